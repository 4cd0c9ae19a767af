"""The fit report: Markdown and one self-contained offline HTML page (inline CSS and SVG, no
scripts, no CDN).  It shows what the evaluator is made of and how far to trust it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from ..metricbank import load_card
from ..metricbank.formulas import plain_formulas
from .analysis import robustness, scaling
from .code_metric import code_metrics_markdown
from .fit import FitResult
from .reading import fmt_number, fmt_p, metric_direction, shape_lines
from .report_candidates import candidates_markdown
from .report_svg import svg_scatter, svg_shape
from .validity import artifact_validity, split_line

__all__ = ["render_markdown", "render_html", "write_reports", "attach_analyses", "inline_html", "SIGNS_NOTE"]


def _stat_line(s: dict) -> str:
    return f"τ = {fmt_number(s.get('tau'))} [95% CI {fmt_number(s.get('ci_low'))}, {fmt_number(s.get('ci_high'))}], p = {fmt_p(s.get('p_value'))}, n = {s.get('n')}"


def _formula(ev) -> str:
    a = ev.artifact
    parts = [f"{a['intercept']:.4g}"]
    for f in a["features"]:
        if "shape" in f:
            parts.append(f"+ shape({f['feature']})")
            continue
        sign = "+" if f["weight"] >= 0 else "−"
        parts.append(f"{sign} {abs(f['weight']):.4g} · z({f['feature']})")
    parts += [f"+ pair({p['features'][0]}, {p['features'][1]})" for p in a.get("pairs") or []]
    lo, hi = ev.label_range
    clip = f", kept within the label range [{lo:g}, {hi:g}] (order-preserving near the bounds)" if lo is not None else ""
    return f"{a['target']} ≈ " + " ".join(parts) + clip


def _terms_line(a: dict) -> str:
    if any("shape" in f for f in a["features"]):
        return ("shape(m): the contribution stored for the bin m's value falls in (a missing value has its own bin); "
                "pair(a, b): a joint term read from both values.")
    return "z(m) = (m − train mean) / train std; missing values take the train median."


#: what "sign-constrained" means for the nnls regressions (report, CLI, dashboard)
SIGNS_NOTE = ("each weight's sign is fixed to its metric's direction on the training rows (the sign of its train τ: negative "
              "for a metric whose lower values go with better labels) and only the sizes are fitted, by non-negative least "
              "squares on the metrics so oriented")


def _regression_line(a: dict) -> str:
    m = a["method"]
    name = m.get("regression", "pls")  # artifacts before the regression option were PLS
    what = {"nnls": f"sign-constrained least squares: {SIGNS_NOTE}; near-duplicate metrics collapsed to one",
            "nnls_nodedup": f"sign-constrained least squares: {SIGNS_NOTE} (no near-duplicate collapsing)",
            "pls": "two-stage PLS (the AutoMetrics paper)", "enet": "elastic net (penalty by CV)",
            "single": "the best single metric on train",
            "ebm": "one shape per metric, learned jointly by an explainable boosting machine (a metric's direction is its "
                   "effect given the others; weight = signed spread of its contribution)",
            "ebm_pairs": "one shape per metric plus up to 3 pairwise terms, learned jointly by an explainable boosting machine "
                         "(weight = signed spread of a metric's contribution)"}.get(name, name)
    line = f"Selection and weights: **{name}** — {what}; top {m.get('top_n')} metrics."
    ch = m.get("regression_choice")
    if ch:
        cv = f" (inner-CV τ {fmt_number(ch.get('tau'))})" if ch.get("scores") else ""
        line += f" Chosen automatically on the training rows: {ch.get('note')}{cv}."
    return line


def _stands_for(f: dict) -> str:
    reps = f.get("represents") or []
    return ", ".join(reps) if reps else "–"


def _card_markdown(name: str) -> str:
    try:
        return load_card(name)
    except Exception as exc:  # a missing card must not break the report
        return f"(no Metric Card: {exc})"


def validity_view(a: dict) -> tuple[bool, str]:
    """(validated, one sentence) for the report."""
    v = artifact_validity(a)
    head = "Validated" if v.get("validated") else "Not validated — treat its scores as unvalidated"
    return bool(v.get("validated")), f"{head}: {v.get('reason', '')}"


def render_markdown(result: FitResult) -> str:
    ev = result.evaluator
    a = ev.artifact
    st = a["statistics"]
    lines = [f"# AutoMetrics evaluator report: `{a['target']}`", ""]
    if a.get("task"):
        lines += [f"**Task:** {a['task']}", ""]
    d = a["dataset"]
    lines += [
        f"**Data:** {d['source']} — {d['n_labelled']} labelled rows ({d['n_excluded_missing_target']} without a label excluded), "
        f"{split_line(a)}.  ",
        f"**Label:** {a['label']['kind']} (range {a['label']['min']:g}..{a['label']['max']:g}).  ",
        f"**Package:** autometrics-sdk {a['package_version']}, created {a['created_at']}, data {d['fingerprint'][:19]}…",
        "",
        "## Validity",
        "",
        f"**{'✔' if validity_view(a)[0] else '⚠'} {validity_view(a)[1]}**",
        "",
        "## Agreement with human judgment (Kendall τ-b)",
        "",
    ]
    cross = st["test"].get("method") == "cross-fit"
    lines += [
        f"- **{'Cross-fitted (every row predicted by a fit without it)' if cross else 'Held-out (test)'}: {_stat_line(st['test'])}**",
        f"- {'In-sample (all rows)' if cross else 'Train'}: {_stat_line(st['train'])}",
    ]
    if st.get("best_single_metric"):
        b = st["best_single_metric"]
        lines.append(f"- Best single existing metric {'(chosen inside each fold; on all rows' if cross else '(chosen on train'}: "
                     f"`{b['feature']}`): {'cross-fitted' if cross else 'test'} {_stat_line(b['test'])}")
    if st.get("blackbox_reference"):
        r = st["blackbox_reference"]
        lines.append(f"- Black-box reference ({r['model']}, not interpretable), same {'folds' if cross else 'split'}: "
                     f"{'cross-fitted' if cross else 'test'} {_stat_line(r['test'])}")
    lines += ["", "## Warnings", ""]
    lines += [f"- ⚠ {w}" for w in a["warnings"]] or ["- none"]
    lines += ["", "## Evaluator", "", f"`{_formula(ev)}`", "", _terms_line(a), ""]
    lines += [_regression_line(a), ""]
    lines += ["| metric | weight | importance | τ train | τ test | the evaluator uses | metric card | reading | stands for (near-duplicates left out) |",
              "|---|---:|---:|---:|---:|---|---|---|---|"]
    for f in a["features"]:
        d = metric_direction(f, st["train"].get("n"))
        lines.append(
            f"| `{f['feature']}` | {f['weight']:+.4f} | {100 * f['importance']:.1f}% | {fmt_number(f['tau_train'])} | {fmt_number(f['tau_test'])} | "
            f"{d['uses']} | {d['card']} | {'⚠ ' if d['contradicts'] else ''}{d['reading']} | {_stands_for(f)} |"
        )
    if any("shape" in f for f in a["features"]):
        lines += ["", "### Shapes (the contribution each metric adds to the score)", ""]
        lines += [f"- {line}" for line in shape_lines(a)]
    lines += ["", f"## All candidate metrics ({st['n_candidates']}, {st['n_usable_candidates']} usable)", ""]
    lines += ["| metric | τ train | τ test | stage-1 weight | selected |", "|---|---:|---:|---:|---|"]
    cand = result.candidates.assign(_abs=result.candidates["tau_train"].abs()).sort_values("_abs", ascending=False, na_position="last")
    for r in cand.itertuples():
        lines.append(f"| `{r.feature}` | {fmt_number(r.tau_train)} | {fmt_number(r.tau_test)} | {fmt_number(r.stage1_weight)} | {'✔' if r.selected else ''} |")
    lines += llm_markdown(a) or _free_retrieval(a)
    if a.get("unavailable_metrics"):
        lines += ["", f"MetricBank metrics that could not run here (skipped): {', '.join(a['unavailable_metrics'])} "
                  "(reasons: `autometrics bank list`)."]
    lines += analysis_markdown(a)
    lines += ["", "## Metric Cards of the selected metrics", ""]
    for name in dict.fromkeys(f["metric"]["name"] for f in a["features"]):
        # demote the card's headings two levels so they nest under this section
        lines += [re.sub(r"^(#+)", r"##\1", _card_for(a, name), flags=re.M), ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
main{max-width:1080px;margin:0 auto;padding:24px}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #dde1e6;padding-bottom:.2em}
.meta{color:#56606b;font-size:.92em;line-height:1.5}
.cards{display:flex;gap:14px;flex-wrap:wrap;margin:16px 0}
.stat{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:12px 16px;min-width:200px;flex:1}
.stat .v{font-size:1.9em;font-weight:600}.stat .l{color:#56606b;font-size:.85em}
.warn{background:#fff7e0;border:1px solid #f0c36d;border-radius:8px;padding:8px 16px}
.ok{background:#eaf7ee;border:1px solid #8fd19e;border-radius:8px;padding:8px 16px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.92em}
th,td{border-bottom:1px solid #e6e9ed;padding:6px 8px;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;height:10px;background:#3b7dd8;border-radius:2px;vertical-align:middle}
code{background:#eef1f4;padding:1px 4px;border-radius:3px;font-size:.9em}
.formula{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:10px 14px;overflow-x:auto}
details{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:8px 14px;margin:8px 0}
summary{cursor:pointer;font-weight:600}
.card h1{font-size:1.2em}.card h2{font-size:1.05em}.card h3{font-size:.98em}
svg text{font-size:11px;fill:#56606b}
"""


_SAFE_SCHEMES = ("http://", "https://", "#", "mailto:")


def safe_markdown(text: str, extensions=("tables", "fenced_code")) -> str:
    """Markdown to HTML for text that users, data or an LLM wrote (task, label names, generated
    criteria, rubrics, rationales, cards): raw HTML in the source is shown as text, never parsed
    (Python-Markdown passes it through by default), and a link or image keeps its ``href``/``src``
    only for http(s), mailto and in-page targets, so a ``javascript:`` URL cannot run either."""
    import markdown
    from markdown.treeprocessors import Treeprocessor

    class _Links(Treeprocessor):
        def run(self, root):
            for el in root.iter():
                for attr in ("href", "src"):
                    v = el.get(attr)
                    if v is not None and not v.strip().lower().startswith(_SAFE_SCHEMES):
                        del el.attrib[attr]

    md = markdown.Markdown(extensions=list(extensions))
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    md.treeprocessors.register(_Links(md), "safe_links", 0)
    return md.convert(text)


def inline_html(text: str) -> str:
    """One line of plain text (a warning, an install hint) as HTML: escaped, its `code spans` as code."""
    return re.sub(r"`([^`\n]+)`", r"<code>\1</code>", html.escape(str(text)))


def render_html(result: FitResult) -> str:
    e = html.escape
    ev = result.evaluator
    a = ev.artifact
    st = a["statistics"]
    d = a["dataset"]
    te = st["test"]
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>AutoMetrics report: {e(a['target'])}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        f"<h1>AutoMetrics evaluator: <code>{e(a['target'])}</code></h1>",
        "<div class='meta'>",
    ]
    if a.get("task"):
        out.append(f"<div><b>Task:</b> {e(a['task'])}</div>")
    out.append(
        f"<div><b>Data:</b> {e(str(d['source']))} — {d['n_labelled']} labelled rows ({d['n_excluded_missing_target']} without label excluded); "
        f"{e(split_line(a))}</div>"
        f"<div><b>Label:</b> {e(a['label']['kind'])}, range {a['label']['min']:g}..{a['label']['max']:g} · "
        f"<b>autometrics-sdk</b> {e(a['package_version'])} · {e(a['created_at'])} · data {e(d['fingerprint'][:19])}…</div></div>"
    )
    ok, sentence = validity_view(a)
    out.append(f"<div class='{'ok' if ok else 'warn'}' id='validity' data-validated='{str(ok).lower()}'>"
               f"<b>{'✔' if ok else '⚠'}</b> {e(sentence)}</div>")
    cross = te.get("method") == "cross-fit"
    out.append("<div class='cards'>")
    out.append(
        f"<div class='stat' id='heldout-tau'><div class='l'>{'Cross-fitted' if cross else 'Held-out'} Kendall τ</div><div class='v'>{fmt_number(te.get('tau'))}</div>"
        f"<div class='l'>95% CI [{fmt_number(te.get('ci_low'))}, {fmt_number(te.get('ci_high'))}] · p = {fmt_p(te.get('p_value'))} · n = {te.get('n')}</div></div>"
    )
    tr = st["train"]
    out.append(f"<div class='stat'><div class='l'>{'In-sample' if cross else 'Train'} Kendall τ</div><div class='v'>{fmt_number(tr.get('tau'))}</div><div class='l'>n = {tr.get('n')}</div></div>")
    if st.get("best_single_metric"):
        b = st["best_single_metric"]
        out.append(
            f"<div class='stat'><div class='l'>Best single metric ({'chosen in each fold' if cross else 'chosen on train'})</div><div class='v'>{fmt_number(b['test'].get('tau'))}</div>"
            f"<div class='l'>{e(b['feature'])} {'cross-fitted' if cross else 'on test'} · CI [{fmt_number(b['test'].get('ci_low'))}, {fmt_number(b['test'].get('ci_high'))}]</div></div>"
        )
    if st.get("blackbox_reference"):
        r = st["blackbox_reference"]
        out.append(
            f"<div class='stat' id='blackbox'><div class='l'>Black-box reference (not interpretable)</div><div class='v'>{fmt_number(r['test'].get('tau'))}</div>"
            f"<div class='l'>{e(r['model'])} {'cross-fitted' if cross else 'on test'} · CI [{fmt_number(r['test'].get('ci_low'))}, {fmt_number(r['test'].get('ci_high'))}]</div></div>"
        )
    out.append("</div>")
    if a["warnings"]:
        out.append("<div class='warn' id='warnings'><b>Warnings</b><ul>" + "".join(f"<li>{inline_html(w)}</li>" for w in a["warnings"]) + "</ul></div>")
    else:
        out.append("<div class='ok' id='warnings'>No warnings.</div>")

    out.append("<h2>The evaluator</h2>")
    out.append(f"<div class='formula'><code>{e(_formula(ev))}</code><div class='meta'>{e(_terms_line(a))}</div></div>")
    out.append(f"<p>{e(_regression_line(a)).replace('**', '')}</p>")
    out.append("<table id='selected'><tr><th>metric</th><th>weight</th><th>importance</th><th>τ train</th><th>τ test</th><th>the evaluator uses</th>"
               "<th>metric card</th><th>reading</th><th>stands for (near-duplicates left out)</th></tr>")
    for f in a["features"]:
        pct = 100 * f["importance"]
        d = metric_direction(f, st["train"].get("n"))
        out.append(
            f"<tr><td><code>{e(f['feature'])}</code></td><td class='n'>{f['weight']:+.4f}</td>"
            f"<td><span class='bar' style='width:{1.6 * pct:.0f}px'></span> {pct:.1f}%</td>"
            f"<td class='n'>{fmt_number(f['tau_train'])}</td><td class='n'>{fmt_number(f['tau_test'])}</td><td>{e(d['uses'])}</td>"
            f"<td>{e(d['card'])}</td><td class='{'contradicts' if d['contradicts'] else 'reading'}'>{'⚠ ' if d['contradicts'] else ''}{e(d['reading'])}</td>"
            f"<td>{e(_stands_for(f))}</td></tr>"
        )
    out.append("</table>")
    if any("shape" in f for f in a["features"]):
        out.append("<h3>Shapes (the contribution each metric adds to the score)</h3><div id='shapes'>")
        out += [svg_shape(f["feature"], f["shape"]) for f in a["features"] if "shape" in f]
        out.append("</div><ul>")
        out += [f"<li>{e(line)}</li>" for line in shape_lines(a)]
        out.append("</ul>")
    out.append("<h2>Evaluator score vs human label (test points solid, train points faint)</h2>")
    out.append(svg_scatter(result))

    out.append(f"<h2>All candidate metrics ({st['n_candidates']}, {st['n_usable_candidates']} usable)</h2><details><summary>Show the table</summary>")
    out.append("<table><tr><th>metric</th><th>τ train</th><th>τ test</th><th>stage-1 weight</th><th>missing</th><th>selected</th></tr>")
    cand = result.candidates.assign(_abs=result.candidates["tau_train"].abs()).sort_values("_abs", ascending=False, na_position="last")
    for r in cand.itertuples():
        out.append(
            f"<tr><td><code>{e(r.feature)}</code></td><td class='n'>{fmt_number(r.tau_train)}</td><td class='n'>{fmt_number(r.tau_test)}</td>"
            f"<td class='n'>{fmt_number(r.stage1_weight)}</td><td class='n'>{r.missing}</td><td>{'✔' if r.selected else ''}</td></tr>"
        )
    out.append("</table></details>")
    if a.get("unavailable_metrics"):
        un = a["unavailable_metrics"]
        out.append(
            f"<details id='unavailable'><summary>{len(un)} MetricBank metrics could not run here (skipped)</summary><ul>"
            + "".join(f"<li><code>{e(k)}</code>: {inline_html(v)}</li>" for k, v in un.items())
            + "</ul></details>"
        )
    if a.get("llm") or _free_retrieval(a):
        out.append(safe_markdown("\n".join(llm_markdown(a, level=2) or _free_retrieval(a))))
    out += analysis_html(a)
    out.append("<h2>Metric Cards of the selected metrics</h2>")
    for name in dict.fromkeys(f["metric"]["name"] for f in a["features"]):
        body = safe_markdown(_card_for(a, name))
        out.append(f"<details class='card'><summary>{e(name)}</summary>{body}</details>")
    out.append("</main></body></html>")
    return "\n".join(out)


# ------------------------------------------------------- full AutoMetrics (LLM) additions


def _card_for(a: dict, name: str) -> str:
    """A generated judge's, code metric's or nearest-exemplar metric's card comes from the
    artifact; MetricBank's from the bank.  Formulas as plain text (no LaTeX: the report runs no
    script)."""
    card = next((g["card"] for g in a.get("generated") or [] if g["feature"] == name), None)
    if card is None:
        cards = a.get("candidate_cards") or {}
        card = cards[name] if name in cards else _card_markdown(name)
    return plain_formulas(card)


def retrieval_markdown(ret: dict | None, h: str = "##") -> list[str]:
    """Which MetricBank metrics were scored: the policy's plan (cheap always, expensive by measured
    signal), or an older artifact's card retrieval."""
    if not ret:
        return []
    if "names" in ret:  # written before the policy (card retrieval)
        return ["", f"{h} Retrieval", "", f"Kept {len(ret['names'])} metrics{' (LLM re-ranked)' if ret.get('reranked') else ''}: "
                + ", ".join(f"`{n}`" for n in ret["names"])]
    lines = ["", f"{h} Retrieval", "", f"Policy: {ret.get('policy')}. {len(ret.get('always') or [])} cheap metrics always scored; "
             f"{len(ret.get('chosen') or [])} expensive (model-based) metrics chosen (k={ret.get('k')})."]
    rest = [c for c in ret.get("candidates") or [] if c.get("fate") != "always"]
    if rest:
        lines += ["", "| metric | cost | fate | screening τ | card relevance |", "|---|---|---|---:|---:|"]
        lines += [f"| `{c['name']}` | {c['cost']} | {c['fate']} | {fmt_number(c.get('screen_tau'))} | {fmt_number(c.get('card'))} |"
                  for c in rest]
    lines += [f"- {n}" for n in ret.get("notes") or []]
    return lines


def _free_retrieval(a: dict) -> list[str]:
    """An LLM-free fit's retrieval section, when the policy had model-based metrics to choose from."""
    ret = a.get("retrieval") or {}
    return retrieval_markdown(ret) if any(c.get("fate") != "always" for c in ret.get("candidates") or []) else []


def llm_markdown(a: dict, level: int = 2) -> list[str]:
    """Sections for a full AutoMetrics fit: generated judges (criterion, rubric, τ, weight,
    example rationales), retrieval, and LLM calls/tokens per stage.  Empty for an LLM-free fit."""
    if not a.get("llm"):
        return []
    h = "#" * level
    weights = {f["feature"]: f["weight"] for f in a["features"]}
    llm = a["llm"]
    lines = ["", f"{h} Generated judges ({len(a.get('generated') or [])})", "",
             f"Generator: `{llm['generator']['model']}`; judge: `{llm['judge']['model']}`.", "",
             "| judge | kind | criterion | τ train | τ test | weight | missing |", "|---|---|---|---:|---:|---:|---:|"]
    for g in a.get("generated") or []:
        w = weights.get(g["feature"])
        lines.append(f"| `{g['feature']}` | {g['kind']} | {g['criterion']} | {fmt_number(g.get('tau_train'))} | {fmt_number(g.get('tau_test'))} | "
                     f"{'' if w is None else f'{w:+.4f}'} | {g.get('missing', '–')} |")
    lines += candidates_markdown(a, level)  # every candidate's fate, screening figure and tokens
    for g in a.get("generated") or []:
        spec = g["spec"]
        lines += ["", f"{h}# `{g['feature']}`{' (selected)' if g.get('selected') else ''}", "",
                  f"**{spec['criterion']}** — {spec.get('description') or ''}"]
        if spec.get("rubric"):
            lines += ["", "Rubric:", ""] + [f"- **{k}**: {v}" for k, v in sorted(spec["rubric"].items())]
        if spec.get("demonstrations"):
            lines += ["", f"Demonstrations: {len(spec['demonstrations'])} (scores "
                      + ", ".join(str(d['score']) for d in spec["demonstrations"]) + ")"]
        if spec.get("instructions"):
            lines += ["", f"Instructions: {spec['instructions']}"]
        for r in g.get("rationales") or []:
            lines += ["", f"> human {r['human']:.3g}, judge {r['score']:.2f} — *{(r.get('rationale') or '(no rationale)').strip()}*"]
    lines += retrieval_markdown(a.get("retrieval"), h)
    lines += code_metrics_markdown(a.get("code_metrics") or [], weights, level)
    multi = llm.get("multi_vs_single")
    if multi:
        cs, cm = multi["cost_single"], multi["cost_multi"]

        def ev(c):
            return c.get("prompt_tokens_evaluated", "–")

        lines += ["", f"{h} One call per criterion vs all criteria in one call ({multi['rows']} rows)", "",
                  "| mode | requests | prompt tok sent | prompt tok evaluated | completion tok | s | held-out τ of the fit |",
                  "|---|---:|---:|---:|---:|---:|---:|",
                  f"| per criterion | {cs['requests']} | {cs['prompt_tokens']} | – | {cs['completion_tokens']} | {cs['seconds']} | "
                  f"{fmt_number(multi.get('tau_test_fit_single'))} |",
                  f"| one call | {cm['requests']} | {cm['prompt_tokens']} | {ev(cm)} | {cm['completion_tokens']} | {cm['seconds']} | "
                  f"{fmt_number(multi.get('tau_test_fit_multi'))} |",
                  "", "| criterion | τ train per-criterion | τ train one-call | τ test per-criterion | τ test one-call | missing (one-call) |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| `{c['feature']}` | {fmt_number(c['tau_single'])} | {fmt_number(c['tau_multi'])} | {fmt_number(c.get('tau_test_single'))} | "
                  f"{fmt_number(c.get('tau_test_multi'))} | {c['missing_multi']} |" for c in multi["criteria"]]
    pc = llm.get("scoring_prefix_cache")
    if pc:
        lines += ["", f"Judge prompts: {pc['prompt_tokens_sent']} prompt tokens sent, {pc['prompt_tokens_evaluated']} evaluated "
                  f"by the local server ({pc['evaluated_share']:.0%}; the rest came from its prefix cache)."]
    lines += ["", f"{h} LLM calls", "", "| stage | requests | cache hits | calls | retries | failed | unparsed | prompt tok | completion tok | s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for stage, u in llm["usage"].items():
        lines.append(f"| {stage} | {u['requests']} | {u['cache_hits']} | {u['calls']} | {u['retries']} | {u['failures']} | "
                     f"{u['parse_failures']} | {u['prompt_tokens']} | {u['completion_tokens']} | {u['seconds']} |")
    return lines


def analysis_markdown(a: dict, level: int = 2) -> list[str]:
    """The optional Data scaling and Robustness sections (``autometrics fit --scaling /
    --robustness``), read from the artifact's ``scaling`` and ``robustness`` entries (see
    :func:`attach_analyses`).  Empty when neither is present."""
    return scaling.markdown_section(a.get("scaling"), level) + robustness.markdown_section(a.get("robustness"), level)


def analysis_html(a: dict) -> list[str]:
    """HTML of the same sections; the scaling curve is an inline SVG (no script, no external file)."""
    out = []
    if a.get("scaling"):
        out.append("<h2 id='scaling'>Data scaling: how many more labels are worth collecting?</h2>")
        out.append(scaling.svg_plot(a["scaling"]))
        out.append(safe_markdown("\n".join(scaling.markdown_section(a["scaling"], title=False)), extensions=["tables"]))
    if a.get("robustness"):
        out.append("<div id='robustness'>" + safe_markdown("\n".join(robustness.markdown_section(a["robustness"])), extensions=["tables"]) + "</div>")
    return out


def attach_analyses(result: FitResult, *, scaling=None, robustness=None) -> FitResult:
    """Store a :class:`~.scaling.ScalingResult` / :class:`~.robustness.RobustnessResult` (or
    their ``to_dict()``) in the evaluator artifact, where the report (and evaluator.json) keep
    them.  Scoring ignores these entries."""
    for key, value in (("scaling", scaling), ("robustness", robustness)):
        if value is not None:
            result.evaluator.artifact[key] = value if isinstance(value, dict) else value.to_dict()
    return result


def write_reports(result: FitResult, out_dir) -> dict[str, Path]:
    """evaluator.json, report.md and report.html in ``out_dir``, as one step: all three are rendered
    first and then written in one step (:meth:`Evaluator.save`), so a run that fails (in rendering, on a
    full disk, interrupted) leaves a previous run's three files as they were."""
    out = Path(out_dir)
    paths = {"evaluator": out / "evaluator.json", "markdown": out / "report.md", "html": out / "report.html"}
    reports = {paths["markdown"]: render_markdown(result), paths["html"]: render_html(result)}  # rendered before any write
    result.evaluator.save(paths["evaluator"], beside=reports)
    return paths
