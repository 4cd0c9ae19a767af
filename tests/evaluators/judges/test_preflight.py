"""Before the first judge call: text every row shares is elided from what judges read,
per-call timeouts follow the measured server speed, and the fit's judge-prompt tokens are
counted against the floor (each judged case once) and what a prefix cache could reuse."""

from __future__ import annotations

import csv
import time

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.judges.budget import Speed
from autometrics.evaluators.judges.metric import JudgeSpec, elide_text, judge_case, judge_messages, shared_affixes
from autometrics.evaluators.llm.usage import Usage


def _rows(path):
    csv.field_size_limit(1 << 30)
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_shared_prompt_template_is_elided_so_a_clipped_judge_sees_what_differs(datasets_dir):
    """evalgen_product: every input opens with the same ~940-character instruction template; clipped
    to 400 characters, every input looked the same to the judge.  With the template elided, the
    clipped inputs differ where the products differ."""
    rows = _rows(datasets_dir / "evalgen_product.csv")
    inputs = [r["input"] for r in rows]
    pre, suf = shared_affixes(inputs)
    assert len(pre) >= 800 and pre[-1].isspace() and suf == ""
    assert all(t.startswith(pre) for t in inputs)
    plain = JudgeSpec(kind="single", criterion="Persuasive", task="Write a product description", clip_chars=400)
    elided = JudgeSpec(kind="single", criterion="Persuasive", task="Write a product description", clip_chars=400,
                       elide={"input": [pre, suf]})
    shown_plain = {judge_case(plain, r["output"], r["input"])[0] for r in rows}
    shown = {judge_case(elided, r["output"], r["input"])[0] for r in rows}
    assert len(shown_plain) == 1  # the template only: what the issue measured
    assert len(shown) >= 0.9 * len(set(inputs))
    first = judge_case(elided, rows[0]["output"], rows[0]["input"])[0]
    assert first.startswith(f"[… {len(pre)} characters every example starts with …]")
    assert rows[0]["input"][len(pre):len(pre) + 200] in first


def test_shared_affixes_edges():
    head = "Please answer the following question carefully and briefly, citing sources. " * 2
    tail = " Remember: be brief, be clear, and do not invent any facts that are not in the text." * 2
    texts = [head + body + tail for body in ("alpha beta", "gamma", "delta epsilon zeta")]
    pre, suf = shared_affixes(texts)
    assert pre == head and suf == tail
    assert elide_text(texts[1], (pre, suf)) == (f"[… {len(pre)} characters every example starts with …]\ngamma"
                                                f"\n[… {len(suf)} characters every example ends with …]")
    assert shared_affixes(texts[:2]) == ("", "")  # too few rows to call anything shared
    assert shared_affixes([texts[0]] * 5) == ("", "")  # identical rows: nothing differs, nothing elided
    assert shared_affixes(["short common start " + w for w in ("a", "b", "c")]) == ("", "")  # below 80 characters
    # a new row without the template is shown whole
    assert elide_text("something else entirely", (pre, suf)) == "something else entirely"


def test_elide_is_part_of_the_spec_only_when_set():
    a = JudgeSpec(kind="single", criterion="Fluency", task="T")
    b = JudgeSpec.from_dict({**a.to_dict(), "elide": None})
    c = JudgeSpec.from_dict({**a.to_dict(), "elide": {"input": ["x" * 90, ""]}})
    assert a.sha() == b.sha() != c.sha()  # specs stored before elision keep their hash


def test_judges_with_demonstrations_put_them_before_the_case():
    """A prefix cache reuses what comes first: the example judge's ~500-token demonstration block is
    the same for every row, so it precedes the case; criterion-only judges keep the case first."""
    demos = [{"input": f"in {k}", "output": f"demo output {k} " * 20, "score": k} for k in range(1, 6)]
    ex = JudgeSpec(kind="example", criterion="Overall", task="T", demonstrations=demos)
    single = JudgeSpec(kind="single", criterion="Fluency", task="T")
    a, b = (judge_messages(ex, f"output {k}", f"input {k}")[1]["content"] for k in (1, 2))
    shared = a[: next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)]
    assert "demo output 5" in shared and "Criterion: Overall" in shared
    assert a.index("Now judge this case") < a.index("Input:\ninput 1") < a.index("Rate the output")
    s = judge_messages(single, "output 1", "input 1")[1]["content"]
    assert s.startswith("Task: T\n\nInput:\ninput 1\n\nOutput:\noutput 1\n\nCriterion: Fluency")


def test_token_ledger_counts_what_a_prefix_cache_reuses_and_the_floor():
    u = Usage(track_prefixes=True)
    case = "Input: a long shared case text " * 10
    u.note_prompt("score:single", [{"role": "user", "content": case + "Criterion: A"}])
    u.note_prompt("score:single", [{"role": "user", "content": case + "Criterion: B"}])  # all of the case is reusable
    u.note_prompt("generate:axes", [{"role": "user", "content": "something else"}])
    u.note_case(case)
    u.note_case(case)  # one case, counted once
    rep = u.token_report(("score:",))
    sent = 2 * len(case) + 2 * len("Criterion: A")
    assert rep["sent"] == sent // 4 and rep["floor"] == len(case) // 4
    assert rep["reusable"] == (len(case) + len("Criterion: ")) // 4
    assert rep["evaluated"] == (sent - len(case) - len("Criterion: ")) // 4
    assert 1.0 < rep["sent_over_floor"] < 2.2 and rep["evaluated_over_floor"] < 1.1
    assert u.token_report(("nothing",)) is None
    off = Usage()  # the default (e.g. online scoring): no prompt is kept
    off.note_prompt("score:single", [{"role": "user", "content": case}])
    off.note_case(case)
    assert off.prefixes is None and off.token_report(("score:",)) is None


def test_per_call_timeouts_follow_the_measured_speed(fake, client_for):
    """A server slower than the configured timeout: the call fails on the fixed timeout and passes
    once the client knows the server's speed (3x what the call needs at it)."""
    msg = [{"role": "user", "content": "x" * 400}]  # ~100 prompt tokens
    with fake(delay=1.2) as srv:
        client = client_for(srv, timeout=0.5, max_retries=0, concurrency=1)
        r = client.chat(msg, stage="t", max_tokens=4)
        assert not r.ok and "timeout" in r.error
        client.speed = Speed(prompt_tps=100.0, completion_tps=10.0)  # ~1.4 s needed: timeout ~4.2 s
        t, d = client.timeouts(msg, 4)
        assert 3.5 < t < 5 and d >= 2 * t
        t0 = time.perf_counter()
        r = client.chat(msg + [{"role": "user", "content": "again"}], stage="t", max_tokens=4)
        assert r.ok and time.perf_counter() - t0 < t
        client.speed = Speed(prompt_tps=1e6, completion_tps=1e6)  # fast server: the configured floor stays
        assert client.timeouts(msg, 4)[0] == 0.5


def test_example_judge_demonstrations_cost_no_judge_calls(fake, client_for):
    """The default example judge picks one demonstration per label quintile without asking the judge
    (choosing among 5 sets by judge calls was 40-49 % of a fit's tokens), from distinct
    inputs where a level has several."""
    from autometrics.evaluators.judges.generate import example_judge, typical_demonstrations
    from autometrics.evaluators.judges.options import GeneratorCounts

    rng = np.random.default_rng(0)
    n = 40
    inputs = [f"question {i // 2}" for i in range(n)]
    outputs = [("word " * int(rng.integers(3, 30))) + str(i) for i in range(n)]
    y = rng.normal(size=n)
    picked = typical_demonstrations(inputs, outputs, y, np.random.default_rng(1))
    assert len(picked) == 5 and len({inputs[i] for i in picked}) == 5
    with fake() as srv:
        client = client_for(srv)
        spec = example_judge("T", "score", inputs, outputs, y, GeneratorCounts(), client.config, np.random.default_rng(1))
        assert len(srv.requests) == 0
    assert len(spec.demonstrations) == 5 and "no judge calls" in spec.origin["selection"]
    assert sorted(d["score"] for d in spec.demonstrations) == [1, 2, 3, 4, 5]


def test_fit_reports_tokens_and_elides_a_template():
    """Through the whole LLM path with the scripted judge server: the artifact reports judge-prompt
    tokens (sent, reusable, floor), the template every input shares is elided from the judges'
    prompts, and the judges' specs carry the elision so a reloaded evaluator scores alike."""
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.options import LLMOptions
    from scripted_judge_server import ScriptedJudgeServer, noise_score

    rng = np.random.default_rng(0)
    head = "You are a helpful assistant. Read the customer's question below and answer it politely and precisely. "
    rows = []
    for i in range(16):
        for k in range(4):
            rows.append({"id": f"r{i}-{k}", "input": head + f"Question {i}: where is item {i * 7}?",
                         "output": f"answer {k} about item {i * 7} " + " ".join(rng.choice(list("abcdefgh"), 6)),
                         "score": float(rng.normal())})
    df = pd.DataFrame(rows)
    level = dict(zip(df["output"], (1 + np.minimum(4, (df["score"].rank(pct=True) * 5).astype(int))).tolist(), strict=True))
    seen_inputs = []

    def script(criterion, output, input_text):
        seen_inputs.append(input_text)
        return level.get(output, 3) if criterion == "Helpfulness" else noise_score(criterion, output)

    specs = [JudgeSpec(kind="single", criterion="Helpfulness", description="helpful", task="Answer"),
             JudgeSpec(kind="single", criterion="Noise", description="an aspect humans ignore", task="Answer")]
    with ScriptedJudgeServer(script) as server:
        opts = LLMOptions(llm=f"openai/fake@{server.url}", judge_specs=specs, rationales=0, cache="off", exemplar=False,
                          use_bank="never")
        res = fit_evaluator(df, "score", task="Answer", llm_options=opts, seed=0, n_boot=0)
    a = res.evaluator.artifact
    tok = a["llm"]["tokens"]["judging"]
    assert tok["floor"] > 0 and tok["sent"] >= tok["evaluated"] > 0 and tok["reusable"] > 0
    assert tok["sent_over_floor"] == pytest.approx(tok["sent"] / tok["floor"], rel=0.05)
    assert seen_inputs and all(not t.startswith(head) and t.startswith("[… ") for t in seen_inputs)
    kept = [g for g in a["generated"] if g.get("spec")]
    assert kept and all(g["spec"]["elide"]["input"][0].startswith(head) for g in kept)
