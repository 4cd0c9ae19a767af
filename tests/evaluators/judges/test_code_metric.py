"""Code-generated metrics (evaluators/code_metric.py): code extracted from replies,
generation with repair against the fake OpenAI-compatible server, scoring SimpEval through the
sandbox, the artifact round trip (``Evaluator.load(...).score`` re-runs the stored source in the
sandbox; a tampered source fails with the reason) and the report section."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.code_metric import (
    CodeMetric,
    CodeMetricSpec,
    code_metric_entry,
    code_metrics_markdown,
    extract_code,
    generate_code_metrics,
)
from autometrics.evaluators.data import load_dataset
from autometrics.evaluators.evaluator import Evaluator, score_metrics
from autometrics.evaluators.features import metric_from_artifact_spec
from autometrics.evaluators.induce import fit_on_features
from autometrics.evaluators.report import safe_markdown
from autometrics.evaluators.sandbox import SandboxLimits, sandbox_unavailable
from autometrics.evaluators.stats import kendall_tau
from fake_llm_server import FakeLLMServer

pytestmark = pytest.mark.skipif(sandbox_unavailable() is not None, reason=str(sandbox_unavailable()))

KEPT = '''# name: kept_word_share
import re

def metric(input: str, output: str, reference: str | None) -> float:
    """Share of the output's words that also occur in the input."""
    out = re.findall(r"\\w+", output.lower())
    if not out:
        return 0.0
    src = set(re.findall(r"\\w+", input.lower()))
    return sum(w in src for w in out) / len(out)
'''

SHORTER = '''# name: length_ratio
def metric(input: str, output: str, reference: str | None) -> float:
    """Output length relative to the input (shorter is simpler)."""
    return -len(output) / max(1, len(input))
'''


def _simpeval(datasets_dir, n=None) -> pd.DataFrame:
    df = pd.read_csv(datasets_dir / "simpeval.csv")
    return df if n is None else df.iloc[:n].reset_index(drop=True)


@pytest.mark.parametrize("reply, ok, reason", [
    (f"Here you go:\n```python\n{KEPT}```\nThis works.", True, None),
    (f"```py\n{SHORTER}```", True, None),
    (SHORTER, True, None),  # no fence, but it defines metric
    (f"```python\n{KEPT}", True, None),  # the closing fence was cut off
    # what Qwen2.5-Coder-1.5B replied in the judge-budget benchmark: no opening fence, a closing
    # fence, then prose about the code
    (f"{SHORTER}```\nThis function compares the lengths and had an extra closing parenthesis fixed.", True, None),
    (f"{KEPT}\n```", True, None),
    (f"The function `def metric` below is simple.\n```python\n{SHORTER}```", True, None),
    ("I would measure the length of the output.", False, "the reply has no Python code block"),
    ("```python\ndef metric(input, output, reference)\n    return 1\n```", False, "syntax error at line 1"),
    ("```python\ndef compute_score(input, output):\n    return 1\n```", False, "no top-level function named 'metric'"),
])
def test_extract_code(reply, ok, reason):
    source, why = extract_code(reply)
    assert (source is not None) == ok
    if ok:
        assert "def metric" in source and "```" not in source
    else:
        assert reason in why


class CodeWritingServer(FakeLLMServer):
    """The fake OpenAI-compatible server, answering code-metric prompts with scripted replies."""

    def __init__(self, replies: list[str], **kw):
        super().__init__(**kw)
        self.scripted = list(replies)

    def reply(self, req, mode):
        resp = super().reply(req, mode)
        if "def metric(input: str, output: str" in req["messages"][1]["content"] and self.scripted:
            resp["choices"][0]["message"]["content"] = self.scripted.pop(0)
        return resp


def test_generation_parses_runs_repairs_and_fails_with_reasons(datasets_dir, client_for):
    df = _simpeval(datasets_dir, 60)
    replies = [f"```python\n{KEPT}```",  # 1: works at once
               "```python\ndef metric(input, output, reference)\n    return 1.0\n```",  # 2: syntax error ...
               f"Fixed:\n```python\n{SHORTER}```",  # ... repaired
               "```python\nimport os\n\ndef metric(input, output, reference):\n    return float(os.getpid())\n```",  # 3 ...
               "```python\nimport os\n\ndef metric(input, output, reference):\n    return 1.0\n```",  # ... still refused
               f"```python\n{KEPT.replace('# name: kept_word_share', '# name: overlap')}```"]  # 4: a duplicate of 1
    with CodeWritingServer(replies) as srv:
        client = client_for(srv)
        specs = generate_code_metrics(client, "Simplify a sentence", "score", df["input"], df["output"], df["score"],
                                      n=4, seed=3, references=[[r] for r in df["reference"]])  # as Dataset.references
        prompts = [r["messages"] for r in srv.requests]
    assert [s.status for s in specs] == ["ok", "ok", "failed", "failed"]
    assert [s.name for s in specs[:2]] == ["kept_word_share", "length_ratio"]
    assert specs[0].description == "Share of the output's words that also occur in the input."
    assert specs[1].origin["attempts"] == 2 and "syntax error at line 1" in specs[1].origin["failures"][0]
    assert "refused in the sandbox: import of 'os'" in specs[2].error and specs[2].origin["attempts"] == 2
    assert specs[3].error == "duplicate of code.kept_word_share"
    assert len(prompts) == 6  # one call per candidate plus one repair for each of the two failures
    first = prompts[0][1]["content"]
    assert "Outputs rated HIGH" in first and "Outputs rated LOW" in first and "Simplify a sentence" in first
    assert "\nReference: " in first and "reference may be None" in first
    assert "Already written (measure something different): kept_word_share" in prompts[1][1]["content"]
    assert prompts[2][-1]["content"].startswith("That function failed: syntax error at line 1")  # the repair turn
    smoke = specs[0].origin["smoke"]
    assert smoke["rows"] == 16 and smoke["row_errors"] == 0 and smoke["distinct_values"] > 1
    # an LLM that is down: a failed candidate with the reason, no exception
    with CodeWritingServer([], default="500") as srv:
        down = generate_code_metrics(client_for(srv, max_retries=0), None, "score", df["input"], df["output"], df["score"],
                                     n=1)
    assert down[0].status == "failed" and "the LLM request failed" in down[0].error


def test_code_metric_scores_simpeval_through_the_sandbox(datasets_dir):
    df = _simpeval(datasets_dir)
    spec = CodeMetricSpec(name="kept_word_share", source=KEPT, description="share of kept words")
    metric = CodeMetric.from_spec(spec, limits=SandboxLimits(cpu_seconds=20, wall_seconds=60, batch_rows=200))
    values = metric.score(df["output"].tolist(), inputs=df["input"].tolist())
    assert values.shape == (len(df),) and np.isfinite(values).all() and np.unique(values).size > 50
    assert metric.last_result.batches == 2 and metric.last_result.n_row_errors == 0
    again = CodeMetric.from_spec(spec).score(df["output"].tolist(), inputs=df["input"].tolist())
    assert np.array_equal(values, again)  # deterministic, whatever the batching
    tau = kendall_tau(values, df["score"].to_numpy(dtype=float))[0]
    assert -1 <= tau <= 1 and math.isfinite(tau)
    assert metric.signature().startswith("code.kept_word_share|kind:code|source:")


def test_artifact_round_trip_re_runs_the_source_in_the_sandbox(datasets_dir, tmp_path):
    df = _simpeval(datasets_dir, 120)
    ds = load_dataset(df, "score")
    lab = ds.labelled("score")
    metrics = [CodeMetric.from_spec(CodeMetricSpec(name=n, source=s)) for n, s in (("kept", KEPT), ("shorter", SHORTER))]
    X, meta, notes = score_metrics(metrics, lab.outputs, lab.inputs, lab.references)
    assert not notes and list(X.columns) == ["code.kept", "code.shorter"]
    result = fit_on_features(ds, "score", (X, meta, notes), n_boot=50)
    path = result.evaluator.save(tmp_path / "evaluator.json")
    feats = json.loads(path.read_text())["features"]
    assert feats and all("def metric" in f["metric"]["params"]["spec"]["source"] for f in feats)

    loaded = Evaluator.load(path)
    scored = loaded.score(df.iloc[:10])
    for f in feats:
        assert np.allclose(scored[f["feature"]].to_numpy(), X[f["feature"]].to_numpy()[:10])

    # a tampered source is run in the sandbox too, and refused there: scoring fails with the reason
    artifact = json.loads(path.read_text())
    artifact["features"][0]["metric"]["params"]["spec"]["source"] = (
        "def metric(input, output, reference):\n    return float(__import__('os').system('echo pwned'))\n")
    (tmp_path / "tampered.json").write_text(json.dumps(artifact))
    with pytest.raises(RuntimeError, match="refused in the sandbox: import of 'os'"):
        Evaluator.load(tmp_path / "tampered.json").score(df.iloc[:3])
    rebuilt = metric_from_artifact_spec(feats[0]["metric"])
    assert isinstance(rebuilt, CodeMetric) and rebuilt.signature() == feats[0]["metric"]["signature"]


def test_a_failed_candidate_cannot_become_a_metric():
    spec = CodeMetricSpec(name="broken", source="def metric(", status="failed", error="syntax error at line 1")
    with pytest.raises(ValueError, match="failed when it was generated"):
        CodeMetric.from_spec(spec)


def test_report_section_shows_source_reason_and_escapes_html():
    good = CodeMetricSpec(name="kept", source=KEPT, description="Share of kept words | pipes", axis="Meaning preservation")
    metric = CodeMetric.from_spec(good)
    metric.score(["a b", "c"], inputs=["a", "x"])
    bad = CodeMetricSpec(name="evil", source="import os\n# </code><script>alert(1)</script> ```\n", status="failed",
                         error="refused in the sandbox: import of 'os'")
    entries = [code_metric_entry(good, metric=metric, selected=True, stats={"tau_train": 0.31, "tau_test": float("nan")}),
               code_metric_entry(bad)]
    assert entries[0]["tau_test"] is None and entries[0]["scoring"]["row_errors"] == 0
    json.dumps(entries, allow_nan=False)  # JSON-safe for the artifact
    md = "\n".join(code_metrics_markdown(entries, {"code.kept": 0.42}))
    assert "Code metrics (2 written, 1 ran)" in md and "| `code.kept` | Share of kept words \\| pipes | selected | 0.310 | – | +0.4200 |" in md
    assert "```python\n# name: kept_word_share" in md and "**Failed:** refused in the sandbox: import of 'os'" in md
    assert "````python\nimport os" in md  # a longer fence than the backticks inside the source
    html = safe_markdown(md)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "## Metric Implementation" in entries[0]["card"] and "def metric" in entries[0]["card"]
