"""A newcomer's first hour, as a test: a fresh virtual environment, the README's first command
(`pip install ".[observe]" && autometrics demo --no-llm`), the next commands a newcomer types (no
`--store`: the demo's store is found), and the dashboard and report opened in Chromium and read for
raw markup, empty charts and Python reprs.

Slow (a fresh environment installs every dependency; pip's cache makes it minutes, not more), so
it runs with `-m "not llm"` (.ci/test) and not in the fast default."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAW = [r"\$\$", r"\\(mathrm|frac|sum|text|left|right|cdot|log)\b", r"`", r"TraceStore\(", r"<function ", r"object at 0x",
       r"\bnan\b", r"\bNone\b", r"Traceback"]


def _readme_first_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    cmd = re.search(r"^python3 -m venv \.venv && \. \.venv/bin/activate && (pip install \"\.\[observe\]\" && autometrics demo --no-llm)$",
                    text, re.M)
    assert cmd, "README.md's first command changed: update this walk-through"
    return cmd.group(1)


@pytest.mark.slow
@pytest.mark.browser
def test_fresh_venv_readme_command_then_pages_in_chromium(tmp_path):
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.skip("chromium not installed (.ci/test installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    _readme_first_command()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_ = env_dir / "bin"
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "VIRTUAL_ENV": str(env_dir),
           "AUTOMETRICS_HOME": str(tmp_path / "data"), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HF_HUB_OFFLINE": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_CONFIG_FILE"):
        if k in os.environ:
            env[k] = os.environ[k]
    # the README's first command, in a folder of the newcomer's (the package from this checkout)
    work = tmp_path / "work"
    work.mkdir()
    pip = subprocess.run([str(bin_ / "pip"), "install", "-q", f"{ROOT}[observe]"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=1500)
    assert pip.returncode == 0, pip.stderr[-3000:]
    demo = subprocess.run([str(bin_ / "autometrics"), "demo", "--no-llm"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "Traceback" not in demo.stderr and "Open the dashboard: file://" in demo.stdout
    dashboard = work / "autometrics-demo" / "dashboard.html"
    # the next commands, as typed without --store: the demo's store is found and said
    listing = subprocess.run([str(bin_ / "autometrics"), "versions", "list", "--target", "score"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0 and "v1" in listing.stdout, listing.stdout + listing.stderr
    assert "autometrics-demo" in listing.stderr
    show = subprocess.run([str(bin_ / "autometrics"), "versions", "show", "1", "--target", "score", "--out", str(work / "v1")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert show.returncode == 0, show.stdout + show.stderr
    pages = [dashboard] + sorted((work / "v1").glob("report*.html")) + sorted((work / "v1").glob("report*.md"))
    assert len(pages) >= 2, sorted(p.name for p in (work / "v1").iterdir())
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in [dashboard, *(work / "v1").iterdir()]}
    assert len(set(modes.values())) == 1, modes  # one file mode for every output
    md = [p for p in pages if p.suffix == ".md"]
    for p in md:
        text = p.read_text(encoding="utf-8")
        assert not re.search(r"\$\$|\\(mathrm|frac)\b|TraceStore\(", text), p.name
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        for p in [x for x in pages if x.suffix == ".html"]:
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            page.goto(p.as_uri())
            visible = page.inner_text("body")
            for pattern in RAW:
                m = re.search(pattern, visible)
                assert m is None, f"{p.name} shows {m.group(0)!r} near {visible[max(0, m.start() - 80):m.end() + 80]!r}"
            charts = page.query_selector_all("svg")
            assert charts, f"{p.name} has no chart"
            for svg in charts:  # every chart draws something: marks, not only an empty frame
                marks = svg.eval_on_selector_all("path, rect, circle, line, polyline, polygon", "els => els.length")
                box = svg.bounding_box()
                assert marks >= 2 and box and box["width"] > 20 and box["height"] > 10, (p.name, marks, box)
            assert not errors, (p.name, errors)
        browser.close()
    # what the CLI warned about during the demo is in the report (nothing warned: nothing to find)
    warned = [line.split("warning:", 1)[1].strip() for line in demo.stderr.splitlines() if "warning:" in line.lower()]
    report_text = " ".join(p.read_text(encoding="utf-8") for p in md)
    for w in warned:
        assert w[:60] in report_text or "No warnings" not in report_text, w
    assert sys.executable  # the test's own environment is untouched: everything ran in the fresh one
