"""Budgets (``fit --budget 20m`` / ``--max-judge-tokens N``), the dry run's measured time estimate,
``fit --max-rows`` and what ``fit`` prints about every candidate, against the fake and
the scripted fake OpenAI-compatible servers."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pandas as pd
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.judges.budget import Budget, Speed, plan_fit
from autometrics.evaluators.judges.options import PAPER_COUNTS, QUICK_COUNTS, LLMOptions, ScreeningOptions
from autometrics.evaluators.judges.screening import FunctionCandidate
from autometrics.evaluators.sampling import sample_rows
from autometrics.metricbank import Metric
from scripted_judge_server import ScriptedJudgeServer
from test_screening import TASK, grouped_data, signal_script, specs


def test_cli_refuses_a_budget_without_unit(tmp_path, capsys):
    from autometrics._cli.main import main

    assert main(["fit", "x.csv", "--target", "score", "--llm", "local", "--budget", "20", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: argument --budget") and "90s, 20m, 12h, 7d" in err


def _plan(seconds, *, case_chars=6000.0, n_lab=200, counts=PAPER_COUNTS):
    return plan_fit(Budget(seconds=seconds), Speed(prompt_tps=200.0, completion_tps=20.0), n_lab=n_lab, test_size=0.3,
                    case_chars=case_chars, counts=counts, top_n=5, screening=ScreeningOptions(), local=True)


def test_a_plan_clips_long_examples_first_then_drops_candidates_then_rows():
    roomy = _plan(10 ** 7)
    assert roomy.fits and roomy.clip_chars is None and roomy.counts == PAPER_COUNTS and roomy.rows is None
    estimates = [_plan(s) for s in (roomy.seconds * 0.7, roomy.seconds * 0.2, roomy.seconds * 0.06, 1.0)]
    clipped, fewer, smaller, hopeless = estimates
    assert clipped.fits and clipped.clip_chars and clipped.n_candidates == roomy.n_candidates and clipped.rows is None
    assert fewer.fits and fewer.clip_chars and fewer.n_candidates < roomy.n_candidates and fewer.counts.n_optimized == 0
    assert smaller.fits and smaller.n_candidates == 1 and smaller.rows and smaller.rows < 200
    assert any("and all 60 held-out rows" in n for n in smaller.notes)  # only training rows are cut
    assert _plan(1.0, n_lab=1000).rows >= 300 + 16  # ends: every held-out row, at least 16 training rows
    assert not hopeless.fits and any("LLM-free" in n for n in hopeless.notes)
    for p in (clipped, fewer, smaller):
        assert p.seconds <= 0.85 * p.budget["seconds"]
        assert any(line.startswith("budget") and "estimated" in line for line in p.lines())
    assert not _plan(10 ** 7, case_chars=500).clip_chars  # short examples are never clipped


def test_a_token_budget_plans_candidates_and_the_fit_stays_within_it(tmp_path):
    df = grouped_data(seed=6)
    with ScriptedJudgeServer(signal_script(df)) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", judge_specs=specs(n_noise=8), rationales=0, backoff=0.01,
                          cache=str(tmp_path / "c.sqlite"), max_judge_tokens=20_000)
        lines = []
        a = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50, echo=lines.append).evaluator.artifact
    plan = a["llm"]["budget"]["plan"]
    assert plan["fits"] and plan["estimated_tokens"] <= 0.85 * 20_000
    assert a["llm"]["budget"]["spent"]["tokens"] <= 20_000
    assert any("budget 20,000 tokens: plan:" in line for line in lines)
    n = plan["counts"]["n_single"]
    judges = [c for c in a["llm"]["candidates"] if c["kind"].startswith("judge")]
    assert 1 <= n < 9 and len(judges) == n  # fewer candidates than given: the first n
    assert a["llm"]["candidates"][0]["feature"] == "llm.single.faithfulness"
    assert a["method"]["returned"] == "with-judges"


def test_a_budget_spent_while_scoring_stops_and_returns_the_llm_free_evaluator(tmp_path):
    """The plan expects short judge prompts; these carry long instructions, so scoring costs far
    more than planned: screening stops when the budget is spent, and the fit says what it returned."""
    df = grouped_data(seed=7)
    long = [dataclasses.replace(s, instructions="Read the answer slowly and completely. " * 60) for s in specs(n_noise=3)]
    with ScriptedJudgeServer(signal_script(df)) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", judge_specs=long, rationales=0, backoff=0.01,
                          cache=str(tmp_path / "c.sqlite"), max_judge_tokens=15_000, exemplar=False)
        a = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50).evaluator.artifact
        asked = len(srv.judge_requests)
    assert a["llm"]["screening"]["stopped"] and "15,000-token budget is spent" in a["llm"]["screening"]["stopped"]
    assert a["method"]["returned"] == "llm-free" and "could not be validated" in a["llm"]["floor"]["why"]
    assert {c["fate"] for c in a["llm"]["candidates"]} == {"budget"}
    assert a["llm"]["budget"]["spent"]["tokens"] <= 25_000 and asked < 4 * 16
    assert any("the judges added nothing" in w for w in a["warnings"])


class _Named(Metric):
    """What the artifact stores for a test candidate (never run on new data here)."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def _compute(self, outputs, inputs, references):
        return np.zeros(len(outputs))


def test_the_budget_drops_the_costliest_candidates_first_and_free_ones_always_go_on(tmp_path):
    """A judge with long instructions costs many times what the others do: when the budget cannot
    pay for every candidate, it is dropped (fate "budget", said in the output) and screening goes on
    with the rest; a candidate that costs no tokens is always screened."""
    df = grouped_data(seed=12)
    costly = dataclasses.replace(specs(n_noise=1)[1], criterion="Costly", instructions="Weigh every word. " * 150)
    free_values = pd.Series(df["score"]).rank(pct=True).to_numpy()

    def source(ctx):
        return [FunctionCandidate("free", "exemplar", lambda pos: free_values[pos],
                                  metric=_Named("free"))]

    with ScriptedJudgeServer(signal_script(df)) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", judge_specs=[costly, *specs(n_noise=2)], rationales=0, backoff=0.01,
                          cache=str(tmp_path / "c.sqlite"), max_judge_tokens=25_000, exemplar=False,
                          candidate_sources=[source])
        lines: list[str] = []
        # with a held-out split: the budget keeps back what scoring the held-out rows will cost
        a = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50, echo=lines.append,
                          test_size=0.3).evaluator.artifact
    fates = {c["feature"]: c for c in a["llm"]["candidates"]}
    assert fates["llm.single.costly"]["fate"] == "budget" and "cannot pay for" in fates["llm.single.costly"]["detail"]
    assert any("llm.single.costly dropped" in line for line in lines)
    assert fates["free"]["fate"] in ("kept", "not returned") and fates["free"]["gain"] is not None
    assert fates["llm.single.faithfulness"]["fate"] != "budget"
    assert a["llm"]["budget"]["spent"]["tokens"] <= 25_000


def test_a_row_cut_keeps_every_held_out_row_and_the_llm_free_floor_on_all_rows(tmp_path):
    """A budget that only fits with fewer rows: the judges score fewer training rows, but the
    held-out rows are the same for both evaluators and the LLM-free one is fitted on every row, so
    the budget can never make the returned evaluator worse than a fit without --llm."""
    df = grouped_data(n_inputs=40, seed=11)
    plain = fit_evaluator(df, "score", task=TASK, n_boot=50, test_size=0.3).evaluator.artifact
    with ScriptedJudgeServer(signal_script(df)) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", judge_specs=specs(n_noise=2), rationales=0, backoff=0.01,
                          cache=str(tmp_path / "c.sqlite"), max_judge_tokens=12_000, exemplar=False)
        a = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50, test_size=0.3).evaluator.artifact
    plan = a["llm"]["budget"]["plan"]
    assert plan["fits"] and plan["rows"] and plan["rows"] < 160, plan
    floor = a["llm"]["floor"]
    assert floor["llm_free_test"]["n"] == plain["statistics"]["test"]["n"] == 48
    assert floor["llm_free_test"]["tau"] == plain["statistics"]["test"]["tau"]  # the floor is the fit without --llm
    if floor["with_judges_test"] is not None:
        assert floor["with_judges_test"]["n"] == 48  # validated on the same held-out rows
    if a["method"]["returned"] == "llm-free":
        assert a["dataset"]["n_labelled"] == 160
    else:
        assert a["dataset"]["n_labelled"] < 160 and a["statistics"]["test"]["n"] == 48  # about plan["rows"]: whole groups


def test_a_row_cut_with_cross_fitted_validity_compares_on_the_judges_rows(tmp_path):
    """Without a held-out split a row cut leaves the judges fewer rows to be cross-fitted on: the
    LLM-free evaluator is cross-fitted again on those rows for the comparison (same folds), while
    the evaluator returned without judges is still the one fitted on every row."""
    df = grouped_data(n_inputs=40, seed=11)
    plain = fit_evaluator(df, "score", task=TASK, n_boot=50).evaluator.artifact
    with ScriptedJudgeServer(signal_script(df)) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", judge_specs=specs(n_noise=2), rationales=0, backoff=0.01,
                          cache=str(tmp_path / "c.sqlite"), max_judge_tokens=12_000, exemplar=False)
        a = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50).evaluator.artifact
    plan = a["llm"]["budget"]["plan"]
    assert plan["fits"] and plan["rows"] and plan["rows"] < 160, plan
    assert any("cross-fitted and compared with the LLM-free one" in n for n in plan["notes"])
    floor = a["llm"]["floor"]
    assert floor["llm_free_test"]["tau"] == plain["statistics"]["test"]["tau"] and floor["llm_free_test"]["n"] == 160
    if a["method"]["returned"] == "llm-free":
        assert a["dataset"]["n_labelled"] == 160 and a["validity"] == plain["validity"]
    else:
        assert a["dataset"]["n_labelled"] < 160 and a["validity"]["method"] == "cross-fit"
        assert "cross-fitted τ with judges" in floor["why"]


def test_a_budget_too_small_for_any_plan_does_no_llm_work(tmp_path):
    df = grouped_data(seed=8)
    with ScriptedJudgeServer(signal_script(df)) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=QUICK_COUNTS, cache=str(tmp_path / "c.sqlite"),
                          max_judge_tokens=500)
        a = fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50).evaluator.artifact
        n_requests = len(srv.requests)
    assert n_requests == 2  # the two warm-up calls, nothing else
    assert a["method"]["returned"] == "llm-free" and "smallest plan" in a["llm"]["floor"]["why"]
    assert not a["llm"]["budget"]["plan"]["fits"] and a["llm"]["usage"]["warmup"]["requests"] == 2


def test_dry_run_estimates_time_from_a_measured_warm_up(fake):
    df = grouped_data(seed=9)
    with fake(delay=0.05) as srv:
        opts = LLMOptions(llm=f"openai/fake@{srv.url}", counts=QUICK_COUNTS, warmup=True)
        plan = fit_evaluator(df, "score", task=TASK, llm_options=opts, dry_run=True)
        assert len(srv.requests) == 2  # the warm-up only
    assert plan["speed"]["prompt_tokens_per_s"] > 0 and plan["speed"]["completion_tokens_per_s"] > 0
    assert plan["total"]["seconds"] > 0 and plan["score"]["seconds"] > 0
    assert plan["notes"] and "MetricBank metrics are not candidates" in plan["notes"][0]
    no_screen = fit_evaluator(df, "score", task=TASK, llm_options=dataclasses.replace(opts, screen=False, warmup=False),
                              dry_run=True)
    # screening's upper bound: an early round may keep every candidate (bounds), none is asked twice
    assert no_screen["score"]["calls"] == 4 * 60 >= plan["score"]["calls"]


def test_max_rows_takes_whole_groups_and_says_so():
    from autometrics.evaluators.data import load_dataset

    ds = load_dataset(grouped_data(n_inputs=30), "score")
    sub = sample_rows(ds, "score", 50, seed=1)
    assert 46 <= len(sub) <= 50 and len(sub) % 4 == 0
    assert sub.frame.groupby("group").size().eq(4).all()
    assert "max rows 50" in sub.warnings[-1] and f"{len(sub)} of 120" in sub.warnings[-1]
    assert sample_rows(ds, "score", 500) is ds
    res = fit_evaluator(grouped_data(n_inputs=30), "score", max_rows=50, seed=1, n_boot=20)
    assert res.evaluator.artifact["dataset"]["n_labelled"] == len(sub)
    assert any(w.startswith("max rows 50") for w in res.evaluator.artifact["warnings"])


def test_cli_fit_says_where_the_tokens_went(tmp_path, capsys, monkeypatch):
    from autometrics._cli.main import main

    monkeypatch.setenv("AUTOMETRICS_LLM_CACHE", str(tmp_path / "cache.sqlite"))
    df = grouped_data(n_inputs=25, seed=10)
    data = tmp_path / "data.csv"
    df.to_csv(data, index=False)
    with ScriptedJudgeServer(signal_script(df)) as srv:
        base = ["fit", str(data), "--target", "score", "--llm", f"openai/fake@{srv.url}", "--quick", "--n-boot", "20",
                "--no-progress"]
        assert main([*base, "--dry-run", "--max-rows", "70", "--out", str(tmp_path / "dry")]) == 0
        dry = capsys.readouterr().out
        assert main([*base, "--max-rows", "70", "--budget", "10m", "--out", str(tmp_path / "run")]) == 0
        out = capsys.readouterr().out
    assert "note: max rows 70: fitted on a seeded sample of 68 of 100 labelled rows" in dry
    assert "measured warm-up:" in dry and "of LLM time in all" in dry
    # cross-fitted by default: every label counts for the bank's inclusion rule
    assert "note: MetricBank metrics are not candidates next to the judges (68 training labels < 80" in dry
    assert "note: MetricBank metrics are not candidates" in out and "measured speed:" in out and "budget 10.0 min: plan:" in out
    cand = [line for line in out.splitlines() if line.startswith("[score] candidate ")]
    a = json.loads((tmp_path / "run" / "evaluator.json").read_text())
    judges = [c for c in a["llm"]["candidates"] if c["kind"].startswith("judge")]
    assert len(cand) == len(a["llm"]["candidates"]) and len(judges) == len(a["generated"]) >= 2
    kinds = {c["kind"] for c in a["llm"]["candidates"]}
    assert {"code", "exemplar"} <= kinds  # --quick writes one code metric; the exemplar candidate is on by default
    code = a["code_metrics"]
    assert len(code) == 1 and code[0]["feature"] in {c["feature"] for c in a["llm"]["candidates"] if c["kind"] == "code"}
    assert all(re.search(r" — .+ \[[\d,]+ tokens", line) for line in cand), cand
    assert any(line.startswith("[score] returned the ") for line in out.splitlines())
    assert a["dataset"]["n_labelled"] == 68
    md = (tmp_path / "run" / "report.md").read_text()
    assert "Candidates and where the tokens went" in md and md.count("| judge:") >= 2
    assert "Candidates and where the tokens went" in (tmp_path / "run" / "report.html").read_text()
    assert np.isfinite(a["llm"]["budget"]["spent"]["seconds"])


def test_clipping_is_part_of_the_judge_spec():
    """A budget plan clips long examples through the spec, so ``score`` on new data sees what the
    fit saw; a spec without clipping keeps the hash it had before the option existed."""
    from autometrics.evaluators.judges.metric import JudgeSpec, judge_messages

    spec = JudgeSpec(kind="single", criterion="Fluency", task="T")
    clipped = dataclasses.replace(spec, clip_chars=100)
    text = judge_messages(clipped, "y" * 500, "x" * 500)[1]["content"]
    assert "x" * 100 + " […]" in text and "x" * 101 not in text and "y" * 100 + " […]" in text
    assert "y" * 500 in judge_messages(spec, "y" * 500, "x" * 500)[1]["content"]
    old = {k: v for k, v in spec.to_dict().items() if k != "clip_chars"}
    assert JudgeSpec.from_dict(old).sha() == spec.sha() != clipped.sha()


def test_cli_flags_fill_the_options():
    from autometrics._cli.main import _build_parser, _llm_options

    args = _build_parser().parse_args(["fit", "d.csv", "--target", "y", "--out", "o", "--llm", "local", "--budget", "1h30m",
                                       "--max-judge-tokens", "5000", "--no-screen", "--screen-rows", "24", "--max-rows", "80"])
    o = _llm_options(args)
    assert (o.budget_seconds, o.max_judge_tokens, o.screen, o.screening.first_rows) == (5400, 5000, False, 24)
    assert args.max_rows == 80 and o.warmup is False
