"""Retrieval-quality benchmark: does metric retrieval rank first the MetricBank metrics that
actually agree with the human judgments?

    python tests/benchmarks/retrieval_quality.py [--datasets simpeval summeval ...] [--max-rows 400]
        [--modes bm25 dense hybrid screen policy] [--screen-rows 32] [--screen-seeds 5]
        [--design extreme|random] [--card-weight 0.02] [--llm MODEL] [--shuffles 1000]
        [--out results/retrieval_quality.json]

For each shared dataset (at most ``--max-rows`` rows, a seeded sample) every MetricBank metric
that the data can feed and that runs here is scored once.  For each label target the labelled
rows are split train/test grouped by input exactly as a fit does (``Dataset.split_positions``,
seed 0, test 30 %).  Then, for each of ``--screen-seeds`` seeds:

* the screening rows S: ``--screen-rows`` rows of the *train* split chosen as the fit's retrieval
  policy chooses them (``screening_rows``: one row per input, the lowest and highest labels;
  ``--design random`` draws one row per input at random instead);
* the relevance rows R: every labelled row (train or test) whose input is not among S's inputs:
  **disjoint from S by group**, so no label the ranker reads and no input it saw defines relevance.

Relevance, from R:

* graded relevance of a metric = |Kendall tau-b| with the target on R (sign-free: the regression
  can use a metric in either direction); a metric with several features (ROUGE.rouge1/2/L, ...)
  takes its best feature's |tau|; an undefined tau counts 0;
* binary relevance: among the ``--top-relevant`` (10) metrics with the largest |tau| (ties by name).

Rankers over the same candidate set (every MetricBank metric that runs here, all of them cheap CPU
metrics in this environment, ranked here as if each were an expensive candidate):

* ``bm25`` / ``dense`` / ``hybrid``: card text only, queried as a fit queries it (the task
  description plus ``Quality to predict: <target>``);
* ``screen``: |tau| on the screening rows S only (labels of S, nothing else);
* ``policy``: what ``plan_retrieval`` ranks expensive candidates by: screening |tau| +
  ``--card-weight`` x the hybrid card relevance rank-normalised to 0..1;
* ``hybrid+rerank`` (only with ``--llm MODEL``): the hybrid ranking re-ranked by the LLM.

Measures: recall@k and NDCG@k (gain |tau|, log2 discount) for k in 5, 10, 20, per seed; peer: a
random ranking, as the exact expected value and as the mean and 95th percentile of ``--shuffles``
seeded permutations of the same candidates under the same gains.  A mode "beats random" on a
target and seed when its NDCG@10 is above that 95th percentile.  Where every candidate is
relevant (datasets without references leave 7 metrics) recall@k is the same for every ranking and
is reported as n/a.
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
from autometrics.evaluators.retrieval import (
    CARD_WEIGHT,
    RRF_K,
    SCREEN_ROWS,
    bank_documents,
    ndcg_at_k,
    policy_scores,
    recall_at_k,
    retrieve,
    screen_signal,
    screening_rows,
)
from autometrics.metricbank import default_metrics, get_metric

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "datasets"
KS = (5, 10, 20)
CARD_MODES = ("bm25", "dense", "hybrid")
MODES = (*CARD_MODES, "screen", "policy")
_MODE_FLAGS = {"bm25": (True, False), "dense": (False, True), "hybrid": (True, True)}

RELEVANCE_DEFINITION = (
    "graded relevance of a metric = |Kendall tau-b| with the target on the relevance rows R = every labelled row whose "
    "input (group) is not among the screening rows' inputs (best feature of the metric; undefined tau counts 0); binary "
    "relevant = among the top-{top} metrics by that |tau| (ties by name). The screening rows S ({n} rows of the grouped "
    "train split, design '{design}') are the only labels the screen/policy rankers read; S and R are disjoint by group. "
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


def percentile_of(value: float, gains: dict[str, float], shuffles: int, seed: int, k: int = 10) -> float | None:
    """Share of random orderings (same seed as :func:`shuffled_random`) whose NDCG@k is below ``value``."""
    if value is None or math.isnan(value):
        return None
    names = sorted(gains)
    rng = np.random.default_rng(seed)
    vals = [ndcg_at_k([names[i] for i in rng.permutation(len(names))], gains, k) for _ in range(shuffles)]
    return float(np.mean([v < value for v in vals])) if vals else None


# --------------------------------------------------------------------------- the data side


def load_jobs(shared: Path) -> dict[str, dict]:
    """{dataset: {"task", "file", "targets"}} from the shared datasets.json (every label)."""
    info = json.loads((shared / "datasets.json").read_text(encoding="utf-8"))
    return {name: {"task": d["task"], "file": d["file"], "targets": list(d["labels"])} for name, d in info.items()}


def metric_taus(X, meta: dict, y: np.ndarray, positions: np.ndarray) -> dict[str, dict]:
    """Per metric: the feature with the largest |tau| on ``positions`` and that tau (None when undefined)."""
    sub = X.iloc[positions].reset_index(drop=True)
    return {m: {"feature": v["feature"], "tau": v["tau"]} for m, v in screen_signal(sub, meta, y[positions]).items()}


def random_screen_rows(train_pos, groups, n: int, seed: int) -> np.ndarray:
    """The ``--design random`` peer of ``screening_rows``: one random row per input, ``n`` inputs at random."""
    rng = np.random.default_rng(seed)
    g = groups[train_pos]
    picks = [int(rng.choice(train_pos[g == key])) for key in rng.permutation(np.unique(g))[:n]]
    return np.sort(np.asarray(picks, dtype=int))


def _card_rankings(task: str, target: str, docs, modes, rerank_client) -> tuple[dict[str, list[str]], dict[str, list[str]], dict]:
    """Full card rankings of ``docs`` per card mode, each mode's notes (a mode that did not really
    run is left out, e.g. dense without MiniLM, instead of silently measuring a fallback), and the
    hybrid fused scores (the policy's card term)."""
    out: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    hybrid_order: list[str] = []
    for mode in CARD_MODES:
        if mode not in modes and not (mode == "hybrid" and "policy" in modes):
            continue
        lexical, dense = _MODE_FLAGS[mode]
        r = retrieve(task, target, docs, k=len(docs), lexical=lexical, dense=dense)
        notes[mode] = list(r.notes)
        if (lexical and not r.lexical) or (dense and not r.dense):
            continue
        if mode == "hybrid":
            hybrid_order = r.names
        if mode in modes:
            out[mode] = r.names
    if rerank_client is not None:
        r = retrieve(task, target, docs, k=len(docs), rerank_client=rerank_client)
        notes["hybrid+rerank"] = list(r.notes)
        if r.reranked:
            out["hybrid+rerank"] = r.names
    n = len(hybrid_order)
    card = {name: (1.0 - i / (n - 1)) if n > 1 else 1.0 for i, name in enumerate(hybrid_order)}
    return out, notes, card


def _mean_dicts(dicts: list[dict]) -> dict:
    out = {}
    for key in dicts[0] if dicts else []:
        vals = [d[key] for d in dicts if d[key] is not None and not (isinstance(d[key], float) and math.isnan(d[key]))]
        out[key] = float(np.mean(vals)) if vals else None
    return out


def run(
    datasets: list[str],
    *,
    shared: Path = SHARED,
    max_rows: int = 400,
    seed: int = 0,
    test_size: float = 0.3,
    modes=MODES,
    top_relevant: int = 10,
    shuffles: int = 1000,
    screen_rows_n: int = SCREEN_ROWS,
    screen_seeds: int = 5,
    design: str = "extreme",
    card_weight: float = CARD_WEIGHT,
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
                y = lab.y(target)
                Xl = X.iloc[keep].reset_index(drop=True)
                groups = lab.frame["group"].astype(str).to_numpy()
                train_pos, _ = lab.split_positions(test_size, seed)
                card_rankings, mode_notes, card = _card_rankings(job["task"], target, docs, modes, rerank_client)
                per_seed = []
                for s in range(screen_seeds):
                    S = (screening_rows(y, train_pos, groups, screen_rows_n, seed=s) if design == "extreme"
                         else random_screen_rows(train_pos, groups, screen_rows_n, s))
                    seen = set(groups[S])
                    R = np.asarray([i for i in range(len(lab)) if groups[i] not in seen], dtype=int)
                    taus = metric_taus(Xl, meta, y, R)
                    gains = {d.name: abs(taus[d.name]["tau"]) if d.name in taus and taus[d.name]["tau"] is not None else 0.0
                             for d in docs}
                    relevant = relevant_set(gains, top_relevant)
                    rankings = dict(card_rankings)
                    signal = screen_signal(Xl.iloc[S].reset_index(drop=True), meta, y[S])
                    signal = {n: signal.get(n, {"tau": None}) for n in gains}
                    if "screen" in modes:
                        sc = policy_scores(signal, {}, 0.0)
                        rankings["screen"] = sorted(gains, key=lambda n: (-sc[n], n))
                    if "policy" in modes and card:
                        sc = policy_scores(signal, card, card_weight)
                        rankings["policy"] = sorted(gains, key=lambda n: (-sc[n], n))
                    quality = {mode: ranking_quality(r, gains, relevant) for mode, r in rankings.items()}
                    shuffled = shuffled_random(gains, relevant, shuffles, seed + s)
                    per_seed.append({
                        "screen_seed": s, "n_screen": int(len(S)), "n_relevance_rows": int(len(R)),
                        "relevant": sorted(relevant, key=lambda n: -gains[n]),
                        "tau_relevance": {n: taus.get(n, {"feature": None, "tau": None}) for n in gains},
                        "tau_screen": {n: signal[n]["tau"] for n in gains},
                        "quality": quality, "random_expected": expected_random(gains, relevant), "random_shuffles": shuffled,
                        "ndcg@10_percentile": {m: percentile_of(q["ndcg@10"], gains, shuffles, seed + s) for m, q in quality.items()},
                        "beats_random_p95": {m: bool(q["ndcg@10"] > shuffled["p95"]["ndcg@10"]) for m, q in quality.items()
                                             if q["ndcg@10"] is not None and shuffled["p95"].get("ndcg@10") is not None},
                        "rankings": {m: r[:20] for m, r in rankings.items() if m in ("screen", "policy")},
                    })
                found = list(per_seed[0]["quality"]) if per_seed else []
                row = {
                    "dataset": name,
                    "target": target,
                    "n_labelled": int(len(lab)),
                    "n_train": int(len(train_pos)),
                    "n_candidates": len(docs),
                    "n_relevant": len(per_seed[0]["relevant"]) if per_seed else 0,
                    "quality": {m: _mean_dicts([p["quality"][m] for p in per_seed]) for m in found},
                    "random_expected": _mean_dicts([p["random_expected"] for p in per_seed]),
                    "random_shuffles": {"mean": _mean_dicts([p["random_shuffles"]["mean"] for p in per_seed]),
                                        "p95": _mean_dicts([p["random_shuffles"]["p95"] for p in per_seed])},
                    "beats_random_p95": {m: sum(p["beats_random_p95"].get(m, False) for p in per_seed) for m in found},
                    "seeds": len(per_seed),
                    "rankings": {m: r[:20] for m, r in card_rankings.items()},
                    "per_seed": per_seed,
                    "retrieval_notes": {m: n for m, n in mode_notes.items() if n},
                }
                rows.append(row)
                summary = ", ".join(f"{m} {q['ndcg@10']:.2f} ({row['beats_random_p95'][m]}/{len(per_seed)})"
                                    for m, q in row["quality"].items())
                echo(f"  {name}/{target}: NDCG@10 (seeds above random p95) {summary}; "
                     f"random mean {row['random_shuffles']['mean']['ndcg@10']:.2f} p95 {row['random_shuffles']['p95']['ndcg@10']:.2f}")
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
    """Per mode (and random): macro mean over targets of each measure (seed means), and how many
    targets beat the random 95th percentile on NDCG@10: per screening seed, and their mean."""
    out = {}
    seeds = max((r["seeds"] for r in rows), default=0)
    for mode in [*modes, "random (expected)"]:
        means = {}
        for key in _columns():
            if mode == "random (expected)":
                vals = [r["random_expected"][key] for r in rows]
            else:
                vals = [r["quality"][mode][key] for r in rows if mode in r["quality"]]
            vals = [v for v in vals if v is not None and not math.isnan(v)]
            means[key] = float(np.mean(vals)) if vals else None
        entry = {"mean": means, "beats_random_p95": {}}
        if mode != "random (expected)":
            counted = [r for r in rows if mode in r["quality"]]
            per_seed = [sum(bool(r["per_seed"][s]["beats_random_p95"].get(mode)) for r in counted if s < len(r["per_seed"]))
                        for s in range(seeds)]
            entry["beats_random_p95"] = {"ndcg@10": f"{np.mean(per_seed) if per_seed else 0:.1f}/{len(counted)}",
                                         "per_seed": per_seed, "targets": len(counted)}
        out[mode] = entry
    return out


def to_markdown(rows: list[dict], summary: dict, modes: list[str]) -> str:
    out = ["| dataset | target | N | mode | NDCG@5 | NDCG@10 | NDCG@20 | recall@10 | seeds > random p95 |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for mode in modes:
            if mode not in r["quality"]:
                continue
            q = r["quality"][mode]
            out.append(f"| {r['dataset']} | {r['target']} | {r['n_candidates']} | {mode} | {_fmt(q['ndcg@5'])} | "
                       f"{_fmt(q['ndcg@10'])} | {_fmt(q['ndcg@20'])} | {_fmt(q['recall@10'])} | "
                       f"{r['beats_random_p95'][mode]}/{r['seeds']} |")
        e, p = r["random_expected"], r["random_shuffles"]["p95"]
        out.append(f"| {r['dataset']} | {r['target']} | {r['n_candidates']} | random (E / p95) | "
                   f"{_fmt(e['ndcg@5'])} / {_fmt(p.get('ndcg@5'))} | {_fmt(e['ndcg@10'])} / {_fmt(p.get('ndcg@10'))} | "
                   f"{_fmt(e['ndcg@20'])} / {_fmt(p.get('ndcg@20'))} | {_fmt(e['recall@10'])} | |")
    out += ["", "Macro mean over targets (seed means); 'targets > random p95' = targets whose NDCG@10 is above the 95th "
            "percentile of the random permutations, mean over screening seeds (per seed in brackets):", "",
            "| mode | NDCG@5 | NDCG@10 | NDCG@20 | targets > random p95 |", "|---|---:|---:|---:|---|"]
    for mode, s in summary.items():
        b = s["beats_random_p95"]
        beats = f"{b['ndcg@10']} ({', '.join(map(str, b['per_seed']))})" if b else ""
        out.append(f"| {mode} | {_fmt(s['mean']['ndcg@5'])} | {_fmt(s['mean']['ndcg@10'])} | {_fmt(s['mean']['ndcg@20'])} | {beats} |")
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
    ap.add_argument("--shuffles", type=int, default=1000)
    ap.add_argument("--screen-rows", type=int, default=SCREEN_ROWS)
    ap.add_argument("--screen-seeds", type=int, default=5)
    ap.add_argument("--design", choices=("extreme", "random"), default="extreme")
    ap.add_argument("--card-weight", type=float, default=CARD_WEIGHT)
    ap.add_argument("--metrics", nargs="*", default=None, help="restrict the bank (default: every metric that runs here)")
    ap.add_argument("--llm", default=None, metavar="MODEL",
                    help="also measure the LLM re-rank stage with this model (skipped by default)")
    ap.add_argument("--out", default=str(HERE / "results" / "retrieval_quality.json"))
    args = ap.parse_args(argv)
    shared = Path(args.shared)
    datasets = args.datasets or list(load_jobs(shared))
    started = time.perf_counter()
    rows, extra = run(datasets, shared=shared, max_rows=args.max_rows, seed=args.seed, test_size=args.test_size,
                      modes=args.modes, top_relevant=args.top_relevant, shuffles=args.shuffles,
                      screen_rows_n=args.screen_rows, screen_seeds=args.screen_seeds, design=args.design,
                      card_weight=args.card_weight, metrics=args.metrics, llm=args.llm)
    modes = list(args.modes) + (["hybrid+rerank"] if args.llm else [])
    summary = summarise(rows, modes)
    seconds = time.perf_counter() - started
    print()
    print(to_markdown(rows, summary, modes))
    rerank = f"LLM re-rank measured with {args.llm}" if args.llm else "LLM re-rank skipped (pass --llm MODEL to measure it)"
    definition = RELEVANCE_DEFINITION.format(top=args.top_relevant, n=args.screen_rows, design=args.design)
    print(f"\nRelevance: {definition}")
    print(f"Query: '<task> Quality to predict: <target>'; {rerank}; policy = screening |tau| + {args.card_weight} x card "
          f"relevance; random peer: exact expectation and {args.shuffles} seeded permutations; {args.screen_seeds} screening "
          f"seeds; ≤ {args.max_rows} rows per dataset, grouped train split (test {args.test_size}, seed {args.seed}); "
          f"total {seconds:.0f} s.")
    result = {
        "settings": {
            "datasets": datasets, "max_rows": args.max_rows, "seed": args.seed, "test_size": args.test_size,
            "ks": list(KS), "modes": modes, "top_relevant": args.top_relevant, "shuffles": args.shuffles,
            "screen_rows": args.screen_rows, "screen_seeds": args.screen_seeds, "design": args.design,
            "card_weight": args.card_weight,
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
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return _json_safe(float(v))
    if isinstance(v, np.bool_):
        return bool(v)
    return v


if __name__ == "__main__":
    main()
