"""Retention (``store prune``) and the schema v8 indexes, on real SQLite and real Postgres: old
unlabelled traces go with their spans, scores and claims; labelled traces, their scores, all
feedback and evaluator versions stay; a dry run deletes nothing; a bad duration is refused."""

from __future__ import annotations

import json
import time

import pytest
import sqlalchemy as sa

DAY = 86_400 * 10**9
NOW = time.time_ns()  # the CLI prunes against the real clock


def _trace(store, i: int, *, age_days: float, project: str = "p", spans: int = 2, old_schema: bool = False) -> str:
    tid = f"{i:032x}"
    start = NOW - int(age_days * DAY)
    rows = [{"trace_id": tid, "span_id": f"{i:08x}{k:08x}", "parent_span_id": f"{i:08x}{0:08x}" if k else None,
             "name": "root" if not k else "llm", "project": project, "start_time_ns": start + k, "end_time_ns": start + 10**9,
             "input": f"question {i}", "output": f"answer {i}", "attributes": "{}", "status": "OK"} for k in range(spans)]
    if old_schema:  # a store left at an older version: only the columns it has (as that release wrote them)
        from autometrics.collectors.store import schema

        with store.engine.begin() as c:
            c.execute(sa.insert(schema.traces), [{"trace_id": tid, "project": project, "first_seen_ns": start}])
            c.execute(sa.insert(schema.spans), rows)
        return tid
    store.write(rows, [])
    return tid


def _fb(i: int, tid: str, value: float = 1.0) -> dict:
    return {"id": f"fb-{i}", "trace_id": tid, "name": "thumbs", "kind": "thumbs", "value": value, "created_at_ns": NOW}


def _score(store, tid: str, evaluator_id: str = "ev1") -> None:
    store.write_scores([{"trace_id": tid, "evaluator_id": evaluator_id, "project": "p", "target": "thumbs", "score": 0.5,
                         "metrics": {"m": 1.0}, "trace_start_ns": 0, "scored_at_ns": NOW}])


def _claim(store, tid: str) -> None:
    with store.engine.begin() as c:
        c.execute(sa.text("INSERT INTO score_claims (evaluator_id, trace_id, claim_id, worker, claimed_at_ns, expires_ns, attempts) "
                          "VALUES ('ev1', :t, 'c1', 'w', 0, 1, 1)"), {"t": tid})


def _rows(store, table: str, tid: str) -> int:
    with store.engine.connect() as c:
        return int(c.execute(sa.text(f"SELECT COUNT(*) FROM {table} WHERE trace_id = :t"), {"t": tid}).scalar())


@pytest.fixture
def populated(store_url):
    """7 old unlabelled traces (scored, one claimed), 2 old labelled (scored), 2 new unlabelled,
    2 old unlabelled of project q, one evaluator version."""
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    old = [_trace(store, i, age_days=40 + i) for i in range(7)]
    labelled = [_trace(store, 100 + i, age_days=45) for i in range(2)]
    new = [_trace(store, 200 + i, age_days=3) for i in range(2)]
    other = [_trace(store, 300 + i, age_days=50, project="q") for i in range(2)]
    store.write_feedback([_fb(0, labelled[0]), _fb(1, labelled[1], 0.0), _fb(2, labelled[1], 1.0)])
    for t in old + labelled:
        _score(store, t)
    _claim(store, old[0])
    store.add_version("p", "thumbs", evaluator_id="ev1", promote=True, reason="r", method="nnls", feedback_max_ns=NOW,
                      n_feedback=3, artifact={"features": []}, report=None, statistics={})
    yield store, old, labelled, new, other
    store.dispose()


def test_prune_deletes_old_unlabelled_keeps_labelled_and_their_scores(populated):
    from autometrics.collectors.store.retention import prune

    store, old, labelled, new, other = populated
    before = {t: store.count(t) for t in ("spans", "feedback", "traces")}
    dry = prune(store, "30d", dry_run=True, batch_size=2, now_ns=NOW)
    assert (dry.traces, dry.spans, dry.scores, dry.claims, dry.kept_labelled) == (9, 18, 7, 1, 2)
    assert dry.batches == 5 and dry.dry_run and "would delete 9 traces" in dry.summary()
    assert {t: store.count(t) for t in before} == before  # the dry run deleted nothing
    assert _rows(store, "score_claims", old[0]) == 1

    res = prune(store, "30d", batch_size=2, now_ns=NOW)  # several batches: the keyset walk skips labelled traces
    assert (res.traces, res.spans, res.scores, res.claims, res.kept_labelled) == (9, 18, 7, 1, 2)
    for t in old + other:
        assert [_rows(store, tb, t) for tb in ("traces", "spans", "trace_scores", "score_claims")] == [0, 0, 0, 0]
    for t in labelled:
        assert [_rows(store, tb, t) for tb in ("traces", "spans", "trace_scores")] == [1, 2, 1]
    for t in new:
        assert [_rows(store, tb, t) for tb in ("traces", "spans")] == [1, 2]
    assert store.count("feedback") == before["feedback"] == 3
    assert [v["version"] for v in store.evaluator_versions("p", "thumbs")] == [1]
    frame = store.training_frame("thumbs")  # what a fit reads is unchanged by the prune
    assert sorted(frame["id"]) == sorted(labelled) and frame["thumbs"].tolist() == [1.0, 1.0]
    again = prune(store, "30d", now_ns=NOW)
    assert (again.traces, again.kept_labelled) == (0, 2)


def test_prune_one_project_and_cutoff(populated):
    from autometrics.collectors.store.retention import prune

    store, old, labelled, new, other = populated
    res = store.prune("45d", project="q", dry_run=True)  # TraceStore.prune
    assert (res.traces, res.spans, res.project) == (2, 4, "q") and store.count("traces") == 13
    res = prune(store, "45d", project="q", now_ns=NOW)
    assert (res.traces, res.spans, res.kept_labelled) == (2, 4, 0)
    assert all(_rows(store, "traces", t) == 1 for t in old + labelled + new)
    res = prune(store, 1080 * 3600, project="p", now_ns=NOW)  # 45 days in seconds
    assert (res.traces, res.kept_labelled) == (1, 0)  # old[6] (46 days); old[5] and the labelled ones, first seen
    # exactly at the cutoff, are not older than it
    assert _rows(store, "traces", old[5]) == 1 and _rows(store, "traces", old[6]) == 0


def test_feedback_that_arrives_during_a_prune_keeps_its_trace(store_url):
    """The delete re-checks "no feedback": feedback stored after the batch was chosen, before it
    is deleted (injected from another connection right before the DELETE runs), keeps its trace."""
    from autometrics.collectors.store import TraceStore
    from autometrics.collectors.store.retention import prune

    store = TraceStore(store_url)
    ids = [_trace(store, i, age_days=40) for i in range(4)]
    other_writer = TraceStore(store_url)
    fired = []

    def late_feedback(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("DELETE FROM TRACES") and not fired:
            fired.append(1)
            other_writer.write_feedback([_fb(9, ids[1])])

    sa.event.listen(store.engine, "before_cursor_execute", late_feedback)
    try:
        res = prune(store, "30d", now_ns=NOW)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", late_feedback)
    assert fired and res.traces == 3 and res.spans == 6
    assert [_rows(store, "traces", t) for t in ids] == [0, 1, 0, 0] and _rows(store, "spans", ids[1]) == 2
    other_writer.dispose()
    store.dispose()


@pytest.mark.parametrize("bad", ["30", "30x", "-5d", "0d", "", "d", "30 days", "1e3h", True, 0, float("inf"), float("nan")])
def test_bad_duration_is_refused_with_the_accepted_forms(bad, sqlite_url):
    from autometrics.collectors.store import TraceStore
    store = TraceStore(sqlite_url)
    with pytest.raises(ValueError, match=r"--older-than .*90s, 20m, 12h, 7d"):
        store.prune(bad)
    with pytest.raises(ValueError, match="batch_size"):
        store.prune("30d", batch_size=0)
    store.dispose()


def test_cli_store_prune(populated, capsys, tmp_path):
    from autometrics._cli.main import main

    store, old, labelled, new, other = populated
    url = store.url
    assert main(["store", "prune", "--older-than", "30d", "--store", url, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would delete 9 traces, 18 spans, 7 online scores, 1 claims" in out and "dry run: nothing was deleted" in out
    assert "kept 2 older traces that have feedback" in out and store.count("traces") == 13
    assert main(["store", "prune", "--older-than", "30x", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "'30x' is not a duration" in err and "90s, 20m, 12h, 7d" in err
    assert main(["store", "prune", "--older-than", "30d", "--store", str(tmp_path / "missing.db")]) == 2
    assert "no SQLite trace store" in capsys.readouterr().err
    assert main(["store", "prune", "--older-than", "30d", "--store", url, "--project", "q", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["traces"], got["spans"], got["dry_run"], got["project"]) == (2, 4, False, "q") and "cutoff" in got
    assert main(["store", "prune", "--older-than", "30d", "--store", url]) == 0
    assert "deleted 7 traces" in capsys.readouterr().out
    assert store.count("traces") == 4 and store.count("feedback") == 3


def test_cli_prune_deletes_and_vacuums_sqlite(sqlite_url, capsys):
    import time

    from autometrics._cli.main import main
    from autometrics.collectors.store import TraceStore

    store = TraceStore(sqlite_url)
    real_now = time.time_ns()
    for i in range(30):
        tid = f"{i:032x}"
        store.write([{"trace_id": tid, "span_id": f"{i:016x}", "name": "root", "project": "p", "start_time_ns": real_now - 40 * DAY,
                      "end_time_ns": real_now - 40 * DAY + 1, "input": "x" * 2000, "output": "y" * 2000}], [])
    store.write_feedback([_fb(0, f"{0:032x}")])
    store.dispose()
    assert main(["store", "prune", "--older-than", "30d", "--store", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "deleted 29 traces, 29 spans" in out and "kept 1 older traces" in out and "VACUUM" in out
    assert main(["store", "prune", "--older-than", "30d", "--store", sqlite_url, "--vacuum", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["traces"] == 0 and got["sqlite_mib_after"] <= got["sqlite_mib_before"]
    assert TraceStore(sqlite_url).count("traces") == 1


# ---------------------------------------------------------------------------- schema v8
def _indexes(store) -> set[str]:
    insp = sa.inspect(store.engine)
    return {ix["name"] for t in ("traces", "feedback", "trace_scores", "score_claims", "monitor_alerts", "refit_runs")
            if insp.has_table(t) for ix in insp.get_indexes(t)}


@pytest.mark.parametrize("start", [6, 7])
def test_migration_v8_on_an_older_store_keeps_data_and_adds_the_indexes(store_url, start):
    from autometrics.collectors.store import SCHEMA_VERSION, TraceStore
    from autometrics.collectors.store.schema import V8_INDEXES

    old = TraceStore(store_url, migrate=False)
    assert old.migrate(target=start) == start
    assert "ix_feedback_name" in _indexes(old) and not {n for n, *_ in V8_INDEXES} & _indexes(old)
    tid = _trace(old, 1, age_days=40, old_schema=True)
    old.write_feedback([_fb(1, tid)])
    old.dispose()
    new = TraceStore(store_url)
    assert new.version() == SCHEMA_VERSION >= 8
    assert {n for n, *_ in V8_INDEXES} <= _indexes(new) and "ix_feedback_name" not in _indexes(new)
    assert new.training_frame("thumbs")["id"].tolist() == [tid]
    assert new.prune("30d").kept_labelled == 1 and new.count("spans") == 2
    new.dispose()


def test_worker_queries_use_the_v8_indexes_on_sqlite(sqlite_url):
    """The plans SQLite chooses for the hot queries (a regression guard: a rewritten query that no
    longer matches its index shows here before it shows at a million traces)."""
    from autometrics.collectors.store import TraceStore

    store = TraceStore(sqlite_url)
    store.write_feedback([_fb(1, _trace(store, 1, age_days=1))])
    plans = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "EXPLAIN" not in statement:
            plans.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    store.undelivered_scores("ev1", max_attempts=5, limit=10)
    store.count_feedback("thumbs", since_ns=0, project="p")
    store.alerts("p", "thumbs", 10)
    store.runs("p", "thumbs", 10)
    store.training_frame("thumbs", project="p")
    sa.event.remove(store.engine, "before_cursor_execute", capture)
    text = []
    with store.engine.connect() as c:
        for s, p in plans:
            text.append(" | ".join(str(r[-1]) for r in c.exec_driver_sql("EXPLAIN QUERY PLAN " + s, p).all()))
    joined = "\n".join(text)
    for ix in ("ix_trace_scores_undelivered", "ix_feedback_name_created", "ix_monitor_alerts_scope", "ix_refit_runs_scope"):
        assert ix in joined, joined
    assert "SEARCH spans USING INDEX sqlite_autoindex_spans_1 (trace_id=?)" in joined, joined  # labelled traces only
    store.dispose()


@pytest.mark.parametrize("kw", [{}, {"project": "p"}, {"aggregate": "count"}, {"aggregate": {"stars": "mean"}},
                                {"since_ns": NOW - 5 * DAY}])
def test_training_frame_read_in_sql_equals_the_full_frame_filtered(store_url, kw):
    """Since v8 only labelled traces' spans are read: the result is the full frame (every span read,
    as before) with its unlabelled rows dropped: same rows, same values."""
    import pandas as pd
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    for i in range(40):
        _trace(store, i, age_days=i / 4, project="p" if i % 5 else "q", spans=1 + i % 3)
    fb = [_fb(i, f"{i:032x}", float(i % 2)) for i in range(0, 40, 3)]
    fb += [{"id": f"st-{i}-{k}", "trace_id": f"{i:032x}", "name": "stars", "kind": "likert", "value": float(1 + (i + k) % 5),
            "created_at_ns": NOW + k} for i in range(0, 40, 4) for k in range(2)]
    fb += [{"id": f"cor-{i}", "trace_id": f"{i:032x}", "name": "fix", "kind": "correction", "value_text": f"better {i}",
            "created_at_ns": NOW} for i in range(0, 40, 7)]
    store.write_feedback(fb)
    for names in (["thumbs"], ["thumbs", "stars"], ["stars"]):
        full = store.training_frame(names, include_unlabelled=True, **kw)
        expected = full[full[names].notna().any(axis=1)].reset_index(drop=True)
        got = store.training_frame(names, **kw)
        assert len(got) > 0
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    # nothing labelled: the same empty frame, with a references column since corrections exist
    none = store.training_frame("nothing", **kw)
    full = store.training_frame("nothing", include_unlabelled=True, **kw)
    assert none.empty and list(none.columns) == list(full.columns) and "references" in none.columns
    store.dispose()
