"""Reading from Langfuse: its traces (observations) and scores in, through its public API.

:func:`import_langfuse` reads a Langfuse project's observations (``GET /api/public/v2/observations``,
the real-time read path, cursor-paged, up to 1,000 a page) and its scores under the given names
(``GET /api/public/v3/scores``, up to 100 a page) with the official ``langfuse`` client's
generated API (``LangfuseAPI``), and writes them into a trace store as spans and feedback, so that
``autometrics fit`` and the worker read them like anything captured here.  Scores *to* Langfuse
are :mod:`autometrics.dashboards.langfuse_push`'s job.

An observation becomes one span row: its input/output (raw strings in the v2 API: a JSON message
list is read as messages, as for any span), the model it names, its token usage, its level (ERROR
→ an error), and the trace's session, user and tags under Langfuse's attribute names, read by
:mod:`~autometrics.collectors.conventions`.  Ids an OpenTelemetry span had (16/32 hex digits) are
kept; another id (older SDKs' UUIDs) becomes 16 hex digits of its hash, the same every time.

A score becomes one feedback row named after the score: NUMERIC → its number, BOOLEAN → a thumb,
CATEGORICAL → its label (``up``/``down``, ``good``/``bad``... read as thumbs); TEXT and CORRECTION
scores and scores of a session or an experiment are counted as skipped, with the reason.  A score
that this project pushed from its own feedback keeps that feedback's id and kind (so a store that
has it already stores nothing twice); any other gets ``langfuse:<score id>:<update time>``, so an
edited score is read as the newer label.

``langfuse+https://cloud.langfuse.com`` (or ``langfuse+http://host:3000``) is how the CLI names a
Langfuse deployment (:func:`parse_langfuse_url`); the project is the one ``LANGFUSE_PUBLIC_KEY`` /
``LANGFUSE_SECRET_KEY`` belong to (the secret is never logged).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from urllib.parse import urlsplit

from ..metricbank.errors import Unavailable, UserError
from .convert import span_row
from .feedback import FeedbackValueError, make_feedback_row
from .imports import ImportCounts, IncrementalSource, iso_ns, iso_text, skip, store_imported, versioned_id

__all__ = ["parse_langfuse_url", "langfuse_api", "import_langfuse", "LangfuseSource", "OBSERVATION_FIELDS"]

#: the observation field groups read (core is always returned)
OBSERVATION_FIELDS = "core,basic,io,metadata,model,usage,trace_context"
_HEX = re.compile(r"[0-9a-f]+")
_OPERATIONS = {"GENERATION": "chat", "EMBEDDING": "embeddings"}
_VALUE_TYPES = ("NUMERIC", "BOOLEAN", "CATEGORICAL")


def parse_langfuse_url(url: str) -> str:
    """The base URL of ``langfuse+http(s)://host[:port][/path]``."""
    if not url.lower().startswith(("langfuse+http://", "langfuse+https://")):
        raise UserError(f"{url!r} is not a Langfuse deployment: write langfuse+https://cloud.langfuse.com "
                        "(or langfuse+http://host:3000), with LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY set")
    parts = urlsplit(url[len("langfuse+"):])
    if not parts.hostname:
        raise UserError(f"{url!r} names no host: write langfuse+https://cloud.langfuse.com")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def langfuse_api(base_url: str | None = None, timeout: float = 60.0):
    """The ``langfuse`` package's generated API client for ``base_url`` (else ``LANGFUSE_BASE_URL``),
    authenticated with ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY``."""
    from .langfuse_client import langfuse_settings

    try:
        from langfuse.api.client import LangfuseAPI
    except ModuleNotFoundError as exc:
        raise Unavailable(f"reading from Langfuse needs its SDK ({exc}); pip install langfuse") from exc
    try:
        s = langfuse_settings(base_url=base_url)
    except RuntimeError as exc:
        raise UserError("reading from Langfuse needs the project's keys: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY "
                        "(Langfuse > Settings > API keys)") from exc
    return LangfuseAPI(base_url=s.base_url, username=s.public_key, password=s.secret_key, x_langfuse_public_key=s.public_key,
                       timeout=timeout)


def _hex_id(value, digits: int) -> str | None:
    """An id as ``digits`` lower-case hex digits: kept when it is one (dashes dropped), else hashed."""
    if value is None:
        return None
    s = str(value).strip().lower().replace("-", "")
    if len(s) == digits and _HEX.fullmatch(s) and s.strip("0"):
        return s
    return hashlib.sha256(str(value).encode()).hexdigest()[:digits]


def _text(v):
    return v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def _tokens(usage: dict, *keys):
    for k in keys:
        v = usage.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return int(v)
    return None


def _row(o: dict, project: str) -> dict:
    typ = str(o.get("type") or "SPAN").upper()
    usage = o.get("usageDetails") or {}
    a = {
        "langfuse.observation.type": typ.lower(),
        "langfuse.observation.input": _text(o.get("input")),
        "langfuse.observation.output": _text(o.get("output")),
        "langfuse.observation.model.name": o.get("providedModelName") or o.get("model"),
        "gen_ai.operation.name": _OPERATIONS.get(typ),
        "gen_ai.usage.input_tokens": _tokens(usage, "input", "prompt_tokens", "input_tokens"),
        "gen_ai.usage.output_tokens": _tokens(usage, "output", "completion_tokens", "output_tokens"),
        "langfuse.session.id": o.get("sessionId"),
        "langfuse.user.id": o.get("userId"),
        "langfuse.trace.tags": [str(t) for t in o.get("tags") or []],
        "langfuse.trace.name": o.get("traceName"),
        "langfuse.observation.metadata": _text(o.get("metadata")) if o.get("metadata") else None,
        "langfuse.observation.id": str(o["id"]),
    }
    level = str(getattr(o.get("level"), "value", o.get("level")) or "")
    status = "ERROR" if level == "ERROR" else "UNSET"
    env = o.get("environment")
    resource = {"service.name": project, "autometrics.project": project, **({"deployment.environment": env} if env else {})}
    return span_row(trace_id=_hex_id(o.get("traceId"), 32), span_id=_hex_id(o["id"], 16),
                    parent_span_id=_hex_id(o.get("parentObservationId"), 16), name=o.get("name") or typ.lower(), kind="INTERNAL",
                    start_time_ns=iso_ns(o.get("startTime")), end_time_ns=iso_ns(o.get("endTime")), status=status,
                    status_message=o.get("statusMessage"), attributes=a, resource=resource, scope="langfuse")


def _feedback(s: dict, project: str) -> dict:
    """One feedback row of a v3 score (raises FeedbackValueError with a code for what is not one)."""
    dtype = str(getattr(s.get("dataType"), "value", s.get("dataType")))
    if dtype not in _VALUE_TYPES:
        raise FeedbackValueError(f"a {dtype} score is not a label", field="dataType", code=f"{dtype.lower()}_score")
    subject = s.get("subject") or {}
    kind = subject.get("kind")
    if kind == "trace":
        trace_id, span_id = subject.get("id"), None
    elif kind == "observation":
        trace_id, span_id = subject.get("traceId"), _hex_id(subject.get("id"), 16)
    else:
        raise FeedbackValueError(f"a score of a {kind or 'missing'} subject is not a trace's label", field="subject",
                                 code=f"{kind or 'no'}_subject")
    meta = s.get("metadata") if isinstance(s.get("metadata"), dict) else {}
    source = str(getattr(s.get("source"), "value", s.get("source")) or "").lower()
    ours = isinstance(meta.get("kind"), str) and "source" in meta and len(str(s["id"])) <= 64
    return make_feedback_row(_hex_id(trace_id, 32), s["name"], s.get("value"), comment=s.get("comment"),
                             kind=meta["kind"] if ours else None, span_id=span_id,
                             source=(meta.get("source") or f"langfuse:{source}") if ours else f"langfuse:{source}",
                             id=str(s["id"]) if ours else versioned_id("langfuse", s["id"], s.get("updatedAt") or s.get("timestamp")),
                             # an edit keeps the score's timestamp: its update time orders the versions ("latest")
                             timestamp=iso_text(s.get("timestamp") if ours else (s.get("updatedAt") or s.get("timestamp"))),
                             project=project)


def _pages(fetch, *, limit: int):
    """Items of a cursor-paged list endpoint, at most ``limit``."""
    cursor, n = None, 0
    while True:
        page = fetch(cursor)
        for item in page.data:
            yield item.dict()
            n += 1
            if n >= limit:
                return
        cursor = getattr(page.meta, "cursor", None)
        if not cursor or not page.data:
            return


def import_langfuse(api, store, *, project: str, names=None, since: dt.datetime | None = None,
                    scores_since: dt.datetime | None = None, limit: int = 1_000_000, page_size: int = 1000) -> ImportCounts:
    """Copy a Langfuse project's observations started since ``since`` (all when None) and its
    scores named in ``names`` (all names when None: pass the feedback names to learn from, so
    evaluator scores pushed back are not read as labels) given since ``scores_since`` into
    ``store`` under ``project``."""
    opts = {"max_retries": 2, "timeout_in_seconds": 60}
    rows, no_trace = [], 0
    for o in _pages(lambda c: api.observations.get_many(fields=OBSERVATION_FIELDS, limit=min(page_size, 1000), cursor=c,
                                                        from_start_time=since, request_options=opts), limit=limit):
        if not o.get("traceId"):  # the API allows an observation outside any trace: nothing to learn from
            no_trace += 1
            continue
        rows.append(_row(o, project))
    counts = ImportCounts(spans=len(rows), traces=len({r["trace_id"] for r in rows}), feedback=0, scores_skipped={})
    if no_trace:
        counts["observations_without_trace"] = no_trace
    store_imported(store, rows, [], counts, "scores_skipped")
    fb = []
    for s in _pages(lambda c: api.scores.get_many(limit=100, cursor=c, fields="details,subject",
                                                  name=",".join(names) if names else None, from_timestamp=scores_since,
                                                  request_options=opts), limit=limit):
        try:
            fb.append(_feedback(s, project))
        except FeedbackValueError as exc:
            skip(counts, "scores_skipped", f"{s.get('name')}: {exc.code}")
    store_imported(store, [], fb, counts, "scores_skipped")
    return counts


class LangfuseSource(IncrementalSource):
    """The worker's view of a Langfuse project: the observations started since the last pull
    (less a 10-minute overlap: Langfuse's other read paths lag by minutes, and spans arrive late)
    and the scores under ``names`` given since then (see :class:`IncrementalSource`).  A score
    edited in Langfuse keeps its first timestamp: an edit older than the window is not re-read."""

    def __init__(self, base_url: str | None = None, *, project: str, names=None, overlap_s: float = 600.0):
        super().__init__(project=project, names=names, overlap_s=overlap_s)
        self.base_url = base_url
        self._api = None

    def __repr__(self) -> str:
        return f"Langfuse {self.base_url or '(LANGFUSE_BASE_URL)'}"

    def _copy(self, store, since) -> dict:
        if self._api is None:
            self._api = langfuse_api(self.base_url)
        return import_langfuse(self._api, store, project=self.project, names=self.names, since=since, scores_since=since)
