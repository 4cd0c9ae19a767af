"""Online scores, rationales, warnings and alerts pushed to Langfuse with the real ``langfuse``
SDK, against a Langfuse-compatible test server that validates every request body against
Langfuse's published OpenAPI spec (tests/continuous/langfuse_server.py) — it is not Langfuse.
An opt-in test runs against a real Langfuse when LANGFUSE_HOST and keys are set."""

from __future__ import annotations

import os
import shutil
import time

import pytest


def _wait(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _copy_store(url, tmp_path):
    import sqlalchemy as sa

    src = sa.engine.make_url(url).database
    dst = tmp_path / "copy.db"
    shutil.copy(src, dst)
    return f"sqlite:///{dst}"


def test_validator_rejects_bodies_that_break_the_spec():
    pytest.importorskip("yaml")
    from .langfuse_server import OpenAPIValidator, SpecError, load_spec

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
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.langfuse_push import WARNING_NAME, LangfusePush, push_pending

    url = _copy_store(fitted_store, tmp_path)
    mon = Monitor(url, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200))
    ch = mon.champion()
    alert_id = mon.add_alert("score_drift", "alert", "score drift: test alert", evaluator_id=ch["id"])
    pusher = LangfusePush()
    res = push_pending(mon, pusher, limit=20)
    assert res == {"scores": 20, "alerts": 1}
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
    assert res2 == {"scores": 10, "alerts": 0}
    assert len(langfuse_server.configs) == n_configs
    assert not langfuse_server.errors, langfuse_server.errors
    pusher.shutdown(5)


def test_low_significance_warning_is_visible_in_langfuse(fitted_store, tmp_path, langfuse_server):
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.langfuse_push import WARNING_NAME, LangfusePush

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
    pytest.importorskip("langfuse")
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.langfuse_push import LangfusePush, push_pending

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-down")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-down")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    mon = Monitor(_copy_store(fitted_store, tmp_path), MonitorConfig(target="score", project="p"))
    p = LangfusePush(timeout=1)
    t = time.monotonic()
    push_pending(mon, p, limit=5)
    p.flush(3)
    assert p.errors >= 1  # score configs could not be created; counted, not raised
    assert time.monotonic() - t < 20
    p.shutdown(2)


@pytest.mark.skipif(not (os.environ.get("LANGFUSE_HOST") and os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY")),
                    reason="opt-in: set LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY to run against a real Langfuse")
def test_real_langfuse_opt_in(fitted_store, tmp_path):  # pragma: no cover - needs a real server
    from autometrics.collectors.continuous import Monitor, MonitorConfig
    from autometrics.dashboards.langfuse_push import LangfusePush, push_pending

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
