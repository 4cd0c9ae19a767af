"""A code metric written by the real embedded LLM (Qwen2.5-Coder-0.5B served by llama.cpp) from
SimpEval training rows: whatever the model replies, the result is either a function that ran in
the sandbox on the smoke-test rows, or a failed candidate with the reason, never an exception or
a metric of zeros.

Marked ``llm`` (opt-in: ``.ci/test python -m pytest -m llm``; about 2 minutes on 2 cores): at most two calls of up
to 700 completion tokens (one metric, one repair turn).  CI runs the code-metric path with a
stand-in LLM (tests/evaluators/judges/test_fit_candidates.py).  Fresh reply cache under ``tmp_path``.  Skipped with the reason when
llama-cpp-python or the model is not installed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.llm  # heavy (2 min on 2 cores): opt-in, `.ci/test python -m pytest -m llm`; the code-metric path runs in CI with a stand-in LLM


def test_the_real_model_writes_a_code_metric_or_a_failure_with_its_reason(local_server, datasets_dir, tmp_path):
    from autometrics.evaluators.code_metric import CodeMetric, generate_code_metrics
    from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig

    df = pd.read_csv(datasets_dir / "simpeval.csv").sample(40, random_state=0).reset_index(drop=True)
    client = LLMClient(LLMConfig.parse("local:0.5b", timeout=300), cache=LLMCache(str(tmp_path / "cache.sqlite")))
    specs = generate_code_metrics(client, "Simplify a complex English sentence while keeping its meaning", "score",
                                  df["input"], df["output"], df["score"], n=1, seed=0,
                                  references=[[r] for r in df["reference"]])
    usage = client.usage.to_dict()["generate:code"]
    assert 1 <= usage["requests"] <= 2 and usage["completion_tokens"] > 0
    (spec,) = specs
    if spec.ok:
        smoke = spec.origin["smoke"]
        assert smoke["rows"] == 16 and "def metric" in spec.source
        values = CodeMetric.from_spec(spec).score(list(df["output"]), inputs=list(df["input"]),
                                                 references=[[r] for r in df["reference"]])
        assert len(values) == len(df) and np.isfinite(values).sum() >= len(df) - smoke["row_errors"] * 3
    else:
        assert spec.error and spec.origin["failures"], spec  # the reason of each failed attempt is kept
