"""No script in any page: every text that a user (``--task``, the label name), the data or an LLM
(criteria, rubrics, instructions, rationales, generated cards) wrote is shown as text in the HTML
report, checked on the DOM that headless Chromium built after running the page."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.judges.generate import GeneratorCounts
from autometrics.evaluators.judges.options import LLMOptions
from autometrics.evaluators.report import render_html, safe_markdown

# each payload tries to create a live element whose id starts with "inj", or to run a script
PAYLOADS = [
    '<img id="inj-img" src="x" onerror="document.title=\'PWNED\'">',
    '<script id="inj-script">document.title="PWNED"</script>',
    '<div id="inj-div" onmouseover="alert(1)">x</div>',
    '[click](javascript:document.title="PWNED")',
    '<svg id="inj-svg" onload="document.title=\'PWNED\'"></svg>',
    '"><b id="inj-attr">',
]


def _poison(value, i=[0]):  # noqa: B006 - a counter shared by the recursion
    """Every string in a nested structure gets a payload appended (keys are kept)."""
    if isinstance(value, str):
        i[0] += 1
        return value + " " + PAYLOADS[i[0] % len(PAYLOADS)]
    if isinstance(value, dict):
        return {k: _poison(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v) for v in value]
    return value


def _live_injections(dom: str) -> list[str]:
    return re.findall(r"<[a-z]+\b[^<>]*\bid=\"inj[^\"]*\"", dom) + re.findall(r"href=\"javascript:", dom, re.I)


def test_safe_markdown_keeps_formatting_and_drops_raw_html():
    out = safe_markdown("**bold** <b id=\"inj\">x</b> [a](javascript:alert(1)) [b](https://example.org)\n\n| a |\n|---|\n| <i>c</i> |")
    assert "<strong>bold</strong>" in out and "<table>" in out
    assert "&lt;b id=" in out and "&lt;i&gt;" in out
    assert "javascript:" not in out and 'href="https://example.org"' in out


@pytest.mark.browser
def test_llm_report_with_payloads_runs_no_injected_code(fake, tmp_path, monkeypatch):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium not installed (apt-get install chromium); .ci/run installs it")
    pytest.importorskip("dspy", reason="the generated judges need the `llm` extra (dspy)")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    rng = np.random.default_rng(0)
    rows = [{"id": f"r{i}", "input": f"question {i}", "output": " ".join(["word"] * k), "score": k + rng.normal(0, 0.3)}
            for i, k in enumerate(rng.integers(1, 6, size=40))]
    counts = GeneratorCounts(n_single=2, n_rubric=1, n_example=0, n_optimized=0)
    with fake(judge=lambda t: max(1, min(5, len(t.split())))) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=counts, rationales=2, backoff=0.01)
        res = fit_evaluator(pd.DataFrame(rows), "score", task="Answer briefly " + PAYLOADS[0], llm_options=opts, n_boot=50)
    a = res.evaluator.artifact
    assert a.get("generated") and a.get("llm")
    # what an LLM repeating a payload would have written, everywhere it writes (and the warnings)
    for key in ("generated", "llm", "retrieval", "warnings"):
        if a.get(key):
            a[key] = _poison(a[key])
    a["target"] = 'score<b id="inj-target">'
    page = tmp_path / "report.html"
    page.write_text(render_html(res), encoding="utf-8")
    assert "PWNED" in page.read_text()  # the payloads are in the page, as text
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--no-first-run", "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'id="heldout-tau"' in dom and "Kendall τ" in dom  # the page rendered (cross-fitted or held-out figure)
    assert _live_injections(dom) == []
    assert "<title>AutoMetrics report" in dom and "PWNED</title>" not in dom
