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
    assert "cross-fitted Kendall tau" in p.stdout and "95% CI" in p.stdout
    assert "[score] validated: cross-fitted τ" in p.stdout and "fitted on all 360 labelled rows" in p.stdout
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


def test_bank_list_prints_full_reasons_why_metrics_cannot_run(tmp_path, monkeypatch):
    """The table shows a short status; the full reason (where it looked, how to fix it) follows,
    wrapped to the terminal width and never cut, and `--unavailable` prints only those blocks."""
    from autometrics.metricbank import default_metrics, metric_class

    monkeypatch.setenv("AUTOMETRICS_MODELS_DIR", str(tmp_path / "no-models"))  # the subprocess inherits these
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hub"))
    monkeypatch.setenv("COLUMNS", "80")
    why: dict[str, str] = {}
    default_metrics(unavailable=why)  # the same reasons, computed here
    if not why:
        pytest.skip("every metric can run here")

    def flat(text):
        return " ".join(text.split())

    full = run("bank", "list").stdout
    table, _, notes = full.partition("\nWhy ")
    header = table.splitlines()[0]
    status_col = slice(header.index("status"), header.index("description"))
    for name, reason in why.items():
        row = next(r for r in table.splitlines() if r.startswith(name + " "))
        assert row[status_col].strip() in {"no weights", "no package", "unavailable"}
        assert flat(reason) not in flat(row)
        assert flat(reason) in flat(notes), f"{name}: full reason missing from `bank list`"
    for line in notes.splitlines():  # wrapped at 80 columns; only a single unbreakable word may overrun
        assert len(line) <= 80 or len(line.split()) == 1 or line.split()[0] in why, line

    only = run("bank", "list", "--unavailable").stdout
    assert only.startswith(f"{len(why)} of {len(list_metrics())} metrics cannot run here")
    headers = [line.split()[0] for line in only.splitlines()[1:] if line and not line.startswith(" ")]
    assert headers == sorted(why, key=str.lower)
    for reason in why.values():
        assert flat(reason) in flat(only)
    model_based = [n for n in why if hasattr(metric_class(n), "resources")]
    for name in model_based:  # the declared resources of model metrics, and where to read more
        head = next(line for line in only.splitlines() if line.startswith(name + " "))
        assert "GB GPU" in head and f"bank show {name}" in head


@pytest.mark.heavy  # ~2 min on 2 cores: opt-in (`.ci/test python -m pytest -m heavy`); the CLI fit runs in CI on the demo data
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


def test_scored_csv_is_spreadsheet_safe(tmp_path, datasets_dir):
    """Cells a spreadsheet would run (=, +, -, @, tab first) are written with a leading apostrophe,
    counted in the output; plain negative numbers stay numbers; --raw-csv writes them as they were."""
    import csv

    out = tmp_path / "run"
    run("fit", "demo:simpeval", "--target", "score", "--out", str(out), "--no-progress", "--n-boot", "50")
    src = pd.read_csv(datasets_dir / "simpeval.csv").head(30)
    hostile = ["=HYPERLINK(\"http://x.invalid\",\"click\")", "+cmd|' /C calc'!A0", "@SUM(A1:A2)", "\t=1+1", "-2+3+cmd|' /C x'!A0"]
    for k, cell in enumerate(hostile):
        src.loc[k, "output"] = cell + " " + src.loc[k, "output"]
        src.loc[k + 10, "input"] = cell
    src.loc[20, "id"] = "=1+2"
    src.loc[21, "input"] = "-0.5"  # a number written as text: not a formula
    data = tmp_path / "hostile.csv"
    src.to_csv(data, index=False)
    safe = tmp_path / "safe.csv"
    p = run("score", str(out / "evaluator.json"), str(data), "--out", str(safe), "--no-progress")
    assert "11 cells start with =, +, -, @ or a tab" in p.stdout
    with open(safe, newline="", encoding="utf-8") as f:
        cells = [c for row in csv.reader(f) for c in row]
    live = [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r")) or (c.startswith("-") and not _number(c))]
    assert live == []
    assert "-0.5" in cells and any(c.startswith("'=HYPERLINK") for c in cells)
    raw = tmp_path / "raw.csv"
    run("score", str(out / "evaluator.json"), str(data), "--out", str(raw), "--no-progress", "--raw-csv")
    with open(raw, newline="", encoding="utf-8") as f:
        assert "=1+2" in [c for row in csv.reader(f) for c in row]


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
