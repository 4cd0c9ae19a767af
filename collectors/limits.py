"""The collector's limits and the bookkeeping behind them: :class:`CollectorLimits` (every limit,
from arguments or ``AUTOMETRICS_COLLECTOR_*`` variables), :class:`ByteBudget` (memory shared by
all requests), bounded decompression, and which store errors mean "this value can never be
stored" (400, do not retry) rather than "the store is down" (503, retry).

Why a shared budget and not only per-request limits: each request's 64 MiB decompression limit
held, but 16 gzip bombs at once still took 16 x 64 MiB; and decoding an accepted body costs
several times its size (JSON objects, protobuf messages, rows).  A request takes its estimated
cost from the budget before decoding and gives it back when answered; when the budget is spent
it waits briefly, then gets 503.  Bombs cost none of it: a gzip body is first decompressed in
1 MiB steps that are counted and dropped, so a bomb is refused (413) having held one step.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import zlib

from ..metricbank.errors import UserError

__all__ = ["CollectorLimits", "ByteBudget", "BodyError", "decompress", "decompress_all", "DECODE_COST", "unstorable"]

DECODE_COST = 6  # memory to decode a body, in multiples of its decompressed size (JSON/protobuf -> rows), measured
_KEEP = 2 << 20  # gzip output up to this size is kept from the counting pass (no second pass for usual batches)


@dataclasses.dataclass
class CollectorLimits:
    """Every limit of the collector, each settable by argument or environment variable
    (``AUTOMETRICS_COLLECTOR_<NAME>``, e.g. ``AUTOMETRICS_COLLECTOR_IDLE_TIMEOUT=30``)."""

    max_connections: int = 1024  # open client connections; beyond, the longest-idle one is closed, else 503
    # open connections from one client address; beyond, that client's longest-idle one is closed, else 503.
    # Behind a proxy or load balancer every client shares its address: raise it to max_connections there.
    max_client_connections: int = 256
    workers: int = 32  # threads that run complete requests (idle and slow connections use none)
    header_timeout: float = 10.0  # s from connect (or a request's first byte) to the end of its headers
    body_timeout: float = 60.0  # s from the end of the headers to the end of the body (total, not per recv)
    idle_timeout: float = 15.0  # s a keep-alive connection may wait for its next request
    write_timeout: float = 10.0  # s a client may take to accept a response
    max_header_bytes: int = 64 << 10  # request line + headers
    max_body: int = 16 << 20  # request body as sent (Content-Length)
    max_decompressed: int = 64 << 20  # request body after gzip/deflate
    memory_budget: int = 512 << 20  # bytes all requests may hold at once: 1/4 buffered bodies, 3/4 decoding
    budget_wait: float = 5.0  # s a request waits for its share of the budget before 503
    max_field_chars: int = 1 << 20  # one span attribute value / name / message; longer ones are truncated

    ENV_PREFIX = "AUTOMETRICS_COLLECTOR_"

    @classmethod
    def from_env(cls, environ=None, **overrides) -> CollectorLimits:
        """Defaults, then ``AUTOMETRICS_COLLECTOR_*`` variables, then ``overrides`` that are not None."""
        environ = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            name = cls.ENV_PREFIX + f.name.upper()
            text = environ.get(name, "").strip()
            if text:
                is_float = f.type in ("float", float)
                try:
                    values[f.name] = float(text) if is_float else int(text.replace("_", ""))
                except ValueError:
                    raise UserError(f"{name}={text!r} is not {'a number' if is_float else 'a whole number'}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values).checked()

    def checked(self) -> CollectorLimits:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and v > 0 and v == v and v != float("inf")):
                raise UserError(f"collector limit {f.name} ({self.ENV_PREFIX}{f.name.upper()}) must be a positive number, got {v!r}")
        return self

    def describe(self, per_client: bool = True) -> str:
        """One line of the limits; ``per_client=False`` for a front that does not enforce the per-address limit."""
        mib = 1 << 20
        client = f"{self.max_client_connections} per client address" if per_client else "no per-client limit on this front"
        return (f"{self.max_connections} connections ({client}), {self.workers} workers, timeouts header {self.header_timeout:g} s / body "
                f"{self.body_timeout:g} s / idle {self.idle_timeout:g} s, body {self.max_body / mib:g} MiB "
                f"({self.max_decompressed / mib:g} MiB decompressed), memory budget {self.memory_budget / mib:g} MiB, "
                f"field {self.max_field_chars} chars")


class ByteBudget:
    """Bytes that requests may hold in memory at once, shared by all of them (thread-safe)."""

    def __init__(self, total: int):
        self.total = int(total)
        self.used = 0
        self.peak = 0
        self._cv = threading.Condition()

    def try_acquire(self, n: int) -> bool:
        with self._cv:
            if self.used + n > self.total:
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def acquire(self, n: int, timeout: float) -> bool:
        """Take ``n`` bytes, waiting up to ``timeout`` s for others to give theirs back."""
        if n > self.total:
            return False
        deadline = time.monotonic() + timeout
        with self._cv:
            while self.used + n > self.total:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        if n:
            with self._cv:
                self.used -= n
                self._cv.notify_all()


class BodyError(Exception):
    """A request body refused before decoding: HTTP ``status`` and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def decompress(data: bytes, encoding: str, limit: int) -> bytes | int:
    """A gzip/deflate body, decompressed, or its size when that is over ``_KEEP`` (then call
    :func:`decompress_all` once the budget allows).  Raises BodyError: 413 past ``limit`` (a bomb
    is stopped having held 1 MiB), 400 for a corrupt or truncated stream.  Concatenated gzip
    members (legal gzip) are all read."""
    wbits = 31 if "gzip" in encoding else 15
    kept: list[bytes] | None = []
    total = 0
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits)
            buf = rest
            while True:
                out = d.decompress(buf, 1 << 20)
                total += len(out)
                if total > limit:
                    raise BodyError(413, f"body decompresses to more than {limit} bytes (the limit; set "
                                         f"AUTOMETRICS_COLLECTOR_MAX_DECOMPRESSED to change it); send smaller batches")
                if kept is not None:
                    kept.append(out)
                    if total > _KEEP:
                        kept = None  # too big to keep from the counting pass: decompressed again within the budget
                buf = d.unconsumed_tail
                if d.eof or (not buf and len(out) < 1 << 20):
                    break
            if not d.eof:
                raise BodyError(400, f"truncated {encoding} body: the stream ends before its end marker")
            rest = d.unused_data if wbits == 31 else b""
            if d.unused_data and wbits != 31:
                raise BodyError(400, f"{len(d.unused_data)} bytes after the end of the {encoding} stream")
    except zlib.error as exc:
        raise BodyError(400, f"bad {encoding} body: {exc}") from None
    return b"".join(kept) if kept is not None else total


def decompress_all(data: bytes, encoding: str) -> bytes:
    """The second pass of :func:`decompress` (already checked: well-formed and within the limit)."""
    wbits = 31 if "gzip" in encoding else 15
    parts, rest = [], data
    while rest:
        d = zlib.decompressobj(wbits)
        parts.append(d.decompress(rest))
        rest = d.unused_data if wbits == 31 else b""
    return parts[0] if len(parts) == 1 else b"".join(parts)


def unstorable(exc: BaseException) -> bool:
    """True when a write failed because of a value in the request (a number past the column's
    range, text the database cannot hold, nesting too deep to decode): retrying cannot help, so
    the client gets 400, not 503.  Connection and lock errors stay retryable (False)."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, (OverflowError, RecursionError, UnicodeError)):
            return True
        try:
            import sqlalchemy.exc as sa_exc

            if isinstance(exc, sa_exc.DataError):
                return True
            if isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError):
                exc, seen = exc.orig, seen + 1  # a bind-parameter error wrapped by SQLAlchemy
                continue
        except ImportError:  # pragma: no cover - the store needs sqlalchemy
            pass
        return isinstance(exc, ValueError) and not isinstance(exc, TimeoutError)
    return False
