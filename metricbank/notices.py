"""The warnings a fit shows are the warnings its report keeps.

While a fit runs, warnings reach the terminal two ways: records logged at WARNING or above (the
package's own ``log.warning`` calls, a metric's fallback, a library's logger) and Python
``warnings`` that are shown.  :func:`collect_warnings` listens to both for as long as it is
open and keeps each message once, in order; the fit adds them to the evaluator artifact's
``warnings``, from which evaluator.json, report.md and report.html are written.

A warning about the environment (no WordNet, no numba) is logged once per process by
:func:`warn_once` so that a long-running process does not repeat it, except that each
outermost collection starts afresh: every fit whose result it changes logs it, and so keeps it.

Example::

    with collect_warnings() as seen:
        result = fit(...)
    artifact["warnings"] += [w for w in seen.messages if w not in artifact["warnings"]]
"""

from __future__ import annotations

import logging
import threading
import warnings
from contextlib import contextmanager

__all__ = ["WarningLog", "collect_warnings", "warn_once", "add_warnings"]

_lock = threading.Lock()
_logged_once: set[str] = set()  # messages warn_once has logged (in this process, or this collection)
_collections = 0  # collections open now (nested ones share the outermost's once-set)


class WarningLog:
    """The messages collected so far, each once, in the order they were first seen."""

    def __init__(self):
        self.messages: list[str] = []
        self._seen: set[str] = set()

    def add(self, message: str) -> None:
        text = str(message).strip()
        with _lock:
            if text and text not in self._seen:
                self._seen.add(text)
                self.messages.append(text)


class _Collector(logging.Handler):
    """Keeps the message of every record at WARNING or above; when no other handler would show
    the record (logging not configured), the first collector shows it as logging's last resort
    would have (a collector on the root logger would otherwise silence it)."""

    def __init__(self, log: WarningLog):
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.name != "py.warnings":  # a Python warning routed to logging: kept by the warnings hook
                self.log.add(record.getMessage())
            first = next((h for h in logging.getLogger().handlers if isinstance(h, _Collector)), self)
            if first is self and logging.lastResort is not None and record.levelno >= logging.lastResort.level \
                    and not self._shown_elsewhere(record):
                logging.lastResort.handle(record)
        except Exception:
            self.handleError(record)

    def _shown_elsewhere(self, record: logging.LogRecord) -> bool:
        logger = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self and not isinstance(h, _Collector) for h in logger.handlers):
                return True
            logger = logger.parent if logger.propagate else None
        return False


@contextmanager
def collect_warnings():
    """Collect every warning logged or shown while the block runs (all threads); yields a
    :class:`WarningLog`.  Collections nest: each sees everything its block shows."""
    global _logged_once, _collections
    log = WarningLog()
    handler = _Collector(log)
    root = logging.getLogger()
    root.addHandler(handler)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        log.add(f"{category.__name__}: {message}")
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    with _lock:
        outermost = _collections == 0
        if outermost:
            saved, _logged_once = _logged_once, set()
        _collections += 1
    try:
        yield log
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown
        root.removeHandler(handler)
        with _lock:
            _collections -= 1
            if outermost:
                _logged_once = saved | _logged_once


def warn_once(logger: logging.Logger, message: str, *args) -> None:
    """``logger.warning(message, *args)`` unless the same text was logged before in this process,
    or, inside a collection, before in its outermost collection."""
    text = message % args if args else message
    with _lock:
        if text in _logged_once:
            return
        _logged_once.add(text)
    logger.warning(message, *args)


def add_warnings(artifact: dict, messages) -> dict:
    """Append ``messages`` to ``artifact["warnings"]``, each that is not already there."""
    have = artifact.setdefault("warnings", [])
    for m in messages:
        if m not in have:
            have.append(m)
    return artifact
