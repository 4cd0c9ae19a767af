"""Every warning the CLI prints during a fit is in its report and its artifact, once (issue #28):
METEOR without WordNet falls back to exact + stem matching, and the report says so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys


def _fit(out, env) -> subprocess.CompletedProcess:
    exe = shutil.which("autometrics")
    cmd = [exe] if exe else [sys.executable, "-m", "autometrics._cli.main"]
    cmd += ["fit", "demo:simpeval", "--target", "score", "--metrics", "METEOR,LengthRatio,BLEU", "--out", str(out),
            "--n-boot", "50", "--permutations", "19", "--folds", "3", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_warnings_printed_during_a_fit_are_in_the_report_and_artifact(tmp_path):
    empty = tmp_path / "no-wordnet"
    empty.mkdir()  # a WordNet folder without WordNet: METEOR runs without synonyms
    out = tmp_path / "fit"
    proc = _fit(out, {**os.environ, "AUTOMETRICS_WORDNET_DIR": str(empty)})
    printed = [m.group(1) for m in re.finditer(r"^WARNING \S+: (.+)$", proc.stderr, flags=re.M)]
    assert any("METEOR: no WordNet found" in w for w in printed), proc.stderr
    assert "`" not in proc.stderr  # the install hint's code spans are plain text on the terminal
    assert "no WordNet found" not in proc.stdout  # printed once, not again in the summary

    warnings = json.loads((out / "evaluator.json").read_text())["warnings"]
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    assert "No warnings." not in page
    for line in printed:  # every warning the terminal showed, once in each output
        kept = [w for w in warnings if line == w.replace("`", "")]
        assert len(kept) == 1, (line, warnings)
        assert md.count(f"- ⚠ {kept[0]}") == 1
        assert page.count(line.split("(")[0]) == 1
    meteor = next(w for w in warnings if w.startswith("METEOR: no WordNet found"))
    assert "exact + stem matching only" in meteor and "<code>sudo apt-get install wordnet-base</code>" in page
