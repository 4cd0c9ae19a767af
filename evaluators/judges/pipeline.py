"""The full AutoMetrics method: generate -> retrieve -> score -> regress -> report.

:func:`fit_with_judges` generates LLM judges from the training rows, retrieves candidate metrics
(MetricBank's Metric Cards plus the generated judges' cards) for the task, scores them on the
labelled data, and hands the features to :func:`~autometrics.evaluators.induce.fit_on_features`
(same split, same selection; negatively weighted generated judges are dropped).  The evaluator
artifact gains ``llm`` (models, per-stage calls/tokens/cache hits/failures), ``generated`` (each
judge's full spec, Metric Card, τ and example rationales) and ``retrieval``.

Users call it through the one entry point::

    fit_evaluator("simpeval.csv", "score", task="Simplify a sentence", llm="local:1.5b",
                  llm_options=LLMOptions(counts=QUICK_COUNTS))
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict

import numpy as np
from autometrics.collectors.files import json_safe
from autometrics.evaluators.evaluator import Evaluator, score_metrics
from autometrics.evaluators.induce import fit_on_features
from autometrics.evaluators.judges.generate import generate_judges
from autometrics.evaluators.judges.metric import (
    LLMJudgeMetric,
    bind_client,
    prefetch_row_major,
    score_multi,
    unbind_clients,
)
from autometrics.evaluators.judges.options import LLMOptions
from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig, LLMUnreachable, Usage, estimate_tokens
from autometrics.evaluators.stats import kendall_tau

__all__ = ["fit_with_judges", "estimate_plan"]

log = logging.getLogger("autometrics")


def _clients(opts: LLMOptions) -> tuple[LLMClient, LLMClient]:
    over = {"concurrency": opts.concurrency, "timeout": opts.timeout, "max_retries": opts.max_retries, "backoff": opts.backoff}
    cache = False if opts.cache == "off" else LLMCache(opts.cache)
    usage = Usage()
    gen = LLMClient(LLMConfig.parse(opts.llm, **over), cache=cache, usage=usage)
    if not opts.judge_llm or opts.judge_llm == opts.llm:
        return gen, gen
    return gen, LLMClient(LLMConfig.parse(opts.judge_llm, **over), cache=cache, usage=usage)


def estimate_plan(n_labelled: int, n_train: int, avg_chars: float, opts: LLMOptions, *, bank_used: bool) -> dict:
    """Expected number of LLM calls and tokens per stage (before any call is made)."""
    c = opts.counts
    n_judges = c.n_single + c.n_rubric + c.n_example + c.n_optimized
    example_tokens = estimate_tokens("x" * int(avg_chars))
    judge_prompt = example_tokens + 110
    stages = {
        "generate:axes": (1, 10 * example_tokens + 200, 64 * max(c.n_single, c.n_rubric) + 64),
        "generate:rubric": (c.n_rubric, 350, 200),
        "generate:example": (c.n_example * c.example_sets * min(c.example_eval_rows, n_train), judge_prompt + 5 * example_tokens, 1),
        "generate:optimize": (c.n_optimized * (8 + c.optimized_candidates * 2 + c.optimized_trials * max(1, c.optimized_rows // 2)),
                              judge_prompt + 300, 30),
        "retrieve:rerank": (min(2 * opts.retrieve_k, 60) if bank_used and opts.rerank else 0, 400, 1),
        "score": (n_judges * n_labelled, judge_prompt, 1),
        "rationales": (opts.rationales * min(5, n_judges), judge_prompt, 80),
        "score:multi": (n_labelled if opts.compare_multi else 0, judge_prompt + 30 * c.n_single, 8 * c.n_single),
    }
    out = {k: {"calls": n, "prompt_tokens": n * p, "completion_tokens": n * q} for k, (n, p, q) in stages.items()}
    out["total"] = {k: sum(v[k] for v in out.values()) for k in ("calls", "prompt_tokens", "completion_tokens")}
    return out


def _unique_features(specs) -> list[str]:
    names, seen = [], {}
    for s in specs:
        base = s.feature_name
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return names


def fit_with_judges(
    ds,
    target: str,
    opts: LLMOptions,
    *,
    task: str | None = None,
    test_size: float = 0.3,
    seed: int = 0,
    top_n: int = 5,
    n_boot: int = 1000,
    regression: str = "nnls",
    progress: bool = False,
    dry_run: bool = False,
    echo=lambda *a, **k: None,
):
    """Run the full method (module docstring) on a loaded dataset.  With ``dry_run=True``
    returns the plan from :func:`estimate_plan` and makes no call.  Called by
    :func:`autometrics.evaluators.fit.fit_evaluator` when it is given an LLM."""
    started = time.perf_counter()
    lab = ds.labelled(target)
    y = lab.y(target)
    train_pos, _test_pos = lab.split_positions(test_size, seed)
    n_lab = len(lab)
    bank_used = opts.use_bank == "always" or (opts.use_bank == "auto" and n_lab >= opts.min_labels_for_bank)
    inputs = lab.inputs if lab.has_input else [""] * n_lab
    outputs = lab.outputs
    if dry_run:
        avg = float(np.mean([len(i or "") + len(o or "") for i, o in zip(inputs, outputs, strict=False)])) if n_lab else 0.0
        return estimate_plan(n_lab, len(train_pos), avg, opts, bank_used=bank_used)

    gen, judge = _clients(opts)
    for client in dict.fromkeys((gen, judge)):
        client.check_reachable()  # a down endpoint: a clear error now, not minutes of retries
    bind_client(judge)
    notes: list[str] = []
    try:
        # ---------------------------------------------------------------- generate
        echo(f"[{target}] generating judges with {gen.config.model} (judge: {judge.config.model}) ...")
        specs, gen_notes = generate_judges(
            task, target, [inputs[i] for i in train_pos], [outputs[i] for i in train_pos], y[train_pos],
            generator=gen, judge=judge, counts=opts.counts, seed=seed,
        )
        notes += gen_notes
        judges = [LLMJudgeMetric.from_spec(s, judge.config, feature=f, mode=opts.judge_mode)
                  for s, f in zip(specs, _unique_features(specs), strict=False)]
        for j in judges:
            j.client = judge
        echo(f"[{target}] {len(judges)} generated judges: " + ", ".join(j.name for j in judges))

        # ---------------------------------------------------------------- retrieve
        retrieval = None
        if bank_used:
            from autometrics.evaluators.judges.retrieve import Document, bank_documents, retrieve
            from autometrics.metricbank import default_metrics

            bank = default_metrics(with_reference=lab.has_references, with_input=lab.has_input)
            docs = bank_documents([m.name for m in bank]) + [Document(j.name, j.spec.card(), generated=True) for j in judges]
            retrieval = retrieve(task, target, docs, k=opts.retrieve_k, rerank_client=judge if opts.rerank else None,
                                 dense=opts.dense)
            notes += retrieval.notes
            keep = set(retrieval.names)
            candidates = [m for m in bank if m.name in keep] + [j for j in judges if j.name in keep]
            echo(f"[{target}] retrieved {len(candidates)} candidate metrics (k={opts.retrieve_k})")
        else:
            candidates = list(judges)
            why = "--use-bank never" if opts.use_bank == "never" else f"{n_lab} labelled examples < {opts.min_labels_for_bank}"
            notes.append(f"only generated metrics used ({why}; AutoMetrics paper §4.6)")

        # ------------------------------------------------------------------- score
        echo(f"[{target}] scoring {len(candidates)} metrics on {n_lab} rows ...")
        scored_judges = [c for c in candidates if isinstance(c, LLMJudgeMetric)]
        prefix_cache = None
        if scored_judges:
            before = _scoring_counters(judge)
            prefetch_row_major(scored_judges, outputs, inputs)
            prefix_cache = _prefix_cache_report(before, _scoring_counters(judge))
        X, meta, score_notes = score_metrics(candidates, outputs, inputs if lab.has_input else None, lab.references, progress=progress)
        for client in dict.fromkeys((gen, judge)):
            if client.unreachable:  # went away mid-run: no evaluator from all-missing judges
                raise LLMUnreachable(f"the LLM endpoint went away during the fit ({client.unreachable}); nothing was "
                                     "written. Restart the server and run the fit again (cached replies are reused)")
        if not any(meta[c]["generated"] for c in X.columns):
            notes.append("no generated judge could be scored")

        # ----------------------------------------------------------------- regress
        result = fit_on_features(ds, target, (X, meta, score_notes), task=task, test_size=test_size, seed=seed, top_n=top_n,
                                 n_boot=n_boot, regression=regression, started=started)

        # ---------------------------------------------------------------- extras
        a = result.evaluator.artifact
        cand = result.candidates.set_index("feature")
        selected = {f["feature"] for f in a["features"]}
        generated = []
        for j in judges:
            entry = {"feature": j.name, "kind": j.spec.kind, "criterion": j.spec.criterion, "spec": j.spec.to_dict(),
                     "card": j.spec.card(), "retrieved": j.name in X.columns, "selected": j.name in selected,
                     "example_prompt": j.requests(["<output>"], ["<input>"])[0]["messages"], "rationales": []}
            if j.name in cand.index:
                entry.update({"tau_train": cand.loc[j.name, "tau_train"], "tau_test": cand.loc[j.name, "tau_test"],
                              "missing": int(cand.loc[j.name, "missing"])})
            if j.name in selected and opts.rationales > 0 and j.name in X.columns:
                vals = X[j.name].to_numpy(dtype=float)[train_pos]
                ok = np.flatnonzero(~np.isnan(vals))
                if len(ok):
                    order = ok[np.argsort(vals[ok])]
                    pick = list(dict.fromkeys([order[-1], order[0], order[len(order) // 2]]))[: opts.rationales]
                    rows = [int(train_pos[p]) for p in pick]
                    texts = j.rationales([outputs[r] for r in rows], [inputs[r] for r in rows])
                    entry["rationales"] = [{"id": str(lab.frame["id"].iloc[r]), "human": float(y[r]),
                                            "score": float(X[j.name].iloc[r]), "output": outputs[r][:300], "rationale": t}
                                           for r, t in zip(rows, texts, strict=False)]
            generated.append(entry)

        multi = None
        singles = [j for j in judges if j.spec.kind == "single" and j.name in X.columns]
        if opts.compare_multi and singles:
            multi = _compare_multi(singles, judge, X, y, outputs, inputs, train_pos, refit=lambda Xm: fit_on_features(
                ds, target, (Xm, meta, score_notes), task=task, test_size=test_size, seed=seed, top_n=top_n, n_boot=n_boot,
                regression=regression))
            multi["tau_test_fit_single"] = result.evaluator.artifact["statistics"]["test"]["tau"]

        a["method"]["name"] = "autometrics-full"
        a["method"]["generator_counts"] = asdict(opts.counts)
        a["method"]["retrieve_k"] = opts.retrieve_k if bank_used else None
        a["method"]["bank_used"] = bank_used
        a["llm"] = {"generator": gen.config.public(), "judge": judge.config.public(), "usage": gen.usage.to_dict(),
                    "multi_vs_single": multi, "scoring_prefix_cache": prefix_cache, "seconds": round(time.perf_counter() - started, 1)}
        a["generated"] = generated
        a["retrieval"] = retrieval.to_dict() if retrieval else None
        usage = a["llm"]["usage"]["total"]
        if usage["failures"] or usage["parse_failures"]:
            a["warnings"].append(f"LLM: {usage['failures']} failed requests and {usage['parse_failures']} unparseable replies "
                                 "became missing values (imputed with the training median)")
        a["warnings"] += [f"LLM: {n}" for n in notes]
        a["fit_seconds"] = round(time.perf_counter() - started, 2)
        result.evaluator = Evaluator(json_safe(a))
        result.notes = list(result.notes) + notes
        return result
    finally:
        unbind_clients()


def _scoring_counters(client: LLMClient) -> dict:
    """Prompt tokens sent by the scoring stages so far, and (for the embedded server) prompt
    tokens the server actually evaluated, i.e. not served from its prefix cache."""
    from autometrics.evaluators.llm.local import server_prompt_stats

    usage = client.usage.to_dict()
    sent = sum(v.get("prompt_tokens", 0) for k, v in usage.items() if k.startswith("score:"))
    stats = server_prompt_stats(client.config.model)
    return {"sent": sent, "evaluated": stats["evaluated_prompt_tokens"] if stats else None}


def _prefix_cache_report(before: dict, after: dict) -> dict | None:
    sent = after["sent"] - before["sent"]
    if after["evaluated"] is None or before["evaluated"] is None or sent <= 0:
        return None
    evaluated = after["evaluated"] - before["evaluated"]
    return {"prompt_tokens_sent": sent, "prompt_tokens_evaluated": evaluated, "evaluated_share": round(evaluated / sent, 4),
            "note": "judge prompts of one example share its prefix (case first, criterion last); the local server "
                    "evaluates only what its prefix cache does not hold (counted from its timing log)"}


def _compare_multi(singles, judge: LLMClient, X, y, outputs, inputs, train_pos, *, refit=None) -> dict:
    """Beyond the paper: score the single-criterion judges in one call per example (all rows)
    and compare with one call per criterion on the same data: cost, per-criterion τ on train and
    test rows, and (``refit``) the held-out τ of the same regression fed the multi-mode scores."""
    before = judge.usage.to_dict()
    counters = _scoring_counters(judge)
    multi = score_multi([j.spec for j in singles], judge, list(outputs), list(inputs))
    after = judge.usage.to_dict()
    evaluated = _prefix_cache_report(counters, _scoring_counters(judge))
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
                   "LLM-cache hits cost nothing); cost_multi scores the same criteria on the same rows in one call per example"}
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
