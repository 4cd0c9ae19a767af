"""Where and how autometrics writes files: one data folder, JSON-safe values, atomic writes.

Every file the project writes by default lives under :func:`data_dir` (``$AUTOMETRICS_HOME``,
else the platform's per-user data folder), so one variable moves all of them: the trace store
(``traces.db``), the LLM reply cache, the perturbation cache, the local models and the dashboard.
Each still has its own override variable (:data:`OVERRIDES`) for deployments that split them.

This module sits at the bottom of the stages (collectors -> evaluators -> dashboards -> sdk): it
imports nothing of the package, so every stage can use it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import sys
from pathlib import Path

__all__ = ["data_dir", "data_path", "json_safe", "dumps", "atomic_write_text", "atomic_write_files", "package_version",
           "OVERRIDES", "spreadsheet_safe", "FORMULA_START", "sweep_stale_temps", "os_error_fix", "pid_alive", "new_temp"]

# file -> the variable that overrides its location (a path); the default is data_dir() / file
OVERRIDES = {
    "traces.db": "AUTOMETRICS_STORE_URL",  # a store URL, not a path (see collectors.store.default_store_url)
    "llm_cache.sqlite": "AUTOMETRICS_LLM_CACHE",
    "perturbations.sqlite": "AUTOMETRICS_PERTURBATION_CACHE",
    "models": "AUTOMETRICS_MODELS_DIR",
}


def data_dir() -> Path:
    """Per-user data folder: ``$AUTOMETRICS_HOME``, else the platform's user data directory."""
    if os.environ.get("AUTOMETRICS_HOME"):
        return Path(os.environ["AUTOMETRICS_HOME"]).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "autometrics"


def project_name(given: str | None = None) -> str:
    """The project a capture, fit or worker works on: ``given``, else ``$AUTOMETRICS_PROJECT``, else
    ``default`` (one rule for the SDK, ``training_frame()`` and the CLI)."""
    return given or os.environ.get("AUTOMETRICS_PROJECT") or "default"


def data_path(name: str) -> Path:
    """Location of one of the project's files: its override variable (:data:`OVERRIDES`) when set
    and a path, else ``data_dir() / name``."""
    var = OVERRIDES.get(name)
    if var and var != "AUTOMETRICS_STORE_URL" and os.environ.get(var):
        return Path(os.environ[var]).expanduser()
    return data_dir() / name


def json_safe(v):
    """The value with NaN/inf floats as None and numpy scalars as Python numbers, recursively
    (JSON has no NaN; a missing value must read as missing, never as 0)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a core dependency
        np = None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if np is not None:
        if isinstance(v, np.floating):
            return float(v) if math.isfinite(v) else None
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, np.ndarray):
            return [json_safe(x) for x in v.tolist()]
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [json_safe(x) for x in v]
    return v


def dumps(v, **kw) -> str:
    """``json.dumps`` of :func:`json_safe` (non-JSON objects as their ``str``)."""
    kw.setdefault("ensure_ascii", False)
    kw.setdefault("default", str)
    return json.dumps(json_safe(v), **kw)


def atomic_write_text(path, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to a temporary sibling, then rename it over ``path``: a failed or
    interrupted write never leaves a half-written file or replaces a good one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_temp(path)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        _unlink(tmp)
        _name_the_path(exc, path)
        raise
    return path


def _temp_prefix(path: Path) -> str:
    # the writer's pid is in the name: a later write finds the temporaries of a killed writer
    return f".{path.name}.{os.getpid()}."


def new_temp(path) -> tuple[int, str]:
    """A new temporary sibling of ``path`` to write and then rename over it: (file descriptor
    open for writing, name).  Temporaries of a killed writer are swept first.

    Why not ``tempfile.mkstemp``: it creates the file with mode 0600, which the rename carries over,
    so an evaluator.json, a report or a scored CSV would be unreadable to the group and others
    while every other file of the user (the dashboard too) is not.  Created here like ``open()``
    creates a file, with mode 0666 less the umask (0644 under umask 022).  No file written here holds
    a secret (an artifact names the variable holding an API key, never the key), so none needs a
    stricter mode."""
    path = Path(path)
    sweep_stale_temps(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = str(path.parent / f"{_temp_prefix(path)}{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue  # a name another writer took meanwhile: draw another
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(path.parent))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine still runs; True when that cannot be probed safely
    (not POSIX: there ``os.kill(pid, 0)`` would send a Ctrl-C event) or it runs as another user."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sweep_stale_temps(path: Path) -> int:
    """Remove temporaries of ``path`` left by a writer that was killed (kill -9, power loss): those
    whose writer's pid no longer runs.  Returns how many were removed.  A temporary of a live
    writer, or one not named by this module, is never touched."""
    removed = 0
    try:
        candidates = list(Path(path).parent.glob(f".{Path(path).name}.*.tmp"))
    except OSError:
        return 0
    for f in candidates:
        pid = f.name[len(Path(path).name) + 2:].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            try:
                f.unlink()
                removed += 1
            except OSError:
                pass
    return removed


_FIX = {"ENOSPC": "free space on that disk, or write somewhere else (--out)",
        "EDQUOT": "free space within your disk quota, or write somewhere else (--out)",
        "EACCES": "make it writable for this user, or write somewhere else (--out)",
        "EPERM": "make it writable for this user, or write somewhere else (--out)",
        "EROFS": "the file system is read-only: write somewhere else (--out)",
        "ELOOP": "a symbolic link there points (through others) back to itself: fix or remove the link",
        "ENAMETOOLONG": "use a shorter path"}


def os_error_fix(exc: OSError) -> str | None:
    """What to do about an OS error, by its errno (None when there is no general advice)."""
    import errno as _errno

    return _FIX.get(_errno.errorcode.get(exc.errno or -1, ""))


def _name_the_path(exc: BaseException, path: Path) -> None:
    """An OSError raised while writing (``fh.write`` on a full disk) often carries no file name:
    give it the target's, so the message says which file could not be written."""
    if isinstance(exc, OSError) and not exc.filename:
        exc.filename = str(path)


def _write_temp(path: Path, data: bytes) -> str:
    """``data`` in a new temporary sibling of ``path`` (flushed to disk); returns its name."""
    fd, tmp = new_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        _unlink(tmp)
        _name_the_path(exc, path)
        raise
    return tmp


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def atomic_write_files(files: dict, *, encoding: str = "utf-8") -> list[Path]:
    """Write several files as one step: every file goes to a temporary sibling first, and only
    when all of them are written (and flushed) are they renamed over their targets.  A failure
    while writing (disk full, a folder where a file should be, an interrupt) removes the
    temporaries and leaves every target as it was: an output folder holds the files of one run,
    never a new evaluator.json beside an old report.  ``files``: path -> text (or bytes)."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            staged.append((_write_temp(path, data.encode(encoding) if isinstance(data, str) else data), path))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            _unlink(tmp)  # those already renamed are gone: nothing to remove
        raise
    return [path for _, path in staged]


#: a cell starting with one of these is evaluated by spreadsheet programs (a formula or DDE call:
#: ``=HYPERLINK(…)``, ``+cmd|' /C calc'!A0``, ``@SUM(…)``); tab and carriage return too (OWASP CSV injection)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def spreadsheet_safe(frame):
    """(copy of ``frame``, cells escaped): every text cell a spreadsheet would evaluate gets a
    leading apostrophe, which spreadsheets show as text and do not run.  Cells that are plain
    numbers written as text (``-0.5``) are left alone.  Numeric columns are never touched."""
    import pandas as pd

    out = frame.copy()
    escaped = 0
    for col in out.columns:
        if out[col].dtype.kind in "biufcmM":  # numbers, booleans, dates: never text
            continue
        values = out[col].tolist()
        for k, v in enumerate(values):
            if isinstance(v, str) and v.startswith(FORMULA_START) and not _is_number(v):
                values[k] = "'" + v
                escaped += 1
        out[col] = pd.Series(values, index=out.index, dtype=out[col].dtype)
    return out, escaped


def package_version() -> str:
    """The installed autometrics-sdk version (``0+unknown`` when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autometrics-sdk")
    except PackageNotFoundError:
        return "0+unknown"
