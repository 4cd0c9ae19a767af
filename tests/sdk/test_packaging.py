"""Build the wheel, install it into a fresh venv and import every subpackage, so a packaging
mistake (a missing package mapping, card files or demo data left out) cannot ship."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUBPACKAGES = ["autometrics", "autometrics._cli", "autometrics.metricbank", "autometrics.evaluators", "autometrics.collectors", "autometrics.dashboards"]


@pytest.mark.slow
def test_wheel_installs_and_every_subpackage_imports(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)], check=True, capture_output=True, timeout=600)
    wheel = next(dist.glob("autometrics_sdk-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    # dependencies come from the test environment's site-packages (no network needed); the
    # package itself must come from the wheel
    deps = sysconfig.get_paths()["purelib"]
    check = f"""
import importlib, autometrics, sys
assert 'venv' in autometrics.__file__ and {str(ROOT)!r} not in autometrics.__file__, autometrics.__file__
for name in {SUBPACKAGES!r}:
    importlib.import_module(name)
from autometrics.metricbank import list_metrics, load_card, missing_card_sections
names = list_metrics()
assert len(names) >= 25, names
for n in names:
    assert not missing_card_sections(load_card(n)), n
from autometrics.evaluators.data import builtin_dataset_path
assert builtin_dataset_path('simpeval').exists()
print('ok', len(names))
"""
    res = subprocess.run([str(py), "-c", check], capture_output=True, text=True, env={"PYTHONPATH": deps, "PATH": "/usr/bin:/bin"}, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ok")
    cli = subprocess.run([str(env_dir / "bin" / "autometrics"), "bank", "list"], capture_output=True, text=True, env={"PYTHONPATH": deps, "PATH": "/usr/bin:/bin"}, timeout=300)
    assert cli.returncode == 0 and "BLEU" in cli.stdout, cli.stderr


def test_core_import_pulls_no_heavy_dependency():
    """`import autometrics` stays fast because it imports nothing heavy (timing itself is in
    benchmarks/import_time.py, not in a timed test)."""
    heavy = ["numpy", "pandas", "sklearn", "scipy", "torch", "transformers", "dspy", "litellm", "langfuse", "sacrebleu", "nltk",
             "opentelemetry", "sqlalchemy", "psycopg", "google.protobuf"]
    code = f"import sys, autometrics; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"import autometrics pulled in {out}"
