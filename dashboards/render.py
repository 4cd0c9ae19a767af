"""The built-in dashboard: one self-contained HTML page (inline CSS and SVG; no scripts, no CDN,
no web fonts), so it opens offline from disk, can be attached to a ticket, and renders the same
in any browser.  The worker rewrites it after each job (atomically: write, then rename).

Sections: current evaluator and its validity, warnings and drift alerts, evaluator versions
(tau with CI, p-value, n; champion/challenger decisions and their reasons), scores over time,
score distribution at fit time vs now, per-metric contributions, rationales for sampled
traces, recent refit runs.

Every τ, CI and p-value on the page carries the label of the data it was computed on
(:mod:`autometrics.dashboards.figures`): the fit-time test split, the newest held-out feedback
at refit (champion/challenger comparison) or live feedback since the fit; warnings and alerts
name the figure they are about.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..evaluators.reading import fmt_number as _f
from ..evaluators.reading import fmt_p as _p
from ..evaluators.reading import metric_direction
from ..evaluators.report import inline_html
from ..evaluators.report_svg import svg_shape
from . import figures as fig

__all__ = ["render_dashboard", "write_dashboard"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
main{max-width:1180px;margin:0 auto;padding:20px 24px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.5em;border-bottom:1px solid #dde1e6;padding-bottom:.2em}
.meta{color:#56606b;font-size:.9em;line-height:1.5}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:14px 0}
.stat{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:10px 14px;min-width:170px;flex:1}
.stat .v{font-size:1.7em;font-weight:600}.stat .l{color:#56606b;font-size:.82em}
.alert{background:#fdecea;border:1px solid #e5a19a;border-radius:8px;padding:6px 12px;margin:6px 0}
.warn{background:#fff7e0;border:1px solid #f0c36d;border-radius:8px;padding:6px 12px;margin:6px 0}
.ok{background:#eaf7ee;border:1px solid #8fd19e;border-radius:8px;padding:6px 12px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.88em}
th,td{border-bottom:1px solid #e6e9ed;padding:5px 7px;text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 7px;border-radius:10px;font-size:.85em;font-weight:600}
.champion{background:#d6f0dd;color:#1e6b34}.rejected{background:#fbe3e1;color:#9b2c22}.retired{background:#e8eaed;color:#4b5563}
.bar{display:inline-block;height:10px;border-radius:2px;vertical-align:middle}
code{background:#eef1f4;padding:1px 4px;border-radius:3px;font-size:.9em}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}.panel{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:8px 12px}
.txt{max-width:340px;white-space:pre-wrap;word-break:break-word;color:#333}
.on{color:#56606b;font-size:.8em;font-style:italic}.fig{font-weight:600}
#versions td.txt{min-width:260px}.contradicts{color:#9b2c22}.story{background:#eef4fc;border:1px solid #b5cdee;border-radius:8px;padding:6px 12px;margin:6px 0}
svg text{font-size:11px;fill:#56606b}
details.stat summary{cursor:pointer;color:#56606b;font-size:.9em}details.stat .stat{margin-top:8px}
nav{margin:8px 0}nav a{margin-right:14px}form.filters{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:8px 12px;display:flex;flex-wrap:wrap;gap:8px 14px;align-items:end}
form.filters label{display:flex;flex-direction:column;font-size:.8em;color:#56606b}form.filters input,form.filters select{font-size:1em;padding:2px 4px}
.pager{margin:10px 0}.pager a{margin-right:12px}pre.txt{white-space:pre-wrap;max-width:none;background:#fff;border:1px solid #dde1e6;padding:8px;border-radius:6px}
@media (max-width:900px){.grid{grid-template-columns:1fr}}
"""




_when = fig.when


def _short(s, n=220) -> str:
    s = "" if s is None or (isinstance(s, float) and math.isnan(s)) else str(s)
    return s if len(s) <= n else s[:n] + "…"


def _axis(lo, hi):
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo < 1e-12:
        return lo - 1, hi + 1
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _svg_versions(versions: list[dict], w=540, h=240) -> str:
    """Tau on the newest held-out feedback at each version's refit, with its 95% CI (green:
    champion, red: rejected, grey: retired); each refit held out its own newest feedback."""
    pts = [(v["version"], fig.holdout(v)[0], v["status"]) for v in versions]
    labels = {v["version"]: fig.holdout(v)[1] for v in versions}
    pts = [(n, s, st) for n, s, st in pts if s.get("tau") is not None]
    if not pts:
        return "<p class='meta'>No evaluator version with a defined held-out tau yet.</p>"
    vals = [x for _, s, _ in pts for x in (s.get("ci_low"), s.get("ci_high"), s.get("tau")) if x is not None] + [0.0]
    lo, hi = _axis(min(vals), max(vals))
    ml, mr, mt, mb = 44, 12, 12, 30
    xs = [n for n, _, _ in pts]
    x0, x1 = min(xs) - 0.5, max(xs) + 0.5

    def sx(v):
        return ml + (v - x0) / (x1 - x0) * (w - ml - mr)

    def sy(v):
        return h - mb - (v - lo) / (hi - lo) * (h - mt - mb)

    col = {"champion": "#2f9e55", "rejected": "#d0493b", "retired": "#8a939c"}
    o = [f'<svg role="img" aria-label="held-out tau per evaluator version" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">',
         f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fff" stroke="#c9ced4"/>']
    for t in np.linspace(lo, hi, 5):
        o.append(f'<line x1="{ml}" x2="{w - mr}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eef0f2"/><text x="{ml - 5}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:.2f}</text>')
    o.append(f'<line x1="{ml}" x2="{w - mr}" y1="{sy(0):.1f}" y2="{sy(0):.1f}" stroke="#999" stroke-dasharray="3 3"/>')
    for n, s, st in pts:
        c = col.get(st, "#3b7dd8")
        if s.get("ci_low") is not None and s.get("ci_high") is not None:
            o.append(f'<line x1="{sx(n):.1f}" x2="{sx(n):.1f}" y1="{sy(s["ci_low"]):.1f}" y2="{sy(s["ci_high"]):.1f}" stroke="{c}" stroke-width="2"/>')
        o.append(f'<circle cx="{sx(n):.1f}" cy="{sy(s["tau"]):.1f}" r="5" fill="{c}"><title>v{n}: {html.escape(fig.fmt_stat(s))} '
                 f'on the {html.escape(labels[n])}</title></circle>')
        o.append(f'<text x="{sx(n):.1f}" y="{h - mb + 15}" text-anchor="middle">v{n}</text>')
    o.append(f'<text x="12" y="{(mt + h - mb) / 2:.0f}" transform="rotate(-90 12 {(mt + h - mb) / 2:.0f})" text-anchor="middle">τ (95% CI)</text>')
    o.append("</svg>")
    return "".join(o)


def _svg_over_time(scores: pd.DataFrame, w=540, h=240, buckets=24) -> str:
    """Mean online score per time bucket (trace start time), with the 25-75% band."""
    s = scores[pd.to_numeric(scores["score"], errors="coerce").notna()]
    if len(s) < 2:
        return "<p class='meta'>Not enough scored traces yet.</p>"
    t = s["trace_start_ns"].astype("float64").to_numpy()
    y = s["score"].astype(float).to_numpy()
    edges = np.linspace(t.min(), t.max() + 1, min(buckets, max(2, len(s) // 5)) + 1)
    idx = np.clip(np.digitize(t, edges) - 1, 0, len(edges) - 2)
    rows = []
    for b in range(len(edges) - 1):
        yy = y[idx == b]
        if len(yy):
            rows.append(((edges[b] + edges[b + 1]) / 2, yy.mean(), np.percentile(yy, 25), np.percentile(yy, 75), len(yy)))
    lo, hi = _axis(min(r[2] for r in rows), max(r[3] for r in rows))
    ml, mr, mt, mb = 48, 12, 12, 34
    t0, t1 = edges[0], edges[-1]

    def sx(v):
        return ml + (v - t0) / (t1 - t0) * (w - ml - mr)

    def sy(v):
        return h - mb - (v - lo) / (hi - lo) * (h - mt - mb)

    o = [f'<svg role="img" aria-label="online scores over time" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">',
         f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fff" stroke="#c9ced4"/>']
    for v in np.linspace(lo, hi, 5):
        o.append(f'<text x="{ml - 5}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    band = " ".join(f"{sx(r[0]):.1f},{sy(r[3]):.1f}" for r in rows) + " " + " ".join(f"{sx(r[0]):.1f},{sy(r[2]):.1f}" for r in reversed(rows))
    o.append(f'<polygon points="{band}" fill="#3b7dd8" fill-opacity="0.15"/>')
    o.append('<polyline fill="none" stroke="#3b7dd8" stroke-width="2" points="' + " ".join(f"{sx(r[0]):.1f},{sy(r[1]):.1f}" for r in rows) + '"/>')
    for r in rows:
        o.append(f'<circle cx="{sx(r[0]):.1f}" cy="{sy(r[1]):.1f}" r="2.5" fill="#3b7dd8"><title>mean {r[1]:.3g}, n={r[4]}</title></circle>')
    ticks, day = _time_ticks(t.min(), t.max())
    for v, label in ticks:
        anchor = "start" if v == ticks[0][0] else "end" if v == ticks[-1][0] else "middle"
        o.append(f'<line x1="{sx(v):.1f}" x2="{sx(v):.1f}" y1="{h - mb}" y2="{h - mb + 4}" stroke="#8a939c"/>'
                 f'<text class="tick" x="{sx(v):.1f}" y="{h - mb + 15}" text-anchor="{anchor}">{label}</text>')
    o.append(f'<text x="{(ml + w - mr) / 2:.0f}" y="{h - 4}" text-anchor="middle">trace time, UTC{day} (mean and 25–75% band '
             'per bucket)</text>')
    o.append("</svg>")
    return "".join(o)


#: tick formats of a time axis, coarsest first, each with the shortest span it is used for (s)
_TIME_FORMATS = ((2 * 86_400, "%Y-%m-%d"), (86_400, "%m-%d %H:%M"), (120, "%H:%M"), (2, "%H:%M:%S"), (0, "%H:%M:%S.%f"))


def _time_ticks(t0: float, t1: float, n: int = 3) -> tuple[list[tuple[float, str]], str]:
    """(position ns, label) of up to ``n`` ticks from ``t0`` to ``t1``, in the coarsest format the
    span allows that tells them apart, and ", 2026-12-06" when the labels leave the day out (one day)."""
    import datetime as dt

    def fmt(ns, f):
        text = dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime(f)
        return text[:-3] if f.endswith("%f") else text  # milliseconds

    span = (t1 - t0) / 1e9
    if span <= 0:
        return [(t0, fmt(t0, "%H:%M:%S"))], f", {fmt(t0, '%Y-%m-%d')}"
    points = list(np.linspace(t0, t1, n))
    usable = [f for least, f in _TIME_FORMATS if span >= least]
    f = next((f for f in usable if len({fmt(p, f) for p in points}) == n), usable[-1])
    labels = [fmt(p, f) for p in points]
    ticks = [(p, lab) for k, (p, lab) in enumerate(zip(points, labels, strict=True)) if lab not in labels[:k]]
    days = {fmt(t0, "%Y-%m-%d"), fmt(t1, "%Y-%m-%d")}
    return ticks, (f", {days.pop()}" if "%d" not in f and len(days) == 1 else "")


def _svg_histograms(ref, cur, w=540, h=240, bins=20, ref_name="fit time", cur_name="newest online scores") -> str:
    """Score distribution of the reference (grey: the drift reference window, or the fit-time
    predictions before one exists) vs the online scores after it (blue), each bar the share of
    its window's scores in the bin (the windows differ in size), on a labelled axis; each bar's
    tooltip gives its count."""
    ref = np.asarray([x for x in ref if x is not None], dtype=float)
    cur = np.asarray(cur, dtype=float)
    ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
    if len(ref) < 2 and len(cur) < 2:
        return "<p class='meta'>No scores yet.</p>"
    allv = np.concatenate([ref, cur])
    lo, hi = float(allv.min()), float(allv.max())
    if hi - lo < 1e-12:
        hi = lo + 1
    edges = np.linspace(lo, hi, bins + 1)
    cr, cc = np.histogram(ref, edges)[0], np.histogram(cur, edges)[0]
    hr, hc = cr / max(1, len(ref)), cc / max(1, len(cur))
    top = max(hr.max(initial=0), hc.max(initial=0)) or 1
    top = math.ceil(top * 20) / 20  # the axis ends on a multiple of 5%
    ml, mr, mt, mb = 52, 12, 40, 30  # the legend sits above the plot, never on the bars
    bw = (w - ml - mr) / bins
    o = [f'<svg role="img" aria-label="score distribution, reference versus now" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">',
         f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fff" stroke="#c9ced4"/>']
    for v in np.linspace(0, top, 5):  # the share axis
        y = h - mb - v / top * (h - mt - mb)
        o.append(f'<line x1="{ml}" x2="{w - mr}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef0f2"/>'
                 f'<text class="ytick" x="{ml - 5}" y="{y + 4:.1f}" text-anchor="end">{100 * v:.0f}%</text>')
    for i in range(bins):
        for val, n, total, c, off in ((hr[i], cr[i], len(ref), "#9aa5b1", 0.0), (hc[i], cc[i], len(cur), "#3b7dd8", 0.5)):
            bh = val / top * (h - mt - mb)
            o.append(f'<rect x="{ml + i * bw + off * bw:.1f}" y="{h - mb - bh:.1f}" width="{bw / 2 - 0.5:.1f}" height="{bh:.1f}" '
                     f'fill="{c}"><title>{n} of {total} scores in [{edges[i]:.3g}, {edges[i + 1]:.3g})</title></rect>')
    o.append(f'<text x="{ml}" y="{h - mb + 15}">{lo:.3g}</text><text x="{w - mr}" y="{h - mb + 15}" text-anchor="end">{hi:.3g}</text>')
    o.append(f'<text x="{(ml + w - mr) / 2:.0f}" y="{h - mb + 15}" text-anchor="middle">score</text>')
    o.append(f'<text x="12" y="{(mt + h - mb) / 2:.0f}" transform="rotate(-90 12 {(mt + h - mb) / 2:.0f})" '
             'text-anchor="middle">share of the window\'s scores</text>')
    o.append(f'<rect x="{ml}" y="4" width="10" height="10" fill="#9aa5b1"/><text x="{ml + 14}" y="13">{html.escape(ref_name)} (n={len(ref)})</text>')
    o.append(f'<rect x="{ml}" y="20" width="10" height="10" fill="#3b7dd8"/><text x="{ml + 14}" y="29">{html.escape(cur_name)} (n={len(cur)})</text>')
    o.append("</svg>")
    return "".join(o)


def _fitted_on(version: dict) -> str:
    """What a version was fitted on, in the numbers the versions table shows: a refit fits on the
    older feedback and holds the newest out for the champion/challenger comparison."""
    st = version.get("statistics") or {}
    made = f"fitted {_when(version['created_at_ns'])}"
    if st.get("n_train") is None:
        return f"{made} on {version['n_feedback']} feedback points"
    return (f"{made} on the {st['n_train']} older of {version['n_feedback']} feedback points; the newest "
            f"{st.get('n_holdout', 0)} held out for the champion/challenger comparison")


def _headline(figs) -> int:
    """Which agreement figure leads: live agreement once it rests on 30 or more feedback points
    (what the evaluator does now), else the newest held-out feedback at the refit, else the fit's."""
    for i, (key, _, (s, label)) in enumerate(figs):
        if key == "live" and label and (s.get("n") or 0) >= 30 and s.get("tau") is not None:
            return i
    for i, (key, _, (s, _label)) in enumerate(figs):
        if key == "heldout" and s.get("tau") is not None:
            return i
    return next((i for i, (k, _, _) in enumerate(figs) if k == "fit-test"), 0)


def _figure_card(key: str, head: str, s: dict, label: str) -> str:
    """A card for one agreement figure: τ, CI, p and, always, the data it was computed on."""
    return (f"<div class='stat' id='{key}'><div class='l'>{html.escape(head)}</div><div class='v'>{_f(s.get('tau'))}</div>"
            f"<div class='l'>95% CI [{_f(s.get('ci_low'))}, {_f(s.get('ci_high'))}] · p = {_p(s.get('p_value'))}</div>"
            f"<div class='on'>on the {html.escape(label)}</div></div>")


_TAU_TEXT = re.compile(r"\btau\b|τ")


def _on(text, version: dict | None) -> str:
    """A refit's reason or message quotes τ on the newest held-out feedback: say which (with n)."""
    if not text or version is None or not _TAU_TEXT.search(str(text)):
        return ""
    return f"<div class='on'>on the {html.escape(fig.holdout(version)[1])}</div>"


def _versions_table(versions: list[dict]) -> str:
    e = html.escape
    o = ["<table id='versions'><tr><th>version</th><th>status</th><th>created</th><th>method</th>"
         "<th>fitted on (older) / held out (newest)</th>"
         f"<th>τ [95% CI], p on the {fig.HOLDOUT}</th><th>Δτ vs the champion of that refit, on the same {fig.HOLDOUT} [95% CI]</th>"
         f"<th>τ [95% CI], p on the {fig.FIT_TEST} or {fig.FIT_CROSS}</th><th>validated</th><th>reason</th></tr>"]
    for v in reversed(versions):
        s = v["statistics"]
        ho = s.get("holdout") or {}
        (hc, hl), (ft, fl) = fig.holdout(v), fig.fit_test(v)
        delta = "–" if ho.get("delta") is None else f"{ho['delta']:+.3f} [{_f(ho.get('ci_low'))}, {_f(ho.get('ci_high'))}]"
        o.append(f"<tr><td>v{v['version']}</td><td><span class='badge {e(v['status'])}'>{e(v['status'])}</span></td>"
                 f"<td>{e(_when(v['created_at_ns']))}</td><td>{e(v['method'] or '')}</td>"
                 f"<td class='n'>{s.get('n_train', '–')} / {s.get('n_holdout', '–')}</td>"
                 f"<td class='n'>{_f(hc.get('tau'))} [{_f(hc.get('ci_low'))}, {_f(hc.get('ci_high'))}], p {_p(hc.get('p_value'))}"
                 f"<div class='on'>{e(hl)}</div></td><td class='n'>{delta}</td>"
                 f"<td class='n'>{_f(ft.get('tau'))} [{_f(ft.get('ci_low'))}, {_f(ft.get('ci_high'))}], p {_p(ft.get('p_value'))}"
                 f"<div class='on'>{e(fl)}</div></td>"
                 f"<td>{'yes' if fig.validity(v).get('validated') else '<b>no</b>'}</td>"
                 f"<td class='txt'>{e(v['reason'] or '')}{_on(v['reason'], v)}</td></tr>")
    o.append("</table>")
    return "".join(o)


def _contributions_table(champ: dict, scores: pd.DataFrame) -> str:
    """Weights, online contributions and, per metric, the direction the evaluator uses read
    against its card (a negative weight is no error for a lower-is-better metric)."""
    e = html.escape
    art = champ["artifact"]
    n_train = ((art.get("statistics") or {}).get("train") or {}).get("n")
    contrib: dict[str, list[float]] = {}
    for c in scores["contributions"].dropna().head(1000) if len(scores) else []:
        for k, val in json.loads(c).items():
            if val is not None:
                contrib.setdefault(k, []).append(float(val))
    shaped = any("shape" in f for f in art["features"])
    how = ("score = intercept + Σ shape(metric) (+ pairwise terms): each metric adds the value its shape gives for the bin its "
           "value falls in; the weight is the signed spread of that contribution (positive: a higher value tends to raise the score)."
           if shaped else
           "score = intercept + Σ weight × z(metric), z the metric's standardised value (not flipped by its card's direction): a "
           "positive weight means a higher value raises the score, a negative weight that a lower value does.")
    o = [f"<h2>Per-metric contributions</h2><div class='meta'>{e(how)}</div><table id='contributions'><tr><th>metric</th><th>weight</th>"
         "<th>the evaluator uses</th><th>metric card</th><th>mean |contribution| to online scores</th><th>mean contribution</th>"
         "<th>reading</th></tr>"]
    mx = max([np.mean(np.abs(v)) for v in contrib.values()] or [1]) or 1
    for f in art["features"]:
        vals = contrib.get(f["feature"], [])
        ma = float(np.mean(np.abs(vals))) if vals else float("nan")
        mean = float(np.mean(vals)) if vals else float("nan")
        width = 0 if not math.isfinite(ma) else 220 * ma / mx
        color = "#3b7dd8" if f["weight"] >= 0 else "#d0493b"
        d = metric_direction(f, n_train)
        o.append(f"<tr data-contradicts='{str(d['contradicts']).lower()}'><td><code>{e(f['feature'])}</code></td>"
                 f"<td class='n'>{f['weight']:+.4f}</td><td class='direction'>{e(d['uses'])}</td><td>{e(d['card'])}</td>"
                 f"<td><span class='bar' style='width:{width:.0f}px;background:{color}'></span> {_f(ma)}</td>"
                 f"<td class='n'>{_f(mean)}</td><td class='{'contradicts' if d['contradicts'] else 'txt'}'>"
                 f"{'⚠ ' if d['contradicts'] else ''}{e(d['reading'])}</td></tr>")
    o.append("</table>")
    if any("shape" in f for f in art["features"]):  # a shape model: each metric's contribution curve
        o.append("<h3>Shapes of the champion (contribution to the score over each metric's value)</h3><div id='shapes'>")
        o += [svg_shape(f["feature"], f["shape"]) for f in art["features"] if "shape" in f]
        o.append("</div>")
    return "".join(o)


def render_dashboard(monitor, *, title: str | None = None, sample: int = 8, seed: int = 0, trace_href=None,
                     nav: str = "", stamp: bool = True) -> str:
    """The dashboard page for one :class:`~autometrics.evaluators.continuous.monitor.Monitor`.
    ``trace_href(trace_id)``: where a trace id links to (the served dashboard's trace view);
    ``nav``: HTML put under the title (the served pages' links); ``stamp``: say when it was made."""
    e = html.escape
    cfg = monitor.cfg
    versions = monitor.versions()
    champ = monitor.champion()
    alerts = monitor.alerts()
    runs = monitor.runs(limit=12)
    # every score, light columns only (the JSON columns of 10^6 scores took 10-17 s to read); the
    # contributions of the newest 1000 and the rationales of the sampled traces are read by key
    light = ["trace_id", "score", "trace_start_ns"]
    scores = monitor.store.scores_frame(champ["id"], columns=light) if champ else pd.DataFrame(columns=light)
    st = champ["statistics"] if champ else {}
    by_id = {v["id"]: v for v in versions}
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width,initial-scale=1'>",
           f"<title>{e(title or 'AutoMetrics dashboard')}: {e(cfg.target)}</title><style>{_CSS}</style></head><body><main>",
           f"<h1>{e(title or 'AutoMetrics dashboard')} — <code>{e(cfg.target)}</code></h1>",
           f"<div class='meta'>Project <b>{e(cfg.project)}</b>" + (f" · Task: {e(cfg.task)}" if cfg.task else "")
           + f" · store {e(monitor.store.shown_url)}"
           + (f"<span class='generated'> · generated {e(_when(__import__('time').time_ns()))}</span>" if stamp else "")
           + f"</div>{nav}"]
    # ---- validity: is the evaluator that scores these traces better than chance?
    if champ:
        v = fig.validity(champ)
        ok = bool(v.get("validated"))
        out.append(f"<div class='{'ok' if ok else 'warn'}' id='validity' data-validated='{str(ok).lower()}'>"
                   f"<b>{'✔ Validated' if ok else '⚠ NOT validated: its scores are unvalidated'}</b> (v{champ['version']}), "
                   f"on the {e(fig.validity_label(champ))}: {e(str(v.get('reason', '')))}</div>")
    elif versions:
        v = fig.validity(versions[-1])
        if not v.get("validated"):
            out.append(f"<div class='warn' id='validity' data-validated='false'><b>⚠ No evaluator scores traces yet</b>: the "
                       f"newest version v{versions[-1]['version']} is NOT validated and was not promoted, on the "
                       f"{e(fig.validity_label(versions[-1]))}: {e(str(v.get('reason', '')))}</div>")
    # ---- cards: one per agreement figure, each naming the data it was computed on
    out.append("<div class='cards'>")
    story = None
    if champ:
        out.append(f"<div class='stat' id='champion'><div class='l'>Current evaluator</div><div class='v'>v{champ['version']}</div>"
                   f"<div class='l'>{e(champ['method'] or '')} · {e(_fitted_on(champ))}</div></div>")
        figs = [("heldout", "Kendall τ, champion/challenger", fig.holdout(champ)), ("fit-test", "Kendall τ, fit-time", fig.fit_test(champ)),
                ("live", "Kendall τ, live", fig.live(champ))]
        # one headline agreement figure (the freshest one measured on enough feedback), the others one click away
        first = _headline(figs)
        key, head, (s, label) = figs[first]
        out.append(_figure_card(key, f"Agreement with people: {head}", s, label))
        others = [f for i, f in enumerate(figs) if i != first]
        out.append(f"<details class='stat' id='other-figures'><summary>Other agreement figures ({len(others)})</summary>")
        for key, head, (s, label) in others:
            out.append(_figure_card(key, head, s, label or f"{fig.LIVE}: not measured yet (no feedback newer than the fit has an online score)"))
        out.append("</details>")
        story = fig.reconcile([f for _, _, f in figs])
    else:
        out.append("<div class='stat'><div class='l'>Current evaluator</div><div class='v'>none yet</div>"
                   f"<div class='l'>a refit needs {cfg.min_feedback} labelled traces</div></div>")
    n_scored = int(pd.to_numeric(scores["score"], errors="coerce").notna().sum()) if len(scores) else 0
    out.append(f"<div class='stat'><div class='l'>Traces scored online</div><div class='v'>{n_scored}</div>"
               f"<div class='l'>{len(versions)} evaluator version(s)</div></div>")
    # one list for the count and the section, so they always agree: the current evaluator's own
    # warnings (low significance p > 0.05, small n, ... from its refit) and the stored alerts;
    # each names the figure (the data) it is about
    items: list[tuple[str, str, str]] = []  # (class, source, html)
    if champ:
        for label, w in fig.labelled_warnings(champ):
            items.append(("warn", "evaluator", f"⚠ v{champ['version']} · <span class='fig'>{e(label)}</span>: {inline_html(w)}"))
    orphans = monitor.store.orphaned_feedback(cfg.target)
    if orphans:
        items.append(("warn", "store", f"⚠ <b>{orphans} orphaned feedback item(s)</b> named <code>{e(cfg.target)}</code>: their "
                      "traces are not in the store (the app's sampler did not record them), so no fit uses them and no "
                      "score is sent for them. Record every trace that may get feedback (sample_rate=1) and sample what "
                      "is judged with <code>worker --judge-sample-rate</code>."))
    for a in alerts:
        v = by_id.get(a.get("evaluator_id"))
        about = "" if v is None else f" · v{v['version']}" + ("" if v["status"] == "champion" else f" ({e(v['status'])}, not the current evaluator)")
        items.append(("alert" if a["severity"] == "alert" else "warn", "monitor",
                      f"<b>{e(a['kind'].replace('_', ' '))}</b>{about} · {e(_when(a['created_at_ns']))} · "
                      f"<span class='fig'>{e(fig.alert_figure(a, v))}</span>: {e(a['message'])}"))
    n_alert = sum(1 for cls, _, _ in items if cls == "alert")
    n_warn = len(items) - n_alert
    out.append(f"<div class='stat' id='warning-counts'><div class='l'>Alerts / warnings</div>"
               f"<div class='v'><span id='n-alerts'>{n_alert}</span> / <span id='n-warnings'>{n_warn}</span></div>"
               f"<div class='l'>drift, validity, significance, sample size</div></div></div>")
    if story:
        out.append(f"<div class='story' id='story'>{e(story)}</div>")
    # ---- warnings and alerts
    out.append("<h2>Warnings and drift alerts</h2><div id='alerts'>")
    # alerts first (the severe ones), then warnings; every counted item is listed
    for cls, src, body in sorted(items, key=lambda x: x[0] != "alert"):
        out.append(f"<div class='{cls}' data-source='{src}'>{body}</div>")
    if not items:
        out.append("<div class='ok'>No warnings or alerts.</div>")
    out.append("</div>")
    # ---- versions
    out.append(f"<h2>Evaluator versions</h2><div class='grid'><div class='panel'><b>τ on the {fig.HOLDOUT}, per version</b>"
               "<div class='on'>each refit holds out its own newest feedback (n per version in the table below)</div>")
    out.append(_svg_versions(versions))
    out.append("</div><div class='panel'><b>Champion/challenger rule</b><div class='meta'>A new version is fitted on older feedback and judged, "
               f"with the current champion, on the {fig.HOLDOUT} (feedback the fit never saw). It replaces the champion only when the lower bound of the "
               "paired-bootstrap 95% CI of τ(new) − τ(champion) on that feedback is above 0; otherwise it is kept as a rejected candidate with the reason. "
               f"The fit also reports τ on its own {fig.FIT_TEST} (a part of the older feedback): a different, usually smaller set, so "
               "its p-value can differ. Roll back with <code>autometrics versions rollback N</code>.</div></div></div>")
    out.append(_versions_table(versions))
    # ---- scores
    out.append("<h2>Scores</h2><div class='grid'><div class='panel'><b>Scores over time</b>")
    out.append(_svg_over_time(scores))
    # the drift check's own reference (its first out-of-sample online scores) once it has one;
    # before that the fit-time predictions, named as such.  Compared with the newest online scores
    # of traces after it, so the two windows never share a score (as the drift check's windows)
    drift = st.get("drift") or {}
    dref = drift.get("reference") or {}
    if dref.get("scores"):
        ref, after = dref["scores"], dref.get("last_ns")
        ref_name, cur_name = "drift reference: the first online scores after the fit's data", "online scores after the reference"
    else:
        ref, after = st.get("reference_scores") or [], st.get("fit_traces_until_ns")
        ref_name, cur_name = "fit-time predictions", "online scores after the fit's data"
    # compared as the drift check compares them (float ns), so the windows are its windows
    later = scores if after is None or not len(scores) else scores[scores["trace_start_ns"].astype(float) > float(after)]
    cur = pd.to_numeric(later["score"], errors="coerce").dropna().head(cfg.drift_window).to_numpy() if len(later) else []
    if len(cur) == cfg.drift_window:
        cur_name = f"newest {cur_name}"
    out.append(f"</div><div class='panel'><b>Distribution: {e(ref_name.split(':')[0])} vs {e(cur_name)}</b>")
    out.append(_svg_histograms(ref, cur, ref_name=ref_name, cur_name=cur_name))
    if drift:
        out.append(f"<div class='meta' id='drift-state'>{e(fig.drift_summary(drift))}</div>")
    if st.get("sequential"):
        out.append(f"<div class='meta' id='sequential-state'>"
                   f"{e(fig.sequential_summary(st['sequential'], st.get('sequential_validity')))}</div>")
    out.append("</div></div>")
    # ---- contributions
    if champ:
        out.append(_contributions_table(champ, monitor.store.scores_frame(champ["id"], limit=1000, columns=["contributions"])))
    # ---- rationales
    out.append("<h2>Rationales for sampled traces</h2>")
    ok = scores[pd.to_numeric(scores["score"], errors="coerce").notna()] if len(scores) else scores
    if len(ok):
        samp = ok.sample(n=min(sample, len(ok)), random_state=seed)
        samp = monitor.store.scores_frame(champ["id"], columns=[*light, "rationales"], trace_ids=samp["trace_id"].tolist())
        texts = monitor.store.trace_texts(samp["trace_id"].tolist()).set_index("trace_id")
        out.append("<table id='rationales'><tr><th>trace</th><th>input</th><th>output</th><th>score</th><th>why</th></tr>")
        for r in samp.itertuples():
            rats = json.loads(r.rationales) if isinstance(r.rationales, str) else []
            tx = texts.loc[r.trace_id] if r.trace_id in texts.index else None
            tid = f"<code>{e(r.trace_id[:12])}…</code>"
            if trace_href is not None:
                tid = f"<a href='{e(trace_href(r.trace_id))}'>{tid}</a>"
            out.append(f"<tr><td>{tid}<div class='meta'>{e(_when(r.trace_start_ns))}</div></td>"
                       f"<td class='txt'>{e(_short(tx['input'] if tx is not None else ''))}</td>"
                       f"<td class='txt'>{e(_short(tx['output'] if tx is not None else ''))}</td><td class='n'><b>{r.score:.3g}</b></td>"
                       "<td class='txt'>" + "<br>".join(e(x["text"]) for x in rats) + "</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class='meta'>No scored traces yet.</p>")
    # ---- runs
    out.append("<h2>Recent refit runs</h2><table id='runs'><tr><th>started</th><th>worker</th><th>outcome</th><th>seconds</th><th>message</th></tr>")
    for r in runs:
        secs = "–" if not r["ended_ns"] else f"{(r['ended_ns'] - r['started_ns']) / 1e9:.1f}"
        out.append(f"<tr><td>{e(_when(r['started_ns']))}</td><td>{e(r['worker'] or '')}</td><td>{e(r['outcome'] or '')}</td>"
                   f"<td class='n'>{secs}</td><td class='txt'>{e(_short(r['message'], 300))}{_on(r['message'], by_id.get(r.get('evaluator_id')))}</td></tr>")
    out.append("</table></main></body></html>")
    return "\n".join(out)


_GENERATED = re.compile(r"<span class='generated'>.*?</span>")


def write_dashboard(monitor, path, **kw) -> Path:
    """Render and write atomically (a browser reloading the page never sees half a file), only
    when the content changed: a worker job that changed nothing leaves the file (and its time) as
    it is.  The page carries the hash of its content (all but its "generated" time)."""
    import hashlib

    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        path = path / "dashboard.html"
    page = render_dashboard(monitor, **kw)
    marker = f"<!-- autometrics content sha256:{hashlib.sha256(_GENERATED.sub('', page).encode()).hexdigest()} -->"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            if marker in fh.read(300):
                return path
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(page.replace("<!doctype html>", f"<!doctype html>{marker}", 1), encoding="utf-8")
    os.replace(tmp, path)
    return path
