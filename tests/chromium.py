"""Debian's chromium for the browser tests, and what to do on a machine without it."""

import os
import shutil

import pytest

CHROMIUM = os.environ.get("TRANSFORMER_COURSE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-proxy-server",
    # without these Chromium keeps calling home, and this machine has no network
    "--disable-background-networking", "--disable-component-update", "--no-first-run",
    "--disable-sync", "--disable-default-apps", "--disable-extensions",
]


def missing(why: str):
    """Skip on a machine without a browser; in CI (``CI`` set) fail instead: never skipped there."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{why}. CI must run the browser tests: pip install playwright (never `playwright "
                    "install`) and apt-get install chromium", pytrace=False)
    pytest.skip(why)
