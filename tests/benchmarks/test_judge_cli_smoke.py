"""The CLI judge benchmark (tests/benchmarks/judge_cli.py) and its stand-in LLM
(tests/standin_judge_server.py) stay usable: the fit's real generation step gets the stand-in's
criteria and rubrics, its judges get the scripted truth, and one small run writes the results
JSON with the figures the benchmark reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

SMOKE_SIZE = 40


@pytest.fixture(scope="module")
def simpeval(datasets_dir):
    from judge_cli import load

    return load("simpeval")


def test_standin_truth_is_calibrated_and_repeats(simpeval):
    from autometrics.evaluators.stats import kendall_tau
    from standin_judge_server import REVERSED, SIGNAL, StandinJudgeServer

    full, target, _task, _name = simpeval
    a, b = StandinJudgeServer(full, target, seed=3), StandinJudgeServer(full, target, seed=3)
    y = full[target].to_numpy(dtype=float)
    for c in SIGNAL + REVERSED:
        assert np.array_equal(a.truth[c], b.truth[c])  # seeded: runs repeat exactly
        tau = kendall_tau(a.truth[c].astype(float), y)[0]
        assert abs(tau - (-0.35 if c in REVERSED else 0.35)) < 0.05, (c, tau)
    assert not np.array_equal(a.truth[SIGNAL[0]], a.truth[SIGNAL[1]])  # each criterion its own draw
    # names as the fit may show them; a clipped output; a probe showing row 5's output under row 9's input
    out, inp = full["output"].iloc[5], full["input"].iloc[5]
    assert a.criterion("1. **Task fulfilment**") == "Task fulfilment" and a.criterion("Overall score") is None
    assert a.row(out[:-5] + " […]", inp) == 5 and a.row(out, full["input"].iloc[9]) == 5


def test_generation_gets_the_standin_criteria(simpeval, tmp_path):
    """The real generators (DSPy programs, criteria checks, rubric direction check) against the stand-in."""
    from autometrics.evaluators.judges.generate import GeneratorCounts, generate_judges
    from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig
    from standin_judge_server import SIGNAL, StandinJudgeServer

    full, target, task, _name = simpeval
    train = full.iloc[:SMOKE_SIZE]
    with StandinJudgeServer(full, target, seed=0) as srv:
        client = LLMClient(LLMConfig.parse(f"openai/standin@{srv.url}", timeout=30), cache=LLMCache(tmp_path / "c.sqlite"))
        specs, notes = generate_judges(task, target, train["input"].tolist(), train["output"].tolist(),
                                       train[target].to_numpy(dtype=float), generator=client, judge=client,
                                       counts=GeneratorCounts(n_example=0, n_optimized=0))
    singles = [s.criterion for s in specs if s.kind == "single"]
    rubrics = {s.criterion: s for s in specs if s.kind == "rubric"}
    assert set(SIGNAL) <= set(singles) and len(singles) == 10, (singles, notes)
    assert set(SIGNAL) <= set(rubrics), (list(rubrics), notes)
    for s in rubrics.values():
        assert not s.origin.get("direction_check", {}).get("flipped"), s.origin  # level 1 worst, 5 best  # level 1 worst, 5 best
    assert {k for _ph, k in srv.generation} == {"criteria", "rubric"}
    assert srv.unmatched_rows == 0  # every rubric-check prompt found its row


@pytest.mark.slow
def test_one_run_writes_the_results(tmp_path, datasets_dir):
    from judge_cli import main, result_path
    from standin_judge_server import SIGNAL

    argv = ["--datasets", "simpeval", "--sizes", str(SMOKE_SIZE), "--seeds", "1", "--out", str(tmp_path),
            "--work", str(tmp_path / "work")]
    assert main(argv) == 0
    from judge_cli import parse_args

    doc = json.loads(result_path(parse_args(argv)).read_text())
    entry = doc["datasets"]["simpeval"]["sizes"][str(SMOKE_SIZE)]
    assert {"seeds_with_gain", "mean_gain", "mean_oracle_gain", "share_of_oracle", "worst_gain", "reversed_used",
            "both_signal_kept", "validity_methods", "validated", "mean_sent_over_floor", "max_evaluated_over_floor",
            "mean_fit_seconds"} <= set(entry["summary"])
    (r,) = entry["results"]
    assert r["llm_fit"]["rc"] == 0, r["llm_fit"].get("stderr_tail")
    assert {"tau_llm", "tau_nollm", "tau_oracle", "gain", "oracle_gain", "load_after"} <= set(r)
    m = r["llm"]
    assert {"method", "validated", "tau", "ci", "p_value"} <= set(m["validity"])
    assert m["returned"] in ("with-judges", "llm-free")
    assert {"sent", "evaluated", "floor", "sent_over_floor", "evaluated_over_floor"} == set(m["tokens"])
    assert m["signal_generated"] == sorted(SIGNAL), m["generated"]  # the stand-in answered the generator
    assert r["server"]["generation_requests"]["criteria"] >= 1 and r["server"]["unmatched_rows"] == 0
    assert r["tau_nollm"] is not None and r["tau_oracle"] is not None
    assert "load_now" in doc["machine"] and doc["command"].startswith("python tests/benchmarks/judge_cli.py")
