"""Where the LLM tokens went: every candidate judge's fate in the report (Markdown, also rendered
into the HTML page) and in the lines ``autometrics fit`` prints.

Why a section of its own: a judge that is generated and scored but not selected would otherwise
get no line in the output and a blank weight in the report, so the user could not tell that the
LLM work bought nothing.  Each candidate is listed with its fate (kept, not returned, not in the top n,
near-duplicate, negative weight, screened out, about the input, failed, stopped by the budget), its
screening figure (the τ it adds to the metrics already in), and the tokens it cost; then the
budget plan and which evaluator was returned and why.
"""

from __future__ import annotations

import math

__all__ = ["candidates_markdown", "candidate_lines"]


def _f(v, fmt: str = "+.3f") -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _tokens(llm: dict) -> tuple[int, int]:
    """(tokens of all LLM calls, tokens of judge scoring) from the usage table."""
    usage = llm.get("usage") or {}
    total = usage.get("total") or {}
    scoring = sum(v["prompt_tokens"] + v["completion_tokens"] for k, v in usage.items() if k.startswith("score:"))
    return int(total.get("prompt_tokens", 0) + total.get("completion_tokens", 0)), int(scoring)


def candidates_markdown(a: dict, level: int = 2) -> list[str]:
    """The report's "Candidates and where the tokens went" section; empty for an LLM-free fit."""
    llm = a.get("llm")
    if not llm or "candidates" not in llm:
        return []
    h = "#" * level
    cands = llm.get("candidates") or []
    total, scoring = _tokens(llm)
    floor = llm.get("floor") or {}
    lines = ["", f"{h} Candidates and where the tokens went", ""]
    returned = "the evaluator with judges" if floor.get("returned") == "with-judges" else "the LLM-free evaluator"
    lines.append(f"Returned: **{returned}** — {floor.get('why', '')}. LLM tokens: {total:,} in all, {scoring:,} for judge "
                 "scoring.")
    lf, wj = floor.get("llm_free_test") or {}, floor.get("with_judges_test") or {}
    if lf or wj:
        what = "Cross-fitted" if (lf or wj).get("method") == "cross-fit" else "Held-out"
        nested = floor.get("nested")
        how = (f"each procedure's own figure; the choice was made inside each fold on its training rows, judges chosen in "
               f"{nested['judges_chosen_in_folds']} of {nested['folds']} folds, and the evaluator's reported τ is that of the "
               "whole procedure" if nested else "each procedure's own figure")
        lines.append(f"{what} τ: LLM-free {_f(lf.get('tau'), '.3f')}, with judges {_f(wj.get('tau'), '.3f')} ({how}).")
    if not any(c["fate"] == "kept" for c in cands):
        lines += ["", "**Warning: the judges added nothing** — no candidate is in the returned evaluator."]
    sc = llm.get("screening") or {}
    if sc.get("rounds"):
        rounds = "; ".join(f"round {r['round']}: {r.get('candidates', '?')} candidates on {r['rows']} rows, {r.get('kept', 0)} "
                           "went on" + (f" (stopped: {r['stopped']})" if r.get("stopped") else "") for r in sc["rounds"])
        how = "screened (successive halving)" if sc.get("screened") else "not screened (every candidate on every row)"
        n_base = len((sc.get("base") or {}).get("features") or [])
        base = f"the out-of-fold prediction of the {n_base} MetricBank features already in" if n_base else \
            "nothing (no MetricBank feature is a candidate here: what the candidate predicts alone)"
        lines += ["", f"Candidates were {how}: {rounds}. The screening figure is the out-of-fold R² a candidate adds to {base}."]
    if cands:
        lines += ["", "| candidate | kind | fate | weight | adds τ (rows) | own τ | tokens | calls | cached | unreadable | why |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for c in cands:
            rows = f" ({c['gain_rows']})" if c.get("gain_rows") else ""
            lines.append(f"| `{_cell(c['feature'])}` | {c['kind']} | {c['fate']} | {_f(c.get('weight'))} | {_f(c.get('gain'))}{rows} | "
                         f"{_f(c.get('tau'))} | {c.get('tokens', 0):,} | {c.get('calls', 0)} | {c.get('cached', 0)} | "
                         f"{c.get('parse_failures', 0)} | {_cell(c.get('detail', ''))} |")
    bud = llm.get("budget")
    if bud:
        plan = bud.get("plan") or {}
        spent = bud.get("spent") or {}
        lines += ["", f"Budget: {_limit(bud)}; spent {spent.get('seconds', 0):.0f} s and {spent.get('tokens', 0):,} tokens."]
        if plan:
            sp = plan.get("speed") or {}
            if sp:
                lines.append(f"Measured speed (warm-up): {sp['prompt_tokens_per_s']} prompt tokens/s, "
                             f"{sp['completion_tokens_per_s']} completion tokens/s.")
            lines.append(f"Plan: estimated {plan['estimated_seconds']:.0f} s and {plan['estimated_tokens']:,} tokens"
                         + "".join(f"; {_cell(n)}" for n in plan.get("notes") or []) + ".")
    return lines


def _limit(bud: dict) -> str:
    parts = []
    if bud.get("seconds"):
        parts.append(f"{bud['seconds']:.0f} s")
    if bud.get("tokens"):
        parts.append(f"{bud['tokens']:,} tokens")
    return " and ".join(parts) or "none"


def candidate_lines(a: dict, target: str) -> list[str]:
    """What ``fit`` prints about the candidates: one line per candidate, the budget, the floor."""
    llm = a.get("llm")
    if not llm or "candidates" not in llm:
        return []
    out = []
    for c in llm.get("candidates") or []:
        cost = f"{c.get('tokens', 0):,} tokens" + (f", {c['cached']} cached" if c.get("cached") else "")
        out.append(f"[{target}] candidate {c['feature']} ({c['kind']}): {c['fate']} — {c.get('detail', '')} [{cost}]")
    total, scoring = _tokens(llm)
    bud = llm.get("budget")
    if bud:
        spent = bud.get("spent") or {}
        out.append(f"[{target}] budget {_limit(bud)}: spent {spent.get('seconds', 0):.0f} s, {spent.get('tokens', 0):,} tokens")
    floor = llm.get("floor") or {}
    which = "the evaluator with judges" if floor.get("returned") == "with-judges" else "the LLM-free evaluator"
    out.append(f"[{target}] returned {which}: {floor.get('why', '')} ({total:,} LLM tokens, {scoring:,} of them judge scoring)")
    return out
