"""Many scoring workers on one store: disjoint claims with a lease, takeover of a dead worker's
batch, LLM judges in online scoring (sampling, a budget shared by all workers, the judges of one
trace asked in a row), and the end-to-end run with 4 worker and 2 collector processes on a real
Postgres with one ``kill -9`` (``slow``)."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from fake_llm_server import FakeLLMServer
from monitor_data import simpeval, write_traces


def _ids(n: int, prefix: str = "a") -> list[str]:
    return [f"{prefix}{i:031x}" for i in range(n)]


def _traces(store, n: int, *, project: str = "p", prefix: str = "a", t0: int = 1_000_000_000) -> list[str]:
    ids = _ids(n, prefix)
    store.write([{"trace_id": t, "span_id": f"{i + 1:016x}", "name": "x", "project": project, "start_time_ns": t0 + i,
                  "end_time_ns": t0 + i + 1, "input": f"q {i}", "output": f"answer number {i}"} for i, t in enumerate(ids)])
    return ids


def _claim(store, n, who, lease_s, eid="ev1"):
    return store.claim_unscored("p", eid, n, claim_id=uuid.uuid4().hex, worker=who, lease_ns=int(lease_s * 1e9))


def _expire(store, worker: str) -> None:
    """Let the leases of ``worker`` run out now (what waiting out the lease does, without a
    sleep whose length a loaded machine could outlast)."""
    import sqlalchemy as sa

    with store.engine.begin() as c:
        c.execute(sa.text("UPDATE score_claims SET expires_ns = 0 WHERE worker = :w"), {"w": worker})


def test_claims_are_disjoint_expire_and_are_released_with_the_scores(store_url):
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    ids = _traces(store, 10)
    a, b = _claim(store, 4, "A", 60), _claim(store, 4, "B", 60)
    c = _claim(store, 4, "C", 60)
    got = [t for t, _, _ in a + b + c]
    assert len(got) == 10 and set(got) == set(ids)  # disjoint, everything handed out once
    assert [t for t, _, _ in a] == ids[::-1][:4] and all(n == 1 for _, _, n in a)  # newest first, first claim
    assert _claim(store, 4, "D", 60) == []  # all held
    assert store.unscored_traces("p", "ev1", 100, unclaimed=True) == []
    assert len(store.unscored_traces("p", "ev1", 100)) == 10  # a read ignores claims
    _expire(store, "A")  # A "died": its lease ran out
    d = _claim(store, 10, "D", 60)
    assert sorted(t for t, _, _ in d) == sorted(t for t, _, _ in a) and all(n == 2 for _, _, n in d)
    # B stores its scores: its claim goes in the same transaction; C gives its batch back unscored
    b_cid = next(x["claim_id"] for x in store.claims("ev1") if x["worker"] == "B")
    store.write_scores([{"trace_id": t, "evaluator_id": "ev1", "project": "p", "target": "score", "score": 1.0,
                         "scored_at_ns": 1} for t, _, _ in b], release=b_cid)
    c_cid = next(x["claim_id"] for x in store.claims("ev1") if x["worker"] == "C")
    store.release_claim(c_cid)
    assert {x["worker"] for x in store.claims("ev1")} == {"D"}
    again = _claim(store, 10, "E", 60)
    assert sorted(t for t, _, _ in again) == sorted(t for t, _, _ in c)  # C's, never B's (scored)
    assert _claim(store, 10, "F", 60, eid="ev2") and len(store.claims("ev2")) == 10  # claims are per version
    store.dispose()


def test_a_live_batch_keeps_its_lease(sqlite_url):
    """The heartbeat renews the lease of the batch being scored (only a dead worker's runs out)."""
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.online import _Heartbeat
    from waiting import wait_until

    store = TraceStore(sqlite_url)
    _traces(store, 3)
    _claim(store, 3, "live", 0.3)
    (cid,) = {c["claim_id"] for c in store.claims("ev1")}
    first = max(c["expires_ns"] for c in store.claims("ev1"))
    with _Heartbeat(store, cid, int(0.3e9)):
        assert wait_until(lambda: min(c["expires_ns"] for c in store.claims("ev1")) > first, 10, 0.02)
    assert store.renew_claim(cid, int(60e9)) == 3 and store.renew_claim("no-such-claim", int(60e9)) == 0
    assert _claim(store, 3, "other", 60) == []
    store.dispose()


def test_concurrent_claimers_never_get_the_same_trace(store_url):
    """8 threads claim batches of 7 out of 600 traces as fast as they can: every trace handed out
    exactly once (Postgres: FOR UPDATE SKIP LOCKED + the conflict clause; SQLite: its write lock)."""
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    ids = _traces(store, 600)
    got: list[list[str]] = [[] for _ in range(8)]
    errors = []

    def run(k):
        try:
            while True:
                batch = _claim(store, 7, f"w{k}", 60)
                if not batch and not store.unscored_traces("p", "ev1", 1, unclaimed=True):
                    return
                got[k] += [t for t, _, _ in batch]
                time.sleep(0.01)  # "scoring" the batch: the other claimers get their turn
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    flat = [t for g in got for t in g]
    assert len(flat) == len(set(flat)) == 600 and set(flat) == set(ids)
    assert sum(1 for g in got if g) >= 2  # the work was shared
    store.dispose()


def test_judge_budget_is_shared_and_atomic(store_url):
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    grants = []

    def run():
        for _ in range(5):
            grants.append(store.reserve_judge_budget("ev1", 100, calls=3, tokens=50, max_calls=20, max_tokens=None))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(grants) == 6 and len(grants) == 20  # 6 * 3 = 18 <= 20 < 21: never over the limit
    (row,) = store.judge_usage("ev1")
    assert (row["hour"], row["calls"], row["tokens"], row["traces"], row["denied"]) == (100, 18, 300, 6, 14)
    store.settle_judge_usage("ev1", 100, calls=-3, tokens=-120)  # cached replies, a smaller real token count
    assert store.reserve_judge_budget("ev1", 100, calls=3, tokens=50, max_calls=20, max_tokens=None)
    assert not store.reserve_judge_budget("ev1", 100, calls=1, tokens=200, max_calls=None, max_tokens=300)  # tokens: 230+200 > 300
    assert store.reserve_judge_budget("ev1", 101, calls=3, tokens=50, max_calls=3, max_tokens=None)  # a new hour, a new budget
    store.dispose()


def test_sampling_is_deterministic_by_trace_id():
    from autometrics.evaluators.continuous.online import ScoringOptions, sampled_for_judges

    ids = [uuid.UUID(int=i * 7919).hex for i in range(20_000)]
    picked = [t for t in ids if sampled_for_judges(t, 0.3)]
    assert 0.28 < len(picked) / len(ids) < 0.32
    assert picked == [t for t in ids if sampled_for_judges(t, 0.3)]  # every worker decides the same
    assert set(t for t in ids if sampled_for_judges(t, 0.1)) <= set(picked)  # a lower rate is a subset
    assert all(sampled_for_judges(t, 1.0) for t in ids[:100])
    for bad in ({"judge_sample_rate": 0}, {"judge_sample_rate": 1.5}, {"lease_seconds": 0}, {"judge_calls_per_hour": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ScoringOptions(**bad)


# ------------------------------------------------------------------ judges in online scoring


def judge_champion(store, llm_url: str, *, project: str = "p", n_fit: int = 40) -> dict:
    """A champion with one generated LLM judge and FKGL, fitted against the fake judge server at
    ``llm_url`` (PLS keeps both), stored as version 1 of ``score`` in ``project``."""
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.metric import JudgeSpec, LLMJudgeMetric, unbind_clients
    from autometrics.evaluators.llm.client import LLMConfig
    from autometrics.metricbank import get_metric

    cfg = LLMConfig.parse(f"openai/fake@{llm_url}", timeout=5.0, max_retries=1, backoff=0.05, concurrency=2)
    judges = [LLMJudgeMetric.from_spec(JudgeSpec(kind=k, criterion=c, description=d), cfg)
              for k, c, d in (("single", "Brevity", "short answers"), ("rubric", "Clarity", "clear answers"))]
    df = simpeval(n_fit)[["id", "input", "output", "score"]]
    try:
        ev = fit_evaluator(df, "score", metrics=[*judges, get_metric("FKGL")], n_boot=0, regression="pls").evaluator
    finally:
        unbind_clients()
    assert sum(f["feature"].startswith("llm.") for f in ev.features) == 2, ev.features
    store.add_version(project, "score", evaluator_id=uuid.uuid4().hex, promote=True, reason="test", method="test", feedback_max_ns=0,
                      n_feedback=n_fit, artifact=ev.artifact, report=None, statistics={})
    return store.champion(project, "score")


@pytest.fixture
def llm_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOMETRICS_LLM_CACHE", str(tmp_path / "llm_cache.sqlite"))


def _judged_outputs(srv) -> list[str]:
    import re

    out = []
    for r in srv.requests:
        m = re.search(r"Output:\n(.*?)\n\n(?:Criterion:|Instructions:|For calibration|Rate the output)", r["messages"][-1]["content"], flags=re.S)
        if m and r.get("max_tokens") == 1:
            out.append(m.group(1))
    return out


def test_judges_sampled_budgeted_and_asked_in_a_row(sqlite_url, llm_cache):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from autometrics.evaluators.continuous.online import ScoringOptions, sampled_for_judges

    store = TraceStore(sqlite_url)
    with FakeLLMServer() as fit_srv:
        champ = judge_champion(store, fit_srv.url)
    n_judges = sum(f["feature"].startswith("llm.") for f in champ["artifact"]["features"])
    rows = simpeval(120).iloc[40:]
    ids = write_traces(store, rows, project="p", t0_ns=9_000_000_000, feedback=False)
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, batch_size=50))
    sampled = [t for t in ids if sampled_for_judges(t, 0.5)]
    budget_traces = len(sampled) - 10
    opts = ScoringOptions(judge_sample_rate=0.5, judge_calls_per_hour=budget_traces * n_judges, judge_concurrency=1)
    with FakeLLMServer(delay=0.01) as srv:  # the fit's server is gone: --judge-url points the judges here
        res = mon.score_online(options=ScoringOptions(**{**opts.__dict__, "judge_url": srv.url}))
        assert mon.score_new(options=ScoringOptions(**{**opts.__dict__, "judge_url": srv.url})) == 0  # nothing retried
    sc = mon.scores_frame().set_index("trace_id")
    assert len(sc) == len(ids) == res.written and res.scored == budget_traces
    not_sampled = sc[sc["error"].fillna("").str.startswith("not sampled for judge scoring (rate 0.5)")]
    over = sc[sc["error"].fillna("").str.startswith("judge budget for this hour spent")]
    scored = sc[sc["score"].notna()]
    assert set(not_sampled.index) == set(ids) - set(sampled)
    assert len(over) == 10 and len(scored) == budget_traces and set(over.index) | set(scored.index) == set(sampled)
    assert scored["error"].isna().all()
    # one request per judge and judged trace, the judges of one trace one after the other
    outs = _judged_outputs(srv)
    assert len(outs) == budget_traces * n_judges == res.judge_calls
    assert n_judges == 2 and all(outs[k] == outs[k + 1] for k in range(0, len(outs), 2))
    (usage,) = store.judge_usage(champ["id"])
    assert usage["calls"] == budget_traces * n_judges and usage["traces"] == budget_traces and usage["denied"] == 10
    judge_feature = next(f["feature"] for f in champ["artifact"]["features"] if f["feature"].startswith("llm."))
    assert all(json.loads(m)[judge_feature] is not None for m in scored["metrics"])
    assert store.claims(champ["id"]) == []  # every claim released
    store.dispose()


def test_failed_judge_requests_come_back_after_the_lease_then_give_up(sqlite_url, llm_cache):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from autometrics.evaluators.continuous.online import ScoringOptions

    store = TraceStore(sqlite_url)
    with FakeLLMServer() as fit_srv:
        champ = judge_champion(store, fit_srv.url)
    ids = write_traces(store, simpeval(46).iloc[40:], project="p", t0_ns=9_000_000_000, feedback=False)
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0))
    with FakeLLMServer(default="500") as srv:  # fails on every retry
        opts = ScoringOptions(lease_seconds=60, max_claims=2, judge_url=srv.url)
        first = mon.score_online(options=opts)
        assert first.written == 0 and first.retry_later == 6 and len(store.claims(champ["id"])) == 6  # kept claimed
        assert mon.score_online(options=opts).batches == 0  # still leased: nobody takes them yet
        _expire(store, store.claims(champ["id"])[0]["worker"])
        second = mon.score_online(options=opts)  # claim 2 of 2 fails too: an error record each
    assert second.given_up == 6 and second.written == 6 and store.claims(champ["id"]) == []
    sc = mon.scores_frame().set_index("trace_id")
    assert set(sc.index) == set(ids) and sc["error"].str.startswith("judge requests failed on try 2 of 2: gave up after 2 attempts: HTTP 500").all()
    # an endpoint that does not answer at all: the batch goes back at once, nothing stored
    ids2 = write_traces(store, simpeval(50).iloc[46:], project="p", t0_ns=19_000_000_000, feedback=False)
    with FakeLLMServer() as dead:
        url = dead.url
    res = mon.score_online(options=ScoringOptions(judge_url=url))
    assert res.written == 0 and "unreachable" in " ".join(res.notes) and store.claims(champ["id"]) == []
    assert {t for t, _ in store.unscored_traces("p", champ["id"], 100)} == set(ids2)
    store.dispose()


def test_a_dead_workers_batch_is_scored_after_its_lease_and_repeated_deaths_give_up(sqlite_url):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from autometrics.evaluators.continuous.online import ScoringOptions

    store = TraceStore(sqlite_url)
    write_traces(store, simpeval(60), project="p")
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=50, batch_size=16))
    assert mon.refit().outcome == "promoted"
    eid = mon.champion()["id"]
    new = write_traces(store, simpeval(100).iloc[60:], project="p", t0_ns=9_000_000_000, feedback=False)
    dead = _claim(store, 8, "dead:1", 60, eid=eid)  # a worker claimed 8 and was killed
    opts = ScoringOptions(lease_seconds=30, max_claims=2)
    assert mon.score_new(options=opts) == 60 + 40 - 8  # everything but the dead worker's batch
    held = {t for t, _, _ in dead}
    assert held.isdisjoint(mon.scores_frame()["trace_id"])
    _expire(store, "dead:1")
    res = mon.score_online(options=opts)
    assert res.written == res.scored == 8 and set(mon.scores_frame()["trace_id"]) >= set(new)
    # a trace whose workers keep dying: claimed twice without a result, the third claim gives up on it
    t = _traces(store, 1, prefix="d", t0=99_000_000_000)[0]
    for _ in range(2):
        _claim(store, 1, "dead:2", 60, eid=eid)
        _expire(store, "dead:2")
    res = mon.score_online(options=opts)
    rec = mon.scores_frame().set_index("trace_id").loc[t]
    assert res.given_up == 1 and (rec["score"] is None or rec["score"] != rec["score"])
    assert rec["error"].startswith("scoring given up: claimed 2 times before without a stored result")
    store.dispose()


def test_worker_flags_build_the_scoring_options(capsys):
    from autometrics._cli.continuous import _scoring_options
    from autometrics._cli.main import _build_parser, main

    args = _build_parser().parse_args(["worker", "--target", "t", "--claim-lease", "30", "--judge-sample-rate", "0.25",
                                       "--judge-calls-per-hour", "1000", "--judge-concurrency", "8",
                                       "--judge-url", "http://127.0.0.1:8000/v1/"])
    o = _scoring_options(args)
    assert (o.lease_seconds, o.judge_sample_rate, o.judge_calls_per_hour, o.judge_tokens_per_hour, o.judge_concurrency,
            o.judge_url) == (30.0, 0.25, 1000, None, 8, "http://127.0.0.1:8000/v1")
    for bad in (["--judge-sample-rate", "0"], ["--judge-url", "127.0.0.1:8000"], ["--claim-lease", "0"]):
        assert main(["worker", "--target", "t", *bad]) == 2
        assert f"argument {bad[0]}:" in capsys.readouterr().err


# ------------------------------------------------------------------ 4 workers + 2 collectors on Postgres


def _otlp(first: int, n: int, project: str) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=project)))
    ss = rs.scope_spans.add()
    ss.scope.name = "scale-out-test"
    now = time.time_ns()
    for i in range(first, first + n):
        sp = ss.spans.add()
        sp.trace_id, sp.span_id = (7).to_bytes(8, "big") + i.to_bytes(8, "big"), (i + 1).to_bytes(8, "big")
        sp.name, sp.kind = "answer", 3
        sp.start_time_unix_nano, sp.end_time_unix_nano = now - 1000, now
        q = [{"role": "user", "parts": [{"type": "text", "content": f"question {i}"}]}]
        a = [{"role": "assistant", "parts": [{"type": "text", "content": f"answer {i}" + " word" * (i % 7)}]}]
        for k, v in (("gen_ai.input.messages", json.dumps(q)), ("gen_ai.output.messages", json.dumps(a))):
            sp.attributes.append(KeyValue(key=k, value=AnyValue(string_value=v)))
    return req.SerializeToString()


def _start(cmd: list[str], env: dict, log_path):
    import subprocess
    import sys

    fh = open(log_path, "w")  # noqa: SIM115 - closed by the test
    return subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", *cmd], env=env, stdout=fh, stderr=subprocess.STDOUT), fh


@pytest.mark.slow
def test_four_workers_two_collectors_on_postgres_with_a_kill_9(tmp_path):
    """2 ``collector serve`` and 4 ``worker`` processes on one Postgres; traces arrive over OTLP at
    both collectors while the workers score them with two LLM judges; worker 0 is killed with
    SIGKILL in the middle of a batch (while its judge request is being answered).  Every
    acknowledged span is stored, every trace is scored exactly once, and the only traces judged
    twice are those of the killed batch (each worker has its own reply cache, so a redone trace
    shows up as new requests)."""
    import os
    import re
    import signal
    import socket

    from autometrics.collectors.store import TraceStore
    from otlp_client import post
    from pg_databases import PG_URL, fresh_pg_database
    from waiting import wait_until

    if not PG_URL:
        pytest.skip("AUTOMETRICS_TEST_POSTGRES_URL not set (run `eval \"$(.ci/postgres.sh)\"`)")
    url, project, n_traces = fresh_pg_database(), "scaleout", 240
    store = TraceStore(url)
    with FakeLLMServer() as fit_srv:
        champ = judge_champion(store, fit_srv.url, project=project)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("LANGFUSE_")}
    procs, logs = [], []
    killed = threading.Event()
    victim: dict = {}

    def kill_on_third(text: str) -> int:  # worker 0's judge server: SIGKILL while it waits for this reply
        with lock:
            seen.append(text)
            if len(seen) == 3 and not killed.is_set():
                os.kill(victim["pid"], signal.SIGKILL)
                killed.set()
        return 1 + len(text.split()) % 5

    lock, seen = threading.Lock(), []
    try:
        with FakeLLMServer(delay=0.05) as srv, FakeLLMServer(delay=0.05, judge=kill_on_third) as srv0:
            cols = []
            for c in range(2):
                p, fh = _start(["collector", "serve", "--store", url, "--port", "0", "--no-auth", "--langfuse", "off"], base_env,
                               tmp_path / f"collector{c}.log")
                procs.append(p), logs.append(fh)
                assert wait_until(lambda c=c: "listening on" in (tmp_path / f"collector{c}.log").read_text(), 60, 0.2)
                cols.append(int(re.search(r"http://127\.0\.0\.1:(\d+)", (tmp_path / f"collector{c}.log").read_text()).group(1)))
            for w in range(4):
                env = {**base_env, "AUTOMETRICS_LLM_CACHE": str(tmp_path / f"cache{w}.sqlite")}
                p, fh = _start(["worker", "--store", url, "--project", project, "--target", "score", "--no-llm", "--refit-interval", "0",
                                "--min-new-feedback", "0", "--score-interval", "0.5", "--batch-size", "10", "--settle-seconds", "0",
                                "--claim-lease", "6", "--judge-url", (srv0 if w == 0 else srv).url, "--judge-concurrency", "2",
                                "--langfuse", "off", "--no-jobstore", "--run-for", "300", "--dashboard", str(tmp_path / f"d{w}.html")],
                               env, tmp_path / f"worker{w}.log")
                procs.append(p), logs.append(fh)
            victim["pid"] = procs[2].pid
            acked = []
            for k in range(0, n_traces, 10):  # 24 OTLP requests, alternating between the collectors
                status, body, _ = post(f"http://127.0.0.1:{cols[(k // 10) % 2]}", "/v1/traces", _otlp(k, 10, project),
                                       {"Content-Type": "application/x-protobuf"})
                assert status == 200, body
                acked += range(k, k + 10)
                time.sleep(0.05)
            assert wait_until(killed.is_set, 120, 0.1), "worker 0 never judged a trace"
            time.sleep(1.0)  # Postgres notices the dead connection (its open transaction, if any, rolls back)
            dead = f"{socket.gethostname()}:{victim['pid']}"
            killed_batch = {c["trace_id"] for c in store.claims(champ["id"]) if c["worker"] == dead}
            assert killed_batch, "worker 0 held no claim when it was killed"

            def all_scored():
                return len(store.scores_frame(champ["id"])) >= n_traces

            assert wait_until(all_scored, 180, 0.5), f"{len(store.scores_frame(champ['id']))} of {n_traces} scored"
            judged = _judged_outputs(srv) + _judged_outputs(srv0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except Exception:
                p.kill()
        for fh in logs:
            fh.close()
    assert procs[2].returncode == -signal.SIGKILL
    assert all(p.returncode == 0 for k, p in enumerate(procs) if k != 2), [(k, p.returncode) for k, p in enumerate(procs)]
    # nothing acknowledged lost: every acknowledged span is in the store, once
    assert store.count("spans") == len(acked) == n_traces
    # every trace scored exactly once, with a score (the primary key makes "once" a count)
    sc = store.scores_frame(champ["id"])
    assert len(sc) == sc["trace_id"].nunique() == n_traces and sc["score"].notna().all() and sc["error"].isna().all()
    ids = {(7).to_bytes(8, "big").hex() + i.to_bytes(8, "big").hex() for i in range(n_traces)}
    assert set(sc["trace_id"]) == ids
    assert store.claims(champ["id"]) == []  # the killed batch was taken over and released
    # no duplicate work beyond the killed batch: one request per judge and trace, more only there
    n_judges = sum(f["feature"].startswith("llm.") for f in champ["artifact"]["features"])
    per_output: dict[str, int] = {}
    for o in judged:
        per_output[o] = per_output.get(o, 0) + 1
    trace_of = {f"answer {i}" + " word" * (i % 7): (7).to_bytes(8, "big").hex() + i.to_bytes(8, "big").hex() for i in range(n_traces)}
    assert set(per_output) == set(trace_of)
    twice = {trace_of[o] for o, k in per_output.items() if k > n_judges}
    assert twice <= killed_batch
    assert all(k <= 2 * n_judges for k in per_output.values())
    assert len(judged) - n_traces * n_judges <= len(killed_batch) * n_judges
    assert twice  # the killed worker got replies for part of its batch; another worker redid it
    print(f"killed batch {len(killed_batch)} traces, judged twice {len(twice)}, judge requests {len(judged)} "
          f"(one per judge and trace: {n_traces * n_judges})")
    # the work was shared (every live worker stored scores) and none was done twice: the records
    # the live workers wrote add up to at most the trace count (a duplicate would be counted twice)
    written = [sum(int(x) for x in re.findall(r"scored (\d+) trace", (tmp_path / f"worker{w}.log").read_text())) for w in (1, 2, 3)]
    assert all(written) and sum(written) <= n_traces, written
    store.dispose()
