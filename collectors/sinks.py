"""The sinks a :class:`~autometrics.collectors.exporter.BatchWriter` writes to: the trace store
(:class:`StoreSink`) or a remote collector over HTTP (:class:`CollectorSink`).

A sink has ``write(spans, feedback)`` (the direct path), ``encode(spans, feedback)`` (the batch as
:class:`~autometrics.collectors.spool.SpoolRecord` s for the spool), ``send(records)`` (replay) and
``target`` (which spool records are its own).  ``write``/``send`` return ``(rejected spans,
rejected feedback, reason)`` for items the backend refused for good (never retried), or None, and
raise for anything worth retrying (the writer then spools the batch).
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import logging
import threading
import urllib.parse

from .convert import rows_from_readable_spans
from .spool import FileIdentity, SpoolRecord

log = logging.getLogger("autometrics.collectors")

__all__ = ["StoreSink", "CollectorSink", "StoreFileChanged"]


def short_error(exc: BaseException, n: int = 300) -> str:
    s = str(exc).replace("\n", " ")
    return s if len(s) <= n else s[:n] + "..."


def _target(kind: str, url: str) -> str:
    # a hash: the spool file must never hold a password from a store URL
    return f"{kind}:{hashlib.sha256(url.encode()).hexdigest()[:32]}"


def _decode(records: list[SpoolRecord], encodings: tuple[str, ...]) -> tuple[dict[int, object], set[int]]:
    """({id(record): items list for JSON records / raw bytes}, ids of records this sink cannot read:
    another encoding, a damaged payload).  Unreadable records are refused for good, so one bad
    record cannot block the spool behind it."""
    out, bad = {}, set()
    for r in records:
        try:
            if r.encoding not in encodings or r.kind not in ("span", "feedback"):
                raise ValueError(r.encoding)
            if r.encoding.endswith("json"):
                v = json.loads(r.payload)
                if not isinstance(v, list):
                    raise ValueError("not a list")
                out[id(r)] = v
            else:
                out[id(r)] = r.payload
        except ValueError:
            bad.add(id(r))
    return out, bad


def _rejected(records: list[SpoolRecord], bad: set[int]):
    if not bad:
        return None
    n = [sum(r.items for r in records if id(r) in bad and r.kind == k) for k in ("span", "feedback")]
    return n[0], n[1], f"{len(bad)} spool record(s) this version cannot read"


def _merge(a, b):
    if not a or not b:
        return a or b
    return a[0] + b[0], a[1] + b[1], a[2] or b[2]


class StoreFileChanged(RuntimeError):
    """The SQLite store file was deleted or replaced while the write was committing."""


class StoreSink:
    """Writes to a :class:`~autometrics.collectors.store.TraceStore`, opened lazily in the
    writer thread (so ``configure()`` never blocks on, or fails because of, a down database).

    For a SQLite store, the file's identity is checked before and after every write: a file
    deleted or replaced under the open engine (its folder removed, a backup moved over it) is
    reopened (folder and schema created again) with a warning, and a write that may have gone
    to the old, unlinked file is written again, so nothing is counted as written that is not."""

    def __init__(self, url: str | None = None, store=None):
        self.url = url
        self.store = store
        self._file: FileIdentity | None = None
        self._target: str | None = None
        self._lock = threading.RLock()  # the collector checks the file from its health handler too
        self.counters = None  # the writer's Counters and RateLimitedLog (attach())
        self.errors = None

    def __repr__(self) -> str:
        return repr(self.store) if self.store is not None else "TraceStore(<not opened>)"

    def attach(self, counters, errors) -> None:
        self.counters, self.errors = counters, errors

    @property
    def target(self) -> str:
        """Which spool records are this store's: a hash of its URL (SQLite: of the absolute path)."""
        if self._target is None:
            from .store import default_store_url

            url = self.store.url if self.store is not None else (self.url or default_store_url())
            if url.startswith("sqlite:///") and ":memory:" not in url:
                from pathlib import Path

                url = "sqlite:///" + str(Path(url[len("sqlite:///"):]).expanduser().resolve())
            self._target = _target("store-rows", url)
        return self._target

    def _open(self):
        if self.store is None:
            from .store import TraceStore

            self.store = TraceStore(self.url)
        if self._file is None:
            path = self.store.sqlite_path()
            if path is not None:
                self._file = FileIdentity(path)
                self._file.record()
        else:
            why = self._file.changed()
            if why is not None:
                self._reopen(why)
        return self.store

    def _reopen(self, why: str) -> None:
        path = self._file.path
        self.store.engine.dispose()  # the pooled connections still point at the old file
        stale = self._file.set_aside_stale_wal() if why == "replaced" else None
        path.parent.mkdir(parents=True, exist_ok=True)
        self.store.migrate()
        self._file.record()
        if self.counters is not None:
            self.counters.add("store_reopened")
        warn = self.errors.warning if self.errors is not None else (lambda _key, *a: log.warning(*a))
        warn(f"store-{why}", "autometrics: the trace store file %s was %s while open; reopened it (rows written before are "
             "not in the new file; rows of the write in progress are written again)%s", path, why,
             f"; the old file's uncheckpointed write-ahead log was moved to {stale}" if stale else "")

    def write(self, spans, feedback):
        return self.write_rows(rows_from_readable_spans(spans), list(feedback))

    def write_rows(self, span_rows: list[dict], feedback_rows: list[dict]):
        if not span_rows and not feedback_rows:
            return None
        return self.checked(lambda store: self._insert(store, span_rows, feedback_rows))

    def checked(self, write):
        """``write(store)``, counted as done only when it landed in the file at the store's path:
        a SQLite file deleted or replaced before or during the write is reopened and the write
        made again (the SDK's writer and the collector's both write through here)."""
        with self._lock:
            for _ in range(3):
                store = self._open()
                out = write(store)
                why = self._file.changed() if self._file is not None else None
                if why is None:
                    if self._file is not None:
                        self._file.note_wal()
                    return out
                self._reopen(why)  # the commit may have landed in the old inode: write again
        raise StoreFileChanged(f"the store file {self._file.path} keeps being {why} during writes")

    def _insert(self, store, span_rows, feedback_rows):
        import sqlalchemy as sa

        try:
            store.write(span_rows, feedback_rows)
            return None
        except (sa.exc.IntegrityError, sa.exc.DataError) as exc:  # a bad row: isolate it, keep the others
            reason = f"{type(exc).__name__}: {short_error(exc, 200)}"
        rej = [0, 0]
        for i, rows in enumerate((span_rows, feedback_rows)):
            for r in rows:
                try:
                    store.write(*(([r], []) if i == 0 else ([], [r])))
                except (sa.exc.IntegrityError, sa.exc.DataError):
                    rej[i] += 1
        return rej[0], rej[1], reason

    def encode(self, spans, feedback) -> list[SpoolRecord]:
        out = []
        if spans:
            out.append(SpoolRecord(0, "span", "rows-json", len(spans), json.dumps(rows_from_readable_spans(spans)).encode()))
        if feedback:
            out.append(SpoolRecord(0, "feedback", "rows-json", len(feedback), json.dumps(list(feedback)).encode()))
        return out

    def send(self, records: list[SpoolRecord]):
        spans, fb = [], []
        decoded, bad = _decode(records, ("rows-json",))
        for r in records:
            if id(r) not in bad:
                (spans if r.kind == "span" else fb).extend(decoded[id(r)])
        return _merge(self.write_rows(spans, fb), _rejected(records, bad))

    def close(self) -> None:
        if self.store is not None:
            self.store.dispose()


class _HttpError(RuntimeError):
    def __init__(self, status: int, msg: str):
        super().__init__(msg)
        self.status = status


# a request the collector refuses for good (retrying the same bytes cannot succeed)
_PERMANENT = {400, 409, 413, 415, 422}
_MAX_BODY = 4 << 20  # uncompressed OTLP bytes per replayed request (the collector takes 64 MiB)
_MAX_FEEDBACK = 1000  # items per /v1/feedback request (the collector's limit)


class CollectorSink:
    """Sends to an ``autometrics collector serve`` over HTTP: spans as OTLP protobuf (gzip) to
    ``/v1/traces``, feedback as JSON to ``/v1/feedback``.  The API key goes in a header only.
    Spooled spans are the OTLP bytes (several records concatenate into one request: protobuf
    merges repeated fields), feedback the JSON items, so a replay sends what the direct path would."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 5.0):
        self.url = url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout
        self.target = _target("collector", self.url)

    def __repr__(self) -> str:
        return f"collector {self.url}"

    def _post(self, path: str, body: bytes, ctype: str) -> bytes:
        u = urllib.parse.urlsplit(self.url + path)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname, u.port, timeout=self.timeout)
        headers = {"Content-Type": ctype, "Content-Encoding": "gzip"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            conn.request("POST", u.path, body=gzip.compress(body, 1), headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 300:
                raise _HttpError(resp.status, f"collector answered HTTP {resp.status}: {data[:200]!r}")
            return data
        finally:
            conn.close()

    def encode(self, spans, feedback) -> list[SpoolRecord]:
        out = []
        if spans:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            out.append(SpoolRecord(0, "span", "otlp-protobuf", len(spans), encode_spans(spans).SerializeToString()))
        if feedback:
            items = []
            for r in feedback:  # store rows -> the /v1/feedback request shape
                # no kind given by the app: send the raw value without a kind, so the collector's store
                # reads it under the name's stored kind (``0`` under a thumbs name is thumbs down)
                inferred = bool(r.get("kind_inferred")) and "raw_value" in r
                it = {"id": r["id"], "trace_id": r["trace_id"], "name": r["name"],
                      "value": r["raw_value"] if inferred else (r["value"] if r.get("value") is not None else r.get("value_text")),
                      "timestamp": r["created_at_ns"] / 1e9}
                if not inferred:
                    it["kind"] = r["kind"]
                for k in ("span_id", "comment", "source", "project", "schema"):
                    if r.get(k) is not None:
                        it[k] = r[k]
                if r.get("metadata"):
                    it["metadata"] = json.loads(r["metadata"])
                items.append(it)
            out.append(SpoolRecord(0, "feedback", "feedback-json", len(feedback), json.dumps(items).encode()))
        return out

    def write(self, spans, feedback):
        return self.send(self.encode(spans, feedback))

    def send(self, records: list[SpoolRecord]):
        decoded, bad = _decode(records, ("otlp-protobuf", "feedback-json"))
        return _merge(self._send([r for r in records if id(r) not in bad], decoded), _rejected(records, bad))

    def _send(self, records: list[SpoolRecord], decoded: dict):
        rej_spans, rej_fb, reason = 0, 0, None
        spans = [r for r in records if r.kind == "span"]
        chunks, size = [[]], 0
        for r in spans:
            if chunks[-1] and size + len(r.payload) > _MAX_BODY:
                chunks.append([])
                size = 0
            chunks[-1].append(r)
            size += len(r.payload)
        for chunk in chunks:
            if not chunk:
                continue
            try:
                rej_spans += self._send_spans(b"".join(r.payload for r in chunk))
                continue
            except _HttpError as exc:
                if exc.status not in _PERMANENT:
                    raise
            for r in chunk:  # refused: find the record(s) at fault, send the others
                try:
                    rej_spans += self._send_spans(r.payload)
                except _HttpError as exc:
                    if exc.status not in _PERMANENT:
                        raise
                    rej_spans += r.items
                    reason = str(exc)
        items = [it for r in records if r.kind == "feedback" for it in decoded[id(r)]]
        for i in range(0, len(items), _MAX_FEEDBACK):
            chunk = items[i:i + _MAX_FEEDBACK]
            try:
                self._post("/v1/feedback", json.dumps(chunk).encode(), "application/json")
            except _HttpError as exc:
                if exc.status not in _PERMANENT:
                    raise
                for it in chunk:  # one bad item must not take the others with it
                    try:
                        self._post("/v1/feedback", json.dumps([it]).encode(), "application/json")
                    except _HttpError as exc1:
                        if exc1.status not in _PERMANENT:
                            raise
                        rej_fb += 1
                        reason = str(exc1)
        return (rej_spans, rej_fb, reason) if rej_spans or rej_fb else None

    def _send_spans(self, body: bytes) -> int:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        data = self._post("/v1/traces", body, "application/x-protobuf")
        try:
            return int(ExportTraceServiceResponse.FromString(data).partial_success.rejected_spans)
        except Exception:
            return 0
