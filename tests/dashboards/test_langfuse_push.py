"""Online scores, rationales, warnings and alerts pushed to Langfuse with the real ``langfuse``
SDK, against a Langfuse-compatible test server that validates every request body against
Langfuse's published OpenAPI spec (tests/langfuse_server.py) — it is not Langfuse.  Delivery is
tracked: a server that is down or answers 5xx leaves the scores unpushed for the next cycle.
An opt-in test runs against a real Langfuse when LANGFUSE_HOST and keys are set."""

from __future__ import annotations

import logging
import os
import shutil
import time

import pytest
from waiting import wait_until


def _wait(pred, timeout=15.0):
    return wait_until(pred, timeout)


def _push_state(mon) -> dict:
    """trace_id -> {pushed_at_ns, push_attempts, push_error} of the champion's online scores."""
    import sqlalchemy as sa
    from autometrics.collectors.store.schema import trace_scores as s

    with mon.store.engine.connect() as c:
        rows = c.execute(sa.select(s.c.trace_id, s.c.pushed_at_ns, s.c.push_attempts, s.c.push_error)
                         .where(s.c.evaluator_id == mon.champion()["id"])).mappings().all()
    return {r["trace_id"]: dict(r) for r in rows}


def _copy_store(url, tmp_path):
    import sqlalchemy as sa

    src = sa.engine.make_url(url).database
    dst = tmp_path / "copy.db"
    shutil.copy(src, dst)
    return f"sqlite:///{dst}"


def test_validator_rejects_bodies_that_break_the_spec():
    from langfuse_server import OpenAPIValidator, SpecError, load_spec, spec_path

    if not spec_path().is_file():
        pytest.skip(f"Langfuse's OpenAPI spec not found at {spec_path()} (set AUTOMETRICS_SHARED)")
    v = OpenAPIValidator(load_spec())
    schema = v.request_schema("/api/public/scores", "post")
    v.validate({"name": "x", "value": 1.0, "traceId": "t", "dataType": "NUMERIC"}, schema)
    for bad in ({"value": 1.0}, {"name": "x", "value": [1]}, {"name": "x", "value": 1, "dataType": "FLOAT"},
                {"name": "x", "value": 1, "bogus": 1}):
        with pytest.raises(SpecError):
            v.validate(bad, schema)
    cfg = v.request_schema("/api/public/score-configs", "post")
    with pytest.raises(SpecError):
        v.validate({"name": "x"}, cfg)


def test_push_scores_configs_rationales_and_warnings(fitted_store, tmp_path, langfuse_server):
    from autometrics.dashboards.langfuse_push import WARNING_NAME, LangfusePush, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    url = _copy_store(fitted_store, tmp_path)
    mon = Monitor(url, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200))
    ch = mon.champion()
    alert_id = mon.add_alert("score_drift", "alert", "score drift: test alert", evaluator_id=ch["id"])
    pusher = LangfusePush()
    res = push_pending(mon, pusher, limit=20)
    assert res == {"scores": 20, "alerts": 1, "failed": 0, "given_up": 0}
    pushed = _push_state(mon)
    assert sum(r["pushed_at_ns"] is not None for r in pushed.values()) == 20
    assert pusher.flush(15)
    n_feat = len(ch["artifact"]["features"])
    # per trace: the evaluator score + one per metric (+ warnings, if the version has any)
    assert _wait(lambda: len(langfuse_server.scores) >= 20 * (1 + n_feat) + 1), (len(langfuse_server.scores), langfuse_server.errors)
    assert not langfuse_server.errors, langfuse_server.errors
    names = {c["name"] for c in langfuse_server.configs.values()}
    assert "autometrics score" in names and WARNING_NAME in names
    assert {f"am {f['feature']}" for f in ch["artifact"]["features"]} <= names
    main = [s for s in langfuse_server.scores if s["name"] == "autometrics score"]
    assert len(main) == 20 and len({s["traceId"] for s in main}) == 20
    assert all(s["configId"] == langfuse_server.config_by_name("autometrics score")["id"] for s in main)
    assert all("the score by" in s["comment"] for s in main)  # top rationales as the comment
    assert main[0]["metadata"]["evaluator_version"] == 1
    alerts = [s for s in langfuse_server.scores if s["name"] == WARNING_NAME and s.get("metadata", {}).get("alert_id") == alert_id]
    assert len(alerts) == 1 and alerts[0]["value"] == "score-drift" and "test alert" in alerts[0]["comment"]

    # a second run: only new rows, no duplicate config creation (the server refuses duplicates)
    n_configs = len(langfuse_server.configs)
    res2 = push_pending(mon, LangfusePush(), limit=10)
    assert res2 == {"scores": 10, "alerts": 0, "failed": 0, "given_up": 0}
    assert max(langfuse_server.score_id_counts().values()) == 1  # nothing sent twice
    assert len(langfuse_server.configs) == n_configs
    assert not langfuse_server.errors, langfuse_server.errors
    pusher.shutdown(5)


def test_low_significance_warning_is_visible_in_langfuse(fitted_store, tmp_path, langfuse_server):
    from autometrics.dashboards.langfuse_push import WARNING_NAME, LangfusePush
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    ch = mon.champion()
    ch["statistics"]["holdout"]["challenger"].update(p_value=0.3, n=12)  # as a weak version would have
    rows = mon.scores_frame(ch["id"], limit=3)
    p = LangfusePush()
    assert p.push_scores(ch, rows) == 3
    assert p.flush(15)
    assert _wait(lambda: sum(s["name"] == WARNING_NAME for s in langfuse_server.scores) >= 6), langfuse_server.errors
    cats = {s["value"] for s in langfuse_server.scores if s["name"] == WARNING_NAME}
    assert cats == {"low-significance", "small-n"}
    main = [s for s in langfuse_server.scores if s["name"] == "autometrics score"]
    assert all("⚠" in s["comment"] and "p = 0.3" in s["comment"] for s in main)
    assert not langfuse_server.errors, langfuse_server.errors
    p.shutdown(5)


def test_langfuse_down_never_raises(fitted_store, tmp_path, monkeypatch):
    from autometrics.dashboards.langfuse_push import LangfusePush, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-down")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-down")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    p = LangfusePush(timeout=1)
    t = time.monotonic()
    res = push_pending(mon, p, limit=5)
    p.flush(3)
    assert p.errors >= 1  # score configs could not be created; counted, not raised
    assert res["scores"] == 0 and res["failed"] == 5
    assert all(r["pushed_at_ns"] is None for r in _push_state(mon).values())  # nothing claimed as delivered
    assert time.monotonic() - t < 20
    p.shutdown(2)


def test_scores_are_pushed_only_once_delivered_500_then_recovery(fitted_store, tmp_path, langfuse_server, caplog):
    """Langfuse answers 500 to score ingestion: nothing is marked pushed, the attempt is recorded
    and logged; once it recovers the next cycle delivers the same traces, each score id once."""
    from autometrics.dashboards.langfuse_push import WARNING_NAME, LangfusePush, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from langfuse_server import SCORES_PATH

    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    alert_id = mon.add_alert("score_drift", "alert", "score drift: retried alert", evaluator_id=mon.champion()["id"])
    pusher = LangfusePush(timeout=2)
    langfuse_server.fail_with(500, paths=[SCORES_PATH])  # configs work, score ingestion fails
    caplog.set_level(logging.WARNING, logger="autometrics.langfuse")
    res1 = push_pending(mon, pusher, limit=10)
    assert res1 == {"scores": 0, "alerts": 0, "failed": 10, "given_up": 0}
    assert langfuse_server.failed_requests == 1 and langfuse_server.scores == []
    state = _push_state(mon)
    tried = {t for t, r in state.items() if r["push_attempts"]}
    assert len(tried) == 10
    assert all(r["pushed_at_ns"] is None for r in state.values())  # queued is not delivered
    assert all(state[t]["push_attempts"] == 1 and "HTTP 500" in state[t]["push_error"] for t in tried)
    assert "Langfuse delivery failed for 10 traces' scores (attempt 1 of 10): HTTP 500" in caplog.text
    assert mon.alerts()[0]["pushed_at_ns"] is None  # not tried while Langfuse is failing

    langfuse_server.recover()
    res2 = push_pending(mon, pusher, limit=10)
    assert res2 == {"scores": 10, "alerts": 1, "failed": 0, "given_up": 0}
    state = _push_state(mon)
    assert {t for t, r in state.items() if r["pushed_at_ns"] is not None} == tried  # the same traces, retried
    assert all(state[t]["push_attempts"] == 2 and state[t]["push_error"] is None for t in tried)
    main = [x for x in langfuse_server.scores if x["name"] == "autometrics score"]
    assert {x["traceId"] for x in main} == tried and len(main) == 10
    assert [x["metadata"]["alert_id"] for x in langfuse_server.scores if x["name"] == WARNING_NAME and "alert_id" in x.get("metadata", {})] == [alert_id]
    assert mon.alerts()[0]["pushed_at_ns"] is not None
    # the next cycle moves on to other traces: no score id is ever accepted twice
    assert push_pending(mon, pusher, limit=10)["scores"] == 10
    assert max(langfuse_server.score_id_counts().values()) == 1
    assert not langfuse_server.errors, langfuse_server.errors
    pusher.shutdown(2)


def test_worker_push_with_langfuse_down_then_back_up(fitted_store, tmp_path, langfuse_server, clean_env, monkeypatch):
    """The worker's score job with Langfuse down (connection refused): no trace counts as pushed;
    the same server back on the same port: the next job delivers every trace, once."""
    from autometrics.dashboards.publish import LangfusePublisher
    from autometrics.evaluators.continuous.monitor import MonitorConfig
    from autometrics.evaluators.continuous.worker import Worker, WorkerOptions

    for k in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_BASE_URL"):  # clean_env removed them
        monkeypatch.setenv(k, {"LANGFUSE_PUBLIC_KEY": langfuse_server.public_key, "LANGFUSE_SECRET_KEY": langfuse_server.secret_key,
                               "LANGFUSE_BASE_URL": langfuse_server.url}[k])
    w = Worker(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=100),
               WorkerOptions(), publishers=[LangfusePublisher("on", max_attempts=3)])
    langfuse_server.go_down()
    out = w.run("score")
    assert "error" not in out and out["langfuse"]["scores"] == 0, out
    state = _push_state(w.monitor)
    assert all(r["pushed_at_ns"] is None for r in state.values())
    # one failed attempt for the traces of the first request; the rest waits without using one up
    tried = {t for t, r in state.items() if r["push_attempts"] == 1}
    assert len(tried) == out["langfuse"]["failed"] and 0 < len(tried) < 360, out
    assert all(r["push_attempts"] is None for t, r in state.items() if t not in tried)
    assert "ConnectError" in state[next(iter(tried))]["push_error"]
    langfuse_server.come_up()
    out = w.run("score")
    assert out["langfuse"]["scores"] == 360 and out["langfuse"]["failed"] == 0, out
    state = _push_state(w.monitor)
    assert all(r["pushed_at_ns"] is not None and r["push_attempts"] == (2 if t in tried else 1) for t, r in state.items())
    main = [x for x in langfuse_server.scores if x["name"] == "autometrics score"]
    assert len(main) == 360 == len({x["traceId"] for x in main})
    assert max(langfuse_server.score_id_counts().values()) == 1
    assert w.run("score")["langfuse"]["scores"] == 0  # all delivered: nothing left to send
    assert not langfuse_server.errors, langfuse_server.errors
    w.stop()


def test_delivery_attempts_are_bounded(fitted_store, tmp_path, langfuse_server, caplog):
    from autometrics.dashboards.langfuse_push import LangfusePush, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    pusher = LangfusePush(timeout=2)
    langfuse_server.fail_with(503)
    caplog.set_level(logging.WARNING, logger="autometrics.langfuse")
    assert push_pending(mon, pusher, limit=4, max_attempts=2)["given_up"] == 0
    assert push_pending(mon, pusher, limit=4, max_attempts=2) == {"scores": 0, "alerts": 0, "failed": 4, "given_up": 4}
    assert "giving up on them" in caplog.text
    state = _push_state(mon)
    given_up = {t for t, r in state.items() if r["push_attempts"] == 2}
    assert len(given_up) == 4 and all(state[t]["pushed_at_ns"] is None for t in given_up)
    langfuse_server.recover()
    assert push_pending(mon, pusher, limit=4, max_attempts=2)["scores"] == 4  # other traces; the given-up ones are not retried
    assert not given_up & {x["traceId"] for x in langfuse_server.scores}
    pusher.shutdown(2)


def test_rejected_scores_count_as_delivered_and_are_not_retried(fitted_store, tmp_path, langfuse_server, caplog):
    """A 207 (some scores invalid): Langfuse asks not to retry; the rows are marked pushed with the
    rejection kept in push_error and logged."""
    from autometrics.dashboards.langfuse_push import LangfusePush, config_name, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    feat = mon.champion()["artifact"]["features"][0]["feature"]
    pusher = LangfusePush(timeout=2)
    # a config that already exists in Langfuse with a range the metric's values break
    pusher.client.api.score_configs.create(name=config_name(f"am {feat}"), data_type="NUMERIC", min_value=1e9)
    caplog.set_level(logging.WARNING, logger="autometrics.langfuse")
    res = push_pending(mon, pusher, limit=3)
    assert res["scores"] == 3 and res["failed"] == 0
    assert pusher.rejected == 3 and "Langfuse rejected 3 of" in caplog.text
    done = [r for r in _push_state(mon).values() if r["pushed_at_ns"] is not None]
    assert len(done) == 3 and all("outside the config's range" in r["push_error"] for r in done)
    pusher.shutdown(2)


@pytest.mark.skipif(not (os.environ.get("LANGFUSE_HOST") and os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY")),
                    reason="opt-in: set LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY to run against a real Langfuse")
def test_real_langfuse_opt_in(fitted_store, tmp_path):  # pragma: no cover - needs a real server
    from autometrics.dashboards.langfuse_push import LangfusePush, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    p = LangfusePush(base_url=os.environ["LANGFUSE_HOST"])
    assert push_pending(mon, p, limit=3)["scores"] == 3
    assert p.flush(30) and p.errors == 0
    names = set()
    for page in range(1, 5):
        res = p.client.api.score_configs.get(page=page, limit=100)
        names |= {c.name for c in res.data}
        if page >= (res.meta.total_pages or 1):
            break
    assert "autometrics score" in names
    p.shutdown(10)


@pytest.mark.parametrize("failure", ["503", "down"])
def test_feedback_and_evaluator_scores_follow_one_delivery_rule(fitted_store, tmp_path, langfuse_server, failure):
    """A refused (503) or down Langfuse: a feedback score (the client's in-memory queue) and an
    evaluator score (waiting in the store between worker cycles) are counted the same way under
    one rule: each failed attempt a retry until the last, then a loss; once Langfuse is back both
    are delivered and counted sent."""
    import uuid

    from autometrics.collectors.feedback import make_feedback_row
    from autometrics.collectors.langfuse_client import LangfuseClient, RetryRule
    from autometrics.dashboards.langfuse_push import LangfusePush, push_pending
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from langfuse_server import SCORES_PATH

    rule = RetryRule(max_attempts=2, first_delay=0.05, max_delay=0.05)
    fb, ev = LangfuseClient(retry=rule, timeout=2), LangfuseClient(retry=rule, timeout=2)
    pusher = LangfusePush(client=ev)
    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    if failure == "503":  # score configs work, score ingestion is refused
        langfuse_server.fail_with(503, paths=[SCORES_PATH])
    else:
        langfuse_server.go_down()

    fb.score(make_feedback_row(uuid.uuid4().hex, "thumbs", True, None, None, None, "test", None, None))
    assert wait_until(lambda: fb.stats().get("langfuse_scores_lost", 0) == 1, 10), fb.stats()
    assert push_pending(mon, pusher, limit=1) == {"scores": 0, "alerts": 0, "failed": 1, "given_up": 0}
    assert push_pending(mon, pusher, limit=1) == {"scores": 0, "alerts": 0, "failed": 1, "given_up": 1}

    keys = ("langfuse_score_attempts", "langfuse_scores_retried", "langfuse_scores_lost", "langfuse_scores_sent")
    per_feedback = {k: fb.stats().get(k, 0) for k in keys}
    assert per_feedback == {"langfuse_score_attempts": 2, "langfuse_scores_retried": 1, "langfuse_scores_lost": 1,
                            "langfuse_scores_sent": 0}
    n = ev.stats()["langfuse_scores_lost"]  # the scores of the one trace given up
    assert n >= 3 and {k: ev.stats().get(k, 0) for k in keys} == {k: v * n for k, v in per_feedback.items()}, ev.stats()
    assert langfuse_server.scores == []

    langfuse_server.recover()
    langfuse_server.come_up()
    fb.score(make_feedback_row(uuid.uuid4().hex, "thumbs", False, None, None, None, "test", None, None))
    assert fb.flush(10) and fb.stats()["langfuse_scores_sent"] == 1
    assert push_pending(mon, pusher, limit=1)["scores"] == 1  # another trace: the given-up one stays given up
    assert ev.stats()["langfuse_scores_sent"] == n and fb.stats()["langfuse_scores_lost"] == 1
    assert len(langfuse_server.scores) == n + 1 and not langfuse_server.errors, langfuse_server.errors
    fb.shutdown(2)
    ev.shutdown(2)
