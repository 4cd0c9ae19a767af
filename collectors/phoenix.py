"""Round trips with Arize Phoenix: its spans and span annotations in, evaluator scores out.

In: :func:`import_phoenix` reads a Phoenix project's spans (``phoenix.client``'s
``spans.get_spans``) and its span annotations (human labels such as a thumbs-up given in the
Phoenix UI or through its API) and writes them into a trace store as spans and feedback, so that
``autometrics fit`` and the worker read them like anything captured here: the same
:func:`~autometrics.collectors.convert.span_row` (OpenInference attributes are read by
:mod:`~autometrics.collectors.conventions`) and the same feedback validation.  An annotation
becomes one feedback row named after the annotation, valued by its score (or, without one, its
label: ``up``/``down``, ``good``/``bad``... are read as thumbs), with the id ``phoenix:<its id>:<its
update time>`` so a re-import stores nothing twice and an edited annotation is read as the newer.

Out: :func:`annotate_phoenix` writes evaluator scores back as span annotations on each trace's
root span (``annotator_kind`` CODE, the score, a label saying whether the evaluator is validated,
and the explanation: the rationale and any validity warning), read back in Phoenix next to the
human ones.

``phoenix+http://host:6006/<project>`` (or ``phoenix+https://``) is how the CLI names a Phoenix
project (:func:`parse_phoenix_url`); ``PHOENIX_API_KEY`` is sent when set (never logged).
"""

from __future__ import annotations

import datetime as dt
import os
from urllib.parse import urlsplit

from ..metricbank.errors import DataError, Unavailable, UserError
from .convert import span_row
from .feedback import FeedbackValueError, make_feedback_row
from .imports import ImportCounts, IncrementalSource, iso_ns, iso_text, skip, store_imported, versioned_id

__all__ = ["parse_phoenix_url", "phoenix_client", "import_phoenix", "annotate_phoenix", "ImportCounts", "PhoenixSource"]

_STATUS = {"OK": "OK", "ERROR": "ERROR"}


def parse_phoenix_url(url: str) -> tuple[str, str]:
    """(base URL, project) of ``phoenix+http(s)://host:port/<project>`` (project ``default`` when
    the path is empty)."""
    if not url.lower().startswith(("phoenix+http://", "phoenix+https://")):
        raise UserError(f"{url!r} is not a Phoenix project: write phoenix+http://host:6006/<project>")
    parts = urlsplit(url[len("phoenix+"):])
    if not parts.hostname:
        raise UserError(f"{url!r} names no host: write phoenix+http://host:6006/<project>")
    project = parts.path.strip("/") or "default"
    return f"{parts.scheme}://{parts.netloc}", project


def phoenix_client(base_url: str):
    """A ``phoenix.client.Client`` (the ``arize-phoenix-client`` package) for ``base_url``, with
    ``PHOENIX_API_KEY`` when set."""
    try:
        from phoenix.client import Client
    except ModuleNotFoundError as exc:
        raise Unavailable(f"reading from Phoenix needs its client ({exc}); pip install arize-phoenix-client") from exc
    return Client(base_url=base_url, api_key=os.environ.get("PHOENIX_API_KEY") or None)


def _row(span: dict, project: str) -> dict:
    a = dict(span.get("attributes") or {})
    kind = span.get("span_kind")
    if kind and kind != "UNKNOWN":
        a.setdefault("openinference.span.kind", kind)  # Phoenix returns it beside the attributes
    ctx = span.get("context") or {}
    return span_row(trace_id=ctx["trace_id"], span_id=ctx["span_id"], parent_span_id=span.get("parent_id"), name=span.get("name") or "",
                    kind="INTERNAL", start_time_ns=iso_ns(span.get("start_time")), end_time_ns=iso_ns(span.get("end_time")),
                    status=_STATUS.get(span.get("status_code"), "UNSET"), status_message=span.get("status_message") or None,
                    attributes=a, resource={"service.name": project, "autometrics.project": project}, scope=None,
                    events=[(e.get("name"), e.get("attributes") or {}) for e in span.get("events") or []])


def import_phoenix(client, phoenix_project: str, store, *, project: str | None = None, names=None, limit: int = 1_000_000,
                   start_time: dt.datetime | None = None) -> ImportCounts:
    """Copy a Phoenix project's spans and span annotations (only those named in ``names``, when
    given) into ``store`` under ``project`` (default: the Phoenix project's name)."""
    project = project or phoenix_project
    spans = client.spans.get_spans(project_identifier=phoenix_project, limit=limit, start_time=start_time, timeout=60)
    rows = [_row(s, project) for s in spans]
    trace_of = {r["span_id"]: r["trace_id"] for r in rows}
    counts = ImportCounts(spans=len(rows), traces=len({r["trace_id"] for r in rows}), feedback=0, annotations_skipped={})
    store_imported(store, rows, [], counts, "annotations_skipped")
    fb = []
    ids = list(trace_of)
    for i in range(0, len(ids), 200):  # the client sends span ids in the query string: in chunks
        df = client.spans.get_span_annotations_dataframe(span_ids=ids[i:i + 200], project_identifier=phoenix_project,
                                                         include_annotation_names=list(names) if names else None,
                                                         timeout=60)
        for span_id, a in zip(df.index, df.to_dict("records"), strict=True):
            value = a.get("result.score")
            if value is None or value != value:  # NaN: no score, the label carries it
                value = a.get("result.label")
            try:
                fb.append(make_feedback_row(trace_of[span_id], a["annotation_name"], value, comment=a.get("result.explanation"),
                                            span_id=span_id, source=f"phoenix:{str(a.get('annotator_kind') or '').lower()}",
                                            id=versioned_id("phoenix", a["id"], a.get("updated_at") or a.get("created_at"), digits=14),
                                            timestamp=iso_text(a.get("updated_at") or a.get("created_at")),
                                            project=project))
            except FeedbackValueError as exc:
                skip(counts, "annotations_skipped", f"{a.get('annotation_name')}: {exc.code}")
    store_imported(store, [], fb, counts, "annotations_skipped")
    return counts


def annotate_phoenix(client, scores: list[dict], *, name: str, validated: bool | None = None) -> int:
    """Write evaluator scores as Phoenix span annotations named ``name``: each item has
    ``span_id`` (the trace's root span), ``score`` and optionally ``explanation``.  Returns how
    many were sent; raises on a transport error (callers count it)."""
    label = None if validated is None else ("validated" if validated else "unvalidated")
    batch = [{"name": name, "span_id": s["span_id"], "annotator_kind": "CODE",
              "result": {"score": float(s["score"]), "label": label, "explanation": s.get("explanation")},
              "identifier": "autometrics"} for s in scores if s.get("span_id") and s.get("score") is not None]
    if not batch:
        return 0
    try:
        client.spans.log_span_annotations(span_annotations=batch, sync=True)
    except Exception as exc:
        raise DataError(f"Phoenix refused the annotations: {type(exc).__name__}: {exc}") from exc
    return len(batch)


class PhoenixSource(IncrementalSource):
    """The worker's view of a Phoenix project: the spans started since the last pull (less a
    10-minute overlap for late spans) and all their annotations (see :class:`IncrementalSource`)."""

    def __init__(self, url: str, *, project: str | None = None, names=None, overlap_s: float = 600.0):
        self.base, self.phoenix_project = parse_phoenix_url(url)
        super().__init__(project=project or self.phoenix_project, names=names, overlap_s=overlap_s)
        self._client = None

    def __repr__(self) -> str:
        return f"Phoenix {self.base} project {self.phoenix_project!r}"

    def _copy(self, store, since) -> dict:
        if self._client is None:
            self._client = phoenix_client(self.base)
        try:
            return import_phoenix(self._client, self.phoenix_project, store, project=self.project, names=self.names,
                                  start_time=since)
        except Exception as exc:
            if "404" in str(exc):  # the project has no span yet
                return {"spans": 0, "feedback": 0}
            raise
