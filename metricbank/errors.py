"""The package's error types: one hierarchy for every stage.  It lives in the bottom stage
(metricbank) so that every stage can import it without importing upward, and it imports nothing,
so the CLI can name these types before it loads numpy or pandas (``autometrics --help`` stays
fast; the metricbank package loads its metrics lazily).  Applications catch them as
``autometrics.UserError`` etc.

:class:`AutometricsError` is a problem the user can fix; the CLI prints its message as one
``error: ...`` line and exits with status 2 (no traceback unless ``--debug``).  Anything else
that escapes is a bug in this package (exit status 1).  Each kind also subclasses the built-in
exception callers would have caught before it existed (``ValueError``, ``KeyError``,
``FileNotFoundError``, ``RuntimeError``, ``ConnectionError``), so ``except ValueError`` keeps
working.
"""

from __future__ import annotations

__all__ = ["AutometricsError", "UserError", "DataError", "NotFound", "MissingFile", "Unavailable", "Unreachable"]


class AutometricsError(Exception):
    """A problem the user can fix; the message names where it is and how to fix it."""


class UserError(AutometricsError, ValueError):
    """A mistake in a flag, argument or value."""


class DataError(UserError):
    """Bad input data (a row, column or field); the message names which and the fix."""


class NotFound(UserError, KeyError):
    """A named thing (metric, evaluator version, method) that does not exist."""

    def __str__(self) -> str:  # KeyError would quote the sentence
        return str(self.args[0]) if self.args else ""


class MissingFile(AutometricsError, FileNotFoundError):
    """A file the command needs is not there."""


class Unavailable(AutometricsError, RuntimeError):
    """Something this machine cannot run now: a metric's weights or package, the local LLM, the
    trace store."""


class Unreachable(AutometricsError, ConnectionError):
    """A server (an LLM endpoint) that does not answer."""
