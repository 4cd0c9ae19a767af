"""The CLI shapes users and scripts depend on, run as a user would (subprocess)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from autometrics.metricbank import list_metrics


def run(*args, check=True):
    exe = shutil.which("autometrics")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "autometrics._cli.main", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_fit_then_score_on_demo_data(tmp_path):
    out = tmp_path / "run"
    p = run("fit", "demo:simpeval", "--target", "score", "--task", "Simplify a sentence", "--out", str(out), "--no-progress", "--n-boot", "200")
    assert "held-out Kendall tau" in p.stdout and "95% CI" in p.stdout
    for name in ("evaluator.json", "report.html", "report.md"):
        assert (out / name).stat().st_size > 0
    scored = tmp_path / "scored.csv"
    p = run("score", str(out / "evaluator.json"), "demo:simpeval", "--out", str(scored), "--no-progress")
    df = pd.read_csv(scored)
    ev = json.loads((out / "evaluator.json").read_text())
    assert "autometrics_score" in df.columns and len(df) == 360
    assert {f["feature"] for f in ev["features"]} <= set(df.columns)
    assert {"id", "input", "output", "score"} <= set(df.columns)  # the input rows are kept


def test_fit_several_targets_writes_one_folder_each(tmp_path, datasets_dir):
    out = tmp_path / "multi"
    run("fit", str(datasets_dir / "simpda.csv"), "--target", "meaning", "--target", "fluency", "--out", str(out), "--no-progress", "--n-boot", "50")
    assert (out / "meaning" / "evaluator.json").exists() and (out / "fluency" / "report.html").exists()


def test_bad_input_gives_clear_error_and_exit_2(tmp_path):
    p = run("fit", "demo:simpeval", "--target", "scroe", "--out", str(tmp_path), check=False)
    assert p.returncode == 2 and "Did you mean 'score'" in p.stderr and "Traceback" not in p.stderr
    p = run("fit", str(tmp_path / "missing.csv"), "--target", "score", "--out", str(tmp_path), check=False)
    assert p.returncode == 2 and "file not found" in p.stderr


def test_bank_list_and_show():
    p = run("bank", "list")
    for name in list_metrics():
        assert name in p.stdout
    p = run("bank", "show", "BLEU")
    assert "## Metric Details" in p.stdout and "## Metric Card Authors" in p.stdout
    p = run("bank", "show", "BLUE", check=False)
    assert p.returncode == 2 and "BLEU" in p.stderr


@pytest.mark.slow
def test_fit_on_every_shared_dataset(tmp_path, datasets_dir):
    jobs = {
        "simpda": "simplicity",
        "summeval": "relevance",
        "topical_chat": "overall",
        "evalgen_product": "grade",
        "realhumaneval_chat": "copied",
    }
    for name, target in jobs.items():
        out = tmp_path / name
        run("fit", str(datasets_dir / f"{name}.csv"), "--target", target, "--out", str(out), "--no-progress", "--n-boot", "100")
        run("score", str(out), str(datasets_dir / f"{name}.csv"), "--out", str(out / "scored.csv"), "--no-progress")
