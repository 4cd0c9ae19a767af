"""Scoring on Dask with a real local cluster of worker processes: ``autometrics score --engine
dask`` writes the same file as one process, and ``autometrics backfill`` stores, for a store's
unscored traces, the same rows (scores, contributions, rationales) as the worker's own scoring."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("distributed", reason="needs dask[distributed] (the dev extra)")
pytestmark = pytest.mark.slow


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "autometrics._cli.main", *args], capture_output=True, text=True, timeout=600)


def test_score_on_dask_equals_one_process(fitted_store, tmp_path, datasets_dir):
    from autometrics.collectors.store import TraceStore

    champ = TraceStore(fitted_store).champion("p", "score")
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "evaluator.json").write_text(champ["artifact"] if isinstance(champ["artifact"], str)
                                                    else json.dumps(champ["artifact"]))
    rows = pd.read_csv(datasets_dir / "simpeval.csv")
    big = rows.sample(n=3000, replace=True, random_state=1).reset_index(drop=True)
    big["id"] = [f"r{i}" for i in range(len(big))]
    big.to_csv(tmp_path / "rows.csv", index=False)
    one = _cli("score", str(tmp_path / "ev"), str(tmp_path / "rows.csv"), "--out", str(tmp_path / "one.csv"), "--no-progress")
    assert one.returncode == 0, one.stderr[-2000:]
    dk = _cli("score", str(tmp_path / "ev"), str(tmp_path / "rows.csv"), "--out", str(tmp_path / "dask.csv"), "--engine", "dask",
              "--workers", "2")
    assert dk.returncode == 0, dk.stderr[-2000:]
    assert "a local cluster of 2 worker process(es)" in dk.stdout
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "dask.csv").read_bytes()
    bad = _cli("score", str(tmp_path / "ev"), str(tmp_path / "rows.csv"), "--out", str(tmp_path / "x.csv"), "--workers", "2")
    assert bad.returncode != 0 and "--scheduler and --workers apply to --engine dask" in bad.stderr


def test_backfill_on_dask_stores_what_the_worker_would(fitted_store, tmp_path):
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from monitor_data import simpeval, write_traces

    copies = {}
    for name in ("dask", "worker"):
        path = tmp_path / f"{name}.db"
        shutil.copy(fitted_store.removeprefix("sqlite:///"), path)
        store = TraceStore(f"sqlite:///{path}")
        write_traces(store, simpeval().iloc[:300], project="p", t0_ns=9_000_000_000, feedback=False)  # 300 new, unscored
        store.dispose()
        copies[name] = f"sqlite:///{path}"
    res = _cli("backfill", "--store", copies["dask"], "--project", "p", "--target", "score", "--workers", "2", "--batch-size", "120",
               "--settle-seconds", "0")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "scored 300 trace(s)" in res.stdout, res.stdout
    mon = Monitor(copies["worker"], MonitorConfig(target="score", project="p", settle_seconds=0, batch_size=120))
    assert mon.score_new(limit_batches=10) == 300
    cols = ["trace_id", "score", "metrics", "contributions", "rationales", "error", "trace_start_ns"]
    a, b = (TraceStore(u) for u in (copies["dask"], copies["worker"]))
    ev_id = a.champion("p", "score")["id"]
    fa = a.scores_frame(ev_id, columns=cols).sort_values("trace_id").reset_index(drop=True)
    fb = b.scores_frame(ev_id, columns=cols).sort_values("trace_id").reset_index(drop=True)
    assert len(fa) == 660
    pd.testing.assert_frame_equal(fa, fb)
    again = _cli("backfill", "--store", copies["dask"], "--project", "p", "--target", "score", "--workers", "1", "--settle-seconds", "0")
    assert again.returncode == 0 and "scored 0 trace(s)" in again.stdout


def test_benchmark_on_dask_gives_the_same_results(tmp_path, datasets_dir):
    """``autometrics benchmark --engine dask``: the MetricBank features scored on the cluster (CIDEr,
    a corpus-statistics metric, on the whole batch here) give every method the same τ per split."""
    common = [str(datasets_dir / "simpeval.csv"), "--target", "score", "--seeds", "2", "--methods", "best_metric,metametrics,autometrics",
              "--max-rows", "240", "--metrics", "LengthRatio,OutputLength,FKGL,LevenshteinRatio,CIDEr,InputSimilarity"]
    one = _cli("benchmark", *common, "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-2000:]
    dk = _cli("benchmark", *common, "--out", str(tmp_path / "dask"), "--engine", "dask", "--workers", "2")
    assert dk.returncode == 0, dk.stderr[-2000:]
    a, b = (json.loads((tmp_path / d / "benchmark.json").read_text()) for d in ("one", "dask"))
    assert b["settings"]["metric_scoring"] == "distributed" and a["settings"]["metric_scoring"] == "one process"
    assert a["shared"]["metric_features"] == b["shared"]["metric_features"] and "CIDEr" in a["shared"]["metric_features"]
    for ma, mb in zip(a["methods"], b["methods"], strict=True):
        assert ma["method"] == mb["method"] and ma["status"] == "ok"
        assert [s["tau"] for s in ma["per_seed"]] == [s["tau"] for s in mb["per_seed"]]
