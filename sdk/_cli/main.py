"""`autometrics` command line.  Each command parses its options and calls one public function.

Shapes kept stable (scripts depend on them; options may be added):
  autometrics fit DATA --target COL [--task TEXT] [--input-col] [--output-col] [--reference-col ...]
                  [--test-size 0.3] [--seed 0] [--top-n 5] --out DIR
  autometrics score EVALUATOR DATA --out FILE.csv
  autometrics bank list | autometrics bank show NAME
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path



def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autometrics", description="Induce and run interpretable evaluators from human feedback (AutoMetrics).")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug information")
    sub = p.add_subparsers(dest="command")

    f = sub.add_parser("fit", help="fit an evaluator on labelled data and write evaluator.json + report")
    f.add_argument("data", help="CSV / JSONL / Parquet file, or demo:simpeval for the built-in demo data")
    f.add_argument("--target", action="append", required=True, help="human-judgment column (repeat for several)")
    f.add_argument("--task", default=None, help="task description (shown in the report; used by later LLM steps)")
    f.add_argument("--input-col", default="input")
    f.add_argument("--output-col", default="output")
    f.add_argument("--reference-col", action="append", default=None, help="reference column(s); a column may hold a JSON list")
    f.add_argument("--id-col", default="id")
    f.add_argument("--group-col", default=None, help="split groups (default: the input text)")
    f.add_argument("--test-size", type=float, default=0.3)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--top-n", type=int, default=5)
    f.add_argument("--metrics", default=None, help="comma-separated MetricBank names to consider (default: all that run)")
    f.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for confidence intervals")
    f.add_argument("--out", required=True, help="output folder")
    f.add_argument("--no-progress", action="store_true")

    s = sub.add_parser("score", help="score data with a fitted evaluator")
    s.add_argument("evaluator", help="evaluator.json (or the folder holding it)")
    s.add_argument("data")
    s.add_argument("--out", required=True, help="CSV file to write: the rows plus autometrics_score and metric columns")
    s.add_argument("--input-col", default=None)
    s.add_argument("--output-col", default=None)
    s.add_argument("--reference-col", action="append", default=None)
    s.add_argument("--no-progress", action="store_true")

    b = sub.add_parser("bank", help="browse MetricBank")
    bsub = b.add_subparsers(dest="bank_command")
    bsub.add_parser("list", help="list every metric and whether it can run here")
    show = bsub.add_parser("show", help="print a metric's Metric Card")
    show.add_argument("name")
    return p


def _cmd_fit(args) -> int:
    from ..evaluators.fit import fit_evaluator
    from ..evaluators.report import write_reports

    metrics = [m.strip() for m in args.metrics.split(",")] if args.metrics else None
    out_root = Path(args.out)
    from ..evaluators.data import load_dataset

    ds = load_dataset(
        args.data,
        args.target,
        input_col=args.input_col,
        output_col=args.output_col,
        reference_cols=args.reference_col,
        id_col=args.id_col or None,
        group_col=args.group_col,
    )
    for t in args.target:
        info = ds.labels[t]
        print(f"[{t}] label: {info.describe()}; {info.n_labelled} labelled, {info.n_missing} missing")
    for w in ds.warnings:
        print(f"warning: {w}")
    for t in args.target:
        result = fit_evaluator(
            args.data,
            t,
            task=args.task,
            test_size=args.test_size,
            seed=args.seed,
            top_n=args.top_n,
            metrics=metrics,
            n_boot=args.n_boot,
            progress=not args.no_progress,
            dataset=ds,
        )
        out = out_root if len(args.target) == 1 else out_root / t
        paths = write_reports(result, out)
        st = result.evaluator.statistics
        te = st["test"]
        print(f"[{t}] selected: " + ", ".join(f"{f['feature']} ({f['weight']:+.3f})" for f in result.evaluator.features))
        print(
            f"[{t}] held-out Kendall tau = {te['tau']:.3f} (95% CI {te['ci_low']:.3f} .. {te['ci_high']:.3f}, "
            f"p = {te['p_value']:.3g}, n = {te['n']})"
            if te["tau"] is not None
            else f"[{t}] held-out Kendall tau undefined (n = {te['n']})"
        )
        if st.get("best_single_metric") and st["best_single_metric"]["test"]["tau"] is not None:
            b = st["best_single_metric"]
            print(f"[{t}] best single metric on train: {b['feature']}, held-out tau = {b['test']['tau']:.3f}")
        for w in result.evaluator.artifact["warnings"]:
            if w not in ds.warnings:
                print(f"[{t}] warning: {w}")
        print(f"[{t}] wrote {paths['evaluator']}, {paths['html']}, {paths['markdown']}")
    return 0


def _cmd_score(args) -> int:
    from ..evaluators.fit import SCORE_COLUMN, Evaluator

    ev = Evaluator.load(args.evaluator)
    cols = {"input_col": args.input_col, "output_col": args.output_col, "reference_cols": args.reference_col}
    scored = ev.score(args.data, progress=not args.no_progress, **cols)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scored.to_csv(out, index=False)
    s = scored[SCORE_COLUMN]
    print(f"scored {len(scored)} rows with {ev.target} evaluator: mean {s.mean():.3f}, min {s.min():.3f}, max {s.max():.3f}")
    print(f"wrote {out}")
    return 0


def _cmd_bank(args) -> int:
    from ..metricbank import MetricUnavailable, list_metrics, load_card, metric_class

    if args.bank_command == "show":
        print(load_card(metric_class(args.name).name))
        return 0
    if args.bank_command != "list":
        print("usage: autometrics bank {list,show NAME}", file=sys.stderr)
        return 2
    rows = []
    for name in list_metrics():
        cls = metric_class(name)
        try:
            cls().check_available()
            status = "ok"
        except MetricUnavailable as exc:
            status = f"unavailable: {exc}"
        except Exception as exc:
            status = f"unavailable: {type(exc).__name__}: {exc}"
        needs = "+".join(x for x, on in (("ref", cls.needs_reference), ("input", cls.needs_input)) if on) or "-"
        rows.append((name, "↑" if cls.higher_is_better else "↓", needs, status, cls.description))
    w = max(len(r[0]) for r in rows)
    print(f"{'metric':<{w}}  dir  needs      status  description")
    for name, d, needs, status, desc in rows:
        print(f"{name:<{w}}  {d:^3}  {needs:<9}  {status:<6}  {desc}")
    print(f"{len(rows)} metrics; ↑ higher is better, ↓ lower is better")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.version:
        from .. import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 2
    from ..evaluators.data import DataError

    handler = {"fit": _cmd_fit, "score": _cmd_score, "bank": _cmd_bank}[args.command]
    try:
        return handler(args)
    except (DataError, FileNotFoundError, KeyError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
