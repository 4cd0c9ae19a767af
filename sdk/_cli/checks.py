"""What the CLI checks before any expensive step, and how it reports a failure.

Why up front: a fit can take minutes (hours with an LLM); an output folder that cannot be written,
a flag out of range or a target name that would escape the output folder must stop the run
before that work starts, not after it, and never after part of a previous good output was
replaced.

Errors, one rule for every command (:func:`report`):

- a problem the user can fix (:class:`~autometrics.metricbank.errors.AutometricsError`: a bad flag, value
  or file, bad data, a metric, local LLM or trace store that cannot run here, an LLM that cannot be
  reached), a flag argparse refuses, and the outside world's equivalents (an ``OSError`` naming a
  file or device, a missing optional package, a database SQLAlchemy cannot reach or parse) is one
  line ``error: ...`` on stderr and exit status 2;
- anything else is a bug: one line ``error: internal error (TypeError: ...)`` that asks for a
  report and exit status 1;
- Ctrl-C is ``interrupted`` and exit status 130;
- ``--debug`` (anywhere on the command line, or ``AUTOMETRICS_DEBUG=1``) prints the traceback first.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import traceback
from pathlib import Path

from autometrics.metricbank.errors import AutometricsError, UserError

__all__ = ["N_BOOT_MAX", "Parser", "count", "fraction", "positive", "at_least", "duration", "port", "seed", "check_out_folder",
           "check_out_file", "check_page_path", "check_targets", "metric_names", "local_inputs", "debug_requested", "report",
           "UserError"]

SEED_MAX = 2**32 - 1
N_BOOT_MAX = 100_000  # bootstrap arrays are n_boot x rows floats: a typo of 1e9 must not exhaust memory


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error shape: one ``error: ...`` line (naming the command's --help)
    and exit status 2, instead of the usage block."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def count(low: int = 0, high: int | None = None, *, what: str = "a whole number"):
    """argparse type: an integer in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if v < low or (high is not None and v > high):
            rng = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {rng}, got {v}")
        return v

    parse.__name__ = "count"
    return parse


def seed(text: str) -> int:
    """argparse type: a random seed numpy accepts (0 .. 2**32-1)."""
    return count(0, SEED_MAX)(text)


def port(text: str) -> int:
    """argparse type: a TCP port (0 = any free port)."""
    return count(0, 65535, what="a port number")(text)


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def fraction(text: str) -> float:
    """argparse type: a number strictly between 0 and 1 (a test share, a probability)."""
    v = _float(text)
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {v:g}")
    return v


def positive(text: str) -> float:
    """argparse type: a finite number > 0 (seconds, thresholds)."""
    v = _float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {v:g}")
    return v


def at_least(low: float):
    """argparse type: a finite number >= ``low``."""

    def parse(text: str) -> float:
        v = _float(text)
        if v < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:g}, got {v:g}")
        return v

    parse.__name__ = "number"
    return parse


def duration(text: str) -> float:
    """argparse type: a duration with a unit (``20m``, ``90s``, ``1h30m``, ``7d``) -> seconds; argparse
    names the flag in its one ``error:`` line."""
    from autometrics.collectors.durations import parse_duration

    try:
        return parse_duration(text, field=None)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ------------------------------------------------------------------------------ paths
def local_inputs(*paths) -> list[Path]:
    """The arguments that name existing local files (what a run must never overwrite)."""
    out = []
    for p in paths:
        if p is None or "://" in str(p) or str(p).startswith("demo:"):
            continue
        q = Path(p)
        if q.is_dir() and (q / "evaluator.json").is_file():
            q = q / "evaluator.json"
        if q.is_file():
            out.append(q)
    return out


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _writable(folder: Path, flag: str, shown: Path) -> None:
    """Create and remove a file in ``folder`` (the only test that also holds for root, ACLs and
    read-only mounts)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".autometrics-write-check-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise UserError(f"{flag} {shown}: cannot write in {folder} ({exc.strerror or exc}); choose a folder you can "
                        "write to, or fix its permissions.") from None


def _existing_parent(path: Path, flag: str, shown: Path) -> Path:
    """The nearest existing folder at or above ``path``; an error when that is a file."""
    anc = path
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise UserError(f"{flag} {shown} is under {anc}, which is a file, not a folder; choose another {flag}.")
    return anc


def _given(path, flag: str) -> Path:
    if path is None or not str(path).strip():
        raise UserError(f"{flag} is empty; pass a path (an empty shell variable?).")
    return Path(path)


def check_out_folder(out, files: list[str], *, inputs: list[Path] = (), subfolders: list[str] = (),
                     flag: str = "--out") -> Path:
    """An output folder the run can write ``files`` into (in ``out`` itself, or in each of
    ``subfolders`` when given): not a file, not under a file, writable, and none of the files
    it will replace is a folder or one of ``inputs``.  Files the run does not write are left
    alone; the ones it writes replace a previous run's atomically."""
    shown = _given(out, flag)
    out = shown
    for inp in inputs:
        if _same(out, inp):
            raise UserError(f"{flag} {shown} is the input file {inp}; pass a folder for the results (the run writes "
                            f"{', '.join(files)} into it).")
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {shown} is a file; pass a folder (the run writes {', '.join(files)} into it).")
    _writable(_existing_parent(out, flag, shown) if not out.exists() else out, flag, shown)
    for sub in (out / s for s in subfolders) if subfolders else (out,):
        if sub.exists() and not sub.is_dir():
            raise UserError(f"{flag}: {sub} is a file, but the run writes a folder there; move it or choose another {flag}.")
        for name in files:
            target = sub / name
            if target.is_dir():
                raise UserError(f"{flag}: {target} is a folder, but the run writes a file there; move it or choose "
                                f"another {flag}.")
            for inp in inputs:
                if _same(target, inp):
                    raise UserError(f"{flag}: the run would replace {target}, which is the input {inp}; choose another "
                                    f"{flag} or move the input.")
    return out


def check_out_file(path, *, inputs: list[Path] = (), flag: str = "--out", example: str = "out.csv") -> Path:
    """An output file the run can write: not a folder, not under a file, not one of ``inputs``,
    in a writable folder.  An existing file is replaced atomically at the end of the run."""
    shown = _given(path, flag)
    out = shown
    if str(path).endswith(("/", os.sep)) and not out.is_file():
        raise UserError(f"{flag} {path} ends with a slash; pass a file name (e.g. {shown / example}).")
    if out.is_dir():
        raise UserError(f"{flag} {shown} is a folder; pass a file name (e.g. {shown / example}).")
    for inp in inputs:
        if _same(out, inp):
            raise UserError(f"{flag} {shown} is the input file {inp}; writing it would replace the input. "
                            "Pass another file name.")
    _writable(_existing_parent(out.parent, flag, shown), flag, shown)
    return out


def check_page_path(path, *, flag: str = "--out") -> None:
    """A dashboard path as ``write_dashboard`` reads it: ``*.html`` is the file, anything else a
    folder that gets ``dashboard.html``."""
    if str(path).lower().endswith((".html", ".htm")):
        check_out_file(path, flag=flag, example="dashboard.html")
    else:
        check_out_folder(path, ["dashboard.html"], flag=flag)


def metric_names(text: str | None, flag: str = "--metrics") -> list[str] | None:
    """``--metrics A,B``: the names, each checked against MetricBank (a typo is an error naming the
    close names, before any metric runs); None when the flag is absent."""
    if text is None:
        return None
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise UserError(f"{flag} names no metric; pass comma-separated MetricBank names (`autometrics bank list`).")
    from autometrics.metricbank import metric_class

    for m in names:
        try:
            metric_class(m)
        except KeyError as exc:
            raise UserError(f"{flag}: {exc.args[0] if exc.args else m}") from None
    return names


_UNSAFE = ("/", "\\", "\x00")


def check_targets(targets: list[str], *, as_folders: bool) -> None:
    """Each ``--target`` once; when each target gets its own output folder (several targets),
    its name must be a plain folder name: no path separator, not ``.``/``..``, no control
    character, and unique even on a case-insensitive file system."""
    seen: dict[str, str] = {}
    for t in targets:
        if t in seen:
            raise UserError(f"--target {t!r} is given twice; name each target once.")
        seen[t] = t
    if not as_folders:
        return
    folded: dict[str, str] = {}
    for t in targets:
        bad = [c for c in _UNSAFE if c in t] or [c for c in t if ord(c) < 32]
        if not t.strip() or t in (".", "..") or bad or len(t.encode()) > 255:
            why = f"contains {bad[0]!r}" if bad else "is not a folder name"
            raise UserError(f"--target {t!r} {why}: with several targets each gets a folder named after it under --out. "
                            "Rename the column (letters, digits, spaces, - and _), or fit that target alone.")
        if t.casefold() in folded:
            raise UserError(f"--target {t!r} and {folded[t.casefold()]!r} differ only in case; their folders would be "
                            "the same on macOS and Windows. Rename one column, or fit them in separate runs.")
        folded[t.casefold()] = t


# ------------------------------------------------------------------------------ errors
def _is_user_error(exc: BaseException) -> bool:
    if isinstance(exc, AutometricsError | argparse.ArgumentError):
        return True
    if isinstance(exc, OSError) and (exc.errno is not None or exc.filename):
        return True  # a file or device the user can fix (permission, disk full, missing file, port in use)
    if isinstance(exc, ModuleNotFoundError):
        return True  # an optional package this command needs is not installed
    sa_exc = sys.modules.get("sqlalchemy.exc")  # only loaded when a store was opened
    return sa_exc is not None and isinstance(exc, sa_exc.OperationalError | sa_exc.ArgumentError | sa_exc.NoSuchModuleError)


def _message(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)  # SQLAlchemy wraps the driver's error: its first line says what failed
    if isinstance(exc, KeyError) and exc.args:  # KeyError's own str() quotes the message
        msg = str(exc.args[0])
    elif orig is not None:
        msg = f"trace store: {type(orig).__name__}: {(str(orig).strip().splitlines() or [''])[0]}"
    elif isinstance(exc, ModuleNotFoundError):
        msg = f"{exc}: a Python package this command needs is not installed; install it into this environment"
    elif isinstance(exc, OSError) and exc.strerror and exc.filename and str(exc.filename) not in str(exc.strerror):
        msg = f"{exc.strerror}: {exc.filename}"
    else:
        msg = str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        from autometrics.collectors.files import os_error_fix

        fix = os_error_fix(exc)
        if fix and fix not in msg:
            msg += f"; {fix}"
    return " ".join(msg.split())  # one line, whatever the message held


def debug_requested(argv: list[str]) -> tuple[list[str], bool]:
    """``--debug`` may stand anywhere before a ``--``: removed from ``argv``; also ``AUTOMETRICS_DEBUG=1``."""
    head, sep, tail = (argv[: argv.index("--")], ["--"], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [], [])
    debug = "--debug" in head or os.environ.get("AUTOMETRICS_DEBUG", "").lower() in ("1", "true", "yes")
    return [a for a in head if a != "--debug"] + sep + tail, debug


def report(exc: BaseException, *, debug: bool) -> int:
    """Print ``exc`` as the CLI's one ``error:`` line (the traceback first with ``debug``) and
    return the exit status (see the module docstring)."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if isinstance(exc, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
        return 130
    if _is_user_error(exc):
        print(f"error: {_message(exc)}", file=sys.stderr)
        return 2
    hint = "" if debug else " run again with --debug for the traceback, and"
    print(f"error: internal error ({type(exc).__name__}: {_message(exc)}); this is a bug in autometrics:{hint} please "
          "report it.", file=sys.stderr)
    return 1
