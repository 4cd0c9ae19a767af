"""Retrieval-quality benchmark: does metric retrieval rank first the MetricBank metrics that
actually agree with the human judgments?

    python tests/benchmarks/retrieval_quality.py [--datasets simpeval summeval ...] [--max-rows 400]
        [--modes bm25 dense hybrid] [--llm MODEL] [--shuffles 100] [--out results/retrieval_quality.json]

For each shared dataset (at most ``--max-rows`` rows, a seeded sample) every MetricBank metric
that the data can feed and that runs here is scored once; for each label target the rows are split
train/test grouped by input exactly as a fit does (``Dataset.split_positions``, seed 0, test 30 %),
and each metric's Kendall tau-b with the target is computed on the train split.

Relevance, from those train taus:

* graded relevance of a metric = |tau| (sign-free: the regression can use a metric in either
  direction); a metric with several features (ROUGE.rouge1/2/L, ...) takes its best feature's
  |tau|, because retrieval keeps or drops the whole metric; an undefined tau (constant or failed
  metric) counts 0;
* binary relevance: a metric is "relevant" if it is among the ``--top-relevant`` (10) metrics with
  the largest |tau| (ties broken by name).

The retriever (``autometrics.evaluators.judges.retrieve.retrieve``) is queried as ``fit_autometrics``
queries it (the task description plus ``Quality to predict: <target>``) over the Metric Cards of
the same candidate set, in its LLM-free modes: ``bm25`` (lexical only), ``dense`` (offline
MiniLM only) and ``hybrid`` (both, reciprocal-rank fusion).  The LLM re-rank stage runs only with
``--llm MODEL`` (mode ``hybrid+rerank``); it is skipped by default.

Measures: recall@k = |top-k ∩ relevant| / |relevant| and NDCG@k with gain |tau| (linear gain,
log2 discount), for k in 5, 10, 20.  Peer in the same run: a random ranking, as the exact expected
value and as the mean and 95th percentile of ``--shuffles`` seeded shuffles.  Where the relevant
set is the whole candidate set (a dataset without references leaves fewer than 10 metrics),
recall@k is the same for every ranking and is reported as n/a.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from autometrics.evaluators.data import load_dataset
from autometrics.evaluators.fit import score_metrics
from autometrics.evaluators.judges.retrieve import RRF_K, bank_documents, ndcg_at_k, recall_at_k, retrieve
from autometrics.evaluators.stats import kendall_tau
from autometrics.metricbank import default_metrics, get_metric

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "datasets"
KS = (5, 10, 20)
MODES = ("bm25", "dense", "hybrid")
_MODE_FLAGS = {"bm25": (True, False), "dense": (False, True), "hybrid": (True, True)}

RELEVANCE_DEFINITION = (
    "graded relevance of a metric = |Kendall tau-b| with the target on the train split (best feature of the "
    "metric; undefined tau counts 0); binary relevant = among the top-{top} metrics by that |tau| (ties by name). "
    "recall@k = |top-k retrieved ∩ relevant| / |relevant|; NDCG@k uses gain |tau|, discount log2(rank+1); "
    "recall is n/a where every candidate is relevant (it is then the same for any ranking)."
)


# ------------------------------------------------------------------------------ measures


def relevant_set(gains: dict[str, float], top: int) -> set[str]:
    """The ``top`` metrics with the largest positive gain (ties broken by name)."""
    ranked = sorted((n for n, g in gains.items() if g > 0), key=lambda n: (-gains[n], n))
    return set(ranked[:top])


def ranking_quality(ranked: list[str], gains: dict[str, float], relevant: set[str], ks=KS) -> dict:
    """recall@k and NDCG@k of one ranking (recall None where it cannot tell rankings apart)."""
    degenerate = set(gains) <= relevant
    out = {}
    for k in ks:
        out[f"recall@{k}"] = None if degenerate else recall_at_k(ranked, relevant, k)
        out[f"ndcg@{k}"] = ndcg_at_k(ranked, gains, k)
    return out


def expected_random(gains: dict[str, float], relevant: set[str], ks=KS) -> dict:
    """Exact expectation of recall@k and NDCG@k over uniformly random orderings of the
    candidates: each position holds a relevant item with probability |R|/N and has expected gain
    mean(gains), so E[recall@k] = min(k, N)/N and E[NDCG@k] = mean(g) * sum_{r<min(k,N)} 1/log2(r+2) / IDCG@k."""
    n = len(gains)
    degenerate = set(gains) <= relevant
    mean_gain = sum(gains.values()) / n if n else 0.0
    ideal = sorted(gains.values(), reverse=True)
    out = {}
    for k in ks:
        m = min(k, n)
        discount = sum(1.0 / math.log2(r + 2) for r in range(m))
        idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal[:k]))
        out[f"recall@{k}"] = None if degenerate or not relevant else m / n
        out[f"ndcg@{k}"] = mean_gain * discount / idcg if idcg > 0 else math.nan
    return out


def shuffled_random(gains: dict[str, float], relevant: set[str], shuffles: int, seed: int, ks=KS) -> dict:
    """Mean and 95th percentile of each measure over ``shuffles`` seeded random orderings."""
    names = sorted(gains)
    rng = np.random.default_rng(seed)
    runs = [ranking_quality([names[i] for i in rng.permutation(len(names))], gains, relevant, ks) for _ in range(shuffles)]
    mean, p95 = {}, {}
    for key in runs[0] if runs else []:
        vals = [r[key] for r in runs if r[key] is not None and not math.isnan(r[key])]
        mean[key] = float(np.mean(vals)) if vals else None
        p95[key] = float(np.percentile(vals, 95)) if vals else None
    return {"mean": mean, "p95": p95}


# --------------------------------------------------------------------------- the data side


def load_jobs(shared: Path) -> dict[str, dict]:
    """{dataset: {"task", "file", "targets"}} from the shared datasets.json (every label)."""
    info = json.loads((shared / "datasets.json").read_text(encoding="utf-8"))
    return {name: {"task": d["task"], "file": d["file"], "targets": list(d["labels"])} for name, d in info.items()}


def metric_taus(X, meta: dict, y: np.ndarray, positions: np.ndarray) -> dict[str, dict]:
    """Per metric: the feature with the largest train |tau| and that tau (None when undefined)."""
    best: dict[str, dict] = {}
    for feature in X.columns:
        metric = meta[feature]["metric"]["name"]
        tau, _ = kendall_tau(X[feature].to_numpy(dtype=float)[positions], y[positions])
        tau = None if math.isnan(tau) else tau
        cur = best.get(metric)
        if cur is None or (tau is not None and (cur["tau"] is None or abs(tau) > abs(cur["tau"]))):
            best[metric] = {"feature": feature, "tau": tau}
    return best


def _rankings(task: str, target: str, docs, modes, rerank_client) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Full rankings of ``docs`` per mode, and each mode's notes (a mode that did not really run
    is left out, e.g. dense without MiniLM, instead of silently measuring a fallback)."""
    out: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    for mode in modes:
        lexical, dense = _MODE_FLAGS[mode]
        r = retrieve(task, target, docs, k=len(docs), lexical=lexical, dense=dense)
        notes[mode] = list(r.notes)
        if (lexical and not r.lexical) or (dense and not r.dense):
            continue
        out[mode] = r.names
    if rerank_client is not None:
        r = retrieve(task, target, docs, k=len(docs), rerank_client=rerank_client)
        notes["hybrid+rerank"] = list(r.notes)
        if r.reranked:
            out["hybrid+rerank"] = r.names
    return out, notes


def run(
    datasets: list[str],
    *,
    shared: Path = SHARED,
    max_rows: int = 400,
    seed: int = 0,
    test_size: float = 0.3,
    modes=MODES,
    top_relevant: int = 10,
    shuffles: int = 100,
    metrics: list[str] | None = None,
    llm: str | None = None,
    echo=print,
) -> tuple[list[dict], dict]:
    jobs = load_jobs(shared)
    rerank_client = None
    if llm:
        from autometrics.evaluators.llm.client import LLMClient, LLMConfig

        rerank_client = LLMClient(LLMConfig.parse(llm))
    rows: list[dict] = []
    per_dataset: dict = {}
    try:
        for name in datasets:
            job = jobs[name]
            t0 = time.perf_counter()
            full = load_dataset(shared / job["file"], job["targets"])
            picked = np.arange(len(full))
            if len(full) > max_rows:
                picked = np.sort(np.random.default_rng(seed).choice(len(full), max_rows, replace=False))
            ds = full.subset(picked)
            unavailable: dict[str, str] = {}
            bank = default_metrics(with_reference=ds.has_references, with_input=ds.has_input, unavailable=unavailable)
            if metrics:
                wanted = {get_metric(m).name for m in metrics}
                bank = [m for m in bank if m.name in wanted]
            X, meta, notes = score_metrics(bank, ds.outputs, ds.inputs if ds.has_input else None, ds.references)
            score_s = time.perf_counter() - t0
            # the candidate set retrieval ranks, as in fit_autometrics: every metric that runs here
            docs = bank_documents([m.name for m in bank])
            per_dataset[name] = {"rows": len(ds), "rows_in_file": len(full), "candidates": [d.name for d in docs],
                                 "skipped": notes, "unavailable_here": sorted(unavailable), "scoring_seconds": round(score_s, 1)}
            echo(f"{name}: {len(ds)} rows, {len(docs)} candidate metrics, scored in {score_s:.0f} s")
            for target in job["targets"]:
                keep = np.flatnonzero(ds.frame[target].notna().to_numpy())
                lab = ds.subset(keep)
                if len(np.unique(lab.y(target))) < 2 or len(lab) < 10:
                    echo(f"  {name}/{target}: skipped ({len(lab)} labelled rows)")
                    continue
                train_pos, _ = lab.split_positions(test_size, seed)
                taus = metric_taus(X.iloc[keep].reset_index(drop=True), meta, lab.y(target), train_pos)
                gains = {d.name: abs(taus[d.name]["tau"]) if d.name in taus and taus[d.name]["tau"] is not None else 0.0
                         for d in docs}
                relevant = relevant_set(gains, top_relevant)
                rankings, mode_notes = _rankings(job["task"], target, docs, modes, rerank_client)
                quality = {mode: ranking_quality(r, gains, relevant) for mode, r in rankings.items()}
                row = {
                    "dataset": name,
                    "target": target,
                    "n_train": int(len(train_pos)),
                    "n_candidates": len(docs),
                    "n_relevant": len(relevant),
                    "relevant": sorted(relevant, key=lambda n: -gains[n]),
                    "tau_train": {n: taus.get(n, {"feature": None, "tau": None}) for n in gains},
                    "quality": quality,
                    "random_expected": expected_random(gains, relevant),
                    "random_shuffles": shuffled_random(gains, relevant, shuffles, seed),
                    "rankings": {mode: r[:20] for mode, r in rankings.items()},
                    "retrieval_notes": {m: n for m, n in mode_notes.items() if n},
                }
                rows.append(row)
                summary = ", ".join(f"{m} NDCG@10 {q['ndcg@10']:.2f}" for m, q in quality.items())
                echo(f"  {name}/{target}: {summary} (random {row['random_expected']['ndcg@10']:.2f})")
    finally:
        usage = rerank_client.usage.to_dict() if rerank_client is not None else None
        if rerank_client is not None:
            rerank_client.close()
    return rows, {"datasets": per_dataset, "llm_usage": usage}


# --------------------------------------------------------------------------------- output


def _fmt(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def _columns() -> list[str]:
    return [f"recall@{k}" for k in KS] + [f"ndcg@{k}" for k in KS]


def summarise(rows: list[dict], modes: list[str]) -> dict:
    """Per mode (and random): macro mean of each measure over the targets where it is defined,
    and the number of targets where the mode beats the 95th percentile of the random shuffles."""
    out = {}
    for mode in [*modes, "random (expected)"]:
        means, beats = {}, {}
        for key in _columns():
            if mode == "random (expected)":
                vals = [r["random_expected"][key] for r in rows]
            else:
                vals = [r["quality"][mode][key] for r in rows if mode in r["quality"]]
            vals = [v for v in vals if v is not None and not math.isnan(v)]
            means[key] = float(np.mean(vals)) if vals else None
            if mode != "random (expected)":
                pairs = [(r["quality"][mode][key], r["random_shuffles"]["p95"].get(key)) for r in rows if mode in r["quality"]]
                pairs = [(v, p) for v, p in pairs if v is not None and p is not None and not math.isnan(v)]
                beats[key] = f"{sum(v > p for v, p in pairs)}/{len(pairs)}"
        out[mode] = {"mean": means, "beats_random_p95": beats}
    return out


def to_markdown(rows: list[dict], summary: dict, modes: list[str]) -> str:
    cols = _columns()
    head = "| dataset | target | N | mode | " + " | ".join(cols) + " |"
    out = [head, "|---|---|---:|---|" + "---:|" * len(cols)]
    for r in rows:
        for mode in modes:
            if mode not in r["quality"]:
                continue
            q = r["quality"][mode]
            out.append(f"| {r['dataset']} | {r['target']} | {r['n_candidates']} | {mode} | "
                       + " | ".join(_fmt(q[c]) for c in cols) + " |")
        e, s = r["random_expected"], r["random_shuffles"]["p95"]
        out.append(f"| {r['dataset']} | {r['target']} | {r['n_candidates']} | random (E / p95) | "
                   + " | ".join(f"{_fmt(e[c])} / {_fmt(s.get(c))}" for c in cols) + " |")
    out += ["", "Macro mean over targets (recall: only targets where it is defined); "
            "'beats' = targets where the mode is above the 95th percentile of the random shuffles:", "",
            "| mode | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for mode, s in summary.items():
        cells = [_fmt(s["mean"][c]) + (f" ({s['beats_random_p95'][c]})" if s["beats_random_p95"] else "") for c in cols]
        out.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="*", default=None, help="default: every dataset in datasets.json")
    ap.add_argument("--shared", default=str(SHARED), help="folder with datasets.json and the CSVs")
    ap.add_argument("--max-rows", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-size", type=float, default=0.3)
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    ap.add_argument("--top-relevant", type=int, default=10)
    ap.add_argument("--shuffles", type=int, default=100)
    ap.add_argument("--metrics", nargs="*", default=None, help="restrict the bank (default: every metric that runs here)")
    ap.add_argument("--llm", default=None, metavar="MODEL",
                    help="also measure the LLM re-rank stage with this model (skipped by default)")
    ap.add_argument("--out", default=str(HERE / "results" / "retrieval_quality.json"))
    args = ap.parse_args(argv)
    shared = Path(args.shared)
    datasets = args.datasets or list(load_jobs(shared))
    started = time.perf_counter()
    rows, extra = run(datasets, shared=shared, max_rows=args.max_rows, seed=args.seed, test_size=args.test_size,
                      modes=args.modes, top_relevant=args.top_relevant, shuffles=args.shuffles, metrics=args.metrics,
                      llm=args.llm)
    modes = list(args.modes) + (["hybrid+rerank"] if args.llm else [])
    summary = summarise(rows, modes)
    seconds = time.perf_counter() - started
    print()
    print(to_markdown(rows, summary, modes))
    rerank = f"LLM re-rank measured with {args.llm}" if args.llm else "LLM re-rank skipped (pass --llm MODEL to measure it)"
    definition = RELEVANCE_DEFINITION.format(top=args.top_relevant)
    print(f"\nRelevance: {definition}")
    print(f"Query: '<task> Quality to predict: <target>'; {rerank}; random peer: exact expectation and "
          f"{args.shuffles} seeded shuffles; ≤ {args.max_rows} rows per dataset, grouped train split "
          f"(test {args.test_size}, seed {args.seed}); total {seconds:.0f} s.")
    result = {
        "settings": {
            "datasets": datasets, "max_rows": args.max_rows, "seed": args.seed, "test_size": args.test_size,
            "ks": list(KS), "modes": modes, "top_relevant": args.top_relevant, "shuffles": args.shuffles,
            "metrics": args.metrics or "every MetricBank metric that the data can feed and that runs here",
            "llm_rerank": args.llm or "skipped (pass --llm MODEL)", "rrf_k": RRF_K,
            "query": "<task from datasets.json> Quality to predict: <target>",
            "relevance": definition, "seconds": round(seconds, 1),
        },
        "summary": summary,
        **extra,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_json_safe(result), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


def _json_safe(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return v


if __name__ == "__main__":
    main()
