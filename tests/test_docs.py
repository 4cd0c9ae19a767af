"""The documentation: the MkDocs site in docs/ builds without a warning, and README.md stays a
short entry page whose test command is the one CI runs and whose relative links resolve.

Needs `mkdocs` (in the `dev` extra).  The build takes a few seconds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 250
TEST_COMMAND = '.ci/test python -m pytest -q -m "not llm and not heavy"'
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed (exit {proc.returncode}; needs the dev extra):\n"
                    f"{proc.stdout}\n{proc.stderr}", pytrace=False)
    return out


def _readme_links() -> list[str]:
    links = []
    for target in _LINK.findall(README.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor on the README itself
        links.append(target)
    return links


def test_site_builds_strict(site):
    assert (site / "index.html").is_file()


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}): move detail into docs/"


def test_readme_holds_the_ci_test_command():
    """CI's last line is the README's test command: `.ci/test` (the setup) running pytest."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == TEST_COMMAND, f".ci/run must end with the README's test command {TEST_COMMAND!r}, not {ci[-1]!r}"
    readme = README.read_text(encoding="utf-8")
    assert re.search(r"^python3 -m venv \.venv .*&& " + re.escape(TEST_COMMAND) + "$", readme, re.M), (
        f"README.md must show the test command ending in {TEST_COMMAND!r}")
    default = [line.strip() for line in (ROOT / ".ci" / "test").read_text(encoding="utf-8").splitlines()
               if "pytest" in line and not line.lstrip().startswith("#")]
    assert default == [f'if (($#)); then "$@"; else {TEST_COMMAND.removeprefix(".ci/test ")}; fi'], default


def test_readme_relative_links_resolve(site):
    links = _readme_links()
    assert links, "README.md links nowhere into docs/"
    for link in links:
        path, _, anchor = link.partition("#")
        target = (ROOT / path).resolve()
        assert target.exists(), f"README.md links to {link!r}, which does not exist"
        if not anchor:
            continue
        # an anchor into a docs page: the built page must have that id
        rel = target.relative_to(ROOT / "docs").with_suffix("")
        page = site / (rel.parent if rel.name == "index" else rel) / "index.html"
        assert f'id="{anchor}"' in page.read_text(encoding="utf-8"), f"README.md links to {link!r}: no such anchor"
