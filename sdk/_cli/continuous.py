"""CLI commands of continuous evaluation: ``worker``, ``refit``, ``versions``, ``dashboard``, ``demo``.

  autometrics worker --target NAME [--store URL] [--project P] [--task TEXT] [--refit-interval S]
                     [--min-new-feedback N] [--poll S] [--score-interval S] [--dashboard PATH]
                     [--claim-lease S] [--judge-sample-rate R] [--judge-calls-per-hour N] [--judge-tokens-per-hour N]
                     [--judge-concurrency N] [--judge-url URL]
                     [--langfuse auto|on|off] [--langfuse-max-attempts N] [--no-llm] [--once] [--run-for S]
                     [--drift-ks-alpha P] [--drift-psi X] [--drift-min-scores N] [--drift-window N]
                     [--drift-reference-window N] [--drift-persistence K] [--drift-arl N] [--no-sequential-drift]
                     [--validity-p P] [--validity-alpha P] [--validity-min-n N] [--validity-window N]
  autometrics refit --target NAME [--store URL] [--project P] [--force] [--no-llm]
  autometrics versions list|show N [--out DIR]|compare A B|rollback N  --target NAME [--store URL] [--project P]
  autometrics dashboard --target NAME [--store URL] [--project P] [--out PATH] [--serve] [--port 8765]
  autometrics demo [--no-llm] [--out DIR] [--serve] [--port 8765]

Kept out of main.py so the continuous-evaluation commands evolve without touching the others.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path

from autometrics.collectors.files import project_name
from autometrics.metricbank.errors import UserError

from .checks import N_BOOT_MAX, at_least, count, fraction, port, positive, seed

__all__ = ["add_commands", "HANDLERS"]


def _common(p: argparse.ArgumentParser, *, target_required: bool = True) -> None:
    p.add_argument("--store", default=None, help="trace store URL (default: $AUTOMETRICS_STORE_URL, else SQLite in the user data dir)")
    p.add_argument("--project", default=None, help="project (default: $AUTOMETRICS_PROJECT, else 'default')")
    p.add_argument("--target", required=target_required, help="feedback name the evaluator predicts (e.g. thumbs, stars)")


def _fit_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default=None, help="task description (default: $AUTOMETRICS_TASK)")
    p.add_argument("--no-llm", action="store_true", help="LLM-free fit (MetricBank + NNLS) even when an LLM is available")
    p.add_argument("--min-feedback", type=count(2), default=30, help="no fit below this many labelled traces (default 30)")
    p.add_argument("--holdout", type=fraction, default=0.3, help="fraction of the newest feedback held out for champion/challenger")
    p.add_argument("--n-boot", type=count(0, N_BOOT_MAX), default=1000,
                   help="bootstrap resamples (CIs and the paired comparison; 0: none)")
    p.add_argument("--metrics", default=None, help="comma-separated MetricBank names (default: every reference-free metric)")
    p.add_argument("--promote-unvalidated", action="store_true",
                   help="let an evaluator whose cross-fitted agreement is not above chance become champion (its scores "
                        "are then marked unvalidated everywhere); default: it is stored but not promoted")


def _drift_opts(p: argparse.ArgumentParser) -> None:
    from autometrics.evaluators.continuous.drift import DriftThresholds  # light: no numpy at import

    d = DriftThresholds()
    g = p.add_argument_group(
        "drift and validity alerts",
        "Score drift compares consecutive windows of the champion's online scores with a reference window (its first "
        "online scores of traffic after the fit's data); a window is significant when a permutation test (Kolmogorov-"
        "Smirnov and Population Stability Index combined) says the distribution moved AND the PSI beyond its chance level "
        "says by at least --drift-psi, "
        "and an alert needs --drift-persistence significant windows in a row. "
        "Validity decay compares the champion's online scores with feedback that arrived after its fit: an alert when "
        "the tau on that feedback is below the fit's held-out tau beyond the noise of both (one-sided p below "
        "--validity-alpha), a warning when it is not significant.")
    g.add_argument("--drift-ks-alpha", type=fraction, default=d.ks_alpha, metavar="P",
                   help=f"a drift window needs a permutation p-value (KS and PSI combined) below P (default {d.ks_alpha:g}; lower = fewer alerts)")
    g.add_argument("--drift-psi", type=at_least(0), default=d.psi_alert, metavar="X",
                   help=f"... and a PSI at least X above its chance level (default {d.psi_alert:g}; rule of thumb: 0.1 moderate shift, 0.25 large)")
    g.add_argument("--drift-min-scores", type=count(2), default=d.min_scores, metavar="N",
                   help=f"no drift test with fewer than N scores on either side (default {d.min_scores})")
    g.add_argument("--drift-window", type=count(1), default=200, metavar="N",
                   help="online scores per drift window (consecutive, non-overlapping; default 200)")
    g.add_argument("--drift-reference-window", type=count(2), default=200, metavar="N",
                   help="the drift reference: the first N online scores of traces after the fit's data (default 200)")
    g.add_argument("--drift-persistence", type=count(1), default=d.persistence, metavar="K",
                   help=f"a drift alert needs K significant windows in a row (default {d.persistence})")
    g.add_argument("--drift-arl", type=count(100), default=10_000, metavar="N",
                   help="sequential detection (CUSUM on the score, each metric and the failed/empty rate, from the first "
                        "trace after the reference): its false-alarm budget, about N traces of unchanged traffic between "
                        "false alarms (default 10000; larger = fewer false alarms, later detection)")
    g.add_argument("--no-sequential-drift", action="store_true",
                   help="leave sequential detection off (the windowed test above still runs)")
    g.add_argument("--validity-alpha", type=fraction, default=d.validity_alpha, metavar="P",
                   help=f"validity-decay alert when the drop from the fit's tau has a one-sided p below P (default {d.validity_alpha:g})")
    g.add_argument("--validity-p", type=fraction, default=d.validity_p, metavar="P",
                   help=f"warn when the agreement on new feedback has a p-value above P (default {d.validity_p:g})")
    g.add_argument("--validity-min-n", type=count(3), default=d.validity_min_n, metavar="N",
                   help=f"no validity verdict on fewer than N new feedback points (default {d.validity_min_n})")
    g.add_argument("--validity-window", type=count(1), default=200, metavar="N",
                   help="newest feedback after the fit used for validity decay (default 200)")


def _rate(text: str) -> float:
    v = at_least(0)(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be greater than 0 and at most 1, got {v:g}")
    return v


def _http_url(text: str) -> str:
    if not text.strip().startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"must be an http(s) base URL such as http://127.0.0.1:8000/v1, got {text!r}")
    return text.strip().rstrip("/")


def _scoring_opts(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "online scoring with many workers and LLM judges",
        "Any number of workers may score one store: each claims a batch of traces with a lease, renewed while it scores, and "
        "a killed worker's batch goes to another worker once its lease ran out. Evaluators with LLM judges send them to the "
        "evaluator's OpenAI-compatible endpoint (or --judge-url); the sampling rate and the hourly budget are shared by all "
        "workers. Traces not sampled or over the budget get a record saying so and are not retried.")
    g.add_argument("--claim-lease", type=positive, default=120.0, metavar="S",
                   help="seconds a claimed batch stays with its worker without a renewal (renewed every S/3; default 120)")
    g.add_argument("--judge-sample-rate", type=_rate, default=1.0, metavar="R",
                   help="fraction of traces an evaluator with LLM judges scores, picked by trace id (default 1: every trace)")
    g.add_argument("--judge-calls-per-hour", type=count(0), default=0, metavar="N",
                   help="judge requests per hour for the champion, all workers together (default 0: no limit)")
    g.add_argument("--judge-tokens-per-hour", type=count(0), default=0, metavar="N",
                   help="judge prompt + completion tokens per hour, all workers together (default 0: no limit)")
    g.add_argument("--judge-concurrency", type=count(1), default=None, metavar="N",
                   help="traces judged at once by this worker (default: the evaluator's LLM setting)")
    g.add_argument("--judge-url", type=_http_url, default=None, metavar="URL",
                   help="OpenAI-compatible base URL for the judges (vLLM, llama.cpp, a hosted API; default: the evaluator's); "
                        "a key comes from $AUTOMETRICS_LLM_API_KEY")


def _scoring_options(args):
    from autometrics.evaluators.continuous.online import ScoringOptions

    return ScoringOptions(lease_seconds=args.claim_lease, judge_sample_rate=args.judge_sample_rate,
                          judge_calls_per_hour=args.judge_calls_per_hour or None,
                          judge_tokens_per_hour=args.judge_tokens_per_hour or None,
                          judge_concurrency=args.judge_concurrency, judge_url=args.judge_url)


def _drift_config(args) -> dict:
    """MonitorConfig fields from the drift flags (ValueError, exit 2, on a bad value)."""
    from autometrics.evaluators.continuous.drift import DriftThresholds

    for name in ("drift_window", "validity_window"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    th = DriftThresholds(ks_alpha=args.drift_ks_alpha, psi_alert=args.drift_psi, min_scores=args.drift_min_scores,
                         validity_min_n=args.validity_min_n, validity_p=args.validity_p, persistence=args.drift_persistence,
                         validity_alpha=args.validity_alpha)
    from autometrics.evaluators.continuous.sequential import SequentialSettings

    return {"drift": th, "drift_window": args.drift_window, "validity_window": args.validity_window,
            "reference_window": args.drift_reference_window,
            "sequential": None if args.no_sequential_drift else SequentialSettings(arl=args.drift_arl)}


def add_commands(subparsers) -> None:
    """Register the commands on ``autometrics``' sub-parsers."""
    w = subparsers.add_parser("worker", help="continuous evaluation service: scheduled refits, online scoring, drift, dashboard")
    _common(w)
    _fit_opts(w)
    w.add_argument("--refit-interval", type=at_least(0), default=3600.0, help="refit every S seconds when there is new feedback (0: off)")
    w.add_argument("--min-new-feedback", type=count(0), default=50, help="also refit as soon as N new feedback points arrived (0: off)")
    w.add_argument("--poll", type=positive, default=30.0, help="how often the new-feedback trigger checks (seconds)")
    w.add_argument("--score-interval", type=positive, default=60.0, help="score new traces every S seconds")
    w.add_argument("--batch-size", type=count(1), default=256, help="traces per scoring batch")
    w.add_argument("--settle-seconds", type=at_least(0), default=5.0, help="leave traces younger than this for the next round")
    _scoring_opts(w)
    w.add_argument("--dashboard", default=None, help="dashboard HTML to rewrite after each job (default: beside a SQLite store)")
    w.add_argument("--langfuse", choices=["auto", "on", "off"], default="auto", help="push scores/warnings to Langfuse")
    w.add_argument("--phoenix", default=None, metavar="URL",
                   help="an Arize Phoenix project (phoenix+http://host:6006/<project>): its spans and span annotations are "
                        "read into the store before each job, and scores, rationales and warnings are written back as span "
                        "annotations on each trace's root span (PHOENIX_API_KEY when set)")
    w.add_argument("--read-langfuse", nargs="?", const="", default=None, metavar="URL",
                   help="read the Langfuse project's traces and its scores under the --target names into the store before "
                        "each job (keys from LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY; URL: langfuse+https://host, default "
                        "LANGFUSE_BASE_URL); with --langfuse on|auto the evaluator's scores go back as Langfuse scores")
    w.add_argument("--langfuse-max-attempts", type=count(1), default=10, metavar="N",
                   help="failed Langfuse deliveries of a trace's scores (or of an alert) before giving up on it; a trace "
                        "counts as pushed only once Langfuse acknowledged it, a failed one is retried next cycle (default 10)")
    _drift_opts(w)
    w.add_argument("--once", action="store_true", help="run refit (if due), scoring, drift and dashboard once, then exit")
    w.add_argument("--run-for", type=positive, default=None, help="stop after S seconds (default: until SIGINT/SIGTERM)")
    w.add_argument("--no-jobstore", action="store_true", help="keep APScheduler jobs in memory instead of the store's database")

    bf = subparsers.add_parser("backfill", help="score every unscored trace with the current evaluator on a Dask cluster")
    _common(bf)
    bf.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="a running Dask scheduler (tcp://host:8786); default a local cluster of --workers processes")
    bf.add_argument("--workers", type=count(1), default=None, help="local cluster size (default: one per core)")
    bf.add_argument("--batch-size", type=count(1), default=20_000,
                    help="traces claimed, scored on the cluster and stored per round (default 20000)")
    bf.add_argument("--settle-seconds", type=at_least(0), default=5.0, help="leave traces younger than this to the worker")
    r = subparsers.add_parser("refit", help="refit now: fit a challenger and promote it only if it beats the champion")
    _common(r)
    _fit_opts(r)
    r.add_argument("--force", action="store_true", help="refit even without new feedback")

    v = subparsers.add_parser("versions", help="list, show, compare and roll back evaluator versions")
    vs = v.add_subparsers(dest="versions_command")
    vl = vs.add_parser("list", help="every version with its status, held-out tau, CI, p-value and n")
    _common(vl)
    vl.add_argument("--json", action="store_true", help="print the versions as a JSON list (statistics included)")
    vsh = vs.add_parser("show", help="a version's statistics; --out writes its evaluator.json and report.md")
    _common(vsh)
    vsh.add_argument("number", type=count(1, what="a version number"), metavar="N",  # not "version": that dest is autometrics --version
                     help="version number (v1 is 1), as `autometrics versions list` prints it")
    vsh.add_argument("--out", default=None, help="folder to write the version's evaluator.json and report.md into")
    vc = vs.add_parser("compare", help="two versions on the newest held-out feedback (paired bootstrap of the tau difference)")
    _common(vc)
    vc.add_argument("a", type=count(1, what="a version number"), help="version number of the baseline (in the champion's place)")
    vc.add_argument("b", type=count(1, what="a version number"), help="version number compared with it (in the challenger's place)")
    vc.add_argument("--holdout", type=fraction, default=0.3, help="fraction of the newest feedback compared on (default 0.3)")
    vc.add_argument("--n-boot", type=count(0, N_BOOT_MAX), default=1000,
                    help="bootstrap resamples of the paired tau difference (0: no CI; default 1000)")
    vr = vs.add_parser("rollback", help="make version N the champion again")
    _common(vr)
    vr.add_argument("number", type=count(1, what="a version number"), metavar="N",
                    help="version number to make champion, as `autometrics versions list` prints it")

    d = subparsers.add_parser("dashboard", help="write the built-in dashboard (static HTML), or serve it on 127.0.0.1")
    _common(d, target_required=False)  # required to write a page; --serve serves every target
    d.add_argument("--out", default=None, help="HTML file (default: beside a SQLite store)")
    d.add_argument("--serve", action="store_true",
                   help="serve the dashboards of every project and target in the store (pages rendered per request: "
                        "overview, traces with filters, trace view) until Ctrl-C")
    d.add_argument("--host", default="127.0.0.1", help="with --serve: address to bind (default: loopback only)")
    d.add_argument("--port", type=port, default=8765, help="with --serve: port (default 8765)")

    m = subparsers.add_parser("demo", help="the whole loop on built-in data: traces, feedback, refits, online scoring, dashboard")
    m.add_argument("--no-llm", action="store_true", help="LLM-free fit (MetricBank + NNLS)")
    m.add_argument("--out", default="autometrics-demo", help="folder for the demo's trace store and dashboard")
    m.add_argument("--seed", type=seed, default=0, help="random seed of the replay order, splits and bootstrap (default 0)")
    m.add_argument("--n-boot", type=count(0, N_BOOT_MAX), default=500,
                   help="bootstrap resamples for confidence intervals (0: none; default 500)")
    m.add_argument("--serve", action="store_true", help="serve the dashboard on 127.0.0.1 afterwards until Ctrl-C")
    m.add_argument("--shuffle-feedback", action="store_true",
                   help="null check: move the ratings between inputs before recording them (no signal left); "
                        "nothing should be promoted")
    m.add_argument("--promote-unvalidated", action="store_true",
                   help="let an evaluator that is not validated become champion (its scores are marked unvalidated)")
    m.add_argument("--port", type=port, default=8765, help="with --serve: port (default 8765)")


#: the trace store `autometrics demo` writes with its default --out, relative to the folder it ran in
DEMO_STORE = Path("autometrics-demo") / "traces.db"


def _existing_store(url: str | None) -> tuple[str | None, bool]:
    """The store URL of a command that only reads the store (refit, versions, dashboard, backfill)
    and whether it is the demo's.  A SQLite file that does not exist is an error naming it (opening
    it would create an empty store and report "no versions"), never a new file.  When no store is
    named (no --store, no $AUTOMETRICS_STORE_URL) and the default one does not exist, the store of
    `autometrics demo` run in this folder (./autometrics-demo/traces.db) is read, and a note on
    stderr says so: a newcomer's first command after the demo finds it.  The worker and demo
    create their store."""
    import os

    from autometrics.collectors.store import default_store_url

    from .store_source import StoreFileMissing, store_url_of

    given = url or default_store_url()
    try:
        return store_url_of(given) or url, False
    except StoreFileMissing as exc:  # the message names the file and the URL forms
        if not url and not os.environ.get("AUTOMETRICS_STORE_URL") and DEMO_STORE.is_file():
            return f"sqlite:///{DEMO_STORE.resolve()}", True
        hint = " (the default store; pass --store URL or set AUTOMETRICS_STORE_URL)" if not url else ""
        raise type(exc)(f"{exc}{hint} Capture traces first, or point --store at the store your app writes to "
                        f"(`autometrics demo` writes one: --store {DEMO_STORE} from the folder it ran in).") from None


def _monitor(args, *, create: bool = False, scope: str | None = "target", **over):
    """The command's Monitor.  A command that only reads the store refuses a --project (and, with
    ``scope="target"``, a --target) naming nothing in it, saying what it holds (see
    :func:`~autometrics._cli.store_source.check_scope`); ``scope=None`` checks neither."""
    import os

    from autometrics.collectors.files import data_path
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from autometrics.metricbank.errors import UserError

    from ..demo import DEMO_PROJECT

    if args.store is not None and not args.store.strip():
        raise UserError("--store is empty; pass a store URL (an empty shell variable?) or leave the flag out.")
    url, demo = (args.store, False) if create else _existing_store(args.store)
    project = project_name(args.project)
    if demo:
        if not args.project and not os.environ.get("AUTOMETRICS_PROJECT"):
            project = DEMO_PROJECT
        print(f"note: no trace store at the default path ({data_path('traces.db')}); reading {DEMO_STORE}, the store "
              f"`autometrics demo` writes, in this folder (project {project!r}). Pass --store URL (and --project) to read "
              "another.", file=sys.stderr)
    cfg = MonitorConfig(target=args.target, project=project,
                        task=getattr(args, "task", None) or os.environ.get("AUTOMETRICS_TASK"))
    if hasattr(args, "no_llm"):
        cfg.llm_config = None if args.no_llm else "auto"
        cfg.min_feedback = args.min_feedback
        cfg.holdout_fraction = args.holdout
        cfg.n_boot = args.n_boot
        cfg.metrics = [x.strip() for x in args.metrics.split(",")] if args.metrics else None
        cfg.promote_unvalidated = args.promote_unvalidated
    for k, val in over.items():
        setattr(cfg, k, val)
    mon = Monitor(url, cfg)
    if not create and scope:
        from .store_source import check_scope

        try:
            check_scope(mon.store, cfg.project, cfg.target if scope == "target" else None)
        except BaseException:
            mon.store.dispose()
            raise
    return mon


def _fmt_stats(s: dict) -> str:
    if not s or s.get("tau") is None:
        return f"tau undefined (n={s.get('n') if s else 0})"
    return (f"tau {s['tau']:.3f} [{s['ci_low'] if s['ci_low'] is None else format(s['ci_low'], '.3f')}, "
            f"{s['ci_high'] if s['ci_high'] is None else format(s['ci_high'], '.3f')}] p={s['p_value']:.2g} n={s['n']}")


def cmd_worker(args) -> int:
    from autometrics.evaluators.continuous.worker import Worker, WorkerOptions, dashboard_default

    if args.dashboard:
        from .checks import check_page_path

        check_page_path(args.dashboard, flag="--dashboard")
    mon = _monitor(args, create=True, batch_size=args.batch_size, settle_seconds=args.settle_seconds, **_drift_config(args))
    from autometrics.dashboards.publish import default_publishers

    opts = WorkerOptions(refit_interval=args.refit_interval or None, min_new_feedback=args.min_new_feedback or None, poll=args.poll,
                         score_interval=args.score_interval, jobstore=not args.no_jobstore, scoring=_scoring_options(args))
    dashboard = args.dashboard or str(dashboard_default(mon.store, mon.cfg.project, mon.cfg.target))
    # no echo publisher: each job's line comes from the worker's own log (below), which also has failed jobs
    pubs = default_publishers(dashboard=dashboard, langfuse=args.langfuse, langfuse_max_attempts=args.langfuse_max_attempts,
                              phoenix=args.phoenix)
    sources = []
    if args.phoenix:  # read the Phoenix project's spans and annotations before each job
        from autometrics.collectors.phoenix import PhoenixSource

        sources.append(PhoenixSource(args.phoenix, project=mon.cfg.project))
    if args.read_langfuse is not None:  # and Langfuse's traces and scores
        from autometrics.collectors.langfuse_source import LangfuseSource, langfuse_api, parse_langfuse_url

        base = parse_langfuse_url(args.read_langfuse) if args.read_langfuse else None
        langfuse_api(base)  # no keys: a clear error now, not a failing pull in every job
        sources.append(LangfuseSource(base, project=mon.cfg.project, names=[mon.cfg.target]))
    w = Worker(mon.store, mon.cfg, opts, publishers=pubs, sources=sources)
    print(f"worker: store {mon.store.shown_url}, project {mon.cfg.project!r}, target {mon.cfg.target!r}; dashboard {dashboard}", flush=True)
    with _job_log():
        if args.once:
            out = w.run_once()
            print(out["refit"])
            print(f"scored {out.get('scored', 0)} traces; {len(out.get('alerts') or [])} new alert(s)")
            return 0
        w.start(blocking=True, run_for=args.run_for)
    return 0


@contextlib.contextmanager
def _job_log():
    """The worker's one line per job (``autometrics.worker`` at INFO: what it refit, scored, pushed,
    alerted) on stderr with a timestamp, without ``-v``: the CLI's root logger shows only
    warnings, which would hide them.  Restored afterwards (``main()`` may run again in-process)."""
    wlog = logging.getLogger("autometrics.worker")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = (wlog.level, wlog.propagate)
    if wlog.getEffectiveLevel() > logging.INFO:  # -v (DEBUG) stays
        wlog.setLevel(logging.INFO)
    wlog.propagate = False  # its records once, through this handler
    wlog.addHandler(handler)
    try:
        yield
    finally:
        wlog.removeHandler(handler)
        wlog.setLevel(saved[0])
        wlog.propagate = saved[1]


def cmd_refit(args) -> int:
    mon = _monitor(args)
    out = mon.refit(force=args.force)
    print(out)
    for a in out.alerts:
        print(f"alert ({a['kind']}): {a['message']}")
    return 0 if out.outcome in ("promoted", "rejected", "skipped") else 1


def cmd_versions(args) -> int:
    if not args.versions_command:
        print("error: name a subcommand: autometrics versions {list,show,compare,rollback} --target NAME "
              "(see `autometrics versions --help`)", file=sys.stderr)
        return 2
    if getattr(args, "out", None):
        from .checks import check_out_folder

        check_out_folder(args.out, ["evaluator.json", "report.md"])
    mon = _monitor(args)
    from autometrics.dashboards import figures as fig

    if args.versions_command == "list":
        vs = mon.versions()
        if args.json:
            def row(x):
                st = x["statistics"]
                return ({k: v for k, v in x.items() if k != "statistics"}
                        | {"heldout": st.get("holdout") or {}, "fit_test": (st.get("fit") or {}).get("test") or {},
                           "live_validity": st.get("live_validity") or {}, "validity": fig.validity(x),
                           "computed_on": {"heldout": fig.holdout(x)[1], "fit_test": fig.fit_test(x)[1], "live_validity": fig.live(x)[1]}})

            print(json.dumps([row(x) for x in vs], default=str, indent=1))
            return 0
        if not vs:  # the project has this feedback (else _monitor refused the flags): none fitted yet
            import shlex

            flags = f"--target {shlex.quote(mon.cfg.target)} --project {shlex.quote(mon.cfg.project)}" + (
                f" --store {shlex.quote(args.store)}" if args.store else "")
            print(f"no evaluator versions for target {mon.cfg.target!r} in project {mon.cfg.project!r} yet; "
                  f"`autometrics refit {flags}` fits the first (or `autometrics worker` does, once enough feedback arrived)")
            return 0
        print(f"{'ver':>4}  {'status':<9} {'method':<16} {'n':>5}  {'validated':<9}  "
              f"{'on the ' + fig.HOLDOUT + ' (champion/challenger)':<56} {'on the ' + fig.FIT_TEST + ' or ' + fig.FIT_CROSS:<44} reason")
        for x in vs:
            ok = "yes" if fig.validity(x).get("validated") else "NO"
            print(f"{'v' + str(x['version']):>4}  {x['status']:<9} {x['method'] or '':<16} {x['n_feedback'] or 0:>5}  {ok:<9}  "
                  f"{_fmt_stats(fig.holdout(x)[0]):<56} {_fmt_stats(fig.fit_test(x)[0]):<44} {x['reason'] or ''}")
        return 0
    if args.versions_command == "show":
        x = mon.version(args.number)
        print("\n".join(fig.version_lines(x, fmt=_fmt_stats)))
        if args.out:
            from autometrics.evaluators.evaluator import Evaluator

            out = Path(args.out)
            report = mon.store.version_report(x["id"])
            Evaluator(x["artifact"]).save(out / "evaluator.json", beside={out / "report.md": report or ""})
            print(f"  wrote {out / 'evaluator.json'}, {out / 'report.md'}")
        return 0
    if args.versions_command == "compare":
        a, b, cmp = mon.compare_versions(args.a, args.b, holdout=args.holdout, n_boot=args.n_boot)
        print(f"on the newest {cmp.n} held-out feedback points of {mon.cfg.target!r}:")
        print(f"  v{a['version']} ({a['status']}): {_fmt_stats(cmp.champion)}")
        print(f"  v{b['version']} ({b['status']}): {_fmt_stats(cmp.challenger)}")
        if cmp.delta is not None and cmp.ci_low is not None:
            verdict = ("better" if cmp.ci_low > 0 else "worse" if cmp.ci_high < 0 else "not different beyond noise")
            print(f"  tau(v{b['version']}) - tau(v{a['version']}) = {cmp.delta:+.3f}, 95% CI [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}]: "
                  f"v{b['version']} is {verdict}")
        print("  (these feedback points may overlap either version's training data; the stored held-out figures do not)")
        return 0
    if args.versions_command == "rollback":
        x = mon.rollback(args.number)
        print(f"v{x['version']} is the champion again")
        return 0
    return 2


def cmd_backfill(args) -> int:
    """Claim and score the champion's unscored traces in rounds of --batch-size on a Dask cluster:
    the same claims as the workers take (a worker running meanwhile never scores a trace twice)
    and the same rows stored (contributions, rationales)."""
    import math
    import time

    from autometrics.evaluators.continuous.online import ScoringOptions, score_new
    from autometrics.evaluators.distributed import check_partitionable, engine, score_texts
    from autometrics.metricbank.errors import UserError

    mon = _monitor(args, batch_size=args.batch_size, settle_seconds=args.settle_seconds)
    champ = mon.champion()
    if champ is None:
        raise UserError(f"no evaluator for target {mon.cfg.target!r} in project {mon.cfg.project!r} yet: run `autometrics refit`")
    check_partitionable(mon.champion_evaluator()[1])
    started = time.perf_counter()
    with engine(args.scheduler, args.workers) as client:
        n = len(client.scheduler_info()["workers"])
        print(f"backfill of v{champ['version']} on Dask ({args.scheduler or f'a local cluster of {n} worker process(es)'})",
              flush=True)
        opts = ScoringOptions(scorer=lambda ev, outs, ins: score_texts(ev, outs, ins, client=client))
        res = score_new(mon.store, mon.cfg, champ, limit_batches=math.ceil(1e12 / args.batch_size), options=opts)
    secs = time.perf_counter() - started
    print(f"scored {res.scored} trace(s), {res.written} record(s) stored ({res.no_output} without output) in {secs:.1f} s")
    return 0


def cmd_dashboard(args) -> int:
    from autometrics.evaluators.continuous.worker import dashboard_default

    if args.out is not None and not args.serve:
        from .checks import check_page_path

        check_page_path(args.out)  # FILE.html, or a folder that gets dashboard.html
    if args.target is None and not args.serve:
        from autometrics.metricbank.errors import UserError

        raise UserError("dashboard needs --target NAME (the feedback name the evaluator predicts) to write a page; "
                        "--serve serves every project and target of the store without it")
    # a project's traces make a dashboard before any feedback; the served app shows every project
    mon = _monitor(args, scope=None if args.serve else "project")
    if args.serve:
        _serve(mon.store, args.host, args.port, mon.cfg.project, mon.cfg.target, task=mon.cfg.task)
        return 0
    from autometrics.dashboards.render import write_dashboard

    path = write_dashboard(mon, args.out or dashboard_default(mon.store, mon.cfg.project, mon.cfg.target))
    print(f"wrote {path}\nopen {path.resolve().as_uri()}")
    return 0


def cmd_demo(args) -> int:
    from ..demo import DEMO_PROJECT, TARGET, run_demo
    from .checks import check_out_folder

    out = check_out_folder(args.out, ["traces.db", "dashboard.html"])
    _not_a_real_store(out / "traces.db", DEMO_PROJECT)
    res = run_demo(args.out, no_llm=args.no_llm, seed=args.seed, n_boot=args.n_boot, shuffle_feedback=args.shuffle_feedback,
                   promote_unvalidated=args.promote_unvalidated)
    if args.serve:
        _serve(f"sqlite:///{res['store']}", "127.0.0.1", args.port, DEMO_PROJECT, TARGET, title="AutoMetrics demo (SimpEval)")
    return 0


def _serve(store, host: str, port: int, project: str, target: str | None, **kw) -> None:
    """Serve the dashboard app (every project and target of the store) until Ctrl-C."""
    from autometrics.dashboards.app import serve
    from autometrics.dashboards.pages import scope_href

    shown = "localhost" if host in ("127.0.0.1", "::1", "localhost") else host
    this = f" — this target: http://{shown}:{port}{scope_href(project, target)}" if target is not None else ""
    print(f"serving the dashboards on http://{shown}:{port}/{this} (Ctrl-C to stop)", flush=True)
    serve(store, host=host, port=port, **kw)


def _not_a_real_store(db, demo_project: str) -> None:
    """The demo deletes and re-creates ``--out/traces.db``: refuse when that file is anything but
    an earlier demo's store (an app's real trace store must never be replaced by the demo)."""
    import sqlite3

    from autometrics.metricbank.errors import UserError

    db = Path(db)
    if not db.exists():
        return
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            projects = {r[0] for r in conn.execute("SELECT DISTINCT project FROM spans LIMIT 20")}
        finally:
            conn.close()
    except sqlite3.Error:
        projects = None
    if projects is None or projects - {demo_project}:
        others = sorted(projects - {demo_project}) if projects else []
        what = f"a trace store with project(s) {', '.join(map(repr, others))}" if others else "a file that is not a demo store"
        raise UserError(f"--out {db.parent} holds {db.name}, {what}; the demo replaces that file. Choose another --out "
                        "(the default is ./autometrics-demo).")


HANDLERS = {"worker": cmd_worker, "refit": cmd_refit, "versions": cmd_versions, "dashboard": cmd_dashboard, "demo": cmd_demo,
            "backfill": cmd_backfill}
