"""The last probe failures: a full disk and a symlink loop are named with their path and
the fix; a killed or terminated run leaves no temporary behind; an evaluator.json with a
format_version the package does not know is refused; NUL bytes in feedback are refused with the
field named; a comment cut to the limit carries a marker and is counted in the answer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from autometrics._cli.main import main
from autometrics.evaluators.data import builtin_dataset_path

ROWS = pd.read_csv(builtin_dataset_path("simpeval")).head(60)


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_full_disk_names_the_file_and_the_fix(tmp_path, good_run, monkeypatch, capsys):
    """Writes go to /dev/full, which fails every write with ENOSPC from the kernel: the one error
    line names the file that could not be written and what to do; the previous file stays."""
    import autometrics.collectors.files as files

    data = tmp_path / "data.csv"
    ROWS.to_csv(data, index=False)
    scored = tmp_path / "scored.csv"
    scored.write_text("previous scores\n")
    real = files.os.fdopen

    def full(fd, mode="r", **kw):
        os.close(fd)
        return real(os.open("/dev/full", os.O_WRONLY), mode, **kw)

    monkeypatch.setattr(files.os, "fdopen", full)
    code, _, err = _run(["score", good_run, data, "--out", scored, "--no-progress"], capsys)
    line = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2 and len(line) == 1, err
    assert "No space left on device" in line[0] and str(scored) in line[0] and "free space" in line[0]
    assert scored.read_text() == "previous scores\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_symlink_loop_is_called_a_symlink_loop(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    data = tmp_path / "data.csv"
    ROWS.to_csv(data, index=False)
    code, _, err = _run(["score", a, data, "--out", tmp_path / "s.csv", "--no-progress"], capsys)
    assert code == 2 and "UTF-8" not in err and "symbolic link" in err and str(a) in err, err


def test_temporaries_of_a_killed_writer_are_swept_by_the_next_write(tmp_path, good_run, capsys):
    """A real process stages evaluator.json and is killed (-9) before renaming it: its temporary
    stays; the next fit into that folder removes it.  A live writer's temporary is never touched."""
    out = tmp_path / "run"
    shutil.copytree(good_run, out)
    code = ("import os, sys, signal; from pathlib import Path; from autometrics.collectors import files; "
            "files._write_temp(Path(sys.argv[1]), b'half'); os.kill(os.getpid(), signal.SIGKILL)")
    p = subprocess.run([sys.executable, "-c", code, str(out / "evaluator.json")], capture_output=True, timeout=60)
    assert p.returncode == -signal.SIGKILL
    left = [f for f in out.iterdir() if f.name.endswith(".tmp")]
    assert len(left) == 1 and f".{p.args[0] and 'evaluator.json'}." in left[0].name
    live = out / f".report.md.{os.getppid()}.x.tmp"  # a writer that still runs
    live.write_text("in progress")
    data = tmp_path / "data.csv"
    ROWS.to_csv(data, index=False)
    assert _run(["fit", data, "--target", "score", "--n-boot", "20", "--no-progress", "--out", out], capsys)[0] == 0
    assert [f.name for f in out.iterdir() if f.name.endswith(".tmp")] == [live.name]


def test_sigterm_ends_a_fit_cleanly_with_143(tmp_path):
    """SIGTERM (a container stop) ends the command as an exception: status 143, one line, no traceback,
    no temporary left in --out."""
    exe = shutil.which("autometrics")
    cmd = [exe] if exe else [sys.executable, "-m", "autometrics._cli.main"]
    out = tmp_path / "run"
    proc = subprocess.Popen([*cmd, "fit", "demo:simpeval", "--target", "score", "--n-boot", "1000", "--no-progress",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(6)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (143, 0), err  # 0: it finished before the signal (a fast machine)
    assert "Traceback" not in err
    if out.exists():
        assert [f.name for f in out.rglob("*.tmp")] == []


@pytest.mark.parametrize("version", [0, "1", 1.5, True, None, -1])
def test_an_unknown_format_version_is_refused(tmp_path, good_run, version, capsys):
    art = json.loads((good_run / "evaluator.json").read_text())
    if version is None:
        del art["format_version"]
    else:
        art["format_version"] = version
    bad = tmp_path / "evaluator.json"
    bad.write_text(json.dumps(art))
    data = tmp_path / "data.csv"
    ROWS.to_csv(data, index=False)
    code, _, err = _run(["score", bad, data, "--out", tmp_path / "s.csv", "--no-progress"], capsys)
    from autometrics.evaluators.evaluator import ARTIFACT_VERSION

    assert code == 2 and "format_version" in err and f"whole number from 1 to {ARTIFACT_VERSION}" in err, err
    assert not (tmp_path / "s.csv").exists()
    art["format_version"] = ARTIFACT_VERSION + 1
    bad.write_text(json.dumps(art))
    code, _, err = _run(["score", bad, data, "--out", tmp_path / "s.csv", "--no-progress"], capsys)
    assert code == 2 and "upgrade autometrics-sdk" in err


def test_nul_bytes_and_long_comments_through_the_sdk(tmp_path):
    """The SDK refuses a NUL byte in a feedback name, id, source, comment or value (the field named)
    and stores a too-long comment cut, with a marker and a counter."""
    import autometrics
    from autometrics.collectors.feedback import MAX_COMMENT_CHARS
    from autometrics.collectors.store import TraceStore

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    autometrics.configure(store_url=url, feedback_errors="raise", langfuse=False)
    try:
        @autometrics.observe(name="answer")
        def answer(q):
            return {"trace": autometrics.current_trace_id(), "text": q.upper()}

        tid = answer("hello")["trace"]
        for field, kw in (("name", {"name": "good\x00bad"}), ("id", {"id": "abc\x00"}),
                          ("source", {"source": "app\x00"}), ("comment", {"comment": "ok\x00"})):
            args = {"name": "thumbs", "value": True, **kw}
            with pytest.raises(ValueError, match=rf"{field} contains a NUL byte"):
                autometrics.feedback(tid, args.pop("name"), args.pop("value"), **args)
        fid = autometrics.feedback(tid, "thumbs", True, comment="x" * 900_000)
        assert autometrics.flush(10)
        assert autometrics.stats()["feedback_truncated"] == 1
    finally:
        autometrics.shutdown()
    fb = TraceStore(url).feedback_frame()
    row = fb[fb["id"] == fid].iloc[0]
    assert len(row["comment"]) == MAX_COMMENT_CHARS
    kept = MAX_COMMENT_CHARS - len(" [… truncated by autometrics: 900,000 characters, the first 9,999 kept]")
    assert row["comment"] == "x" * kept + f" [… truncated by autometrics: 900,000 characters, the first {kept:,} kept]"


def _post(url, items):
    req = urllib.request.Request(f"{url}/v1/feedback", data=json.dumps(items).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _health(url):
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def collector(tmp_path):
    from autometrics.collectors.server import CollectorServer

    url = f"sqlite:///{tmp_path / 'store' / 'traces.db'}"
    srv = CollectorServer(url, port=0, allow_no_auth=True, langfuse="off").start()
    yield srv, url
    srv.stop()


def test_the_collector_refuses_nul_and_says_what_it_cut(collector):
    """Over HTTP: a NUL byte refuses the request (400, the item and field named, nothing stored);
    a long comment is stored cut with a marker, and the answer counts and says it."""
    from autometrics.collectors.store import TraceStore

    col, url = collector
    tid = "ab" * 16
    code, body = _post(col.url, [{"trace_id": tid, "name": "thumbs", "value": True},
                                 {"trace_id": tid, "name": "thu\x00mbs", "value": True}])
    assert code == 400 and body["accepted"] == 0
    assert body["errors"][0]["index"] == 1 and body["errors"][0]["field"] == "name" and "NUL" in body["error"]
    code, body = _post(col.url, [{"trace_id": tid, "name": "thumbs", "value": True, "comment": "y" * 50_000}])
    assert code == 200 and body["accepted"] == 1 and body["truncated"] == 1 and "item 0 comment" in body["warnings"][0]
    fb = TraceStore(url).feedback_frame()
    assert len(fb) == 1 and "truncated by autometrics: 50,000 characters" in fb["comment"].iloc[0]


@pytest.mark.parametrize("how", ["deleted", "folder removed"])
def test_a_collector_whose_sqlite_file_is_deleted_acknowledges_only_what_it_stored(collector, how):
    """The store file (or its folder) is removed under a running collector: what it acknowledges
    afterwards is in the file at the store's path (reopened), and /health stops saying ``ok``."""
    from autometrics.collectors.store import TraceStore

    col, url = collector
    path = Path(url[len("sqlite:///"):])
    tid = "cd" * 16
    assert _post(col.url, [{"trace_id": tid, "name": "thumbs", "value": True, "id": "before"}])[0] == 200
    assert _health(col.url)[1]["store"] == "ok"
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    else:
        shutil.rmtree(path.parent)
    ids = []
    for k in range(5):
        code, body = _post(col.url, [{"trace_id": tid, "name": "thumbs", "value": bool(k % 2), "id": f"after-{k}"}])
        assert code == 200, body
        ids += body["ids"]
    stored = set(TraceStore(url).feedback_frame()["id"])
    assert set(ids) <= stored  # every acknowledged item is in the file at the path
    code, h = _health(col.url)
    assert h["store"] == "reopened" and h["status"] == "degraded" and h["counters"]["store_reopened"] >= 1


def test_a_span_re_posted_with_other_content_is_a_conflict_and_said(collector):
    """The same OTLP request twice is a retry (stored once, nothing said); a span re-posted under
    its ids with another name is not stored over the first, and the answer counts and names it."""
    from autometrics.collectors.store import TraceStore
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    from otlp_client import otlp_request, post

    col, url = collector
    hdr = {"Content-Type": "application/x-protobuf"}
    req = otlp_request(3, trace_byte=7)
    for _ in range(2):
        code, body, _ = post(col.url, "/v1/traces", req.SerializeToString(), hdr)
        resp = ExportTraceServiceResponse.FromString(body)
        assert code == 200 and resp.partial_success.rejected_spans == 0 and not resp.partial_success.error_message
    req.resource_spans[0].scope_spans[0].spans[1].name = "something else"
    code, body, _ = post(col.url, "/v1/traces", req.SerializeToString(), hdr)
    resp = ExportTraceServiceResponse.FromString(body)
    assert code == 200 and resp.partial_success.rejected_spans == 1
    assert "already stored with other content" in resp.partial_success.error_message
    assert "differs in name" in resp.partial_success.error_message
    sp = TraceStore(url).spans_frame()
    assert len(sp) == 3 and "something else" not in set(sp["name"])
    assert _health(col.url)[1]["counters"]["spans_conflict"] == 1


def test_spans_from_a_wrong_clock_are_dated_by_arrival(collector):
    """Spans dated 2100 and 1970 (a sender's broken clock): kept with their own times, flagged in
    the answer and counted, and their traces are dated by arrival, so `prune --older-than 1d`
    keeps them and the scoring worker's unscored-trace query sees them."""
    from autometrics.collectors.store import TraceStore
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    from otlp_client import otlp_request, post

    col, url = collector
    req = otlp_request(4, trace_byte=9)
    spans = req.resource_spans[0].scope_spans[0].spans
    for k, start in enumerate((4_102_444_800, 4_102_444_800, 1, 86_400)):  # 2100-01-01, 2100, 1970
        spans[k].start_time_unix_nano = start * 10**9 + k
        spans[k].end_time_unix_nano = start * 10**9 + k + 10**9
    before = time.time_ns()
    code, body, _ = post(col.url, "/v1/traces", req.SerializeToString(), {"Content-Type": "application/x-protobuf"})
    resp = ExportTraceServiceResponse.FromString(body)
    assert code == 200 and resp.partial_success.rejected_spans == 0
    assert "4 span(s) start before 2000 or more than 5 minutes ahead" in resp.partial_success.error_message
    store = TraceStore(url)
    sp = store.spans_frame()
    assert len(sp) == 4
    with store.engine.connect() as conn:
        seen = [r[0] for r in conn.exec_driver_sql("SELECT first_seen_ns FROM traces")]
    assert len(seen) == 4 and all(before <= s <= time.time_ns() for s in seen)
    assert store.prune("1d").traces == 0 and store.count("traces") == 4
    assert _health(col.url)[1]["counters"]["spans_clock_skew"] == 4
