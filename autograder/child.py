"""The child side of ``autograder.runner``: imported once by the fork server, run once per job.

Importing this module pays for the heavy imports (torch, matplotlib, the checks, and what a
first optimizer step would import) in the fork server, so that every forked job starts with them
loaded.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import linecache
import os
import random
import resource
import signal
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401 - imported by the first optimizer step (~1 s): paid here once, not per notebook
from IPython.core.inputtransformer2 import TransformerManager  # noqa: E402

import helpers.checks.core as checks_core  # noqa: E402
import helpers.diagrams  # noqa: E402, F401 - the helpers every lesson's first cell imports (pandas, tqdm: ~0.3 s)
import helpers.plotting  # noqa: E402, F401
import helpers.training  # noqa: E402, F401
from autograder import lesson_checks, protocol  # noqa: E402, F401 - lesson_checks: every lesson's checks, loaded once

IN_SANDBOX = False  # True in a grading child (set first thing in main)
_dumps = json.dumps  # ours, before any student code could replace json.dumps
_progress_fd: int | None = None
KEEP_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "MPLBACKEND": "Agg"}


class CellTimeout(BaseException):
    """Raised inside a cell that ran past its time (a BaseException: ``except Exception`` in
    the student's code does not swallow it)."""


class _Shell:
    """Stands in for ``get_ipython()``: magics and shell escapes do nothing while grading,
    except cell magics that just wrap Python (``%%time``), whose body still runs."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def run_line_magic(self, *args, **kwargs):
        return None

    def run_cell_magic(self, name, line, body):
        if name in {"time", "timeit", "capture"}:
            _exec(body, self.namespace)
        return None

    def system(self, *args, **kwargs):
        return None

    getoutput = system


def _on_alarm(signum, frame):
    if _progress_fd is not None:  # the fork server learns the step was told to stop
        try:
            os.pwrite(_progress_fd, protocol.ALARM_MARK, protocol.ALARM_OFFSET)
        except OSError:
            pass
    raise CellTimeout()


def _exec(source: str, namespace: dict, index: int | None = None) -> None:
    code = TransformerManager().transform_cell(source)
    # a name of its own, with its lines in linecache: tracebacks and the checks' explanations of
    # an error can show the student's line
    filename = "<cell>" if index is None else f"<cell {index}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - this process is the sandbox


MAX_ERROR_CHARS = 2000
ERROR_GAP = "\n[...]\n"


def _describe(exc: BaseException) -> str:
    """The exception's type and message, at most ``MAX_ERROR_CHARS`` long. A longer one keeps its
    beginning and its end: a message that says how to fix something says it last."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) <= MAX_ERROR_CHARS:
        return text
    keep = MAX_ERROR_CHARS - len(ERROR_GAP)
    return text[: keep // 2] + ERROR_GAP + text[len(text) - (keep - keep // 2):]


def _confine(workdir: str, limits) -> None:
    os.setsid()  # a process group of its own: the parent kills all of it at the end
    os.chdir(workdir)
    data = os.environ.get("TRANSFORMER_COURSE_DATA")
    os.environ.clear()
    os.environ.update(KEEP_ENV, HOME=workdir, TMPDIR=workdir, TRANSFORMER_COURSE_QUICK="1")
    if data:  # the course's training text, found by the grader (read-only)
        os.environ["TRANSFORMER_COURSE_DATA"] = data
    out = os.open(os.path.join(workdir, protocol.OUTPUT), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a flood of output fails the write, not the job
    used = _address_space_bytes()
    extra = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + extra, used + extra))
    cpu = int(limits.wall_s) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    size = limits.output_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGALRM, _on_alarm)
    _drop_privileges()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_privileges() -> None:
    """No capability left and none to gain: inside a sandbox the job is root of its own user
    namespace, and with CAP_SYS_PTRACE it could open the fork server's pipes and memory through
    /proc. Best effort outside Linux."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    try:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (fails harmlessly for caps that do not exist)
        libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)())  # version 3: every set empty
    except AttributeError:  # no prctl or capset in this C library
        pass


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


_MISSING = object()


def _watched() -> dict[tuple[str, str], tuple[object, object]]:
    """Objects a cheat would replace to fake a pass: (owner label, name) -> (owner, original)."""
    owners = {
        # (not functions that torch itself rewraps on a lazy import, such as manual_seed when
        # torch._dynamo loads: the grader regenerates every input itself anyway)
        "torch": (torch, ["allclose", "equal", "isclose", "tensor", "Tensor"]),
        "torch.Tensor": (torch.Tensor, ["tolist", "detach", "cpu", "reshape", "__eq__", "__torch_function__"]),
        "torch.testing": (torch.testing, ["assert_close"]),
        "builtins": (builtins, ["isinstance", "type", "len", "list", "dict", "float", "print", "__import__", "exec", "compile", "getattr"]),
        "json": (json, ["dumps"]),
        "helpers.checks.core": (checks_core, ["encode", "recording", "REGISTRY"]),
        "helpers.checks.core.Check": (checks_core.Check, ["record", "__call__"]),
        # what a step's line is made and written with
        "helpers.checks.record.Record": (protocol.Record, ["__init__", "__post_init__", "to_json"]),
        "autograder.protocol.StepLine": (protocol.StepLine, ["__init__", "to_json"]),
    }
    # every global of the check modules (a probe calls their functions: one replaced could forge
    # the data) and every field of every registered check (its probe, its judge)
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("helpers.checks.") and module is not None:
            owners[module_name] = (module, [n for n in vars(module) if not n.startswith("__")])
    for check_name, check in checks_core.REGISTRY.items():
        owners[f"REGISTRY[{check_name!r}]"] = (check, list(vars(check)))
    return {
        (label, name): (owner, vars(owner).get(name, _MISSING)) for label, (owner, names) in owners.items() for name in names
    }


def _changed_and_restore(snapshot, registry: dict) -> list[str]:
    """What the notebook replaced since the snapshot; puts the originals back so that the
    grader's own code in this process keeps working."""
    changed = []
    for (label, name), (owner, original) in snapshot.items():
        if vars(owner).get(name, _MISSING) is original:
            continue
        changed.append(f"{label}.{name}")
        try:
            if original is _MISSING:
                delattr(owner, name)
            else:
                object.__setattr__(owner, name, original)  # a frozen check too
        except (AttributeError, TypeError):
            try:
                setattr(owner, name, original)
            except (AttributeError, TypeError):
                pass
    current = checks_core.REGISTRY
    for name, check in registry.items():
        if dict.get(current, name) is not check:
            changed.append(f"helpers.checks.core.REGISTRY[{name!r}]")
            dict.__setitem__(current, name, check)
    return changed


def _say_running(fd: int, index: int) -> None:
    """Tell the fork server which step runs now: it kills a step that outlives its alarm."""
    try:
        os.pwrite(fd, protocol.progress_bytes(index), 0)
    except OSError:
        pass


def main(payload, workdir: str, limits) -> None:
    """Run the steps; write one JSON line per step to results.jsonl; exit without cleanup."""
    global IN_SANDBOX, _progress_fd
    IN_SANDBOX = True
    _confine(workdir, limits)
    results = open(os.path.join(workdir, protocol.RESULTS), "a", encoding="utf-8")  # O_APPEND: forged lines add, never overwrite
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    shell = _Shell(namespace)
    namespace["get_ipython"] = lambda: shell
    namespace["display"] = print

    def write(line: protocol.StepLine) -> None:
        try:
            results.write(_dumps(line.to_json(), allow_nan=True) + "\n")
            results.flush()
        except Exception as exc:  # noqa: BLE001 - e.g. the output limit: say so, once
            os.write(2, f"grader: could not record a result: {exc}\n".encode())

    snapshot = _watched()
    registry = dict(checks_core.REGISTRY)
    tampered: list[str] = []
    progress = _progress_fd = os.open(os.path.join(workdir, protocol.PROGRESS), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for index, (kind, step_id, source) in enumerate(payload):
        _say_running(progress, index)
        ended: dict = {}
        records = None
        if kind == "test":
            namespace.update(registry)  # the course's checks, whatever the notebook bound to the names
        step_limit = limits.cell_limit(step_id)
        signal.setitimer(signal.ITIMER_REAL, step_limit)
        started = time.monotonic()
        try:
            if kind == "test":
                with checks_core.recording(limits.salt) as records:
                    _exec(source, namespace, index)
            else:
                _exec(source, namespace, index)
            signal.setitimer(signal.ITIMER_REAL, 0)
            ended["status"] = "ok"
        except CellTimeout:
            ended.update(status="timeout", limit_s=step_limit)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
            signal.setitimer(signal.ITIMER_REAL, 0)
            ended.update(status="error", error=_describe(exc), not_implemented=isinstance(exc, NotImplementedError))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = round(time.monotonic() - started, 3)  # what the step took (informative only)
        try:
            tampered += [c for c in _changed_and_restore(snapshot, registry) if c not in tampered]
            if records is not None:
                ended.update(records=tuple(records), tampered=tuple(tampered[:20]))
            line = protocol.StepLine(step_id, s=seconds, **ended)
        except BaseException as exc:  # noqa: BLE001 - the notebook broke the grader's own code
            line = protocol.StepLine(step_id, "error", tampered=(f"the grader's code: {_describe(exc)}",))
        plt.close("all")
        if kind == protocol.COURSE:  # the course's answer: gone before the notebook's next cell runs
            payload[index] = (kind, step_id, "")
            linecache.cache.pop(f"<cell {index}>", None)
        write(line)
    _say_running(progress, len(payload))
    write(protocol.StepLine(protocol.DONE))
    results.close()
    sys.stdout.flush()
    os._exit(0)
