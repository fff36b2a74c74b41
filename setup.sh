#!/usr/bin/env bash
# Create .venv (if needed) and install the course into it.
#   ./setup.sh          what students and instructors need
#   ./setup.sh --book   also the tools that build the book (transformer-course book)
#   ./setup.sh --dev    also the test, book and browser-test tools
# torch: TORCH_SPEC picks the build (default torch==2.13.0). On a machine without a GPU, a CPU
# build is much smaller: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu ./setup.sh
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
extras=""
[[ "${1:-}" == "--dev" ]] && extras="[dev]"
[[ "${1:-}" == "--book" ]] && extras="[book]"
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "$TORCH_SPEC"
.venv/bin/python -m pip install --quiet -e ".${extras}"
echo "setup.sh: ready: $(.venv/bin/python -c 'import torch, nbgrader; print("torch", torch.__version__, "| nbgrader", nbgrader.__version__)')"
