"""The full AutoMetrics method: generate -> retrieve -> score -> regress -> report.

``fit_autometrics`` generates LLM judges from the training rows, retrieves candidate metrics
(MetricBank's Metric Cards plus the generated judges' cards) for the task, scores them on the
labelled data, and hands the features to :func:`.fit.fit_evaluator` (same split, same PLS
selection; negatively weighted generated judges are dropped).  The evaluator artifact gains
``llm`` (models, per-stage calls/tokens/cache hits/failures), ``generated`` (each judge's full
spec, Metric Card, τ and example rationales) and ``retrieval``.

Example::

    result = fit_autometrics("simpeval.csv", "score", task="Simplify a sentence",
                             options=AutoMetricsOptions(llm="local:1.5b", counts=QUICK_COUNTS))
    write_reports(result, "runs/full")
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .data import load_dataset
from .fit import MIN_LABELS_FOR_CONFIDENCE, Evaluator, _clean, fit_evaluator, score_metrics
from .generate import PAPER_COUNTS, GeneratorCounts, generate_judges
from .judges import LLMJudgeMetric, bind_client, prefetch_row_major, score_multi, unbind_clients
from .llm import LLMCache, LLMClient, LLMConfig, Usage, estimate_tokens
from .stats import kendall_tau

__all__ = ["AutoMetricsOptions", "fit_autometrics", "estimate_plan"]

log = logging.getLogger("autometrics")


@dataclass
class AutoMetricsOptions:
    llm: str = "local"  # generator model string (see LLMConfig.parse)
    judge_llm: str | None = None  # judge model string; default: the generator's
    counts: GeneratorCounts = field(default_factory=lambda: PAPER_COUNTS)
    retrieve_k: int = 30
    use_bank: str = "auto"  # auto (bank only with >= 80 labels, paper §4.6) | always | never
    rerank: bool = True  # LLM re-rank of the fused retrieval
    dense: bool = True  # dense (MiniLM) retrieval besides BM25
    rationales: int = 3  # example rationales kept per selected generated judge
    compare_multi: bool = False  # also score the single-criterion judges in one call per example
    judge_mode: str = "auto"  # auto | logprobs | json
    concurrency: int | None = None
    timeout: float | None = None
    max_retries: int | None = None
    cache: str | None = None  # cache path (default: user data dir); "off" disables
    min_labels_for_bank: int = MIN_LABELS_FOR_CONFIDENCE


def _clients(opts: AutoMetricsOptions) -> tuple[LLMClient, LLMClient]:
    over = {"concurrency": opts.concurrency, "timeout": opts.timeout, "max_retries": opts.max_retries}
    cache = False if opts.cache == "off" else LLMCache(opts.cache)
    usage = Usage()
    gen = LLMClient(LLMConfig.parse(opts.llm, **over), cache=cache, usage=usage)
    if not opts.judge_llm or opts.judge_llm == opts.llm:
        return gen, gen
    return gen, LLMClient(LLMConfig.parse(opts.judge_llm, **over), cache=cache, usage=usage)


def estimate_plan(n_labelled: int, n_train: int, avg_chars: float, opts: AutoMetricsOptions, *, bank_used: bool) -> dict:
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


def fit_autometrics(
    data,
    target: str,
    *,
    task: str | None = None,
    options: AutoMetricsOptions | None = None,
    input_col: str = "input",
    output_col: str = "output",
    reference_cols: list[str] | None = None,
    id_col: str | None = "id",
    group_col: str | None = None,
    test_size: float = 0.3,
    seed: int = 0,
    top_n: int = 5,
    n_boot: int = 1000,
    progress: bool = False,
    dataset=None,
    dry_run: bool = False,
    echo=lambda *a, **k: None,
):
    """Run the full method (module docstring).  With ``dry_run=True`` returns the plan from
    :func:`estimate_plan` and makes no call."""
    opts = options or AutoMetricsOptions()
    started = time.perf_counter()
    ds = dataset or load_dataset(data, target, input_col=input_col, output_col=output_col, reference_cols=reference_cols,
                                 id_col=id_col, group_col=group_col)
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
            from ..metricbank import default_metrics
            from .retrieve import Document, bank_documents, retrieve

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
        if scored_judges:
            prefetch_row_major(scored_judges, outputs, inputs)
        X, meta, score_notes = score_metrics(candidates, outputs, inputs if lab.has_input else None, lab.references, progress=progress)
        if not any(meta[c]["generated"] for c in X.columns):
            notes.append("no generated judge could be scored")

        # ----------------------------------------------------------------- regress
        result = fit_evaluator(None, target, task=task, dataset=ds, features=(X, meta, score_notes), test_size=test_size,
                               seed=seed, top_n=top_n, n_boot=n_boot)

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
            multi = _compare_multi(singles, judge, X, y, outputs, inputs, train_pos)

        a["method"]["name"] = "autometrics-full"
        a["method"]["generator_counts"] = asdict(opts.counts)
        a["method"]["retrieve_k"] = opts.retrieve_k if bank_used else None
        a["method"]["bank_used"] = bank_used
        a["llm"] = {"generator": gen.config.public(), "judge": judge.config.public(), "usage": gen.usage.to_dict(),
                    "multi_vs_single": multi, "seconds": round(time.perf_counter() - started, 1)}
        a["generated"] = generated
        a["retrieval"] = retrieval.to_dict() if retrieval else None
        usage = a["llm"]["usage"]["total"]
        if usage["failures"] or usage["parse_failures"]:
            a["warnings"].append(f"LLM: {usage['failures']} failed requests and {usage['parse_failures']} unparseable replies "
                                 "became missing values (imputed with the training median)")
        a["warnings"] += [f"LLM: {n}" for n in notes]
        a["fit_seconds"] = round(time.perf_counter() - started, 2)
        result.evaluator = Evaluator(_clean(a))
        result.notes = list(result.notes) + notes
        return result
    finally:
        unbind_clients()


def _compare_multi(singles, judge: LLMClient, X, y, outputs, inputs, train_pos) -> dict:
    """Score the single-criterion judges in one call per training example and compare cost and
    τ with one call per criterion on the same rows."""
    before = judge.usage.to_dict()
    rows = list(train_pos)
    multi = score_multi([j.spec for j in singles], judge, [outputs[r] for r in rows], [inputs[r] for r in rows])
    after = judge.usage.to_dict()
    stage = after.get("score:multi", {})
    prev = before.get("score:multi", {})
    cost_multi = {k: stage.get(k, 0) - prev.get(k, 0) for k in ("requests", "calls", "prompt_tokens", "completion_tokens", "seconds", "parse_failures")}
    single_stage = after.get("score:single", {})
    frac = len(rows) / max(1, len(y))
    cost_single = {k: round(single_stage.get(k, 0) * frac, 1) for k in ("requests", "calls", "prompt_tokens", "completion_tokens", "seconds")}
    per = []
    for j in singles:
        s_single = X[j.name].to_numpy(dtype=float)[rows]
        s_multi = multi[j.spec.feature_name]
        def tau(s):
            ok = ~np.isnan(s)
            return kendall_tau(s[ok], y[rows][ok])[0] if ok.sum() >= 3 else math.nan
        per.append({"feature": j.name, "tau_single": tau(s_single), "tau_multi": tau(s_multi),
                    "missing_multi": int(np.isnan(s_multi).sum())})
    return {"rows": len(rows), "cost_single_estimated": cost_single, "cost_multi": cost_multi, "criteria": per,
            "note": "single-mode cost is the score:single stage scaled to the same rows (cache hits cost nothing)"}
