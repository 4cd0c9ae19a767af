"""Run untrusted, LLM-written metric code in a contained child process.

A code metric is a Python function ``metric(input, output, reference)`` that a generator LLM
wrote; it must not be able to read secrets, touch the network, write files or hang the fit.
:func:`run_metric_code` runs it over a batch of rows in a fresh interpreter and returns one
value per row (NaN where a row raised or returned something that is not a finite number).

What contains the code (the real containment is the process, not the Python-level checks):

- **a separate process** (``python -S -s -B`` in its own session, killed as a process group
  afterwards): a crash, an infinite loop or a leak cannot reach the caller;
- **resource limits** set before the code runs, hard = soft so they cannot be raised:
  ``RLIMIT_CPU`` (SIGXCPU at the limit, SIGKILL one second later), ``RLIMIT_AS`` (memory),
  ``RLIMIT_FSIZE`` (file and stdout size), ``RLIMIT_NOFILE``, ``RLIMIT_CORE`` = 0 and
  ``RLIMIT_NPROC`` = 0 (no fork, no thread; the kernel ignores it for root, see next point),
  plus a wall-clock timeout enforced by the parent;
- **no privileges**: a parent running as root drops the child to ``nobody`` after start-up
  (root ignores ``RLIMIT_NPROC`` and file permissions; ``nobody`` does not);
- **a scrubbed environment** (no API keys or tokens: only PATH, locale, a fixed hash seed, HOME
  and TMPDIR) and a fresh, empty working folder, deleted afterwards;
- **an import allow-list** (:data:`ALLOWED_MODULES`: text and number utilities only; no ``os``,
  ``socket``, ``subprocess``, ``urllib``...), preloaded before the code runs, and restricted
  builtins (``open``, ``eval``, ``exec``, ``input``... refuse);
- **an audit hook** (:func:`sys.addaudithook`) that refuses every audited event not known to be
  harmless: process creation (``os.fork``, ``os.system``, ``subprocess.Popen``, ``os.exec``...),
  sockets, ``ctypes``, any ``os.*`` file-system call, ``open`` outside the working folder,
  imports outside the allow-list, ``gc`` and frame introspection, changing limits.  A refused
  event fails the whole metric even when the code catches the exception.

Honest limits: an in-process audit hook and restricted builtins are *not* a security boundary
against a determined attacker (CPython's own documentation says so: code running in the
interpreter can corrupt it, e.g. by crafting bytecode); they catch the mistakes and the naive
misuse an LLM writes.  A determined escape stays inside the process limits, the scrubbed
environment, the unprivileged user (when the parent is root) and the temporary folder — but
the child can still read world-readable files with raw system calls if it gets past the hook,
and it shares the host's network namespace.  Run untrusted artifacts in a container or VM if
that matters.  POSIX only (``resource``, process groups).

Example::

    res = run_metric_code("def metric(input, output, reference):\\n    return len(output)",
                          inputs=["a"], outputs=["abc"])
    res.values, res.failed        # [3.0], None
"""

from __future__ import annotations

import ast
import json
import math
import os
import sys

__all__ = ["SandboxLimits", "SandboxResult", "run_metric_code", "check_source", "sandbox_unavailable",
           "ALLOWED_MODULES", "FUNCTION_NAME"]

FUNCTION_NAME = "metric"
#: what generated code may import: pure text and number utilities, nothing that touches the system
ALLOWED_MODULES = ("__future__", "bisect", "collections", "collections.abc", "copy", "decimal", "difflib", "fractions",
                   "functools", "heapq", "itertools", "json", "math", "numbers", "operator", "re", "statistics", "string",
                   "textwrap", "typing", "unicodedata")
# codecs that str.encode/bytes.decode load lazily: preloaded, since the hook refuses file reads
_PRELOAD = ("encodings.ascii", "encodings.latin_1", "encodings.cp1252", "encodings.utf_16", "encodings.utf_32",
            "encodings.unicode_escape", "encodings.raw_unicode_escape")
# audited events that the allowed modules raise in normal use (collections.namedtuple: compile,
# exec, sys._getframe, object.__setattr__ of __module__); everything else is refused
_HARMLESS_EVENTS = frozenset({"exec", "compile", "sys._getframe", "builtins.id", "sys.excepthook", "sys.unraisablehook",
                              "cpython._PySys_ClearAuditHooks", "time.sleep"})
_MARKER = b"\n@@autometrics-sandbox-result@@"
_REFUSED = b"\n@@autometrics-sandbox-refused@@ "  # also written to stderr at once, so a metric cannot hide a refusal
_REFUSED_BUILTINS = ("open", "eval", "exec", "compile", "input", "breakpoint", "help", "exit", "quit")



def _user_error(message: str) -> Exception:
    """The package's UserError, imported on use: this file also runs as the sandbox's child
    process, which has no package to import."""
    from autometrics.metricbank.errors import UserError

    return UserError(message)

class SandboxLimits:
    """Per-batch limits of one sandbox process (a batch is up to ``batch_rows`` rows).

    Defaults allow ~0.1 s of CPU per row, far more than a text heuristic needs; tests pass
    small limits.  ``memory_mb`` bounds the address space (the interpreter with the allowed
    modules loaded takes ~16 MB of it, measured on CPython 3.11)."""

    def __init__(self, *, cpu_seconds: int = 30, wall_seconds: float = 60.0, memory_mb: int = 512, file_mb: int = 16,
                 batch_rows: int = 250, open_files: int = 64):
        if cpu_seconds < 1 or wall_seconds <= 0 or memory_mb < 64 or file_mb < 1 or batch_rows < 1:
            raise _user_error("sandbox limits: cpu_seconds >= 1, wall_seconds > 0, memory_mb >= 64, file_mb >= 1, batch_rows >= 1")
        self.cpu_seconds = int(cpu_seconds)
        self.wall_seconds = float(wall_seconds)
        self.memory_mb = int(memory_mb)
        self.file_mb = int(file_mb)
        self.batch_rows = int(batch_rows)
        self.open_files = int(open_files)

    def to_dict(self) -> dict:
        return dict(vars(self))

    @classmethod
    def from_dict(cls, d: dict | None) -> SandboxLimits:
        d = d or {}
        return cls(**{k: v for k, v in d.items() if k in ("cpu_seconds", "wall_seconds", "memory_mb", "file_mb",
                                                           "batch_rows", "open_files")})


class SandboxResult:
    """Values per row (NaN where a row failed), each failed row's error, and ``failed``: why the
    whole metric failed (a refused operation, a broken limit, a crash, every row failing), else
    None.  When ``failed`` is set every value is NaN: a metric that misbehaves on one batch is
    not trusted on the others."""

    def __init__(self, n: int):
        self.values: list[float] = [math.nan] * n
        self.row_errors: list[str | None] = [None] * n
        self.failed: str | None = None
        self.seconds = 0.0
        self.batches = 0
        self.unprivileged: bool | None = None  # whether the child ran as a non-root user

    @property
    def ok(self) -> bool:
        return self.failed is None

    @property
    def n_row_errors(self) -> int:
        return sum(e is not None for e in self.row_errors)

    def error_counts(self, top: int = 5) -> dict[str, int]:
        """The most frequent row errors (message -> rows)."""
        counts: dict[str, int] = {}
        for e in self.row_errors:
            if e is not None:
                counts[e] = counts.get(e, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:top])

    def to_dict(self) -> dict:
        return {"failed": self.failed, "row_errors": self.n_row_errors, "errors": self.error_counts(),
                "seconds": round(self.seconds, 3), "batches": self.batches, "unprivileged": self.unprivileged}


def sandbox_unavailable() -> str | None:
    """Why code metrics cannot run on this system, or None."""
    if os.name != "posix" or not hasattr(os, "killpg"):
        return "code metrics need a POSIX system (process groups and resource limits)"
    try:
        import resource  # noqa: F401
    except ImportError:
        return "code metrics need Python's resource module (POSIX)"
    return None


def check_source(source: str) -> tuple[int | None, str | None]:
    """(number of arguments ``metric`` takes: 2 or 3, None) or (None, why the code is unusable).
    Checked in the caller before any process starts: a syntax error is a failed candidate."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return None, f"syntax error at line {exc.lineno}: {exc.msg}"
    except (ValueError, TypeError) as exc:  # e.g. a NUL byte in the source
        return None, f"not parseable Python: {exc}"
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION_NAME]
    if not fns:
        return None, f"the code defines no top-level function named {FUNCTION_NAME!r}"
    args = fns[-1].args
    positional = len(args.posonlyargs) + len(args.args)
    if args.vararg is not None or positional >= 3:
        return 3, None
    if positional == 2:
        return 2, None
    return None, f"{FUNCTION_NAME}() takes {positional} argument(s); it must take (input, output, reference)"


def run_metric_code(source: str, inputs, outputs, references=None, *, limits: SandboxLimits | None = None) -> SandboxResult:
    """Score rows with the code's ``metric`` function in sandbox processes (one per batch of
    ``limits.batch_rows`` rows).  ``references``: one string (or None) per row."""
    import time

    limits = limits or SandboxLimits()
    outputs = [_text(o) for o in outputs]
    n = len(outputs)
    inputs = [_text(i) for i in inputs] if inputs is not None else [""] * n
    refs = [None if r is None or (isinstance(r, float) and math.isnan(r)) else str(r) for r in references] \
        if references is not None else [None] * n
    if len(inputs) != n or len(refs) != n:
        raise _user_error(f"got {len(inputs)} inputs and {len(refs)} references for {n} outputs; pass one per output")
    res = SandboxResult(n)
    started = time.perf_counter()
    why = sandbox_unavailable()
    arity, bad = check_source(source)
    if why or bad:
        res.failed = why or bad
        return res
    for lo in range(0, n, limits.batch_rows):
        hi = min(n, lo + limits.batch_rows)
        rows = [[inputs[k], outputs[k], refs[k]] for k in range(lo, hi)]
        reply, failed = _run_batch(source, arity, rows, limits)
        res.batches += 1
        if failed is None:
            res.unprivileged = reply.get("unprivileged")
            for k, (v, e) in enumerate(zip(reply["values"], reply["errors"], strict=True)):
                res.values[lo + k] = math.nan if v is None else float(v)
                res.row_errors[lo + k] = e
        else:
            res.failed = failed
            break
    if res.failed is None and n and res.n_row_errors == n:
        first = next(iter(res.error_counts(1)))
        res.failed = f"every row failed (first error: {first})"
    if res.failed is not None:
        res.values = [math.nan] * n
    res.seconds = time.perf_counter() - started
    return res


def _text(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _nobody() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pw = pwd.getpwnam("nobody")
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return 65534, 65534


def _run_batch(source: str, arity: int, rows: list, limits: SandboxLimits) -> tuple[dict, str | None]:
    """One child process over ``rows``: (its reply, None) or ({}, why it failed)."""
    import shutil
    import signal
    import subprocess
    import tempfile

    base = tempfile.mkdtemp(prefix="autometrics-sandbox-")
    work = os.path.join(base, "work")
    os.mkdir(work)
    drop = _nobody()
    try:
        if drop:
            os.chown(work, *drop)
        payload = {"source": source, "arity": arity, "rows": rows, "limits": limits.to_dict(), "drop": drop,
                   "allowed": list(ALLOWED_MODULES), "preload": list(_PRELOAD)}
        pin = os.path.join(base, "payload.json")
        with open(pin, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
               "HOME": work, "TMPDIR": work}
        with open(pin, "rb") as fin, open(os.path.join(base, "stdout"), "wb") as fout, \
                open(os.path.join(base, "stderr"), "wb") as ferr:
            try:
                proc = subprocess.Popen([sys.executable, "-S", "-s", "-B", "-X", "utf8", os.path.abspath(__file__)],
                                        stdin=fin, stdout=fout, stderr=ferr, cwd=work, env=env, start_new_session=True,
                                        close_fds=True)
            except OSError as exc:
                return {}, f"could not start the sandbox process ({sys.executable}): {exc}"
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                try:  # the whole group: whatever the child started dies with it
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        cap = limits.file_mb * 1024 * 1024
        with open(os.path.join(base, "stdout"), "rb") as fh:
            out = fh.read(cap + 1)
        with open(os.path.join(base, "stderr"), "rb") as fh:
            err = fh.read(64 * 1024).decode("utf-8", "replace").strip()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if len(out) >= cap:  # first: a flood of output makes every later step fail too
        return {}, f"exceeded its output/file-size limit ({limits.file_mb} MB)"
    refused = err.find(_REFUSED.strip().decode())
    if refused >= 0:
        line = err[refused:].split("\n", 1)[0]
        return {}, "refused in the sandbox: " + line.split("@@ ", 1)[-1].strip()
    if timed_out:
        return {}, f"exceeded its wall-clock limit ({limits.wall_seconds:g} s) and was killed"
    rc = proc.returncode
    if rc is not None and rc < 0:
        return {}, _signal_reason(-rc, limits)
    at = out.rfind(_MARKER)
    if at < 0:
        tail = err.splitlines()[-1][:300] if err else "no output"
        return {}, f"the sandbox process exited with status {rc} without a result ({tail})"
    try:
        reply = json.loads(out[at + len(_MARKER):].decode("utf-8"))
    except ValueError:
        return {}, "the sandbox process wrote a malformed result"
    if not isinstance(reply, dict) or not reply.get("ok"):
        return {}, str(reply.get("reason") if isinstance(reply, dict) else "malformed result")
    values, errors = reply.get("values"), reply.get("errors")
    # the metric shares the child's stdout and could forge a result: accept only its shape
    if not (isinstance(values, list) and isinstance(errors, list) and len(values) == len(errors) == len(rows)
            and all(v is None or (type(v) in (int, float) and math.isfinite(v)) for v in values)
            and all(e is None or isinstance(e, str) for e in errors)):
        return {}, "the sandbox process wrote a malformed result"
    reply["errors"] = [e if e is None else e[:300] for e in errors]
    return reply, None


def _signal_reason(sig: int, limits: SandboxLimits) -> str:
    import signal

    if sig == signal.SIGXCPU:
        return f"exceeded its CPU-time limit ({limits.cpu_seconds} s) and was killed"
    if sig == signal.SIGKILL:
        return f"was killed (SIGKILL): CPU-time limit ({limits.cpu_seconds} s) or out of memory"
    if sig == signal.SIGXFSZ:
        return f"exceeded its file-size limit ({limits.file_mb} MB)"
    if sig == signal.SIGSEGV:
        return "crashed (SIGSEGV), e.g. a C-stack overflow from runaway recursion"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = str(sig)
    return f"was killed by signal {name}"


# ------------------------------------------------------------------------ the child process


class _Refused(BaseException):
    """Raised into the metric code for a refused operation (BaseException: ``except Exception``
    in the metric does not swallow it; a swallowed one still fails the metric)."""


def _child() -> None:  # pragma: no cover - runs in the sandbox process (covered by the tests through it)
    import builtins
    import importlib

    sys.path[:] = [p for p in sys.path[1:] if p]  # not this file's folder, not the working folder
    out = sys.stdout.buffer

    def finish(reply: dict) -> None:
        out.write(_MARKER + json.dumps(reply).encode("utf-8") + b"\n")
        out.flush()
        os._exit(0)

    payload = json.loads(sys.stdin.buffer.read())
    allowed = frozenset(payload["allowed"])
    work = os.path.realpath(os.getcwd())
    for name in list(allowed) + payload["preload"]:
        importlib.import_module(name)
    import resource

    try:
        code = compile(payload["source"], "<metric>", "exec")
    except (SyntaxError, ValueError) as exc:
        finish({"ok": False, "reason": f"syntax error: {exc}"})
    unprivileged = os.geteuid() != 0
    if payload["drop"]:
        try:
            os.setgroups([])
            os.setgid(payload["drop"][1])
            os.setuid(payload["drop"][0])
            unprivileged = True
        except OSError:
            unprivileged = False  # e.g. a user namespace without setuid: the hook and limits still apply
    lim = payload["limits"]
    mb = 1024 * 1024
    for what, value, hard in ((resource.RLIMIT_CPU, lim["cpu_seconds"], lim["cpu_seconds"] + 1),
                              (resource.RLIMIT_AS, lim["memory_mb"] * mb, None), (resource.RLIMIT_FSIZE, lim["file_mb"] * mb, None),
                              (resource.RLIMIT_NOFILE, lim["open_files"], None), (resource.RLIMIT_CORE, 0, None),
                              (resource.RLIMIT_NPROC, 0, None)):
        resource.setrlimit(what, (value, value if hard is None else hard))
    os.environ.clear()

    violations: list[str] = []

    def refuse(what: str):
        violations.append(what)
        try:
            os.write(2, _REFUSED + what.encode("utf-8", "replace")[:300] + b"\n")
        except OSError:
            pass
        raise _Refused(f"refused in the sandbox: {what}")

    def inside(path) -> bool:
        if isinstance(path, bytes):
            path = path.decode("utf-8", "replace")
        if not isinstance(path, str):
            return False
        real = os.path.realpath(os.path.join(work, path))
        return real == work or real.startswith(work + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event in _HARMLESS_EVENTS:
            return
        if event in ("object.__setattr__", "object.__delattr__"):
            if len(args) > 1 and args[1] in ("__code__", "__globals__", "__closure__", "__builtins__", "__class__"):
                refuse(f"setting {args[1]}")
            return
        if event == "import":
            if args and args[0] not in allowed:
                refuse(f"import of {args[0]!r}")
            return
        if event == "open":
            if not args or not inside(args[0]):
                refuse(f"open({args[0] if args else '?'!r}) outside the sandbox folder")
            return
        if event == "object.__getattr__":
            refuse(f"reading {args[1] if len(args) > 1 else 'a restricted attribute'} (frame/code introspection)")
        refuse(event)

    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name not in allowed:
            refuse(f"import of {name!r} (allowed: {', '.join(sorted(allowed - {'__future__'}))})")
        return real_import(name, globals, locals, fromlist, level)

    def refusing(name: str):
        def call(*_a, **_k):
            refuse(f"{name}()")
        return call

    safe = {k: v for k, v in builtins.__dict__.items() if not k.startswith("__") or k == "__build_class__"}
    safe.update({k: refusing(k) for k in _REFUSED_BUILTINS})
    safe["__import__"] = guarded_import
    scope = {"__builtins__": safe, "__name__": "metric_module"}
    import io

    sys.stdout = sys.stderr = io.StringIO()  # the metric's prints go nowhere
    sys.addaudithook(hook)

    def limit_reason(exc: BaseException) -> str | None:
        if violations:
            return f"refused in the sandbox: {violations[0]}"
        if isinstance(exc, MemoryError):
            return f"exceeded its memory limit ({lim['memory_mb']} MB): MemoryError"
        if isinstance(exc, RecursionError):
            return "exceeded the recursion limit (runaway recursion): RecursionError"
        if not isinstance(exc, Exception):
            return f"raised {type(exc).__name__}, which stops the sandbox"
        return None

    def describe(exc: BaseException) -> str:
        try:
            return f"{type(exc).__name__}: {str(exc)[:200]}"
        except Exception:
            return type(exc).__name__

    try:
        exec(code, scope)
        fn = scope.get(FUNCTION_NAME)
    except BaseException as exc:
        finish({"ok": False, "reason": limit_reason(exc) or f"the module code raised {describe(exc)}"})
    if violations:
        finish({"ok": False, "reason": f"refused in the sandbox: {violations[0]}"})
    if not callable(fn):
        finish({"ok": False, "reason": f"{FUNCTION_NAME} is not a function"})
    values: list = []
    errors: list = []
    for inp, outp, ref in payload["rows"]:
        value, error = None, None
        try:
            raw = fn(inp, outp, ref) if payload["arity"] == 3 else fn(inp, outp)
            if isinstance(raw, str) or raw is None:
                error = f"returned {type(raw).__name__}, not a number"
            else:
                x = float(raw)
                if math.isfinite(x):
                    value = x
                else:
                    error = f"returned {x!r} (not finite)"
        except BaseException as exc:
            reason = limit_reason(exc)
            if reason:
                finish({"ok": False, "reason": reason})
            error = describe(exc)
        if violations:
            finish({"ok": False, "reason": f"refused in the sandbox: {violations[0]}"})
        values.append(value)
        errors.append(error)
    finish({"ok": True, "values": values, "errors": errors, "unprivileged": unprivileged})


if __name__ == "__main__":
    _child()
