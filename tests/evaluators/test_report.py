"""The report: Markdown content, a self-contained HTML page, and a real render in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.report import render_markdown, write_reports


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    res = fit_evaluator("demo:simpeval", "score", task="Simplify a sentence", n_boot=100)
    out = tmp_path_factory.mktemp("report")
    return res, write_reports(res, out)


def test_markdown_has_every_part(written):
    res, paths = written
    md = paths["markdown"].read_text()
    assert "Cross-fitted (every row predicted by a fit without it): τ =" in md and "95% CI" in md
    assert "## Validity" in md and ("✔ Validated" in md) == res.evaluator.validated
    for f in res.evaluator.features:
        assert f"`{f['feature']}`" in md
    assert "#### Metric Details" in md  # cards of selected metrics, headings demoted
    assert "## Warnings" in md
    assert render_markdown(res) == md


def test_html_is_self_contained(written):
    _, paths = written
    page = paths["html"].read_text()
    assert "<svg" in page and "Cross-fitted Kendall" in page and "id='validity'" in page
    # no external resources of any kind: works offline, no CDN
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page


def test_unavailable_bank_metrics_are_listed_not_fatal(written):
    res, paths = written
    un = res.evaluator.artifact["unavailable_metrics"]
    # model-based metrics without local weights are skipped with their reason, never a crash
    if not un:
        pytest.skip("every MetricBank metric can run in this environment")
    name, reason = next(iter(un.items()))
    assert reason.strip()
    assert name not in {f["metric"]["name"] for f in res.evaluator.features}
    assert "id='unavailable'" in paths["html"].read_text()


def test_warnings_appear_for_small_data(tmp_path):
    import pandas as pd

    df = pd.read_csv(__import__("autometrics").evaluators.data.builtin_dataset_path("simpeval")).head(40)
    res = fit_evaluator(df, "score", n_boot=50, test_size=0.3)  # the held-out protocol's own warnings
    md = render_markdown(res)
    assert "only 40 labelled examples" in md
    assert "more candidate metrics" in md
    cross = render_markdown(fit_evaluator(df.head(30), "score", n_boot=50))  # cross-fitted: the verdict says what helps
    assert "Not validated — treat its scores as unvalidated" in cross and "not validated:" in cross


@pytest.mark.browser
def test_html_renders_in_headless_chromium(written, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium not installed (apt-get install chromium); .ci/run installs it")
    _, paths = written
    common = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
        "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*common, "--dump-dom", paths["html"].as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="heldout-tau"' in dom.stdout and "<svg" in dom.stdout and 'id="selected"' in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run([*common, "--window-size=1200,1600", f"--screenshot={shot}", paths["html"].as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000  # a blank page compresses to a few KB
    # the page is not blank: a good share of pixels differ from the background colour
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def _outside_code(text: str) -> str:
    """``text`` without its code (Markdown code spans and fences, HTML <code>/<pre>), where a
    backslash or a dollar sign is literal (a regex, $AUTOMETRICS_MODELS_DIR)."""
    text = re.sub(r"<(code|pre)>.*?</\1>", "", text, flags=re.S)
    return re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)


def test_every_metric_card_shows_its_formulas_as_text(written):
    import copy
    import dataclasses

    from autometrics.evaluators.evaluator import Evaluator
    from autometrics.evaluators.report import render_html
    from autometrics.metricbank import list_metrics, load_card

    res, _ = written
    art = copy.deepcopy(res.evaluator.artifact)
    f0 = art["features"][0]
    names = list_metrics()
    art["features"] = [{**f0, "feature": n, "metric": {**f0["metric"], "name": n}} for n in names]
    every = dataclasses.replace(res, evaluator=Evaluator(art))
    assert sum("$$" in load_card(n) for n in names) >= 30  # the cards do write formulas in LaTeX
    for page in (render_markdown(every), render_html(every)):
        shown = _outside_code(page)
        for n in names:  # each card is in the page, none fell back to "(no Metric Card ...)"
            assert "no Metric Card" not in shown and n in shown
        assert "$$" not in shown
        assert not re.findall(r"\\[A-Za-z]+", shown), sorted(set(re.findall(r"\\[A-Za-z]+", shown)))
        cards = shown[shown.index("Metric Cards of the selected metrics"):]  # elsewhere "$VAR" is text
        assert not re.findall(r"\$[^$\n]+\$", cards)
    md = render_markdown(every)
    assert "NovelNGramRatioₙ(y, x) = |{g ∈ Gₙ(y) : g ∉ Sₙ(x)}|/|Gₙ(y)|" in md
    assert "`$AUTOMETRICS_MODELS_DIR/<name>`" in md  # code is left as it is


def test_warning_code_spans_are_code_in_html(written):
    import copy
    import dataclasses

    from autometrics.evaluators.evaluator import Evaluator
    from autometrics.evaluators.report import render_html

    res, _ = written
    art = copy.deepcopy(res.evaluator.artifact)
    art["warnings"] = ["METEOR: no WordNet found (install it with `apt-get install wordnet-base`)"]
    page = render_html(dataclasses.replace(res, evaluator=Evaluator(art)))
    assert "with <code>apt-get install wordnet-base</code>)" in page and "`" not in _outside_code(page)
