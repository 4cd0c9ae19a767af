"""Scale-out on one Postgres: online-scoring throughput with 1, 2 and 4 workers, and collector
ingest with 1 and 2 collectors.

Every worker and collector is a separate process (``autometrics worker --once`` /
``autometrics collector serve``) on one Postgres database:

- **MetricBank scoring** (CPU-bound): a champion fitted LLM-free on 220 labelled SimpEval traces
  (``Monitor.refit``), then ``--traces`` unlabelled traces (default 2,150, the issue's case);
  k workers started at once each run ``worker --once`` (refit check, claim-and-score until nothing
  is left, drift check, dashboard).  Wall = first start to last exit (process start-up, about
  2-4 s of imports here, included); scoring phase = earliest worker's ``job refit`` log line (it
  starts scoring right after) to the last stored score.  Scores are deleted between runs.
- **LLM-judge scoring** (I/O-bound): a champion with two generated judges and FKGL, the judges
  answered by ``tests/fake_llm_server.py`` with ``--judge-latency`` seconds per request
  (``--judge-concurrency`` traces in flight per worker), on ``--judge-traces`` traces.
- **Collector ingest**: ``--spans`` spans in OTLP/HTTP protobuf+gzip requests of 100 from 4
  keep-alive client threads, sent to 1 collector, then split over 2 collectors (each client thread
  sticks to one); acknowledged spans/s, and stored == acknowledged is checked.

Each run checks that every trace got exactly one score record and that the sum of the
records the workers report equals the trace count (duplicate work would be counted twice).
The load generator, the fake judge server, Postgres and all workers share this machine's CPUs.

    . /tmp/pg_env.sh   # or AUTOMETRICS_TEST_POSTGRES_URL=postgresql+psycopg://...
    python tests/benchmarks/scale_out.py [--traces 2150] [--judge-traces 400] [--spans 20000] [--workers 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
CLI = [sys.executable, "-m", "autometrics._cli.main"]
PROJECT, TARGET = "bench", "score"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGFUSE_")}
    env.update(extra)
    return env


def _rows(n: int, seed: int):
    from monitor_data import simpeval

    df = simpeval()
    reps = -(-n // len(df))
    import pandas as pd

    out = pd.concat([df.assign(id=df["id"].astype(str) + f"#{r}") for r in range(reps)]).head(n).reset_index(drop=True)
    return out.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def _clear_scores(store, evaluator_id: str) -> None:
    import sqlalchemy as sa

    with store.engine.begin() as c:  # a benchmark reset, not product code
        c.execute(sa.text("DELETE FROM trace_scores WHERE evaluator_id = :e"), {"e": evaluator_id})
        c.execute(sa.text("DELETE FROM score_claims WHERE evaluator_id = :e"), {"e": evaluator_id})


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PgCpu:
    """CPU seconds the Postgres backends serving one database used while sampling (a thread reads
    their /proc counters every 0.1 s; a backend that exits between two reads loses at most its
    last 0.1 s).  The server must run on this machine."""

    def __init__(self, url: str):
        import threading

        import sqlalchemy as sa

        self.engine = sa.create_engine(url)
        self.db = sa.engine.make_url(url).database
        self.seen: dict[int, tuple[float, float]] = {}  # pid -> (first reading, last reading)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import sqlalchemy as sa

        with self.engine.connect() as c:
            me = c.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            while True:
                pids = [r[0] for r in c.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid <> :me"),
                                                {"d": self.db, "me": me})]
                c.rollback()
                for pid in pids:
                    try:
                        v = _proc_cpu(pid)
                    except (OSError, IndexError, ValueError):
                        continue
                    first = self.seen.get(pid, (v, v))[0]
                    self.seen[pid] = (first, v)
                if self._stop.wait(0.1):
                    return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        self.engine.dispose()

    @property
    def seconds(self) -> float:
        return sum(b - a for a, b in self.seen.values())


def _wait_cpu(procs) -> list[float]:
    """Wait for every process; its CPU seconds (user + system, from the kernel's accounting of the
    child), a figure the machine's other load does not inflate the way it does wall time."""
    cpu = {}
    while len(cpu) < len(procs):
        pid, status, ru = os.wait4(-1, 0)
        for p in procs:
            if p.pid == pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                cpu[pid] = ru.ru_utime + ru.ru_stime
    return [cpu[p.pid] for p in procs]


def run_workers(url: str, k: int, tmp: Path, extra: list[str], env: dict) -> dict:
    """k ``worker --once`` processes at once; wall seconds, scoring-phase seconds, records and CPU
    seconds per worker."""
    logs = [tmp / f"w{k}-{i}-{uuid.uuid4().hex[:6]}.log" for i in range(k)]
    cmd = [*CLI, "worker", "--store", url, "--project", PROJECT, "--target", TARGET, "--no-llm", "--once", "--min-new-feedback", "0",
           "--settle-seconds", "0", "--langfuse", "off", *extra]
    t0 = time.time()
    me0 = time.process_time()
    with PgCpu(url) as pg:
        procs = [subprocess.Popen(cmd + ["--dashboard", str(tmp / f"d{i}.html")],
                                  env={**env, "AUTOMETRICS_LLM_CACHE": str(logs[i]) + ".cache"},
                                  stdout=open(logs[i], "w"), stderr=subprocess.STDOUT) for i in range(k)]  # noqa: SIM115
        cpu = _wait_cpu(procs)
    wall = time.time() - t0
    texts = [x.read_text() for x in logs]
    bad = [(i, p.returncode, texts[i][-1500:]) for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise SystemExit(f"a worker failed: {bad}")
    starts = []
    for t in texts:
        m = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*job refit", t, flags=re.M)
        if m:
            starts.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    written = [int(m.group(1)) if (m := re.search(r"^scored (\d+) traces", t, flags=re.M)) else 0 for t in texts]
    return {"wall_s": wall, "start_s": min(starts) - t0 if starts else None, "records_per_worker": written,
            "cpu_s_per_worker": [round(c, 2) for c in cpu], "postgres_cpu_s": round(pg.seconds, 2),
            "this_process_cpu_s": round(time.process_time() - me0, 2), "_t_start": min(starts) if starts else t0}


def scoring_series(url: str, store, eid: str, n: int, ks: list[int], tmp: Path, extra: list[str], env: dict, label: str) -> list[dict]:
    import sqlalchemy as sa

    out = []
    for k in ks:
        _clear_scores(store, eid)
        r = run_workers(url, k, tmp, extra, env)
        with store.engine.connect() as c:
            cnt, distinct, last = c.execute(sa.text("SELECT COUNT(*), COUNT(DISTINCT trace_id), MAX(scored_at_ns) FROM trace_scores "
                                                    "WHERE evaluator_id = :e"), {"e": eid}).one()
        phase = last / 1e9 - r.pop("_t_start")
        row = {"workers": k, **r, "scoring_phase_s": phase, "traces": n, "records": cnt, "distinct_traces": distinct,
               "traces_per_s_wall": n / r["wall_s"], "traces_per_s_phase": n / phase, "cpu_s": sum(r["cpu_s_per_worker"])}
        ok = cnt == distinct == n and sum(r["records_per_worker"]) == n
        row["exactly_once"] = bool(ok)
        out.append(row)
        print(f"  {label}: {k} worker(s): wall {r['wall_s']:.1f} s, scoring phase {phase:.1f} s = {n / phase:,.0f} traces/s; "
              f"records per worker {r['records_per_worker']}; CPU s per worker {r['cpu_s_per_worker']}, Postgres {r['postgres_cpu_s']}, "
              f"this process (judge server) {r['this_process_cpu_s']}; "
              f"each trace once: {'yes' if ok else 'NO'}", flush=True)
    idle = run_workers(url, 1, tmp, extra, env)  # everything is scored now: what a worker costs without work
    fixed, pg_fixed = idle["cpu_s_per_worker"][0], idle["postgres_cpu_s"]
    base = out[0]
    for row in out:
        row["speedup_wall"] = base["wall_s"] / row["wall_s"]
        row["speedup_phase"] = base["scoring_phase_s"] / row["scoring_phase_s"]
        row["scoring_cpu_s"] = max(1e-9, row["cpu_s"] - row["workers"] * fixed)
        row["scoring_postgres_cpu_s"] = max(0.0, row["postgres_cpu_s"] - row["workers"] * pg_fixed)
        row["traces_per_worker_cpu_s"] = n / row["scoring_cpu_s"]
        row["traces_per_postgres_cpu_s"] = n / max(1e-9, row["scoring_postgres_cpu_s"])
    print(f"  {label}: a worker with nothing to score uses {fixed:.1f} CPU s (start-up, refit check, drift, dashboard) and "
          f"{pg_fixed:.1f} Postgres CPU s; scoring CPU beyond that: " + ", ".join(
              f"{r['workers']} worker(s) {r['scoring_cpu_s']:.1f} s in workers ({r['traces_per_worker_cpu_s']:,.0f} traces per CPU s) + "
              f"{r['scoring_postgres_cpu_s']:.1f} s in Postgres" for r in out), flush=True)
    return {"runs": out, "idle_worker_cpu_s": fixed, "idle_worker_postgres_cpu_s": pg_fixed}


def bank_champion(store) -> str:
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from monitor_data import simpeval, write_traces

    write_traces(store, simpeval(220), project=PROJECT)
    mon = Monitor(store, MonitorConfig(target=TARGET, project=PROJECT, settle_seconds=0, n_boot=100))
    out = mon.refit()
    assert out.outcome == "promoted", out
    return mon.champion()["id"]


def judge_champion(store, llm_url: str) -> str:
    from test_scale_out import judge_champion as fit

    return fit(store, llm_url, project=PROJECT)["id"]


def _send(ports: list[int], jobs: list[bytes], clients: int) -> tuple[int, float, int]:
    """Send the OTLP bodies (100 spans each) over ``clients`` keep-alive connections, client w to
    collector w mod n: (acknowledged spans, seconds, failed requests)."""
    from collector_throughput import run_load

    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    return run_load(list(ports), [("/v1/traces", body, headers, 100) for body in jobs], clients)


def collector_series(url: str, spans: int, tmp: Path, env: dict) -> list[dict]:
    from autometrics.collectors.store import TraceStore
    from collector_throughput import otlp_body  # the request shape of the one-collector SQLite benchmark

    out = []
    for n_col in (1, 2):
        store = TraceStore(url)
        before = store.count("spans")
        procs, ports = [], []
        for c in range(n_col):
            log = tmp / f"col{n_col}-{c}.log"
            p = subprocess.Popen([*CLI, "collector", "serve", "--store", url, "--port", "0", "--no-auth", "--langfuse", "off"],
                                 env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
            deadline = time.time() + 60
            while "listening on" not in log.read_text() and time.time() < deadline:
                time.sleep(0.1)
            ports.append(int(re.search(r"http://127\.0\.0\.1:(\d+)", log.read_text()).group(1)))
            procs.append(p)
        jobs = [otlp_body(100, 1_000_000 * n_col + s) for s in range(spans // 100)]  # fresh trace ids per run
        cpu0, me0 = [_proc_cpu(p.pid) for p in procs], time.process_time()
        with PgCpu(url) as pg:
            acked, secs, errors = _send(ports, jobs, 4)
        cpu = [_proc_cpu(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
        gen = time.process_time() - me0
        for p in procs:
            p.terminate()
        _wait_cpu(procs)
        stored = store.count("spans") - before
        store.dispose()
        row = {"collectors": n_col, "spans_acknowledged": acked, "seconds": secs, "spans_per_s": acked / secs,
               "stored": stored, "errors": errors, "stored_equals_acknowledged": stored == acked,
               "cpu_s_per_collector": [round(c, 2) for c in cpu], "spans_per_collector_cpu_s": acked / max(1e-9, sum(cpu)),
               "postgres_cpu_s": round(pg.seconds, 2), "load_generator_cpu_s": round(gen, 2)}
        out.append(row)
        print(f"  {n_col} collector(s): {acked} spans acknowledged in {secs:.2f} s = {acked / secs:,.0f} spans/s; "
              f"stored {stored}; errors {errors}; CPU s: collectors {row['cpu_s_per_collector']} "
              f"({row['spans_per_collector_cpu_s']:,.0f} spans per collector CPU s), Postgres {row['postgres_cpu_s']}, "
              f"load generator {row['load_generator_cpu_s']}", flush=True)
    out[1]["ratio_to_1"] = out[1]["spans_per_s"] / out[0]["spans_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg-url", default=os.environ.get("AUTOMETRICS_TEST_POSTGRES_URL"), help="Postgres server (a fresh database is made)")
    ap.add_argument("--traces", type=int, default=2150)
    ap.add_argument("--judge-traces", type=int, default=400)
    ap.add_argument("--judge-latency", type=float, default=0.05)
    ap.add_argument("--judge-concurrency", type=int, default=2)
    ap.add_argument("--spans", type=int, default=20_000)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: bank,judge,collector")
    ap.add_argument("--out", default=str(HERE / "results" / "scale_out.json"))
    args = ap.parse_args()
    if not args.pg_url:
        raise SystemExit("needs a Postgres server: set AUTOMETRICS_TEST_POSTGRES_URL (`. /tmp/pg_env.sh`, .ci/postgres.sh) or --pg-url")
    os.environ.setdefault("AUTOMETRICS_TEST_POSTGRES_URL", args.pg_url)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from autometrics.collectors.store import TraceStore
    from fake_llm_server import FakeLLMServer
    from monitor_data import write_traces
    from pg_databases import fresh_pg_database

    ks = [int(x) for x in args.workers.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    tmp = Path(tempfile.mkdtemp(prefix="am-scale-out-"))
    env = _env(AUTOMETRICS_HOME=str(tmp / "home"))
    load = os.getloadavg()
    result: dict = {"cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load],
                    "note": "every process (workers, collectors, Postgres, load generator, fake judge server) on this machine; "
                            "other jobs were running on it too (see loadavg_at_start)"}
    print(f"scale-out on one Postgres ({os.cpu_count()} CPUs, load average at start {load[0]:.1f}); every process on this machine",
          flush=True)
    if "bank" not in skip:
        url = fresh_pg_database()
        store = TraceStore(url)
        eid = bank_champion(store)
        write_traces(store, _rows(args.traces, 1), project=PROJECT, t0_ns=10**15, feedback=False)
        n = args.traces + 220
        print(f"MetricBank champion ({', '.join(f['feature'] for f in store.champion(PROJECT, TARGET)['artifact']['features'])}), "
              f"{n} traces to score:", flush=True)
        result["metricbank"] = scoring_series(url, store, eid, n, ks, tmp, [], env, "MetricBank")
        store.dispose()
    if "judge" not in skip:
        url = fresh_pg_database()
        store = TraceStore(url)
        with FakeLLMServer() as fit_srv:
            eid = judge_champion(store, fit_srv.url)
        write_traces(store, _rows(args.judge_traces, 2), project=PROJECT, t0_ns=10**15, feedback=False)
        with FakeLLMServer(delay=args.judge_latency) as srv:
            print(f"LLM-judge champion (2 judges + FKGL), {args.judge_traces} traces, judge latency {args.judge_latency:g} s, "
                  f"{args.judge_concurrency} trace(s) in flight per worker:", flush=True)
            extra = ["--judge-url", srv.url, "--judge-concurrency", str(args.judge_concurrency)]
            result["judge"] = scoring_series(url, store, eid, args.judge_traces, ks, tmp, extra, env, "LLM judges")
            result["judge_requests"] = len(srv.requests)
        result["judge_setup"] = {"latency_s": args.judge_latency, "concurrency_per_worker": args.judge_concurrency, "judges": 2}
        store.dispose()
    if "collector" not in skip:
        url = fresh_pg_database()
        TraceStore(url).dispose()
        print(f"collector ingest ({args.spans} spans, OTLP protobuf+gzip, 100 per request, 4 client threads):", flush=True)
        result["collectors"] = collector_series(url, args.spans, tmp, env)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    ok = all(r["exactly_once"] for part in ("metricbank", "judge") for r in result.get(part, {}).get("runs", [])) and all(
        r["stored_equals_acknowledged"] for r in result.get("collectors", []))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
