"""Screening candidate judges before paying for them, against the scripted fake server
(tests/scripted_judge_server.py): one judge carries the human signal, the others are noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.judges.metric import JudgeSpec
from autometrics.evaluators.judges.options import LLMOptions, ScreeningOptions
from autometrics.evaluators.judges.screening import (
    FunctionCandidate,
    added_tau,
    candidate_calls,
    schedule,
)
from autometrics.evaluators.sampling import sample_groups, stratified_groups
from scripted_judge_server import ScriptedJudgeServer, noise_score

VOCAB = "river stone cloud paper garden window silver orange market quiet letter bridge winter candle forest".split()
TASK = "Answer the question"


def grouped_data(n_inputs=15, per=4, seed=0) -> pd.DataFrame:
    """Outputs of equal length made of random words (MetricBank reads no signal from them), a
    label per output, ``per`` outputs per input (the split and screening keep inputs whole)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_inputs):
        for k in range(per):
            out = " ".join(rng.choice(VOCAB, size=8)) + f" {i}-{k}"
            rows.append({"id": f"r{i}-{k}", "input": f"question number {i}", "output": out, "score": float(rng.normal())})
    return pd.DataFrame(rows)


def signal_script(df: pd.DataFrame, signal=("Faithfulness",), fail=()):
    """Judges named in ``signal`` read the label (1..5 by quintile), those in ``fail`` give
    unreadable replies, every other judge is deterministic noise."""
    ranks = df["score"].rank(pct=True)
    level = dict(zip(df["output"], (1 + np.minimum(4, (ranks * 5).astype(int))).tolist(), strict=True))

    def script(criterion, output, _input):
        if criterion in fail:
            return None
        if criterion in signal:
            return level.get(output, 3)
        return noise_score(criterion, output)

    return script


def specs(n_noise=8, extra=()) -> list[JudgeSpec]:
    out = [JudgeSpec(kind="single", criterion="Faithfulness", description="the answer is faithful", task=TASK)]
    out += [JudgeSpec(kind="single", criterion=f"Noise {k}", description="an aspect humans ignore", task=TASK)
            for k in range(1, n_noise + 1)]
    out += [JudgeSpec(kind="single", criterion=c, description="another aspect", task=TASK) for c in extra]
    return out


def _judge_tokens(a: dict) -> int:
    return sum(v["prompt_tokens"] + v["completion_tokens"] for k, v in a["llm"]["usage"].items() if k.startswith("score:"))


def _fit(srv, df, tmp_path, name, **over):
    opts = LLMOptions(llm=f"openai/fake@{srv.url}", judge_specs=over.pop("judge_specs", specs()), rationales=0,
                      cache=str(tmp_path / f"{name}.sqlite"), backoff=0.01, **{"exemplar": False, **over})
    return fit_evaluator(df, "score", task=TASK, llm_options=opts, n_boot=50).evaluator.artifact


def test_screening_keeps_the_signal_judge_and_screens_out_noise_with_fewer_tokens(tmp_path):
    df = grouped_data()
    with ScriptedJudgeServer(signal_script(df)) as srv:
        screened = _fit(srv, df, tmp_path, "screened")
        n_screened = len(srv.judge_requests)
        everything = _fit(srv, df, tmp_path, "all", screen=False)
        n_all = len(srv.judge_requests) - n_screened
    fates = {c["feature"]: c for c in screened["llm"]["candidates"]}
    assert fates["llm.single.faithfulness"]["fate"] == "kept" and fates["llm.single.faithfulness"]["weight"] > 0
    assert screened["method"]["returned"] == "with-judges"
    noise = [c for name, c in fates.items() if "noise" in name]
    assert len(noise) == 8 and sum(c["fate"] == "screened out" for c in noise) >= 5, [(c["feature"], c["fate"]) for c in noise]
    assert all(c["detail"] and c["tokens"] > 0 for c in fates.values())
    # every candidate on every row: 9 judges x 60 rows, and each judge's input-swap probe (6 calls);
    # screening asked far fewer, and paid fewer tokens
    assert n_all == 9 * 60 + everything["llm"]["usage"]["score:probe"]["calls"] and \
        everything["llm"]["usage"]["score:probe"]["calls"] <= 9 * 6
    # (an early round drops only candidates whose upper bound adds nothing, and holds >= 8 input
    # groups: on 60 rows that costs more than the old best-third rule, which lost signal judges)
    assert n_screened <= 0.85 * n_all, (n_screened, n_all)
    assert _judge_tokens(screened) <= 0.85 * _judge_tokens(everything)
    assert sum(c["tokens"] for c in fates.values()) == _judge_tokens(screened)  # every token is on a candidate
    # the same signal judge wins either way, and both evaluators agree with the humans on held-out rows
    kept_all = {c["feature"] for c in everything["llm"]["candidates"] if c["fate"] == "kept"}
    assert "llm.single.faithfulness" in kept_all
    t_s, t_a = screened["statistics"]["test"]["tau"], everything["statistics"]["test"]["tau"]
    assert t_s > 0.5 and abs(t_s - t_a) < 0.15
    first = screened["llm"]["screening"]["rounds"][0]
    # round one holds 8 input groups (32 rows here) and keeps what its upper bound says may add
    assert (first["rows"], first["candidates"]) == (32, 9) and 1 <= first["kept"] <= 6
    assert screened["llm"]["floor"]["llm_free_test"]["tau"] < t_s


def test_noise_judges_only_give_back_the_llm_free_evaluator_and_say_so(tmp_path):
    df = grouped_data(seed=1)
    with ScriptedJudgeServer(signal_script(df, signal=())) as srv:
        a = _fit(srv, df, tmp_path, "noise")
        asked = len(srv.judge_requests)
    assert a["method"]["returned"] == "llm-free"
    assert not any(f["generated"] for f in a["features"])
    assert any(w.startswith("LLM: the judges added nothing") for w in a["warnings"])
    fates = [c["fate"] for c in a["llm"]["candidates"]]
    assert "kept" not in fates and fates.count("screened out") >= 5
    assert asked < 0.85 * 9 * 60
    # the LLM-free evaluator is exactly what `fit` without --llm gives; its figure is the whole procedure's when a
    # choice between it and judges was made (inside each fold), else its own
    free = fit_evaluator(df, "score", n_boot=50).evaluator.artifact
    assert [f["feature"] for f in a["features"]] == [f["feature"] for f in free["features"]]
    nested = a["llm"]["floor"]["nested"]
    assert a["llm"]["floor"]["llm_free_test"]["tau"] == pytest.approx(free["statistics"]["test"]["tau"])  # its own figure
    if nested is None:
        assert a["statistics"]["test"]["tau"] == pytest.approx(free["statistics"]["test"]["tau"])
    else:
        assert a["statistics"]["test"]["tau"] == pytest.approx(nested["tau"]) == pytest.approx(a["validity"]["tau"])
        assert "the choice between the evaluator with judges and the LLM-free one" in a["validity"]["scope"]


def test_unreadable_replies_make_a_failed_candidate(tmp_path):
    df = grouped_data(seed=2)
    with ScriptedJudgeServer(signal_script(df, fail=("Broken",))) as srv:
        a = _fit(srv, df, tmp_path, "fail", judge_specs=specs(n_noise=2, extra=("Broken",)))
    broken = next(c for c in a["llm"]["candidates"] if c["feature"] == "llm.single.broken")
    first = a["llm"]["screening"]["rounds"][0]["rows"]  # failed in round one: asked about no further row
    assert broken["fate"] == "failed" and broken["parse_failures"] == first and "unreadable" in broken["detail"]
    assert a["llm"]["usage"]["total"]["parse_failures"] >= first


def test_a_function_candidate_is_screened_like_a_judge(tmp_path):
    """Code metrics and exemplar metrics plug in as candidate sources: same screening, same fates."""
    from autometrics.metricbank import Metric

    class Stored(Metric):  # what the artifact would store and run on new data
        def _compute(self, outputs, inputs, references):
            return np.zeros(len(outputs))

    oracle, constant = type("Oracle", (Stored,), {"name": "oracle"})(), type("Constant", (Stored,), {"name": "constant"})()
    df = grouped_data(seed=3)
    seen = {}

    def source(ctx):
        seen["train"] = len(ctx.train_pos)
        rank = pd.Series(ctx.y).rank(pct=True).to_numpy()  # a leak on purpose: a perfect candidate
        return [FunctionCandidate("oracle", "exemplar", lambda pos: rank[pos], metric=oracle),
                FunctionCandidate("constant", "code", lambda pos: np.full(len(pos), 3.0), metric=constant)]

    with ScriptedJudgeServer(signal_script(df, signal=())) as srv:
        a = _fit(srv, df, tmp_path, "fn", judge_specs=specs(n_noise=2), candidate_sources=[source])
    fates = {c["feature"]: c for c in a["llm"]["candidates"]}
    assert fates["oracle"]["fate"] == "kept" and fates["oracle"]["kind"] == "exemplar" and fates["oracle"]["tokens"] == 0
    assert fates["constant"]["fate"] == "screened out" and "adds +0.000 R² on 32 rows" in fates["constant"]["detail"]
    assert seen["train"] == a["dataset"]["n_train"]
    with pytest.raises(ValueError, match="Name the candidate after its metric's feature"):
        FunctionCandidate("other", "code", lambda pos: pos, metric=oracle).meta()


def test_bank_metrics_are_the_base_a_judge_must_add_to(tmp_path):
    """With MetricBank in (>= 80 rows), a judge's screening figure is what it adds to them."""
    df = grouped_data(n_inputs=24, seed=4)
    with ScriptedJudgeServer(signal_script(df)) as srv:
        a = _fit(srv, df, tmp_path, "bank", judge_specs=specs(n_noise=3), use_bank="always", retrieve_k=200,
                 dense=False)
    assert a["method"]["bank_used"] and a["llm"]["screening"]["base"]["features"]
    fates = {c["feature"]: c for c in a["llm"]["candidates"]}
    assert fates["llm.single.faithfulness"]["fate"] == "kept"
    assert fates["llm.single.faithfulness"]["gain"] > 0.3


def test_stratified_groups_keep_inputs_whole_and_balance_labels():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(30), 3).astype(str)
    y = rng.normal(size=90) + np.repeat(np.linspace(-2, 2, 30), 3)
    order = stratified_groups(np.arange(90), y, groups, seed=1)
    assert sorted(np.concatenate(order).tolist()) == list(range(90))
    assert all(len(set(groups[m])) == 1 and len(m) == 3 for m in order)
    first = np.concatenate(order[:8])
    assert abs(y[first].mean() - y.mean()) < 0.5  # the first rows span the label range, not one end of it
    assert np.ptp(y[first]) > 0.6 * np.ptp(y)
    pos = sample_groups(groups, 40, seed=3)
    assert len(pos) <= 40 and len(pos) % 3 == 0 and np.array_equal(pos, sample_groups(groups, 40, seed=3))
    assert not np.array_equal(pos, sample_groups(groups, 40, seed=4))


def test_schedule_and_the_upper_bound_on_calls():
    o = ScreeningOptions()
    assert schedule(42, o) == [16, 42]
    assert schedule(252, o) == [32, 96, 252]
    assert schedule(20, o) == [20]  # too few rows to screen
    assert schedule(84, ScreeningOptions(first_rows=10, eta=2)) == [10, 20, 84]
    assert candidate_calls(9, 42, 18, o, top_n=5) == [(9, 16), (9, 26), (5, 18)]  # bounds: a round may keep all
    halving = ScreeningOptions(z=0)
    assert candidate_calls(9, 42, 18, halving, top_n=5) == [(9, 16), (3, 26), (3, 18)]
    assert candidate_calls(9, 42, 18, None, top_n=5) == [(9, 60)]
    assert candidate_calls(1, 28, 12, halving, top_n=5) == [(1, 16), (1, 12), (1, 12)]


def test_added_tau_measures_what_a_candidate_adds_not_its_own_tau():
    rng = np.random.default_rng(0)
    n = 60
    groups = np.arange(n).astype(str)
    a, b = rng.normal(size=n), rng.normal(size=n)
    y = a + b
    rows = np.arange(n)
    copy = added_tau(a + 0.01 * rng.normal(size=n), y, groups, rows, base_pred=a)
    new = added_tau(b, y, groups, rows, base_pred=a)
    alone = added_tau(b, y, groups, rows)
    assert copy["tau"] > 0.3 and abs(copy["gain"]) < 0.05  # a good metric that repeats the base adds nothing
    assert new["gain"] > 0.15 and new["tau_with"] > new["tau_base"]
    assert alone["tau_base"] == 0.0 and alone["tau_gain"] == pytest.approx(alone["tau_with"])
    flipped = added_tau(-b, y, groups, rows, base_pred=a)  # a judge that reliably disagrees adds as much, reversed
    assert flipped["gain"] == pytest.approx(new["gain"], abs=0.02)
    fixed = added_tau(-b, y, groups, rows, base_pred=a, positive=True)  # its sign fixed: it adds nothing
    assert abs(fixed["gain"]) < 1e-9
    assert added_tau(b, y, groups, rows, base_pred=a, n_boot=200)["se"] > 0
    holes = np.where(rng.random(n) < 0.7, np.nan, b)
    assert np.isnan(added_tau(holes, y, groups, rows)["gain"])


def test_score_asks_all_judges_of_one_example_in_a_row(tmp_path):
    """``autometrics score`` (Evaluator.score_texts -> score_metrics) asks every criterion about one
    example before the next example, as the fit does, so the server's prefix cache holds the example."""
    from autometrics.evaluators.features import score_metrics
    from autometrics.evaluators.judges.metric import LLMJudgeMetric, unbind_clients
    from autometrics.evaluators.llm.client import LLMConfig

    with ScriptedJudgeServer(lambda c, o, i: noise_score(c, o)) as srv:
        cfg = LLMConfig.parse(f"openai/fake@{srv.url}", concurrency=1)  # one request at a time, as llama.cpp serves
        judges = [LLMJudgeMetric.from_spec(s, cfg) for s in specs(n_noise=2)]
        outs = [f"a new answer {k}" for k in range(4)]
        try:
            X, _meta, notes = score_metrics(judges, outs, ["q"] * 4, None)
        finally:
            unbind_clients()
        asked = list(srv.judge_requests)
    assert not notes and X.shape == (4, 3) and X.notna().all().all()
    assert [o for _c, o in asked] == [o for o in outs for _ in range(3)]  # each example three times in a row
    assert [c for c, _o in asked[:3]] == ["Faithfulness", "Noise 1", "Noise 2"]


def test_judges_that_all_disagree_give_back_the_llm_free_evaluator(tmp_path):
    """Every judge scores the labels backwards: the regression may not use any (a judge enters with
    a positive weight only), so the fit returns the LLM-free evaluator and says why, instead of failing."""
    df = grouped_data(seed=11)
    ranks = df["score"].rank(pct=True)
    backwards = dict(zip(df["output"], (5 - np.minimum(4, (ranks * 5).astype(int))).tolist(), strict=True))
    with ScriptedJudgeServer(lambda c, o, i: backwards.get(o, 3)) as srv:
        a = _fit(srv, df, tmp_path, "backwards", judge_specs=specs(n_noise=1), screen=False)
    assert a["method"]["returned"] == "llm-free" and "could use no candidate" in a["llm"]["floor"]["why"]
    assert {c["fate"] for c in a["llm"]["candidates"]} == {"negative weight"}
    assert all("τ train -" in c["detail"] for c in a["llm"]["candidates"])


def test_a_judge_that_grades_the_input_is_rejected_and_one_that_reads_the_output_is_kept(tmp_path):
    """The input-swap probe (judges/about_output.py): "Question difficulty" scores the input (the same
    score for every answer to one question) and is rejected; "Faithfulness" reads the answer and
    "On topic" punishes an answer shown under another question (it reads both): both are kept."""
    df = grouped_data(seed=3)
    ranks = df["score"].rank(pct=True)
    level = dict(zip(df["output"], (1 + np.minimum(4, (ranks * 5).astype(int))).tolist(), strict=True))
    by_input = {f"question number {i}": 1 + i % 5 for i in range(15)}

    def script(criterion, output, inp):
        if criterion == "Question difficulty":
            return by_input[inp]
        if criterion == "On topic":  # an answer carries its question's number: "... 7-2"
            return level[output] if inp.endswith(" " + output.rsplit(" ", 1)[1].split("-")[0]) else 1
        return level[output] if criterion == "Faithfulness" else noise_score(criterion, output)

    extra = ("Question difficulty", "On topic")
    with ScriptedJudgeServer(script) as srv:
        a = _fit(srv, df, tmp_path, "probe", judge_specs=specs(n_noise=2, extra=extra))
    fates = {c["feature"]: c for c in a["llm"]["candidates"]}
    q = fates["llm.single.question_difficulty"]
    assert q["fate"] == "about the input" and "grades the input" in q["detail"], q
    assert q["about_output"]["grades_input"] and q["about_output"]["follows_input"] == q["about_output"]["answered"] >= 5
    for name in ("llm.single.faithfulness", "llm.single.on_topic"):
        assert fates[name]["about_output"]["grades_input"] is False, fates[name]
        assert fates[name]["fate"] != "about the input"
    assert fates["llm.single.faithfulness"]["fate"] == "kept"
    # the probe is paid for and counted: 6 calls per judge at most, on the candidates' token tally
    probe = a["llm"]["usage"]["score:probe"]
    assert 0 < probe["calls"] <= 6 * 5
    assert sum(c["tokens"] for c in fates.values()) == _judge_tokens(a)


def test_input_verdict_needs_every_informative_probe_to_follow_the_input():
    from autometrics.evaluators.judges.about_output import input_verdict, probe_pairs

    values = np.array([1.0, 5.0, 2.0, 4.0, 3.0, 3.0, np.nan, 5.0])
    inputs = ["a", "b", "c", "d", "e", "f", "g", "b"]
    pairs = probe_pairs(values, inputs, range(8), k=6)
    assert all(values[j] - values[i] >= 0.5 and inputs[i] != inputs[j] for i, j in pairs)
    assert len({r for p in pairs for r in p}) == 2 * len(pairs) and 6 not in {r for p in pairs for r in p}
    assert pairs[0] in {(0, 1), (0, 7)}  # the widest gap first
    follows_input = [(1, 5, 5), (2, 4, 4.2), (1, 3, 2.6), (2, 5, 4), (1, 4, 4)]
    assert input_verdict(follows_input)["grades_input"]
    assert not input_verdict(follows_input[:4])["grades_input"]  # fewer than 5 informative probes
    assert not input_verdict([*follows_input, (2, 5, 2)])["grades_input"]  # one probe follows the output
    assert not input_verdict([*follows_input[:4], (1, 4, float("nan"))])["grades_input"]  # an unreadable probe is missing


def test_a_judge_with_demonstrations_is_asked_about_all_rows_in_a_row(tmp_path):
    """Its prompt opens with its demonstration block; asked between the other judges of each row, a
    prefix cache could never serve that block.  The case-first judges go row by row, then it goes."""
    from autometrics.evaluators.judges.metric import LLMJudgeMetric, prefetch_row_major, unbind_clients
    from autometrics.evaluators.llm.client import LLMConfig

    example = JudgeSpec(kind="example", criterion="Like the examples", description="match the scored examples", task=TASK,
                        demonstrations=[{"input": "q", "output": f"demo answer {k}", "score": k} for k in range(1, 6)])
    with ScriptedJudgeServer(lambda c, o, i: noise_score(c, o)) as srv:
        cfg = LLMConfig.parse(f"openai/fake@{srv.url}", concurrency=1)
        judges = [LLMJudgeMetric.from_spec(s, cfg) for s in [example, *specs(n_noise=1)]]
        outs = [f"a new answer {k}" for k in range(3)]
        try:
            prefetch_row_major(judges, outs, ["q"] * 3)
        finally:
            unbind_clients()
        asked = list(srv.judge_requests)
    assert asked == [(c, o) for o in outs for c in ("Faithfulness", "Noise 1")] + [("Like the examples", o) for o in outs]
