"""`autometrics fit STORE --project P --target NAME`: the trace store read as the worker reads it
(real SQLite / Postgres stores filled through the real capture path or TraceStore writes), the
URL forms users type, the errors that name what the store does hold, ``training_frame()``'s
project, and the worker's one line per job on stderr."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time

import pandas as pd
import pytest


def _simpeval(n: int, offset: int = 0) -> pd.DataFrame:
    from autometrics.evaluators.data import builtin_dataset_path

    df = pd.read_csv(builtin_dataset_path("simpeval")).sample(frac=1.0, random_state=0).reset_index(drop=True)
    return df.iloc[offset:offset + n].reset_index(drop=True)


def _write(store, rows: pd.DataFrame, *, project: str, start_ns: int, name: str | None = "thumbs", prefix: str = "t",
           output: bool = True) -> list[str]:
    """One single-span trace per row, feedback ``name`` = score above 70 (a thumbs-like label)."""
    spans, fb, ids = [], [], []
    for i, r in enumerate(rows.itertuples()):
        tid = f"{prefix}{i:031x}"  # 32 characters, unique per prefix
        ids.append(tid)
        s = start_ns + i * 1_000_000
        spans.append({"trace_id": tid, "span_id": f"{i + 1:016x}", "name": "simplify", "project": project, "start_time_ns": s,
                      "end_time_ns": s + 500_000, "input": r.input, "output": r.output if output else None,
                      "attributes": "{}", "status": "UNSET"})
        if name:
            fb.append({"id": f"fb-{tid}", "trace_id": tid, "name": name, "kind": "thumbs", "value": float(r.score > 70),
                       "created_at_ns": s + 1000})
    store.write(spans, fb)
    return ids


def _fit(*args: str) -> tuple[int, str, str]:
    """`autometrics fit ...` in-process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from autometrics._cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["fit", *args])
    return rc, out.getvalue(), err.getvalue()


def _worker_frame(url: str, target: str, project: str) -> pd.DataFrame:
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    store = TraceStore(url)
    try:
        return Monitor(store, MonitorConfig(target=target, project=project)).labelled_frame()
    finally:
        store.dispose()


def _one_error(rc: int, err: str) -> str:
    assert rc == 2, err
    line = err.strip()
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in line, err
    return line


# --------------------------------------------------------------------------- the worker's frame, fitted


def test_fit_from_store_filled_by_capture_reads_the_worker_frame(capture, store_url, tmp_path):
    """@observe + feedback() into SQLite / Postgres, then `autometrics fit URL --project --target`:
    the evaluator is written and fitted on exactly the rows the worker's refit reads (another
    project's traces, a trace without output and categorical feedback are left out by both)."""
    from autometrics.collectors.store import TraceStore

    rows = _simpeval(60)
    capture.configure(store_url=store_url, project="bot", langfuse=False)
    ids: list[str] = []
    current = {}

    @capture.observe
    def simplify(sentence: str) -> str:
        ids.append(capture.current_trace_id())
        return current["output"]

    for r in rows.itertuples():
        current["output"] = r.output
        simplify(r.input)
        assert capture.feedback(ids[-1], "thumbs", not bool(r.score > 70)) is not None  # overwritten below: latest wins
        assert capture.feedback(ids[-1], "thumbs", bool(r.score > 70)) is not None
    assert capture.feedback(ids[0], "topic", "billing", kind="categorical") is not None
    assert capture.flush(30)
    store = TraceStore(store_url)
    _write(store, _simpeval(25, offset=100), project="other", start_ns=time.time_ns(), prefix="o")  # same name, other project
    _write(store, _simpeval(3, offset=200), project="bot", start_ns=time.time_ns(), prefix="n", output=False)  # no output
    store.dispose()

    out = tmp_path / "ev"
    rc, stdout, err = _fit(store_url, "--project", "bot", "--target", "thumbs", "--no-llm", "--out", str(out),
                           "--n-boot", "50", "--no-progress")
    assert rc == 0, err
    frame = _worker_frame(store_url, "thumbs", "bot")
    assert len(frame) == 60 and set(frame["id"]) == set(ids)
    art = json.loads((out / "evaluator.json").read_text())
    assert art["target"] == "thumbs" and art["features"]
    assert art["dataset"]["n_rows"] == art["dataset"]["n_labelled"] == len(frame)
    assert art["dataset"]["n_train"] + art["dataset"]["n_test"] == len(frame)
    assert art["label"]["kind"] == "binary"
    assert frame["thumbs"].sum() == (rows["score"] > 70).sum()  # the latest value of each trace
    assert f"read {len(frame)} labelled trace(s) from" in stdout and "project 'bot'" in stdout


def test_sdk_training_frame_honours_the_configured_project(capture, sqlite_url):
    from autometrics.collectors.store import TraceStore

    capture.configure(store_url=sqlite_url, project="mine", langfuse=False)

    mine: list[str] = []

    @capture.observe
    def answer(q: str) -> str:
        mine.append(capture.current_trace_id())
        return q.upper()

    for i in range(5):
        answer(f"q{i}")
        assert capture.feedback(mine[-1], "thumbs", True) is not None
    _write(TraceStore(sqlite_url), _simpeval(4), project="theirs", start_ns=time.time_ns(), prefix="x")
    df = capture.training_frame("thumbs")
    assert sorted(df["id"]) == sorted(mine) and set(df["project"]) == {"mine"}
    assert len(capture.training_frame("thumbs", project=None)) == 9  # every project, on request
    assert len(capture.training_frame("thumbs", project="theirs")) == 4


# --------------------------------------------------------------------------- URL forms


@pytest.fixture
def filled_sqlite(tmp_path):
    """A SQLite store: 40 labelled traces of project 'p' 30 days old, 40 from the last hour,
    10 unlabelled; 12 of project 'q' with feedback 'stars'."""
    from autometrics.collectors.store import TraceStore

    path = tmp_path / "data" / "app.db"
    store = TraceStore(f"sqlite:///{path}")
    now = time.time_ns()
    _write(store, _simpeval(40), project="p", start_ns=now - 30 * 86400 * 10**9, prefix="a")
    _write(store, _simpeval(40, offset=40), project="p", start_ns=now - 3600 * 10**9, prefix="b")
    _write(store, _simpeval(10, offset=80), project="p", start_ns=now - 60 * 10**9, prefix="c", name=None)
    _write(store, _simpeval(12, offset=90), project="q", start_ns=now, prefix="d", name="stars")
    store.dispose()
    return path


@pytest.mark.parametrize("form", ["abs4", "rel3", "db_path", "rel_db_path", "sqlite_suffix"])
def test_url_forms_all_read_the_same_store(filled_sqlite, monkeypatch, tmp_path, form):
    import shutil

    monkeypatch.chdir(tmp_path)
    path = filled_sqlite
    if form == "sqlite_suffix":
        path = tmp_path / "copy.sqlite"
        shutil.copy(filled_sqlite, path)
    data = {"abs4": f"sqlite:///{path}", "rel3": "sqlite:///data/app.db", "db_path": str(path), "rel_db_path": "data/app.db",
            "sqlite_suffix": str(path)}[form]
    assert form != "abs4" or data.startswith("sqlite:////")
    rc, stdout, err = _fit(data, "--project", "p", "--target", "thumbs", "--dry-run", "--out", str(tmp_path / "o"))
    assert rc == 0, err
    assert "read 80 labelled trace(s)" in stdout and "[thumbs] label: binary" in stdout and "80 labelled" in stdout


def test_since_keeps_recent_traces_like_the_worker_frame(filled_sqlite, tmp_path):
    url = f"sqlite:///{filled_sqlite}"
    frame = _worker_frame(url, "thumbs", "p")
    week = pd.Timestamp.now(tz="UTC") - pd.Timedelta(days=7)
    recent = frame[frame["start_time"] >= week]
    assert len(frame) == 80 and len(recent) == 40
    for since in ("7d", "168h", (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=10)).date().isoformat()):
        rc, stdout, err = _fit(url, "--project", "p", "--target", "thumbs", "--since", since, "--dry-run", "--out", str(tmp_path))
        assert rc == 0, err
        assert "read 40 labelled trace(s)" in stdout and "started since" in stdout
    rc, stdout, err = _fit(url, "--project", "p", "--target", "thumbs", "--since", "30m", "--no-llm", "--out", str(tmp_path / "e"))
    assert "since" in _one_error(rc, err) and "80 started earlier" in err and "Widen --since" in err


def test_since_rejects_what_is_not_a_duration_or_date(filled_sqlite, tmp_path):
    rc, _, err = _fit(str(filled_sqlite), "--project", "p", "--target", "thumbs", "--since", "last week", "--out", str(tmp_path))
    assert "--since 'last week'" in _one_error(rc, err) and "7d" in err


# --------------------------------------------------------------------------- errors that say what the store holds


def test_wrong_project_lists_the_projects(store_url, tmp_path):
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    _write(store, _simpeval(12), project="support", start_ns=time.time_ns(), prefix="s")
    _write(store, _simpeval(3, offset=20), project="search", start_ns=time.time_ns(), prefix="r")
    store.dispose()
    rc, _, err = _fit(store_url, "--target", "thumbs", "--out", str(tmp_path))  # default project: 'default'
    line = _one_error(rc, err)
    assert "no traces of project 'default'" in line and "'support' (12 traces), 'search' (3 traces)" in line
    assert "--project" in line
    if store_url.startswith("postgresql+psycopg://"):  # the driver-less form reads the same store (psycopg 3 picked)
        rc, _, err = _fit(store_url.replace("postgresql+psycopg://", "postgresql://"), "--target", "thumbs", "--out", str(tmp_path))
        assert _one_error(rc, err) == line


def test_wrong_target_lists_the_feedback_names(store_url, tmp_path):
    from autometrics.collectors.store import TraceStore

    store = TraceStore(store_url)
    _write(store, _simpeval(12), project="p", start_ns=time.time_ns(), prefix="s", name="stars")
    _write(store, _simpeval(5, offset=20), project="q", start_ns=time.time_ns(), prefix="r", name="thumbs")
    _write(store, _simpeval(4, offset=30), project="empty", start_ns=time.time_ns(), prefix="e", name=None)
    store.dispose()
    rc, _, err = _fit(store_url, "--project", "p", "--target", "thumb", "--out", str(tmp_path))
    line = _one_error(rc, err)
    assert "no feedback named 'thumb'" in line and "'stars' (12 traces)" in line and "--target" in line
    rc, _, err = _fit(store_url, "--project", "p", "--target", "thumbs", "--out", str(tmp_path))
    assert "'thumbs' exists in project 'q' (5 traces)" in _one_error(rc, err)
    rc, _, err = _fit(store_url, "--project", "empty", "--target", "nothing", "--out", str(tmp_path))
    assert "no feedback there at all" in _one_error(rc, err) and "autometrics.feedback(" in err


def test_empty_store_and_non_stores(store_url, tmp_path):
    from autometrics.collectors.store import TraceStore

    TraceStore(store_url).dispose()  # schema, no traces
    rc, _, err = _fit(store_url, "--target", "thumbs", "--out", str(tmp_path))
    assert "has no traces yet" in _one_error(rc, err)


def test_labels_without_numbers_or_outputs_are_explained(tmp_path):
    from autometrics.collectors.store import TraceStore

    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = TraceStore(url)
    ids = _write(store, _simpeval(12), project="p", start_ns=time.time_ns(), prefix="s", name=None)
    store.write(feedback_rows=[{"id": f"c{i}", "trace_id": t, "name": "topic", "kind": "categorical", "value_text": "billing",
                                "created_at_ns": 1} for i, t in enumerate(ids)])
    _write(store, _simpeval(12, offset=20), project="p", start_ns=time.time_ns(), prefix="n", name="thumbs", output=False)
    store.dispose()
    rc, _, err = _fit(url, "--project", "p", "--target", "topic", "--out", str(tmp_path))
    assert "no numeric value" in _one_error(rc, err) and "categorical" in err
    rc, _, err = _fit(url, "--project", "p", "--target", "thumbs", "--out", str(tmp_path))
    assert "no captured output" in _one_error(rc, err)


def test_mangled_and_missing_sqlite_urls(filled_sqlite, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    abs_path = str(filled_sqlite)
    # three slashes before an absolute path: relative to the current folder, which has no such file
    rc, _, err = _fit(f"sqlite://{abs_path}", "--project", "p", "--target", "thumbs", "--out", "o")
    line = _one_error(rc, err)
    assert "file not found" in line and f"sqlite:///{abs_path}" in line and "four slashes" in line
    # one slash (what Path() made of the URL before): named, with the URL that works
    rc, _, err = _fit(f"sqlite:{abs_path}", "--target", "thumbs", "--out", "o")
    assert f"did you mean sqlite:///{abs_path}?" in _one_error(rc, err)
    rc, _, err = _fit("sqlite://", "--target", "thumbs", "--out", "o")
    assert "not a SQLite URL" in _one_error(rc, err)
    rc, _, err = _fit("sqlite:///:memory:", "--target", "thumbs", "--out", "o")
    assert "in-memory" in _one_error(rc, err)
    rc, _, err = _fit("missing.db", "--target", "thumbs", "--out", "o")
    assert "no SQLite trace store at" in _one_error(rc, err) and not (tmp_path / "missing.db").exists()  # never created
    (tmp_path / "notes.db").write_text("not a database")
    rc, _, err = _fit("notes.db", "--target", "thumbs", "--out", "o")
    assert "file is not a database" in _one_error(rc, err)


def test_foreign_sqlite_file_is_refused_untouched(tmp_path):
    import sqlite3

    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE users (id INTEGER)")
    before = path.read_bytes()
    rc, _, err = _fit(str(path), "--target", "thumbs", "--out", str(tmp_path / "o"))
    assert "not an autometrics trace store" in _one_error(rc, err)
    assert path.read_bytes() == before  # not switched to WAL, no table added


def test_store_flags_on_a_file_and_other_schemes(tmp_path):
    rc, _, err = _fit("demo:simpeval", "--target", "score", "--project", "p", "--out", str(tmp_path))
    assert "--project applies to a trace store only" in _one_error(rc, err)
    rc, _, err = _fit("demo:simpeval", "--target", "score", "--since", "7d", "--out", str(tmp_path))
    assert "drop --since" in _one_error(rc, err)
    rc, _, err = _fit("https://user:hunter2@example.com/data.csv", "--target", "score", "--out", str(tmp_path))
    line = _one_error(rc, err)
    assert "'https' is not a supported data source" in line and "hunter2" not in line


def test_unreachable_postgres_is_one_line_without_the_password(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _, err = _fit(f"postgresql://u:hunter2@127.0.0.1:{port}/db", "--target", "thumbs", "--out", str(tmp_path))
    line = _one_error(rc, err)
    assert "cannot open the trace store postgresql+" in line and "hunter2" not in line and "***" in line


# --------------------------------------------------------------------------- the worker's log lines


def _worker(url: str, *extra: str, home) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "AUTOMETRICS_"))}
    env["AUTOMETRICS_HOME"] = str(home)
    cmd = [sys.executable, "-m", "autometrics._cli.main", "worker", "--store", url, "--project", "p", "--target", "thumbs",
           "--no-llm", "--n-boot", "50", "--langfuse", "off", "--settle-seconds", "0", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_worker_logs_one_line_per_job_on_stderr(filled_sqlite, tmp_path):
    from autometrics.collectors.store import TraceStore

    url = f"sqlite:///{filled_sqlite}"
    p = _worker(url, "--once", "--min-new-feedback", "1", home=tmp_path / "h")
    assert p.returncode == 0, p.stderr
    assert "refit promoted v1" in p.stdout and "scored 90 traces" in p.stdout
    lines = [x for x in p.stderr.splitlines() if "autometrics.worker" in x]
    assert len(lines) == 2 and " INFO autometrics.worker: worker p/thumbs job refit: refit promoted v1" in lines[0]
    # the refit's alerts (here: its held-out set is small) are logged and counted with the scoring job's
    n_alerts = int(re.search(r"scored 90 traces; (\d+) new alert", p.stdout).group(1))
    assert " INFO autometrics.worker: worker p/thumbs job score: scored 90 trace(s) " in lines[1]
    assert (" no new alert" in lines[1]) == (n_alerts == 0)
    if n_alerts:
        assert len(re.search(r"alerts: ([a-z_; ]+)", lines[1]).group(1).split("; ")) == n_alerts
    assert "dashboard " in lines[1]
    # a short scheduled run: the refit job and the scoring job each log their line (nothing on stdout per job)
    store = TraceStore(url)
    _write(store, _simpeval(30, offset=120), project="p", start_ns=time.time_ns(), prefix="z")
    store.dispose()
    p = _worker(url, "--run-for", "8", "--refit-interval", "60", "--min-new-feedback", "0", "--score-interval", "60",
                home=tmp_path / "h")
    assert p.returncode == 0, p.stderr
    jobs = [x.split(" job ", 1)[1] for x in p.stderr.splitlines() if " INFO autometrics.worker: worker p/thumbs job " in x]
    assert any(j.startswith("refit: refit ") and ("promoted v2" in j or "rejected v2" in j) for j in jobs), p.stderr
    assert any(re.match(r"score: scored \d+ trace\(s\) (no new alert|alerts: )", j) for j in jobs), p.stderr
    assert "job " not in p.stdout


def test_several_targets_each_fit_on_their_own_worker_frame(tmp_path):
    """--target thumbs --target stars: one row per trace labelled with either, each evaluator
    fitted on exactly its own worker frame (the rows without its label are excluded, not zeros)."""
    from autometrics.collectors.store import TraceStore

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = TraceStore(url)
    rows = _simpeval(70)
    ids = _write(store, rows, project="p", start_ns=time.time_ns(), prefix="m")
    store.write(feedback_rows=[{"id": f"s{i}", "trace_id": t, "name": "stars", "kind": "likert", "value": float(1 + int(s) % 5),
                                "created_at_ns": time.time_ns()} for i, (t, s) in enumerate(zip(ids[20:], rows["score"][20:], strict=True))])
    store.dispose()
    rc, stdout, err = _fit(url, "--project", "p", "--target", "thumbs", "--target", "stars", "--no-llm", "--n-boot", "20",
                           "--no-progress", "--out", str(tmp_path / "o"))
    assert rc == 0, err
    assert "read 70 labelled trace(s)" in stdout
    for target, n in (("thumbs", 70), ("stars", 50)):
        assert len(_worker_frame(url, target, "p")) == n
        art = json.loads((tmp_path / "o" / target / "evaluator.json").read_text())
        assert art["dataset"]["n_labelled"] == n and art["target"] == target


def test_one_training_frame_for_the_sdk_the_cli_and_the_worker(sqlite_url):
    """``autometrics.training_frame``, ``autometrics fit sqlite:///…`` and the worker's refit read one
    frame: same traces (labelled, with an output), same labels, same order."""
    from autometrics._cli.store_source import store_training_frame
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    store = TraceStore(sqlite_url)
    _write(store, _simpeval(30), project="p", start_ns=1_000_000_000)
    _write(store, _simpeval(5, offset=30), project="p", start_ns=2_000_000_000, prefix="n", output=False)  # no output
    _write(store, _simpeval(5, offset=35), project="p", start_ns=3_000_000_000, prefix="u", name=None)  # no feedback
    sdk = store.training_frame("thumbs", project="p")
    worker = Monitor(store, MonitorConfig(target="thumbs", project="p")).labelled_frame()
    cli = store_training_frame(sqlite_url, ["thumbs"], "p")
    store.dispose()
    assert len(sdk) == 30 and sdk["output"].notna().all()
    cols = ["id", "input", "output", "thumbs", "start_time"]
    pd.testing.assert_frame_equal(sdk[cols], worker[cols])
    pd.testing.assert_frame_equal(sdk[cols], cli[cols])
