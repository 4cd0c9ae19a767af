"""The built-in dashboard: one self-contained HTML page (inline CSS and SVG; no scripts, no CDN,
no web fonts), so it opens offline from disk, can be attached to a ticket, and renders the same
in any browser.  The worker rewrites it after each job (atomically: write, then rename).

Sections: current evaluator and its validity, warnings and drift alerts, evaluator versions
(tau with CI, p-value, n; champion/challenger decisions and their reasons), scores over time,
score distribution at fit time vs now, per-metric contributions, rationales for sampled
traces, recent refit runs.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from autometrics.evaluators.report import fmt_number as _f
from autometrics.evaluators.report import fmt_p as _p

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
svg text{font-size:11px;fill:#56606b}
@media (max-width:900px){.grid{grid-template-columns:1fr}}
"""




def _when(ns) -> str:
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return "–"
    return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(s, n=220) -> str:
    s = "" if s is None or (isinstance(s, float) and math.isnan(s)) else str(s)
    return s if len(s) <= n else s[:n] + "…"


def _axis(lo, hi):
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo < 1e-12:
        return lo - 1, hi + 1
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _svg_versions(versions: list[dict], w=540, h=240) -> str:
    """Held-out tau with its 95% CI per version (green: champion, red: rejected, grey: retired)."""
    pts = [(v["version"], ((v["statistics"].get("holdout") or {}).get("challenger") or {}), v["status"]) for v in versions]
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
        o.append(f'<circle cx="{sx(n):.1f}" cy="{sy(s["tau"]):.1f}" r="5" fill="{c}"><title>v{n}: tau {s["tau"]:.3f}</title></circle>')
        o.append(f'<text x="{sx(n):.1f}" y="{h - mb + 15}" text-anchor="middle">v{n}</text>')
    o.append(f'<text x="12" y="{(mt + h - mb) / 2:.0f}" transform="rotate(-90 12 {(mt + h - mb) / 2:.0f})" text-anchor="middle">held-out τ (95% CI)</text>')
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
    for v, anchor in ((t0, "start"), (t1, "end")):
        o.append(f'<text x="{sx(v):.1f}" y="{h - mb + 15}" text-anchor="{anchor}">{_when(v)[:16]}</text>')
    o.append(f'<text x="{(ml + w - mr) / 2:.0f}" y="{h - 4}" text-anchor="middle">trace time (mean and 25–75% band per bucket)</text>')
    o.append("</svg>")
    return "".join(o)


def _svg_histograms(ref, cur, w=540, h=240, bins=20) -> str:
    """Score distribution at fit time (grey) vs the newest online scores (blue)."""
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
    hr = np.histogram(ref, edges)[0] / max(1, len(ref))
    hc = np.histogram(cur, edges)[0] / max(1, len(cur))
    top = max(hr.max(initial=0), hc.max(initial=0)) or 1
    ml, mr, mt, mb = 36, 12, 12, 30
    bw = (w - ml - mr) / bins
    o = [f'<svg role="img" aria-label="score distribution, fit time versus now" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">',
         f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fff" stroke="#c9ced4"/>']
    for i in range(bins):
        for val, c, off in ((hr[i], "#9aa5b1", 0.0), (hc[i], "#3b7dd8", 0.5)):
            bh = val / top * (h - mt - mb)
            o.append(f'<rect x="{ml + i * bw + off * bw:.1f}" y="{h - mb - bh:.1f}" width="{bw / 2 - 0.5:.1f}" height="{bh:.1f}" fill="{c}"/>')
    o.append(f'<text x="{ml}" y="{h - mb + 15}">{lo:.3g}</text><text x="{w - mr}" y="{h - mb + 15}" text-anchor="end">{hi:.3g}</text>')
    o.append(f'<rect x="{ml + 8}" y="{mt + 6}" width="10" height="10" fill="#9aa5b1"/><text x="{ml + 22}" y="{mt + 15}">fit time (n={len(ref)})</text>')
    o.append(f'<rect x="{ml + 130}" y="{mt + 6}" width="10" height="10" fill="#3b7dd8"/><text x="{ml + 144}" y="{mt + 15}">newest online (n={len(cur)})</text>')
    o.append("</svg>")
    return "".join(o)


def render_dashboard(monitor, *, title: str | None = None, sample: int = 8, seed: int = 0) -> str:
    """The dashboard page for one :class:`~autometrics.evaluators.continuous.monitor.Monitor`."""
    e = html.escape
    cfg = monitor.cfg
    versions = monitor.versions()
    champ = monitor.champion()
    alerts = monitor.alerts()
    runs = monitor.runs(limit=12)
    scores = monitor.scores_frame(champ["id"]) if champ else pd.DataFrame(columns=["trace_id", "score", "trace_start_ns"])
    st = champ["statistics"] if champ else {}
    hold = (st.get("holdout") or {}).get("challenger") or {}
    lv = st.get("live_validity") or {}
    lw = lv.get("window") or {}
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width,initial-scale=1'>",
           f"<title>{e(title or 'AutoMetrics dashboard')}: {e(cfg.target)}</title><style>{_CSS}</style></head><body><main>",
           f"<h1>{e(title or 'AutoMetrics dashboard')} — <code>{e(cfg.target)}</code></h1>",
           f"<div class='meta'>Project <b>{e(cfg.project)}</b>" + (f" · Task: {e(cfg.task)}" if cfg.task else "")
           + f" · store {e(repr(monitor.store))} · generated {e(_when(__import__('time').time_ns()))}</div>"]
    # ---- cards
    out.append("<div class='cards'>")
    if champ:
        out.append(f"<div class='stat' id='champion'><div class='l'>Current evaluator</div><div class='v'>v{champ['version']}</div>"
                   f"<div class='l'>{e(champ['method'] or '')} · fitted {e(_when(champ['created_at_ns']))} on {champ['n_feedback']} feedback points</div></div>")
        out.append(f"<div class='stat' id='heldout'><div class='l'>Held-out Kendall τ (newest feedback)</div><div class='v'>{_f(hold.get('tau'))}</div>"
                   f"<div class='l'>95% CI [{_f(hold.get('ci_low'))}, {_f(hold.get('ci_high'))}] · p = {_p(hold.get('p_value'))} · n = {hold.get('n')}</div></div>")
        out.append(f"<div class='stat' id='live'><div class='l'>Live τ on feedback after the fit</div><div class='v'>{_f(lw.get('tau'))}</div>"
                   f"<div class='l'>CI [{_f(lw.get('ci_low'))}, {_f(lw.get('ci_high'))}] · p = {_p(lw.get('p_value'))} · n = {lw.get('n', 0)}</div></div>")
    else:
        out.append("<div class='stat'><div class='l'>Current evaluator</div><div class='v'>none yet</div>"
                   f"<div class='l'>a refit needs {cfg.min_feedback} labelled traces</div></div>")
    n_scored = int(pd.to_numeric(scores["score"], errors="coerce").notna().sum()) if len(scores) else 0
    out.append(f"<div class='stat'><div class='l'>Traces scored online</div><div class='v'>{n_scored}</div>"
               f"<div class='l'>{len(versions)} evaluator version(s)</div></div>")
    # one list for the count and the section, so they always agree: the current evaluator's own
    # warnings (low significance p > 0.05, small n, ... from its refit) and the stored alerts
    items: list[tuple[str, str, str]] = []  # (class, source, html)
    if champ:
        for w in st.get("warnings") or []:
            items.append(("warn", "evaluator", f"⚠ v{champ['version']}: {e(w)}"))
    for a in alerts:
        items.append(("alert" if a["severity"] == "alert" else "warn", "monitor",
                      f"<b>{e(a['kind'].replace('_', ' '))}</b> · {e(_when(a['created_at_ns']))} · {e(a['message'])}"))
    n_alert = sum(1 for cls, _, _ in items if cls == "alert")
    n_warn = len(items) - n_alert
    out.append(f"<div class='stat' id='warning-counts'><div class='l'>Alerts / warnings</div>"
               f"<div class='v'><span id='n-alerts'>{n_alert}</span> / <span id='n-warnings'>{n_warn}</span></div>"
               f"<div class='l'>drift, validity, significance, sample size</div></div></div>")
    # ---- warnings and alerts
    out.append("<h2>Warnings and drift alerts</h2><div id='alerts'>")
    # alerts first (the severe ones), then warnings; every counted item is listed
    for cls, src, body in sorted(items, key=lambda x: x[0] != "alert"):
        out.append(f"<div class='{cls}' data-source='{src}'>{body}</div>")
    if not items:
        out.append("<div class='ok'>No warnings or alerts.</div>")
    out.append("</div>")
    # ---- versions
    out.append("<h2>Evaluator versions</h2><div class='grid'><div class='panel'>")
    out.append(_svg_versions(versions))
    out.append("</div><div class='panel'><b>Champion/challenger rule</b><div class='meta'>A new version is fitted on older feedback and judged, "
               "with the current champion, on the newest held-out feedback. It replaces the champion only when the lower bound of the "
               "paired-bootstrap 95% CI of τ(new) − τ(champion) is above 0; otherwise it is kept as a rejected candidate with the reason. "
               "Roll back with <code>autometrics versions rollback N</code>.</div></div></div>")
    out.append("<table id='versions'><tr><th>version</th><th>status</th><th>created</th><th>method</th><th>train / held-out</th>"
               "<th>held-out τ [95% CI]</th><th>p</th><th>Δτ vs champion [95% CI]</th><th>reason</th></tr>")
    for v in reversed(versions):
        s = v["statistics"]
        hc = (s.get("holdout") or {}).get("challenger") or {}
        ho = s.get("holdout") or {}
        delta = "–" if ho.get("delta") is None else f"{ho['delta']:+.3f} [{_f(ho.get('ci_low'))}, {_f(ho.get('ci_high'))}]"
        out.append(f"<tr><td>v{v['version']}</td><td><span class='badge {e(v['status'])}'>{e(v['status'])}</span></td>"
                   f"<td>{e(_when(v['created_at_ns']))}</td><td>{e(v['method'] or '')}</td><td class='n'>{s.get('n_train', '–')} / {s.get('n_holdout', '–')}</td>"
                   f"<td class='n'>{_f(hc.get('tau'))} [{_f(hc.get('ci_low'))}, {_f(hc.get('ci_high'))}]</td><td class='n'>{_p(hc.get('p_value'))}</td>"
                   f"<td class='n'>{delta}</td><td class='txt'>{e(v['reason'] or '')}</td></tr>")
    out.append("</table>")
    # ---- scores
    out.append("<h2>Scores</h2><div class='grid'><div class='panel'><b>Scores over time</b>")
    out.append(_svg_over_time(scores))
    out.append("</div><div class='panel'><b>Distribution: fit time vs newest online scores</b>")
    cur = pd.to_numeric(scores["score"], errors="coerce").dropna().head(cfg.drift_window).to_numpy() if len(scores) else []
    out.append(_svg_histograms(st.get("reference_scores") or [], cur))
    out.append("</div></div>")
    # ---- contributions
    if champ:
        art = champ["artifact"]
        contrib: dict[str, list[float]] = {}
        for c in scores["contributions"].dropna().head(1000) if len(scores) else []:
            for k, val in json.loads(c).items():
                if val is not None:
                    contrib.setdefault(k, []).append(float(val))
        out.append("<h2>Per-metric contributions</h2><table id='contributions'><tr><th>metric</th><th>weight</th>"
                   "<th>mean |contribution| to online scores</th><th>mean contribution</th><th>higher is better</th></tr>")
        mx = max([np.mean(np.abs(v)) for v in contrib.values()] or [1]) or 1
        for f in art["features"]:
            vals = contrib.get(f["feature"], [])
            ma = float(np.mean(np.abs(vals))) if vals else float("nan")
            mean = float(np.mean(vals)) if vals else float("nan")
            width = 0 if not math.isfinite(ma) else 220 * ma / mx
            color = "#3b7dd8" if f["weight"] >= 0 else "#d0493b"
            out.append(f"<tr><td><code>{e(f['feature'])}</code></td><td class='n'>{f['weight']:+.4f}</td>"
                       f"<td><span class='bar' style='width:{width:.0f}px;background:{color}'></span> {_f(ma)}</td>"
                       f"<td class='n'>{_f(mean)}</td><td>{'yes' if f['higher_is_better'] else 'no'}</td></tr>")
        out.append("</table>")
    # ---- rationales
    out.append("<h2>Rationales for sampled traces</h2>")
    ok = scores[pd.to_numeric(scores["score"], errors="coerce").notna()] if len(scores) else scores
    if len(ok):
        samp = ok.sample(n=min(sample, len(ok)), random_state=seed).sort_values("trace_start_ns", ascending=False)
        texts = monitor.store.trace_texts(samp["trace_id"].tolist()).set_index("trace_id")
        out.append("<table id='rationales'><tr><th>trace</th><th>input</th><th>output</th><th>score</th><th>why</th></tr>")
        for r in samp.itertuples():
            rats = json.loads(r.rationales) if isinstance(r.rationales, str) else []
            tx = texts.loc[r.trace_id] if r.trace_id in texts.index else None
            out.append(f"<tr><td><code>{e(r.trace_id[:12])}…</code><div class='meta'>{e(_when(r.trace_start_ns))}</div></td>"
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
                   f"<td class='n'>{secs}</td><td class='txt'>{e(_short(r['message'], 300))}</td></tr>")
    out.append("</table></main></body></html>")
    return "\n".join(out)


def write_dashboard(monitor, path, **kw) -> Path:
    """Render and write atomically (a browser reloading the page never sees half a file)."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        path = path / "dashboard.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(render_dashboard(monitor, **kw), encoding="utf-8")
    os.replace(tmp, path)
    return path
