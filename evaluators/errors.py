"""The error types of a user's mistake, in a module with no imports so that the CLI can name them
before it loads numpy or pandas (``autometrics --help`` stays fast).

:class:`UserError` is the one type for a mistake the user can fix (a bad flag, file or value):
the CLI prints its message as one ``error: ...`` line and exits with status 2, without a
traceback unless ``--debug``.  :class:`DataError` is its kind for bad input data.
"""

from __future__ import annotations

__all__ = ["UserError", "DataError"]


class UserError(ValueError):
    """A mistake the user can fix (a bad flag, file or value); the message names where and how.
    A ``ValueError`` so callers that caught ``ValueError`` keep working."""


class DataError(UserError):
    """Bad input data; the message names where the problem is and how to fix it."""
