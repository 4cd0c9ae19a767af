"""The drift benchmarks stay runnable (their --quick modes on the lumpy support bot), and the
operator check (real `autometrics worker --once` processes) still alerts on outputs cut to three
words after six quiet rounds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str, timeout: int = 300) -> str:
    r = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_validity_benchmark_quick():
    out = _run("validity_detection.py", "--quick", "--datasets", "support_bot")
    row = next(line for line in out.splitlines() if line.startswith("| support_bot (stars)"))
    tau = float(row.split("|")[2])
    assert 0.3 < tau < 0.9, row  # the three styles carry the stars: the evaluator agrees with people
    assert re.search(r"\| \d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\] \(\d+/20k\) \|", row), row


def test_drift_benchmark_quick():
    pytest.importorskip("river", reason="the drift benchmark compares with river (pip install '.[bench]')")
    out = _run("drift_detection.py", "--quick", "--datasets", "support_bot")
    cut = next(line for line in out.splitlines() if line.startswith("| support_bot | cut_3_words"))
    median = int(cut.split("|")[3].split("/")[0])  # the CUSUM's median delay
    assert 0 < median <= 50, cut


@pytest.mark.slow
def test_operator_check_alerts_on_truncation_only(tmp_path):
    out = _run("drift_operator_check.py", "--datasets", "support_bot", "--out-dir", str(tmp_path))
    rounds = [line for line in out.splitlines() if line.lstrip().startswith("round ")]
    assert len(rounds) == 7, out
    assert all(" 0 drift alert(s)" in line for line in rounds[:6]), out
    assert " 1 drift alert(s)" in rounds[6] and "trace(s) after the estimated change point" in rounds[6], out
    assert "traffic_change:" in out and (tmp_path / "support_bot.html").exists()
