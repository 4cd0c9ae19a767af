"""Throughput of every CPU MetricBank metric on SummEval (1,600 rows, 11 references each).

For each metric: rows/s of our batch call, and rows/s of a naive per-example call of the
underlying library (or, for metrics we implement ourselves, of our metric called one example at
a time), measured in the same run, with the ratio batch/naive (>= 1 means batching is not slower).

    python tests/benchmarks/throughput.py [--rows 1600] [--naive-rows 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "datasets"


def naive_calls():
    """Per-example calls of the maintained libraries our metrics wrap, as a user would write them."""
    import sacrebleu
    from rapidfuzz.distance import Jaro, JaroWinkler, Levenshtein

    def rouge(o, i, refs):
        from rouge_score import rouge_scorer

        return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True).score_multi(refs, o)

    def nist(o, i, refs):
        from nltk.translate.nist_score import sentence_nist

        try:
            return sentence_nist([r.split() for r in refs], o.split())
        except ZeroDivisionError:
            return 0.0

    def gleu(o, i, refs):
        from nltk.translate.gleu_score import sentence_gleu

        return sentence_gleu([r.split() for r in refs], o.split())

    def charcut(o, i, refs):
        # the charcut package's own entry point on one reference (our CharCut also scores one
        # reference per row by default: the closest by character trigrams)
        from charcut import charcut as cc

        return cc.calculate_charcut(o, refs[0])[0]

    return {
        "BLEU": lambda o, i, refs: sacrebleu.sentence_bleu(o, refs).score,
        "chrF++": lambda o, i, refs: sacrebleu.sentence_chrf(o, refs, word_order=2).score,
        "TER": lambda o, i, refs: sacrebleu.sentence_ter(o, refs).score,
        "ROUGE": rouge,
        "NIST": nist,
        "GLEU": gleu,
        "LevenshteinDistance": lambda o, i, refs: min(Levenshtein.distance(o, r) for r in refs),
        "LevenshteinRatio": lambda o, i, refs: max(Levenshtein.normalized_similarity(o, r) for r in refs),
        "Jaro": lambda o, i, refs: max(Jaro.similarity(o, r) for r in refs),
        "JaroWinkler": lambda o, i, refs: max(JaroWinkler.similarity(o, r) for r in refs),
        "CharCut": charcut,
    }


def main() -> None:
    import pandas as pd
    from autometrics.evaluators.data import load_dataset
    from autometrics.metricbank import default_metrics

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1600)
    ap.add_argument("--naive-rows", type=int, default=200, help="rows timed for the naive per-example peer")
    ap.add_argument("--out", default=str(HERE / "results" / "throughput.json"))
    args = ap.parse_args()

    ds = load_dataset(SHARED / "summeval.csv", "relevance")
    ds = ds.subset(range(min(args.rows, len(ds))))
    outs, ins, refs = ds.outputs, ds.inputs, ds.references
    naive = naive_calls()
    rows = []
    total = 0.0
    for m in default_metrics():
        # warm-up: one-off loads (dictionaries, WordNet, JIT compilation) are not throughput
        m.score_all(outs[:2], inputs=ins[:2], references=refs[:2])
        fn = naive.get(m.name)
        if fn:
            fn(outs[0], ins[0], refs[0])
        t = time.perf_counter()
        m.score_all(outs, inputs=ins, references=refs)
        batch_s = time.perf_counter() - t
        total += batch_s
        k = min(args.naive_rows, len(outs))
        peer = "library per-example" if fn else "ours per-example"
        t = time.perf_counter()
        for j in range(k):
            if fn:
                fn(outs[j], ins[j], refs[j])
            else:
                m.score_all([outs[j]], inputs=[ins[j]], references=[refs[j]])
        naive_s = time.perf_counter() - t
        r = {
            "metric": m.name,
            "batch_rows_per_s": len(outs) / batch_s,
            "naive_rows_per_s": k / naive_s,
            "peer": peer,
            "batch_seconds": batch_s,
        }
        r["ratio"] = r["batch_rows_per_s"] / r["naive_rows_per_s"]
        rows.append(r)
        print(f"{m.name:<20} {r['batch_rows_per_s']:>10.0f} rows/s  batch {batch_s:6.2f} s   naive {r['naive_rows_per_s']:>9.0f} rows/s ({peer})  ratio {r['ratio']:5.2f}", flush=True)
    df = pd.DataFrame(rows)
    print()
    print(f"whole CPU bank on {len(outs)} SummEval rows: {total:.1f} s ({len(rows)} metrics)")
    print(f"metrics where batch is slower than the naive peer: {', '.join(df.loc[df.ratio < 1, 'metric']) or 'none'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": len(outs), "total_seconds": total, "metrics": rows}, indent=2))


if __name__ == "__main__":
    main()
