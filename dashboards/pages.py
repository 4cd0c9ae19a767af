"""The served dashboard's own pages (server-rendered HTML, no script): the list of projects and
targets, a target's traces with filters, and one trace whole.  The overview page of a target is
:func:`~autometrics.dashboards.render.render_dashboard` with its trace ids linked.

Filters are a plain GET form, so every filtered view is a link that can be shared: time range,
evaluator version, model, user, session, score range and label range (:func:`parse_filter`).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
from urllib.parse import quote, unquote, urlencode

from ..collectors.store import TraceFilter
from ..evaluators.reading import fmt_number as _f
from . import figures as fig
from .render import _CSS, _when

__all__ = ["parse_filter", "page", "index_page", "traces_page", "trace_page", "scope_href", "trace_href", "FilterError"]

e = html.escape
PAGE_SIZE = 50
_RANGES = {"1h": 3600, "24h": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400}


class FilterError(ValueError):
    """A filter value that cannot be read (named, with the expected form)."""


def segment(name: str) -> str:
    """A project/target/trace id as one URL path segment.  The server decodes the path before
    routing, so a ``/`` sent as ``%2F`` would still split it: ``%`` and ``/`` are escaped once more
    here (``a/b`` -> ``a%252Fb``) and :func:`from_segment` undoes that after routing."""
    return quote(name.replace("%", "%25").replace("/", "%2F"), safe="")


def from_segment(value: str) -> str:
    return unquote(value)


def scope_href(project: str, target: str, tail: str = "") -> str:
    return f"/p/{segment(project)}/{segment(target)}{tail}"


def trace_href(project: str, target: str, trace_id: str) -> str:
    return scope_href(project, target, f"/traces/{segment(trace_id)}")


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' content='width=device-width,"
            f"initial-scale=1'><title>{e(title)}</title><style>{_CSS}</style></head><body><main>{body}</main></body></html>")


def _num(q: dict, key: str) -> float | None:
    v = (q.get(key) or "").strip()
    if not v:
        return None
    try:
        x = float(v)
    except ValueError:
        raise FilterError(f"{key} must be a number, not {v!r}") from None
    if not math.isfinite(x) or abs(x) > 1e300:
        raise FilterError(f"{key} must be a finite number, not {v!r}")
    return x


def _time(q: dict, key: str) -> int | None:
    v = (q.get(key) or "").strip()
    if not v:
        return None
    try:
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{key} must be a date and time like 2026-12-06T14:30 (UTC), not {v!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    if not 1970 <= t.year <= 2200:
        raise FilterError(f"{key} must be between 1970 and 2200, not {v!r}")
    return int(t.timestamp() * 1e9)


def parse_filter(q: dict, versions: list[dict], now_ns: int) -> tuple[TraceFilter, dict]:
    """(the filter, the form's values) of a query string; ``version`` is a version number,
    ``all`` or empty (the current champion); ``range`` one of 1h/24h/7d/30d, else ``from``/``to``."""
    by_number = {str(v["version"]): v for v in versions}
    ver = (q.get("version") or "").strip()
    champ = next((v for v in versions if v["status"] == "champion"), None)
    if ver == "all":
        eid = None
    elif ver:
        if ver not in by_number:
            raise FilterError(f"version must be one of {', '.join(sorted(by_number, key=int)) or '(none yet)'} or all, not {ver!r}")
        eid = by_number[ver]["id"]
    else:
        eid = champ["id"] if champ else None
        ver = str(champ["version"]) if champ else "all"
    rng = (q.get("range") or "").strip()
    if rng and rng not in _RANGES:
        raise FilterError(f"range must be one of {', '.join(_RANGES)}, not {rng!r}")
    start = now_ns - _RANGES[rng] * 10**9 if rng else _time(q, "from")
    end = None if rng else _time(q, "to")
    f = TraceFilter(evaluator_id=eid, start_ns=start, end_ns=end, model=(q.get("model") or "").strip() or None,
                    user_id=(q.get("user") or "").strip() or None, session_id=(q.get("session") or "").strip() or None,
                    score_min=_num(q, "score_min"), score_max=_num(q, "score_max"), label_min=_num(q, "label_min"),
                    label_max=_num(q, "label_max"))
    form = {k: (q.get(k) or "").strip() for k in ("range", "from", "to", "model", "user", "session", "score_min", "score_max",
                                                  "label_min", "label_max")}
    form["version"] = ver
    return f, form


def index_page(keys: list[dict], store_label: str) -> str:
    rows = "".join(f"<tr><td>{e(k['project'])}</td><td><a href='{e(scope_href(k['project'], k['target']))}'>{e(k['target'])}</a></td>"
                   f"<td class='n'>{k['versions']}</td><td><a href='{e(scope_href(k['project'], k['target'], '/traces'))}'>traces"
                   "</a></td></tr>" for k in keys)
    body = (f"<h1>AutoMetrics dashboards</h1><div class='meta'>store {e(store_label)}</div>"
            + (f"<table id='scopes'><tr><th>project</th><th>target</th><th>versions</th><th></th></tr>{rows}</table>" if keys else
               "<p class='meta'>No evaluator has been fitted in this store yet: run <code>autometrics worker</code> or "
               "<code>autometrics refit</code>.</p>"))
    return page("AutoMetrics dashboards", body)


def nav(project: str, target: str) -> str:
    return (f"<nav><a href='/'>all projects</a><a href='{e(scope_href(project, target))}'>overview</a>"
            f"<a href='{e(scope_href(project, target, '/traces'))}'>traces</a></nav>")


def _filter_form(form: dict, versions: list[dict], models: list[str]) -> str:
    opts = ["<option value='all'" + (" selected" if form["version"] == "all" else "") + ">every version</option>"]
    for v in reversed(versions):
        sel = " selected" if form["version"] == str(v["version"]) else ""
        opts.append(f"<option value='{v['version']}'{sel}>v{v['version']} ({e(v['status'])})</option>")
    rng = "".join(f"<option value='{k}'" + (" selected" if form["range"] == k else "") + f">last {k}</option>" for k in _RANGES)

    def inp(name, label, typ="text", extra=""):
        return f"<label>{label}<input name='{name}' type='{typ}' value='{e(form[name])}'{extra}></label>"

    dl = "<datalist id='models'>" + "".join(f"<option value='{e(m)}'>" for m in models) + "</datalist>"
    return ("<form class='filters' method='get' id='filters'>"
            f"<label>version<select name='version'>{''.join(opts)}</select></label>"
            f"<label>time<select name='range'><option value=''>from/to below</option>{rng}</select></label>"
            + inp("from", "from (UTC)", "datetime-local") + inp("to", "to (UTC)", "datetime-local")
            + inp("model", "model", extra=" list='models'") + inp("user", "user") + inp("session", "session")
            + inp("score_min", "score ≥", "number", " step='any'") + inp("score_max", "score ≤", "number", " step='any'")
            + inp("label_min", "label ≥", "number", " step='any'") + inp("label_max", "label ≤", "number", " step='any'")
            + f"<button type='submit'>filter</button><a href='?'>clear</a>{dl}</form>")


def traces_page(project: str, target: str, rows, total: int, form: dict, versions: list[dict], models: list[str], *,
                offset: int, capped: bool, seconds: float, error: str | None = None) -> str:
    by_id = {v["id"]: v for v in versions}
    out = [f"<h1>Traces — <code>{e(target)}</code></h1><div class='meta'>Project <b>{e(project)}</b></div>", nav(project, target),
           _filter_form(form, versions, models)]
    if error:
        out.append(f"<div class='alert' id='filter-error'>{e(error)}</div>")
    shown = f"{offset + 1}–{offset + len(rows)}" if len(rows) else "0"
    out.append(f"<p class='meta' id='count'><b>{'more than ' if capped else ''}{total:,}</b> scored trace(s) match; showing {shown}"
               f" (newest first; answered in {seconds * 1000:.0f} ms)</p>")
    out.append("<table id='traces'><tr><th>trace</th><th>started</th><th>version</th><th>score</th><th>label</th><th>model</th>"
               "<th>user</th><th>session</th><th>input</th><th>output</th></tr>")
    for r in rows.itertuples():
        v = by_id.get(r.evaluator_id)
        score = "–" if r.score is None or r.score != r.score else f"{r.score:.3g}"
        label = "–" if r.label is None or (isinstance(r.label, float) and r.label != r.label) else e(str(r.label))
        out.append(f"<tr><td><a class='trace' href='{e(trace_href(project, target, r.trace_id))}'><code>{e(r.trace_id[:12])}…</code></a>"
                   f"</td><td>{e(_when(r.trace_start_ns))}</td><td>{'v' + str(v['version']) if v else '?'}</td>"
                   f"<td class='n'>{score}</td><td class='n'>{label}</td><td>{_t(r.model)}</td><td>{_t(r.user_id)}</td>"
                   f"<td>{_t(r.session_id)}</td><td class='txt'>{e(_short(r.input))}</td><td class='txt'>{e(_short(r.output))}</td></tr>")
    out.append("</table>")
    keep = {k: v for k, v in form.items() if v}
    pager = []
    if offset > 0:
        pager.append(f"<a rel='prev' href='?{e(urlencode({**keep, 'offset': max(0, offset - PAGE_SIZE)}))}'>← newer</a>")
    if offset + len(rows) < total:
        pager.append(f"<a rel='next' href='?{e(urlencode({**keep, 'offset': offset + PAGE_SIZE}))}'>older →</a>")
    out.append(f"<div class='pager'>{''.join(pager)}</div>")
    return page(f"Traces: {target}", "".join(out))


def _short(s, n=160) -> str:
    s = "" if s is None else str(s)
    return s if len(s) <= n else s[:n - 1] + "…"


def trace_page(project: str, target: str, trace_id: str, spans, feedback, scores: list[dict], versions: list[dict]) -> str:
    by_id = {v["id"]: v for v in versions}
    out = [f"<h1>Trace <code>{e(trace_id)}</code></h1>", nav(project, target)]
    content = spans[spans["input"].notna() | spans["output"].notna()] if len(spans) else spans
    top = content.iloc[0] if len(content) else None
    who = spans.iloc[0] if len(spans) else None
    if who is not None:
        facts = [f"started {e(_when(int(spans['start_time_ns'].min())))}"]
        for col, name in (("session_id", "session"), ("user_id", "user")):
            vals = spans[col].dropna()
            if len(vals):
                facts.append(f"{name} <b>{e(str(vals.iloc[0]))}</b>")
        models = spans["model"].dropna().unique().tolist()
        if models:
            facts.append("model " + ", ".join(f"<b>{e(m)}</b>" for m in models))
        errors = spans["error_type"].dropna()
        if len(errors):
            facts.append(f"<span class='contradicts'>error {e(str(errors.iloc[0]))}</span>")
        out.append(f"<div class='meta'>{' · '.join(facts)}</div>")
    out.append("<h2>Input</h2><pre class='txt' id='input'>" + e("" if top is None or top["input"] is None else str(top["input"])) + "</pre>")
    out.append("<h2>Output</h2><pre class='txt' id='output'>" + e("" if top is None or top["output"] is None else str(top["output"]))
               + "</pre>")
    out.append("<h2>Feedback</h2>")
    if len(feedback):
        out.append("<table id='feedback'><tr><th>name</th><th>value</th><th>kind</th><th>comment</th><th>source</th><th>when</th></tr>")
        for r in feedback.itertuples():
            val = r.value if r.value is not None and r.value == r.value else r.value_text
            out.append(f"<tr><td>{e(r.name)}</td><td class='n'>{e(str(val))}</td><td>{e(r.kind)}</td><td class='txt'>"
                       f"{_t(r.comment)}</td><td>{_t(r.source)}</td><td>{e(_when(r.created_at_ns))}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class='meta'>No feedback on this trace.</p>")
    out.append(f"<h2>Scores of <code>{e(target)}</code></h2>")
    if not scores:
        out.append("<p class='meta'>No evaluator version has scored this trace yet.</p>")
    for s in scores:
        v = by_id.get(s["evaluator_id"])
        vd = fig.validity(v) if v else {}
        ok = bool(vd.get("validated"))
        head = f"v{v['version']} ({e(v['status'])})" if v else "a deleted version"
        score = "–" if s["score"] is None else f"{s['score']:.3g}"
        out.append(f"<div class='panel score' data-version='{v['version'] if v else ''}'><b>{head}</b>: score <b>{score}</b>"
                   + (f" <span class='contradicts'>not scored: {e(s['error'])}</span>" if s.get("error") else ""))
        if v:
            out.append(f"<div class='{'ok' if ok else 'warn'}'>{'✔ validated' if ok else '⚠ NOT validated'} on the "
                       f"{e(fig.validity_label(v))}: {e(str(vd.get('reason', '')))}</div>")
        rats = json.loads(s["rationales"]) if s.get("rationales") else []
        if rats:
            out.append("<div><b>Why</b><ul class='rationales'>" + "".join(f"<li>{e(r['text'])}</li>" for r in rats) + "</ul></div>")
        metrics = json.loads(s["metrics"]) if s.get("metrics") else {}
        contrib = json.loads(s["contributions"]) if s.get("contributions") else {}
        if metrics or contrib:
            out.append("<table class='metrics'><tr><th>metric</th><th>value</th><th>contribution to the score</th></tr>")
            for name in sorted(set(metrics) | set(contrib), key=lambda k: -abs(contrib.get(k) or 0)):
                c = contrib.get(name)
                out.append(f"<tr><td><code>{e(name)}</code></td><td class='n'>{_f(metrics.get(name))}</td>"
                           f"<td class='n'>{'–' if c is None else f'{c:+.3f}'}</td></tr>")
            out.append("</table>")
        out.append("</div>")
    out.append("<h2>Spans</h2><table id='spans'><tr><th>name</th><th>model</th><th>tokens in/out</th><th>ms</th><th>status</th></tr>")
    for r in spans.itertuples():
        ms = (r.end_time_ns - r.start_time_ns) / 1e6 if r.end_time_ns and r.start_time_ns else None
        out.append(f"<tr><td>{e(r.name)}</td><td>{_t(r.model)}</td><td class='n'>{_int(r.input_tokens)}/{_int(r.output_tokens)}</td>"
                   f"<td class='n'>{'–' if ms is None else f'{ms:.1f}'}</td><td>{_t(r.status)}"
                   + (f"<details><summary>{_t(r.error_type)}</summary><pre class='txt'>{_t(r.error_stack) or _t(r.error_message)}"
                      "</pre></details>" if _t(r.error_type) else "") + "</td></tr>")
    out.append("</table>")
    return page(f"Trace {trace_id[:12]}", "".join(out))


def _t(v) -> str:
    """A cell's escaped text; empty for None/NaN."""
    return "" if v is None or (isinstance(v, float) and v != v) else e(str(v))


def _int(v) -> str:
    return "–" if v is None or v != v else str(int(v))
