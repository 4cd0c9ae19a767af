"""``autometrics benchmark``: AutoMetrics against the baselines on the same grouped, seeded splits.

  autometrics benchmark DATA --target COL [--seeds 5]
                         [--methods best_metric,metametrics,finetuned,autometrics,llm_judge,dna_eval]
                         [--llm MODEL] [--judge-llm MODEL] [--out DIR] [--max-rows N] [--task TEXT] ...

Prints the table (held-out Kendall τ mean ± 95 % t-interval over seeds, LLM calls, tokens, wall
time per method) and writes DIR/benchmark.json and DIR/benchmark.md.  Without --llm the LLM
methods are skipped with a note and AutoMetrics runs LLM-free.  See
:mod:`autometrics.evaluators.benchmark.harness`.
"""

from __future__ import annotations

import argparse

from .checks import count, fraction, positive, seed

__all__ = ["add_parser", "cmd_benchmark"]

_METHODS = "best_metric,metametrics,finetuned,autometrics,llm_judge,dna_eval"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``benchmark`` on ``autometrics``' sub-parsers; returns the sub-parser."""
    b = subparsers.add_parser("benchmark", help="compare AutoMetrics with baselines (held-out Kendall tau over seeded splits)")
    b.add_argument("data", help="CSV / JSONL / Parquet file, or demo:simpeval")
    b.add_argument("--target", required=True, help="human-judgment column")
    b.add_argument("--seeds", type=count(1, 1000), default=5, help="number of grouped train/test splits (seeds 0..N-1; default 5)")
    b.add_argument("--methods", default=_METHODS, help=f"comma-separated subset of {_METHODS} (default: all)")
    b.add_argument("--llm", nargs="?", const="local", default=None,
                   help="LLM for llm_judge, dna_eval and AutoMetrics' generated judges (LiteLLM/DSPy model string, "
                        "openai/NAME@http://host/v1, or local[:0.5b|:1.5b]); without it the LLM methods are skipped")
    b.add_argument("--judge-llm", default=None, help="judge model (default: --llm)")
    b.add_argument("--out", default="benchmark-results", help="folder for benchmark.json and benchmark.md")
    b.add_argument("--max-rows", type=count(10), default=None, help="use a seeded sample of about N labelled rows in whole input groups (as fit --max-rows)")
    b.add_argument("--sample-seed", type=seed, default=0, help="seed of the --max-rows sample")
    b.add_argument("--test-size", type=fraction, default=0.3, help="grouped share of the labelled rows held out per seed (default 0.3)")
    b.add_argument("--task", default=None, help="task description (default: datasets.json beside DATA, if any)")
    b.add_argument("--criterion", default=None,
                   help="annotation instructions for the target, used by the LLM judges (default: the label description "
                        "in datasets.json beside DATA; else a generic rubric)")
    b.add_argument("--input-col", default="input", help="column with the inputs (default 'input'; as in fit)")
    b.add_argument("--output-col", default="output", help="column with the generated texts to evaluate (default 'output')")
    b.add_argument("--reference-col", action="append", default=None,
                   help="reference column(s), repeatable; a column may hold a JSON list")
    b.add_argument("--id-col", default="id", help="column with unique row ids (default 'id'; '': rows are numbered)")
    b.add_argument("--group-col", default=None, help="split groups (default: the input text)")
    b.add_argument("--bank", choices=["cpu", "all"], default="cpu",
                   help="MetricBank metrics for the metric-based methods: cpu = no model weights (fast), all = every "
                        "metric that runs here")
    b.add_argument("--metrics", default=None, help="comma-separated MetricBank names instead of --bank")
    b.add_argument("--top-n", type=count(1), default=5, help="metrics AutoMetrics keeps (default 5)")
    b.add_argument("--gbm", choices=["auto", "xgboost", "sklearn"], default="auto",
                   help="MetaMetrics backend (auto: XGBoost when installed, else scikit-learn)")
    b.add_argument("--head", choices=["ridge", "mlp"], default="ridge", help="head of the finetuned baseline")
    b.add_argument("--dna-aspects", type=count(1, 20), default=4, help="aspects DnA-Eval asks for")
    b.add_argument("--quick", action="store_true", help="AutoMetrics with --llm: small generator counts (2/1/1/0)")
    b.add_argument("--judge-mode", choices=["auto", "logprobs", "json"], default="auto",
                   help="how judges are read: probability-weighted digit (logprobs) or a JSON score (as in fit)")
    b.add_argument("--llm-concurrency", type=count(1, 256), default=None, help="requests in flight per model (local default 1)")
    b.add_argument("--llm-timeout", type=positive, default=None, help="per-call timeout in seconds (default 120)")
    b.add_argument("--llm-cache", default=None, help="LLM reply cache (SQLite path; 'off' disables)")
    b.add_argument("--engine", choices=["local", "dask"], default="local",
                   help="dask: score the MetricBank features on a Dask cluster (the same values as one process)")
    b.add_argument("--scheduler", default=None, metavar="ADDRESS", help="with --engine dask: a running scheduler")
    b.add_argument("--workers", type=count(1), default=None, help="with --engine dask and no --scheduler: worker processes")
    return b


def cmd_benchmark(args) -> int:
    from autometrics.collectors.files import atomic_write_files
    from autometrics.evaluators.benchmark.harness import METHODS, run_benchmark
    from autometrics.metricbank.errors import UserError

    from .checks import check_out_folder, local_inputs, metric_names

    methods = [m.strip() for m in (args.methods or _METHODS).split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UserError(f"unknown method(s) {', '.join(unknown) or '(none given)'} in --methods; choose from {_METHODS}")
    out = check_out_folder(args.out, ["benchmark.json", "benchmark.md"], inputs=local_inputs(args.data))
    metrics = metric_names(args.metrics)
    counts = None
    if args.llm and args.quick:
        from autometrics.evaluators.judges.generate import QUICK_COUNTS

        counts = QUICK_COUNTS
    import contextlib

    cluster = contextlib.nullcontext()
    if args.engine == "dask":
        from autometrics.evaluators.distributed import engine, metric_scorer

        cluster = engine(args.scheduler, args.workers)
    elif args.scheduler or args.workers:
        raise UserError("--scheduler and --workers apply to --engine dask; add --engine dask or drop them")
    with cluster as client:
        scorer = None
        if client is not None:
            scorer = metric_scorer(client)
            n = len(client.scheduler_info()["workers"])
            print(f"MetricBank features on Dask: {args.scheduler or f'a local cluster of {n} worker process(es)'}", flush=True)
        result = run_benchmark(
            args.data, args.target, seeds=args.seeds, methods=methods, llm=args.llm, judge_llm=args.judge_llm, task=args.task,
            criterion=args.criterion, test_size=args.test_size, max_rows=args.max_rows, sample_seed=args.sample_seed,
            input_col=args.input_col, output_col=args.output_col, reference_cols=args.reference_col, id_col=args.id_col or None,
            group_col=args.group_col, bank=args.bank, metrics=metrics,
            echo=print, top_n=args.top_n, gbm_backend=args.gbm, head=args.head, dna_aspects=args.dna_aspects, counts=counts,
            judge_mode=args.judge_mode, llm_cache=args.llm_cache, llm_concurrency=args.llm_concurrency,
            llm_timeout=args.llm_timeout, metric_scorer=scorer,
        )
    print()
    print(result.table())
    import json

    paths = {"json": out / "benchmark.json", "markdown": out / "benchmark.md"}
    atomic_write_files({paths["json"]: json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n",
                        paths["markdown"]: result.markdown()})  # both or neither: a failed run keeps the last good pair
    print(f"\nwrote {paths['json']} and {paths['markdown']}")
    failed = [m["method"] for m in result.methods if m["status"] == "failed"]
    return 1 if failed else 0
