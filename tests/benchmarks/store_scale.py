"""The trace store's queries at 10^5 and 10^6 traces, on SQLite and Postgres, before and after
the schema v8 indexes, and retention (``store prune``) at that size.

For each engine and size it bulk-loads a synthetic store (timed separately): traces spread over
60 days, two spans each (a root span and an LLM child span; input/output text of 200-500
characters, the child's attributes hold the messages JSON as captured spans do), 90 % in project
``bench`` and 10 % in ``other``, 5 % of the traces with thumbs feedback (some twice) and 1 % with
stars, online scores of the champion for all ``bench`` traces but the newest 1 % (2 % of them not
yet delivered to Langfuse), a retired version's scores on the oldest 30 %, alerts and refit runs
(N / 1000 and N / 100) and one claimed batch.  Then:

1. "before": the v8 indexes dropped (the v7 schema's indexes), every query the worker and the
   dashboard run, timed; the training frame both as released before v8 (every span of the project
   read into pandas, then the unlabelled traces dropped; that is ``include_unlabelled=True`` plus
   the same filter) and as now (labelled traces filtered in SQL); the two must be equal.
2. the v8 migration on the loaded store, timed.
3. "after": the same queries, and their plans (EXPLAIN / EXPLAIN QUERY PLAN of the statements the
   store really ran, captured from the engine).
4. ``prune --older-than 30d``: dry run, then the real prune; labelled traces, their scores and all
   feedback must survive it.

    . /tmp/pg_env.sh   # AUTOMETRICS_TEST_POSTGRES_URL: a cluster this script may create databases on
    python tests/benchmarks/store_scale.py [--sizes 100000 1000000] [--engines sqlite postgres] [--dir /tmp]

Prints seconds per query and the growth ratio 10^5 -> 10^6 (10x the traces), writes
tests/benchmarks/results/store_scale.json.  SQLite files go under --dir and are deleted after
each size; Postgres databases are dropped.  Single runs (median of 3 for queries under a second)
on a shared machine: the load of other processes is recorded with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

DAY_NS = 86_400 * 10**9
NOW_NS = time.time_ns()
WORDS = ("the order refund account billing invoice shipping delay customer support agent ticket answer question password "
         "reset subscription plan upgrade cancel charge card payment address delivery tracking number product warranty "
         "return policy days business email phone chat help thanks please sorry understand issue resolved escalate").split()
CHAMPION, RETIRED, TARGET, PROJECT = "ev-bench-2", "ev-bench-1", "thumbs", "bench"


def _texts(rng: random.Random, n: int = 4000) -> list[str]:
    """A pool of 200-500 character texts; each row appends its own id, so no two are equal."""
    out = []
    for _ in range(n):
        length = rng.randint(200, 500)
        words = []
        while sum(len(w) + 1 for w in words) < length:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words)[:length])
    return out


def generate(n: int, seed: int = 0):
    """Yield chunks of (traces, spans, feedback, scores) row tuples for ``n`` traces."""
    rng = random.Random(seed)
    pool = _texts(rng)
    span_ns = 60 * DAY_NS // n
    chunk = 20_000
    for lo in range(0, n, chunk):
        tr, sp, fb, sc = [], [], [], []
        for i in range(lo, min(n, lo + chunk)):
            tid = f"{i:032x}"
            project = "other" if i % 10 == 9 else PROJECT
            start = NOW_NS - 60 * DAY_NS + i * span_ns
            q, a = pool[i % len(pool)] + f" #{i}", pool[(i * 7 + 3) % len(pool)] + f" #{i}"
            tr.append((tid, project, start))
            intok, outtok = len(q) // 4, len(a) // 4
            sp.append((tid, f"{2 * i + 1:016x}", None, "support_bot", "INTERNAL", project, "app", start, start + 900_000_000, "OK",
                       None, None, None, None, None, None, q, a, '{"code.function": "support_bot"}', '{"service.name": "bench"}'))
            msgs = json.dumps({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                               "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": q}]}],
                               "gen_ai.output.messages": [{"role": "assistant", "parts": [{"type": "text", "content": a}]}]})
            sp.append((tid, f"{2 * i + 2:016x}", f"{2 * i + 1:016x}", "chat gpt-4o-mini", "CLIENT", project, "openai",
                       start + 1000, start + 800_000_000, "OK", None, None, "chat", "gpt-4o-mini", intok, outtok, q, a, msgs,
                       '{"service.name": "bench"}'))
            if rng.random() < 0.05:
                fb.append((f"fb-{i}", tid, None, TARGET, "thumbs", float(rng.random() < 0.6), None, None, "bench",
                           start + 3600 * 10**9, None))
                if rng.random() < 0.2:  # changed their mind: history kept, latest wins
                    fb.append((f"fb-{i}-b", tid, None, TARGET, "thumbs", float(rng.random() < 0.6), None, None, "bench",
                               start + 7200 * 10**9, None))
            if rng.random() < 0.01:
                fb.append((f"st-{i}", tid, None, "stars", "likert", float(rng.randint(1, 5)), None, None, "bench", start + 5 * 10**9, None))
            if project == PROJECT and i < n * 0.99:
                metrics = json.dumps({"flesch_kincaid_grade": rng.uniform(2, 12), "length_ratio": rng.uniform(0.2, 3),
                                      "type_token_ratio": rng.uniform(0.3, 0.9)})
                pushed = None if i > n * 0.97 else start + 60 * 10**9
                sc.append((tid, CHAMPION, PROJECT, TARGET, rng.random(), metrics, metrics, "[]", None, start, start + 30 * 10**9,
                           pushed, 1 if pushed else 0, None))
                if i < n * 0.3:
                    sc.append((tid, RETIRED, PROJECT, TARGET, rng.random(), metrics, metrics, "[]", None, start, start + 30 * 10**9,
                               start + 60 * 10**9, 1, None))
        yield tr, sp, fb, sc


SPAN_COLS = ("trace_id, span_id, parent_span_id, name, kind, project, scope, start_time_ns, end_time_ns, status, error_type, "
             "error_message, operation, model, input_tokens, output_tokens, input, output, attributes, resource")
FB_COLS = "id, trace_id, span_id, name, kind, value, value_text, comment, source, created_at_ns, metadata"
SC_COLS = ("trace_id, evaluator_id, project, target, score, metrics, contributions, rationales, error, trace_start_ns, scored_at_ns, "
           "pushed_at_ns, push_attempts, push_error")


def _small_tables(n: int) -> dict[str, tuple[str, list[tuple]]]:
    rng = random.Random(1)
    artifact = json.dumps({"features": [{"feature": f"m{k}", "weight": 0.1} for k in range(40)], "pad": "x" * 20_000})
    stats = json.dumps({"reference_scores": [rng.random() for _ in range(300)], "holdout": {"challenger": {"tau": 0.41}}})
    versions = [(ev, PROJECT, TARGET, k + 1, st, "bench", "nnls", NOW_NS - (30 - 20 * k) * DAY_NS, NOW_NS - 31 * DAY_NS, 400,
                 artifact, "# report", stats) for k, (ev, st) in enumerate(((RETIRED, "retired"), (CHAMPION, "champion")))]
    kinds = ("score_drift", "validity_decay", "low_significance", "refit_error")
    alerts = [(f"al-{k}", PROJECT if k % 3 else "other", TARGET if k % 2 else "stars", f"ev-{k % 50}", kinds[k % 4], "alert",
               "score drift: ...", "{}", NOW_NS - k * 10**9 * 60, None, None, None) for k in range(max(10, n // 1000))]
    runs = [(f"run-{k}", PROJECT if k % 3 else "other", TARGET, "host:1", NOW_NS - k * 60 * 10**9, NOW_NS - k * 60 * 10**9 + 10**9,
             "skipped" if k else "running", "not enough new feedback", None) for k in range(max(10, n // 100))]
    claims = [(CHAMPION, f"{n - 1 - k:032x}", "claim-1", "host:2", NOW_NS, NOW_NS + 60 * 10**9, 1) for k in range(256)]
    return {
        "evaluator_versions": ("id, project, target, version, status, reason, method, created_at_ns, feedback_max_ns, n_feedback, "
                               "artifact, report, statistics", versions),
        "monitor_alerts": ("id, project, target, evaluator_id, kind, severity, message, details, created_at_ns, pushed_at_ns, "
                           "push_attempts, push_error", alerts),
        "refit_runs": ("id, project, target, worker, started_ns, ended_ns, outcome, message, evaluator_id", runs),
        "score_claims": ("evaluator_id, trace_id, claim_id, worker, claimed_at_ns, expires_ns, attempts", claims),
    }


def load(store, n: int) -> dict:
    """Bulk insert (SQLite: executemany in large transactions; Postgres: COPY); returns counts."""
    counts = {"traces": 0, "spans": 0, "feedback": 0, "trace_scores": 0}
    raw = store.engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        pg = store.dialect == "postgresql"

        def put(table: str, cols: str, rows: list[tuple]) -> None:
            if not rows:
                return
            if pg:
                with dbapi.cursor() as cur, cur.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
                    for r in rows:
                        cp.write_row(r)
            else:
                marks = ", ".join("?" * len(cols.split(",")))
                dbapi.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)

        if not pg:
            dbapi.execute("PRAGMA synchronous=OFF")  # bulk load only; the store itself runs with synchronous=FULL
        for tr, sp, fb, sc in generate(n):
            put("traces", "trace_id, project, first_seen_ns", tr)
            put("spans", SPAN_COLS, sp)
            put("feedback", FB_COLS, fb)
            put("trace_scores", SC_COLS, sc)
            dbapi.commit()
            for k, v in zip(counts, (tr, sp, fb, sc), strict=True):
                counts[k] += len(v)
        for table, (cols, rows) in _small_tables(n).items():
            put(table, cols, rows)
            counts[table] = len(rows)
        dbapi.commit()
        if pg:
            dbapi.autocommit = True
            dbapi.execute("VACUUM ANALYZE")  # what autovacuum would do after a load; the planner needs the statistics
            dbapi.autocommit = False
    finally:
        raw.close()
    return counts


# ---------------------------------------------------------------------------- timing
class Captured:
    """The SELECT statements (with parameters) an engine runs while active, for EXPLAIN."""

    def __init__(self, engine):
        self.engine, self.found = engine, []

    def _hook(self, conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT"):
            self.found.append((statement, parameters))

    def __enter__(self):
        sa.event.listen(self.engine, "before_cursor_execute", self._hook)
        return self

    def __exit__(self, *exc):
        sa.event.remove(self.engine, "before_cursor_execute", self._hook)


def explain(store, statement, parameters) -> str:
    prefix = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(prefix + statement, parameters).all()
    if store.dialect == "sqlite":
        return "\n".join(str(r[-1]) for r in rows)
    return "\n".join(str(r[0]) for r in rows)


def timed(fn, *, plans: dict | None = None, store=None, name: str = ""):
    """(median seconds, result): one run, two more when it took under a second."""
    t0 = time.perf_counter()
    if plans is not None:
        with Captured(store.engine) as cap:
            out = fn()
        # the first 3 statements (the training frame runs one per 1000 trace ids), plans cut at 2000 characters
        plans[name] = [{"sql": " ".join(s.split())[:600], "plan": explain(store, s, p)[:2000]} for s, p in cap.found[:3]]
    else:
        out = fn()
    times = [time.perf_counter() - t0]
    if times[0] < 1.0:
        for _ in range(2):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def legacy_training_frame(store, name: str, project: str):
    """The training frame as released before v8: every span of the project into pandas, then the
    unlabelled traces dropped (what ``include_unlabelled=True`` plus that filter computes)."""
    frame = store.training_frame(name, project=project, include_unlabelled=True)
    return frame[frame[[name]].notna().any(axis=1)].reset_index(drop=True)


def queries(store, n: int, *, legacy: bool, plans: dict | None) -> tuple[dict, dict]:
    """Every query the worker, the dashboard, the Langfuse push and retention run; seconds each."""
    settled = NOW_NS - 5 * 10**9
    idle_before = NOW_NS - 60 * DAY_NS + int(n * 0.98) * (60 * DAY_NS // n)  # every trace older than this is scored
    mark = NOW_NS - 2 * DAY_NS  # the last fit saw feedback up to 2 days ago (the worker asks every tick what came since)
    out, frames = {}, {}
    suite = {
        "training_frame": lambda: store.training_frame(TARGET, project=PROJECT),
        "feedback_frame(target)": lambda: store.feedback_frame(names=[TARGET]),
        "count_feedback(new since the last fit)": lambda: store.count_feedback(TARGET, since_ns=mark, project=PROJECT),
        "unscored_traces(256), newest unscored": lambda: store.unscored_traces(PROJECT, CHAMPION, 256, seen_before_ns=settled),
        "unscored_traces(256), all scored (idle poll)": lambda: store.unscored_traces(PROJECT, CHAMPION, 256,
                                                                                      seen_before_ns=idle_before),
        "trace_texts(256 ids)": lambda: store.trace_texts([f"{k:032x}" for k in range(n - 256 * 10, n, 10)]),
        "scores_frame(limit=200)": lambda: store.scores_frame(CHAMPION, limit=200),
        "scores_frame(all)": lambda: store.scores_frame(CHAMPION),
        "undelivered_scores(500)": lambda: store.undelivered_scores(CHAMPION, max_attempts=5, limit=500),
        "undelivered_scores(500), all delivered": lambda: store.undelivered_scores(RETIRED, max_attempts=5, limit=500),
        "alerts(100)": lambda: store.alerts(PROJECT, TARGET, 100),
        "has_alert": lambda: store.has_alert("score_drift", "ev-7"),
        "runs(12)": lambda: store.runs(PROJECT, TARGET, 12),
        "evaluator_versions": lambda: store.evaluator_versions(PROJECT, TARGET),
        "champion": lambda: store.champion(PROJECT, TARGET),
        "prune 30d --dry-run": lambda: store.prune("30d", dry_run=True),
    }
    if hasattr(store, "claim_unscored"):  # schema v7: what each of many workers runs per batch (then gives the batch back)
        def claim_and_release():
            got = store.claim_unscored(PROJECT, CHAMPION, 256, claim_id="bench", worker="bench:1", lease_ns=60 * 10**9,
                                       seen_before_ns=settled)
            store.release_claim("bench")
            return got

        suite["claim_unscored(256) + release"] = claim_and_release
    if legacy:
        suite = {"training_frame (as before v8)": lambda: legacy_training_frame(store, TARGET, PROJECT), **suite}
    for name, fn in suite.items():
        s, res = timed(fn, plans=plans if not name.startswith(("prune", "claim")) else None, store=store, name=name)
        out[name] = round(s, 4)
        if name.startswith("training_frame"):
            frames[name] = res
        if name.startswith(("unscored_traces", "claim_unscored")):
            out[name + " rows"] = len(res)
        print(f"    {name:<48s} {s:9.3f} s", flush=True)
    return out, frames


def load_note() -> str:
    la = os.getloadavg()
    return f"loadavg {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {os.cpu_count()} CPUs (shared with other processes)"


def run_one(engine: str, n: int, base_dir: Path) -> dict:
    from autometrics.collectors.store import TraceStore
    from autometrics.collectors.store.schema import V8_INDEXES

    rec: dict = {"engine": engine, "traces": n}
    if engine == "sqlite":
        folder = base_dir / f"am_store_scale_{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        url, drop = f"sqlite:///{folder / 'traces.db'}", lambda: shutil.rmtree(folder, ignore_errors=True)
    else:
        admin = os.environ["AUTOMETRICS_TEST_POSTGRES_URL"]
        db = "scale_" + uuid.uuid4().hex[:10]
        eng = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.execute(sa.text(f"CREATE DATABASE {db}"))
        url = sa.engine.make_url(admin).set(database=db).render_as_string(hide_password=False)

        def drop():
            with eng.connect() as c:
                c.execute(sa.text(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
            eng.dispose()
    try:
        store = TraceStore(url)
        with store.engine.begin() as c:  # the v7 schema: v8's indexes out, v2's feedback (name) index back
            for name, *_ in V8_INDEXES:
                c.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
            c.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_feedback_name ON feedback (name)"))
            c.execute(sa.text("DELETE FROM schema_version WHERE version = 8"))
        print(f"  {engine} {n:,} traces: loading ...", flush=True)
        t0 = time.perf_counter()
        rec["rows"] = load(store, n)
        rec["generate_and_load_s"] = round(time.perf_counter() - t0, 1)
        rec["size_mib"] = round(_size_mib(store), 1)
        print(f"    loaded in {rec['generate_and_load_s']} s, {rec['size_mib']} MiB; {load_note()}", flush=True)
        print("  before v8 indexes:", flush=True)
        rec["before"], before_frames = queries(store, n, legacy=True, plans=None)
        old, new = before_frames["training_frame (as before v8)"], before_frames["training_frame"]
        import pandas as pd

        pd.testing.assert_frame_equal(old, new, check_dtype=False)
        rec["training_frame_rows"] = len(new)
        rec["training_frame_equal_to_before_v8"] = True
        t0 = time.perf_counter()
        assert store.migrate() >= 8
        rec["migration_v8_s"] = round(time.perf_counter() - t0, 2)
        print(f"  v8 migration on the loaded store: {rec['migration_v8_s']} s; after v8 indexes:", flush=True)
        rec["plans"] = {}
        rec["after"], _ = queries(store, n, legacy=False, plans=rec["plans"])
        labelled = _labelled_counts(store)
        t0 = time.perf_counter()
        res = store.prune("30d")
        rec["prune_30d_s"] = round(time.perf_counter() - t0, 2)
        rec["prune_30d"] = {k: v for k, v in res.as_dict().items() if k in ("traces", "spans", "scores", "claims", "kept_labelled",
                                                                            "batches")}
        after = _labelled_counts(store)
        assert after == labelled, (labelled, after)  # labelled traces, their scores and all feedback survive
        rec["prune_kept_labelled_and_feedback"] = True
        print(f"  prune 30d: {rec['prune_30d_s']} s, {rec['prune_30d']}", flush=True)
        rec["size_after_prune_mib"] = round(_size_mib(store), 1)
        rec["load"] = load_note()
        store.dispose()
        return rec
    finally:
        drop()


def _labelled_counts(store) -> tuple:
    with store.engine.connect() as c:
        return tuple(c.execute(sa.text(q)).scalar() for q in (
            "SELECT COUNT(*) FROM feedback",
            "SELECT COUNT(*) FROM traces t WHERE EXISTS (SELECT 1 FROM feedback f WHERE f.trace_id = t.trace_id)",
            "SELECT COUNT(*) FROM spans s WHERE EXISTS (SELECT 1 FROM feedback f WHERE f.trace_id = s.trace_id)",
            "SELECT COUNT(*) FROM trace_scores s WHERE EXISTS (SELECT 1 FROM feedback f WHERE f.trace_id = s.trace_id)"))


def _size_mib(store) -> float:
    if store.dialect == "sqlite":
        p = store.sqlite_path()
        return sum(f.stat().st_size for f in p.parent.glob(p.name + "*")) / 2**20
    with store.engine.connect() as c:
        return c.execute(sa.text("SELECT pg_database_size(current_database())")).scalar() / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--engines", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    ap.add_argument("--dir", default="/tmp", help="where the SQLite files go (deleted after each size)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "store_scale.json"))
    args = ap.parse_args()
    if "postgres" in args.engines and not os.environ.get("AUTOMETRICS_TEST_POSTGRES_URL"):
        sys.exit("set AUTOMETRICS_TEST_POSTGRES_URL (. /tmp/pg_env.sh, or eval \"$(.ci/postgres.sh)\") or pass --engines sqlite")
    runs = []
    for engine in args.engines:
        for n in args.sizes:
            runs.append(run_one(engine, n, Path(args.dir)))
            Path(args.out).write_text(json.dumps({"runs": runs}, indent=1))
    growth = {}
    for engine in args.engines:
        by = {r["traces"]: r for r in runs if r["engine"] == engine}
        if len(by) >= 2:
            lo, hi = min(by), max(by)
            growth[engine] = {f"{phase}: {q}": round(by[hi][phase][q] / by[lo][phase][q], 1)
                              for phase in ("before", "after") for q in by[lo][phase]
                              if not q.endswith("rows") and by[lo][phase][q] > 0}
            growth[engine]["generate_and_load"] = round(by[hi]["generate_and_load_s"] / by[lo]["generate_and_load_s"], 1)
            growth[engine]["prune_30d"] = round(by[hi]["prune_30d_s"] / max(by[lo]["prune_30d_s"], 1e-3), 1)
            print(f"\n{engine}: growth {lo:,} -> {hi:,} traces ({hi // lo}x):")
            for k, v in growth[engine].items():
                print(f"  {k:<60s} x{v}")
    Path(args.out).write_text(json.dumps({"runs": runs, "growth": growth, "command": " ".join(sys.argv)}, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
