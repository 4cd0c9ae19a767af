"""Where and how autometrics writes files: one data folder, JSON-safe values, atomic writes.

Every file the project writes by default lives under :func:`data_dir` (``$AUTOMETRICS_HOME``,
else the platform's per-user data folder), so one variable moves all of them: the trace store
(``traces.db``), the LLM reply cache, the perturbation cache, the local models and the dashboard.
Each still has its own override variable (:data:`OVERRIDES`) for deployments that split them.

This module sits at the bottom of the stages (collectors -> evaluators -> dashboards -> sdk): it
imports nothing of the package, so every stage can use it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path

__all__ = ["data_dir", "data_path", "json_safe", "dumps", "atomic_write_text", "atomic_write_files", "package_version",
           "OVERRIDES"]

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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _write_temp(path: Path, data: bytes) -> str:
    """``data`` in a new temporary sibling of ``path`` (flushed to disk); returns its name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        _unlink(tmp)
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


def package_version() -> str:
    """The installed autometrics-sdk version (``0+unknown`` when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autometrics-sdk")
    except PackageNotFoundError:
        return "0+unknown"
