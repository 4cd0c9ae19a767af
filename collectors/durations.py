"""One way to write a length of time, for every flag and argument that takes one (``--budget``,
``--older-than``, ``--since``, ``prune(older_than=...)``).

A duration is one or more ``<number><unit>`` parts, largest unit first or not, spaces allowed:
``90s``, ``20m``, ``1h30m``, ``1.5h``, ``7d``, ``2w``, ``1d 12h``.  Units: ``s``/``sec``, ``m``/``min``
(minutes, never months), ``h``, ``d``, ``w``.  A bare number is refused for text (``20`` could be
seconds or minutes); Python callers may pass seconds as a number or a ``timedelta``.

It lives in the lowest stage that reads durations (collectors: retention), so the stages above
(the fit's budget, the CLI) parse the same way; it imports only the error hierarchy.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from ..metricbank.errors import UserError

__all__ = ["parse_duration", "DURATION_HELP"]

_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(sec|min|s|m|h|d|w)(?![a-z])")
DURATION_HELP = "a number with a unit: 90s, 20m, 12h, 7d, 2w, or parts such as 1h30m"


def parse_duration(value, *, field: str | None = "duration") -> float:
    """Seconds in ``value`` (see the module docstring); :class:`UserError` naming ``field`` (left
    out when None: argparse names the flag itself) and the accepted forms for anything else, zero
    and infinity included."""
    what = repr(value) if field is None else f"{field} {value!r}"
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        pos, seconds, parts = 0, 0.0, 0
        for m in _PART.finditer(text):
            if text[pos:m.start()].strip():
                break
            seconds += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
            pos, parts = m.end(), parts + 1
        if not parts or text[pos:].strip():
            raise UserError(f"{what} is not a duration: write {DURATION_HELP}.")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise UserError(f"{what} must be longer than zero and finite: write {DURATION_HELP}.")
    return seconds
