"""What a fit with LLM judges adds to the evaluator artifact: every candidate's fate (kept, dropped
for a negative weight, not in the top n, screened out, failed, stopped by the budget) with its
screening figure and the tokens it cost, the generated judges' specs, cards and rationales, the
one-call-vs-per-criterion comparison and the prefix-cache figures.

Kept apart from :mod:`.pipeline` so the pipeline reads as the method's steps; this module only
turns their results into the artifact's ``llm``, ``generated`` sections.
"""

from __future__ import annotations

import math

import numpy as np

from ..code_metric import code_metric_entry
from ..llm.client import LLMClient
from ..llm.local import server_prompt_stats
from ..stats import kendall_tau
from .metric import score_multi

__all__ = ["candidate_fates", "generated_entries", "compare_multi", "scoring_counters", "prefix_cache_report", "FATE_ORDER"]

#: fates in the order the report lists them
FATE_ORDER = ("kept", "not returned", "not in top n", "near-duplicate", "negative weight", "constant", "screened out",
              "about the input", "failed", "budget")


def _num(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)


def candidate_fates(candidates, outcome, fit_table, weights: dict, *, returned: str, floor_why: str) -> list[dict]:
    """One entry per candidate: ``fate`` and a ``detail`` sentence, ``weight`` when kept, the last
    screening figure (``gain`` over ``gain_rows`` rows, own ``tau``), every round's figures, and
    what it cost (tokens, calls, cache hits, unreadable replies, failed requests, rows scored).

    ``outcome``: the :class:`~.screening.ScreeningOutcome`; ``fit_table``: the with-judges fit's
    candidate table (its ``fate`` column) or None; ``weights``: feature -> weight in that fit;
    ``returned``: ``with-judges`` or ``llm-free``."""
    table = fit_table.set_index("feature") if fit_table is not None and len(fit_table) else None
    out = []
    for c in candidates:
        figs = (outcome.figures.get(c.name) if outcome else None) or []
        last = figs[-1] if figs else {}
        entry = {"feature": c.name, "kind": c.kind, "weight": None, "gain": _num(last.get("gain")),
                 "gain_rows": last.get("rows"), "tau": _num(last.get("tau")),
                 "screening": [{k: (_num(v) if isinstance(v, float) else v) for k, v in f.items()} for f in figs],
                 **{k: int(v) for k, v in c.spent.items()}, "seconds": round(c.seconds, 2)}
        check = (outcome.output_checks.get(c.name) if outcome else None)
        if check:
            entry["about_output"] = check
        dropped = outcome.fates.get(c.name) if outcome else None
        if dropped:
            entry.update(fate=dropped["fate"], detail=dropped["detail"])
        elif table is not None and c.name in table.index:
            fate = str(table.loc[c.name, "fate"])
            tau_train = _num(table.loc[c.name, "tau_train"])
            if fate == "kept":
                w = weights.get(c.name)
                entry["weight"] = w
                entry["direction"] = "reversed" if w is not None and w < 0 else "as asked"
                if w is not None and w < 0:  # passed screening reversed: higher judge scores mean worse here
                    entry["detail"] = f"used reversed (its scores disagree with the labels, τ train {tau_train:+.3f}); "
                if returned == "with-judges":
                    entry.update(fate="kept", detail=entry.get("detail", "") + f"weight {w:+.3f} in the evaluator")
                else:
                    entry.update(fate="not returned", detail=entry.get("detail", "") + f"weight {w:+.3f} in the evaluator "
                                                                                       f"with judges, which was not returned: {floor_why}")
            elif fate == "negative weight":
                entry.update(fate=fate, detail=f"disagrees with the labels on the training rows (τ {tau_train:+.3f}); a judge "
                                               "only enters with a positive weight")
            elif fate.startswith("near-duplicate"):
                entry.update(fate="near-duplicate", detail=fate.replace("near-duplicate of", "says what") + " says (|ρ| ≥ 0.9)")
            elif fate == "constant":
                entry.update(fate=fate, detail="the same value on every training row")
            else:
                entry.update(fate="not in top n", detail="the regression gave it no weight next to the metrics it kept"
                             + (f" (τ train {tau_train:+.3f})" if tau_train is not None else ""))
        else:
            entry.update(fate="failed", detail="it could not be scored")
        if entry["gain"] is not None and entry["fate"] != "screened out":
            entry["detail"] += f"; screening: adds {entry['gain']:+.3f} out-of-fold R² on {entry['gain_rows']} training rows"
        out.append(entry)
    order = {f: k for k, f in enumerate(FATE_ORDER)}
    return sorted(out, key=lambda e: (order.get(e["fate"], 99), -(e["weight"] or 0.0)))


def other_candidates(cands, selected: set, fates: dict) -> tuple[list[dict], dict[str, str]]:
    """The artifact's ``code_metrics`` (every written code metric: source, status, fate, whether
    it is in the returned evaluator) and ``candidate_cards`` (feature -> Metric Card of each
    non-judge candidate that can score, e.g. code and nearest-exemplar metrics)."""
    code, cards = [], {}
    for c in cands:
        f = fates.get(c.name) or {}
        spec = getattr(c, "spec", None) if c.kind == "code" else None
        if spec is not None:
            code.append(code_metric_entry(spec, feature=c.name, metric=c.metric, selected=c.name in selected,
                                          stats={"fate": f.get("fate"), "detail": f.get("detail"), "tau_train": f.get("tau")}))
            if spec.ok:
                cards[c.name] = spec.card()
        elif not c.kind.startswith("judge") and callable(getattr(c.metric, "card", None)):
            cards[c.name] = c.metric.card()
    return code, cards


def generated_entries(judges, table, selected: set, fates: dict, *, X=None, y=None, train_pos=None, lab=None,
                      outputs=None, inputs=None, rationales: int = 0, allow=lambda: True) -> list[dict]:
    """The artifact's ``generated`` list: each judge's spec, card, example prompt, τ train/test,
    missing values and fate; for the judges of the returned evaluator up to ``rationales`` example
    rationales (highest, lowest, median training score), while ``allow()`` says the budget lets it."""
    cand = table.set_index("feature") if table is not None and len(table) else None
    out = []
    for j in judges:
        entry = {"feature": j.name, "kind": j.spec.kind, "criterion": j.spec.criterion, "spec": j.spec.to_dict(),
                 "card": j.spec.card(),
                 "selected": j.name in selected, "fate": fates.get(j.name, {}).get("fate"),
                 "example_prompt": j.requests(["<output>"], ["<input>"])[0]["messages"], "rationales": []}
        if cand is not None and j.name in cand.index:
            entry.update({"tau_train": cand.loc[j.name, "tau_train"], "tau_test": cand.loc[j.name, "tau_test"],
                          "missing": int(cand.loc[j.name, "missing"])})
        if j.name in selected and rationales > 0 and X is not None and j.name in X.columns and allow():
            vals = X[j.name].to_numpy(dtype=float)[train_pos]
            ok = np.flatnonzero(~np.isnan(vals))
            if len(ok):
                order = ok[np.argsort(vals[ok])]
                pick = list(dict.fromkeys([order[-1], order[0], order[len(order) // 2]]))[:rationales]
                rows = [int(train_pos[p]) for p in pick]
                texts = j.rationales([outputs[r] for r in rows], [inputs[r] for r in rows])
                entry["rationales"] = [{"id": str(lab.frame["id"].iloc[r]), "human": float(y[r]),
                                        "score": float(X[j.name].iloc[r]), "output": outputs[r][:300], "rationale": t}
                                       for r, t in zip(rows, texts, strict=False)]
        out.append(entry)
    return out


def scoring_counters(client: LLMClient) -> dict:
    """Prompt tokens sent by the scoring stages so far, and (for the embedded server) prompt
    tokens the server actually evaluated, i.e. not served from its prefix cache."""
    usage = client.usage.to_dict()
    sent = sum(v.get("prompt_tokens", 0) for k, v in usage.items() if k.startswith("score:"))
    stats = server_prompt_stats(client.config.model)
    return {"sent": sent, "evaluated": stats["evaluated_prompt_tokens"] if stats else None}


def prefix_cache_report(before: dict, after: dict) -> dict | None:
    sent = after["sent"] - before["sent"]
    if after["evaluated"] is None or before["evaluated"] is None or sent <= 0:
        return None
    evaluated = after["evaluated"] - before["evaluated"]
    return {"prompt_tokens_sent": sent, "prompt_tokens_evaluated": evaluated, "evaluated_share": round(evaluated / sent, 4),
            "note": "judge prompts of one example share its prefix (case first, criterion last); the local server "
                    "evaluates only what its prefix cache does not hold (counted from its timing log)"}


def compare_multi(singles, judge: LLMClient, X, y, outputs, inputs, train_pos, *, refit=None) -> dict:
    """Beyond the paper: score the single-criterion judges in one call per example (all rows)
    and compare with one call per criterion on the same data: cost, per-criterion τ on train and
    test rows, and (``refit``) the held-out τ of the same regression fed the multi-mode scores."""
    before = judge.usage.to_dict()
    counters = scoring_counters(judge)
    multi = score_multi([j.spec for j in singles], judge, list(outputs), list(inputs))
    after = judge.usage.to_dict()
    evaluated = prefix_cache_report(counters, scoring_counters(judge))
    keys = ("requests", "calls", "prompt_tokens", "completion_tokens", "seconds", "parse_failures")
    cost_multi = {k: round(after.get("score:multi", {}).get(k, 0) - before.get("score:multi", {}).get(k, 0), 2) for k in keys}
    if evaluated:
        cost_multi["prompt_tokens_evaluated"] = evaluated["prompt_tokens_evaluated"]
    single_stage = after.get("score:single", {})
    cost_single = {k: round(single_stage.get(k, 0), 2) for k in keys}
    train = np.zeros(len(y), dtype=bool)
    train[list(train_pos)] = True

    def tau(s, mask):
        ok = mask & ~np.isnan(s)
        return kendall_tau(s[ok], y[ok])[0] if ok.sum() >= 3 else math.nan

    per = []
    for j in singles:
        s_single = X[j.name].to_numpy(dtype=float)
        s_multi = multi[j.spec.feature_name]
        per.append({"feature": j.name, "tau_single": tau(s_single, train), "tau_multi": tau(s_multi, train),
                    "tau_test_single": tau(s_single, ~train), "tau_test_multi": tau(s_multi, ~train),
                    "missing_multi": int(np.isnan(s_multi).sum())})
    out = {"rows": len(y), "cost_single": cost_single, "cost_multi": cost_multi, "criteria": per,
           "note": "cost_single is the score:single stage of this fit (one call per criterion and example; "
                   "LLM-cache hits cost nothing; with screening only on the rows each judge was screened on); "
                   "cost_multi scores the same criteria on the same rows in one call per example"}
    if refit is not None:
        Xm = X.copy()
        for j in singles:
            Xm[j.name] = multi[j.spec.feature_name]
        try:
            out["tau_test_fit_multi"] = refit(Xm).evaluator.artifact["statistics"]["test"]["tau"]
        except Exception as exc:  # the comparison must not break the fit
            out["tau_test_fit_multi"] = None
            out["refit_error"] = f"{type(exc).__name__}: {exc}"
    return out
