"""A budgeted fit with the real embedded LLM (Qwen2.5-Coder-0.5B served by llama.cpp): the warm-up
call measures the server, the plan is printed, screened judge scoring stops when the budget is
spent, and the returned evaluator is never worse on the held-out rows than the LLM-free one.

Marked ``slow`` (run by CI, like test_e2e_local.py): bounded by its own budget (5 minutes of fit
on 2 cores; the server starts before it).  The reply cache is a fresh file under ``tmp_path`` and
the session's data folder is isolated (tests/conftest.py), so a warm cache can never hide a
regression.  Skipped with the reason when llama-cpp-python or the model is not installed."""

from __future__ import annotations

import time

import pandas as pd
import pytest

pytestmark = pytest.mark.llm  # a whole fit with the real 0.5B model: ~2 min on 2 cores, opt-in (`.ci/test python -m pytest -m llm`)

BUDGET = 300.0
TASK = "Simplify a complex English sentence while keeping its meaning"




def test_a_budgeted_fit_with_the_real_local_llm(local_server, datasets_dir, tmp_path):
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.metric import JudgeSpec
    from autometrics.evaluators.judges.options import LLMOptions
    from autometrics.evaluators.sampling import sample_groups

    full = pd.read_csv(datasets_dir / "simpeval.csv")
    df = full.iloc[sample_groups(full["input"].to_numpy(), 48, seed=0)].reset_index(drop=True)
    specs = [JudgeSpec(kind="single", criterion=c, description=d, task=TASK) for c, d in (
        ("Meaning preservation", "the output keeps the meaning of the input sentence"),
        ("Simplicity", "the output is easier to read than the input"),
        ("Fluency", "the output is grammatical, natural English"))]
    opts = LLMOptions(llm="local:0.5b", judge_specs=specs, budget_seconds=BUDGET, rationales=1, timeout=300,
                      cache=str(tmp_path / "cache.sqlite"))
    lines: list[str] = []
    t0 = time.perf_counter()
    res = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=100, top_n=3, echo=lines.append)
    wall = time.perf_counter() - t0
    a = res.evaluator.artifact
    print("\n" + "\n".join(lines))
    print(f"wall {wall:.0f} s; returned {a['method']['returned']}: {a['llm']['floor']['why']}; budget {a['llm']['budget']}")
    plan = a["llm"]["budget"]["plan"]
    assert plan["speed"]["prompt_tokens_per_s"] > 0 and plan["speed"]["completion_tokens_per_s"] > 0
    assert a["llm"]["usage"]["warmup"]["requests"] == 2
    assert any("measured speed:" in line for line in lines) and any(": plan" in line or "no plan fits" in line for line in lines)
    # the budget bounds the fit: at most the chunk under way when it ran out, and the final fits, come after it
    assert wall <= 1.5 * BUDGET + 60, wall
    # never worse than the LLM-free evaluator on the held-out rows, and the artifact says which was returned and why
    floor = a["llm"]["floor"]
    assert floor["returned"] == a["method"]["returned"] and floor["why"]
    free = (floor.get("llm_free_test") or {}).get("tau")
    if free is not None:
        assert a["statistics"]["test"]["tau"] >= free - 1e-12
    for c in a["llm"]["candidates"]:
        assert c["fate"] and c["detail"], c
    scored = [c for c in a["llm"]["candidates"] if c["calls"]]
    assert sum(c["tokens"] for c in scored) <= a["llm"]["usage"]["total"]["prompt_tokens"] + a["llm"]["usage"]["total"]["completion_tokens"]
