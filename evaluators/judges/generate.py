"""Judge generators (AutoMetrics paper defaults: 10 single-criterion, 5 rubric, 1 example-based,
1 prompt-optimized judge).  Everything reads the *training* rows only.

- single: the generator LLM proposes axes of variation from high- vs low-rated examples;
- rubric: 1–5 level descriptions for the leading axes;
- example: demonstrations sampled one per label quintile, best of ``example_sets`` sets by
  Kendall τ on held-in training rows;
- optimized: DSPy MIPROv2 over a judge program (tiny budget by default; optional).

The generator programs are DSPy signatures run through :func:`.llm.dspy_lm` (our cache,
retries and accounting); when DSPy cannot parse a small model's reply, a plain prompt with a
line parser is used instead (counted in the ``fallbacks`` list returned with the specs).
"""

from __future__ import annotations

import logging
import math
import re

import numpy as np
from autometrics.evaluators.judges.metric import JudgeSpec, LLMJudgeMetric, prefetch_row_major
from autometrics.evaluators.llm.client import LLMClient, LLMConfig, dspy_lm
from autometrics.evaluators.stats import kendall_tau

__all__ = ["GeneratorCounts", "PAPER_COUNTS", "QUICK_COUNTS", "generate_judges", "quintile_scores"]

from autometrics.evaluators.judges.options import PAPER_COUNTS, QUICK_COUNTS, GeneratorCounts  # noqa: F401

log = logging.getLogger("autometrics.generate")
_CLIP = 600


def _clip(t: str, n: int = _CLIP) -> str:
    t = (t or "").strip().replace("\n", " ")
    return t if len(t) <= n else t[:n] + " […]"


def quintile_scores(y: np.ndarray) -> np.ndarray:
    """Labels mapped to 1..5 by training quintile (ties share a level)."""
    y = np.asarray(y, dtype=float)
    edges = np.quantile(y, [0.2, 0.4, 0.6, 0.8])
    return (np.searchsorted(edges, y, side="right") + 1).clip(1, 5)


def _examples_block(rows: list[tuple[str, str, float]]) -> str:
    out = []
    # no rating numbers: the block is already high- or low-rated, and small generators copy numbers
    # back as "criteria"
    for k, (i, o, _s) in enumerate(rows, 1):
        out.append(f"[{k}]" + (f"\nInput: {_clip(i, 300)}" if i else "") + f"\nOutput: {_clip(o)}")
    return "\n\n".join(out)


_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*•])?\s*\**\s*([^:*\n]{2,80}?)\s*\**\s*[:—–-]\s*(.{8,})$")


def _parse_criteria(text: str) -> list[tuple[str, str]]:
    out = []
    for line in (text or "").splitlines():
        m = _LINE.match(line)
        if m:
            name, desc = m.group(1).strip(" *\"'`"), m.group(2).strip(" *\"'`")
            # small models echo the format hint back ("Name: what a high score means"): not a criterion
            if (name.lower() in {"name", "criterion", "criteria", "description", "politeness"}
                    or "what a high score means" in desc.lower() or re.search(r"human rating|\d{2}", name.lower())):
                continue
            if 1 <= len(name.split()) <= 8:
                out.append((name, desc))
    return out


def _dedupe(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen, out = set(), []
    for name, desc in items:
        key = re.sub(r"[^a-z0-9]+", "", name.lower())
        if key and key not in seen:
            seen.add(key)
            out.append((name, desc))
    return out


# ---------------------------------------------------------------------- DSPy programs


def _signatures():
    import dspy

    class ProposeCriteria(dspy.Signature):
        """Humans rated outputs of a task. Compare the high-rated and the low-rated outputs and propose
        distinct evaluation criteria (axes of variation) that explain the difference in ratings. Each
        criterion is one line: a short criterion name, a colon, then one sentence saying what a high
        score means (for a customer-support task, e.g. 'Politeness: the reply thanks the customer and
        avoids blunt wording')."""

        task: str = dspy.InputField()
        rating: str = dspy.InputField(desc="name of the human rating")
        high_rated: str = dspy.InputField()
        low_rated: str = dspy.InputField()
        count: int = dspy.InputField(desc="how many criteria to propose")
        criteria: str = dspy.OutputField(desc="one criterion per line, criterion name, colon, one sentence")

    class MakeRubric(dspy.Signature):
        """Write a 1-5 scoring rubric for one evaluation criterion of a task: one sentence per level
        describing an output at that level (1 worst, 5 best)."""

        task: str = dspy.InputField()
        criterion: str = dspy.InputField()
        level_1: str = dspy.OutputField()
        level_2: str = dspy.OutputField()
        level_3: str = dspy.OutputField()
        level_4: str = dspy.OutputField()
        level_5: str = dspy.OutputField()

    class JudgeOutput(dspy.Signature):
        """Rate the output of the task from 1 (worst) to 5 (best)."""

        task: str = dspy.InputField()
        input: str = dspy.InputField()
        output: str = dspy.InputField()
        score: int = dspy.OutputField(desc="1 to 5")

    return ProposeCriteria, MakeRubric, JudgeOutput


class _Gen:
    def __init__(self, client: LLMClient, fallbacks: list[str]):
        self.client = client
        self.fallbacks = fallbacks

    def run(self, sig, stage: str, max_tokens: int, **inputs):
        import dspy

        lm = dspy_lm(self.client, stage, max_tokens=max_tokens)
        with dspy.context(lm=lm):
            return dspy.Predict(sig)(**inputs)

    def plain(self, prompt: str, stage: str, max_tokens: int) -> str:
        r = self.client.chat([{"role": "user", "content": prompt}], stage=stage, max_tokens=max_tokens)
        return r.text or ""


# Used only when the generator LLM proposes too few usable criteria (small local models); the
# fit's notes say so, and the regression still decides whether they predict the human rating.
GENERIC_AXES = [
    ("Task fulfilment", "the output does what the task asks, completely"),
    ("Faithfulness to the input", "the output is consistent with the input and adds nothing false"),
    ("Fluency", "the output is grammatical, natural text"),
    ("Clarity", "the output is easy to read and understand"),
    ("Conciseness", "the output has no unnecessary content"),
    ("Helpfulness", "a user would find the output useful"),
    ("Specificity", "the output is concrete rather than vague or generic"),
    ("Coherence", "the output is well organised and logically consistent"),
    ("Correctness", "statements in the output are accurate"),
    ("Appropriate tone", "the style suits the task and its audience"),
]


def propose_axes(gen: _Gen, task: str, target: str, inputs, outputs, y, n: int, rng) -> list[tuple[str, str]]:
    order = np.argsort(y)
    k = min(5, max(1, len(y) // 4))
    low_pool, high_pool = order[: max(k, len(y) // 5)], order[-max(k, len(y) // 5):]
    axes: list[tuple[str, str]] = []
    for attempt in range(2):
        if len(axes) >= n:
            break
        hi_idx = rng.choice(high_pool, size=min(k, len(high_pool)), replace=False)
        lo_idx = rng.choice(low_pool, size=min(k, len(low_pool)), replace=False)
        high = _examples_block([(inputs[i], outputs[i], y[i]) for i in hi_idx])
        low = _examples_block([(inputs[i], outputs[i], y[i]) for i in lo_idx])
        want = n - len(axes)
        text = ""
        try:
            pred = gen.run(gen_sigs()[0], "generate:axes", 64 * want + 64, task=task, rating=target,
                           high_rated=high, low_rated=low, count=want)
            text = pred.criteria or ""
        except Exception as exc:  # small models: DSPy may not parse; fall back to a plain prompt
            gen.fallbacks.append(f"axes attempt {attempt + 1}: DSPy failed ({type(exc).__name__}); plain prompt used")
        found = _parse_criteria(text)
        if not found:
            prompt = (f"Task: {task}\nHumans rated outputs ({target}).\n\nHIGH-rated outputs:\n{high}\n\nLOW-rated outputs:\n{low}\n\n"
                      f"List {want} distinct criteria that explain why some outputs were rated higher. One per line: "
                      "a short criterion name, a colon, then what a high score means. Example line for a different "
                      "task: 'Politeness: the reply thanks the customer and avoids blunt wording'.")
            found = _parse_criteria(gen.plain(prompt, "generate:axes", 64 * want + 64))
        axes = _dedupe(axes + found)
    return axes[:n]


_gen_sigs_cache = None


def gen_sigs():
    global _gen_sigs_cache
    if _gen_sigs_cache is None:
        _gen_sigs_cache = _signatures()
    return _gen_sigs_cache


def make_rubric(gen: _Gen, task: str, name: str, desc: str) -> tuple[dict[str, str], bool]:
    levels: dict[str, str] = {}
    try:
        pred = gen.run(gen_sigs()[1], "generate:rubric", 320, task=task, criterion=f"{name}: {desc}")
        levels = {str(i): str(getattr(pred, f"level_{i}", "") or "").strip() for i in range(1, 6)}
    except Exception as exc:
        gen.fallbacks.append(f"rubric {name!r}: DSPy failed ({type(exc).__name__}); plain prompt used")
    if not all(levels.get(str(i)) for i in range(1, 6)):
        text = gen.plain(f"Task: {task}\nCriterion: {name}: {desc}\nWrite a scoring rubric with five lines '1: ...' to "
                         "'5: ...', one sentence each, 1 worst and 5 best.", "generate:rubric", 320)
        for line in text.splitlines():
            m = re.match(r"^\s*\**\s*(?:level\s*)?([1-5])\s*\**\s*[:.)-]\s*(.+)$", line, flags=re.I)
            if m and m.group(2).strip():
                levels[m.group(1)] = m.group(2).strip()
    if all(levels.get(str(i)) for i in range(1, 6)):
        return {str(i): levels[str(i)] for i in range(1, 6)}, False
    gen.fallbacks.append(f"rubric {name!r}: unparseable; generic anchored levels used")
    anchors = ["does not meet it at all", "meets it poorly", "meets it partly", "meets it well", "meets it fully"]
    return {str(i + 1): f"The output {a}: {desc}" for i, a in enumerate(anchors)}, True


def _tau(scores: np.ndarray, y) -> float:
    ok = ~np.isnan(scores)
    if ok.sum() < 3:
        return math.nan
    return kendall_tau(scores[ok], np.asarray(y, dtype=float)[ok])[0]


def example_judge(task, target, inputs, outputs, y, counts: GeneratorCounts, judge: LLMConfig, rng) -> JudgeSpec:
    """The example-based judge: ``example_sets`` candidate sets of demonstrations (one per label
    quintile), each judged on the same training rows (not used as demonstrations); the set with
    the best Kendall τ wins.  The candidates are asked row by row, so each row's text is
    evaluated once by a prefix-caching server; the winner's replies on those rows are cached."""
    q = quintile_scores(y)
    n = len(y)
    demo_sets = []
    for _s in range(max(1, counts.example_sets)):
        demo_idx = []
        for level in range(1, 6):
            pool = np.flatnonzero(q == level)
            if len(pool):
                demo_idx.append(int(rng.choice(pool)))
        demo_sets.append(demo_idx)
    used = sorted({i for d in demo_sets for i in d})
    rest = np.setdiff1d(np.arange(n), used)
    if len(rest) < 3:  # tiny data: judge on every row rather than none
        rest = np.arange(n)
    eval_idx = rng.choice(rest, size=min(counts.example_eval_rows, len(rest)), replace=False)
    specs = [JudgeSpec(
        kind="example", criterion=f"Overall {target}", task=task,
        description=f"how the human raters would rate the output ({target}); match the scored examples",
        demonstrations=[{"input": _clip(inputs[i], 400), "output": _clip(outputs[i]), "score": int(q[i])} for i in d],
    ) for d in demo_sets]
    metrics = [LLMJudgeMetric.from_spec(s, judge) for s in specs]
    ev_out, ev_in = [outputs[i] for i in eval_idx], [inputs[i] for i in eval_idx]
    prefetch_row_major(metrics, ev_out, ev_in)
    y_ev = np.asarray(y, dtype=float)[eval_idx]
    taus = [_tau(m.score(ev_out, inputs=ev_in), y_ev) for m in metrics]
    tried = [None if math.isnan(t) else round(float(t), 4) for t in taus]
    # the first set with the highest τ (a set whose τ is undefined never wins unless all are)
    best = specs[int(np.argmax([-math.inf if math.isnan(t) else t for t in taus]))]
    best.origin = {"selection": f"best of {len(specs)} demonstration sets by Kendall tau on {len(eval_idx)} training rows",
                   "set_taus": tried}
    return best


def optimized_judge(task, target, inputs, outputs, y, counts: GeneratorCounts, gen_client: LLMClient, judge_client: LLMClient,
                    rng) -> JudgeSpec:
    """DSPy MIPROv2 (instructions + labelled demos) over a 1–5 judge program; the result is
    frozen into a JudgeSpec (its instructions and demonstrations) and scored like the others."""
    import dspy

    q = quintile_scores(y)
    idx = rng.choice(len(y), size=min(counts.optimized_rows, len(y)), replace=False)
    data = [dspy.Example(task=task, input=_clip(inputs[i], 400), output=_clip(outputs[i]), score=int(q[i])).with_inputs("task", "input", "output")
            for i in idx]
    split = max(2, len(data) // 2)

    def metric(ex, pred, trace=None):
        try:
            return 1.0 - abs(int(pred.score) - int(ex.score)) / 4.0
        except (TypeError, ValueError):
            return 0.0

    prog = dspy.Predict(gen_sigs()[2])
    opt = dspy.MIPROv2(metric=metric, prompt_model=dspy_lm(gen_client, "generate:optimize", max_tokens=256),
                       task_model=dspy_lm(judge_client, "generate:optimize", max_tokens=32), auto=None,
                       num_candidates=counts.optimized_candidates, max_bootstrapped_demos=0, max_labeled_demos=3,
                       num_threads=1, verbose=False, seed=int(rng.integers(1 << 30)))
    with dspy.context(lm=dspy_lm(judge_client, "generate:optimize", max_tokens=32)):
        best = opt.compile(prog, trainset=data[:split], valset=data[split:], num_trials=counts.optimized_trials,
                           minibatch=False)
    pred = best.predictors()[0]
    demos = [{"input": d.get("input", ""), "output": d.get("output", ""), "score": int(d.get("score"))}
             for d in (pred.demos or []) if d.get("score") is not None]
    return JudgeSpec(kind="optimized", criterion=f"Overall {target} (optimized)", task=task,
                     description="how the human raters would rate the output", instructions=pred.signature.instructions,
                     demonstrations=demos, origin={"optimizer": "dspy.MIPROv2", "trials": counts.optimized_trials,
                                                   "candidates": counts.optimized_candidates})


def generate_judges(task: str | None, target: str, inputs: list[str], outputs: list[str], y: np.ndarray, *,
                    generator: LLMClient, judge: LLMClient, counts: GeneratorCounts = PAPER_COUNTS,
                    seed: int = 0) -> tuple[list[JudgeSpec], list[str]]:
    """Generate judge specs from training rows.  Returns (specs, notes about fallbacks)."""
    rng = np.random.default_rng(seed)
    task = task or f"Produce outputs that humans rate highly on '{target}'"
    y = np.asarray(y, dtype=float)
    notes: list[str] = []
    gen = _Gen(generator, notes)
    origin = {"generator": generator.config.model}
    specs: list[JudgeSpec] = []
    n_axes = max(counts.n_single, counts.n_rubric)
    axes = propose_axes(gen, task, target, inputs, outputs, y, n_axes, rng) if n_axes else []
    if len(axes) < n_axes:
        generic = [a for a in GENERIC_AXES if a[0].lower() not in {x[0].lower() for x in axes}][: n_axes - len(axes)]
        notes.append(f"the generator proposed {len(axes)} usable criteria of {n_axes} asked; "
                     f"{len(generic)} generic task-independent criteria filled in: " + ", ".join(g[0] for g in generic))
        axes = axes + generic
    for name, desc in axes[: counts.n_single]:
        specs.append(JudgeSpec(kind="single", criterion=name, description=desc, task=task, origin=origin))
    for name, desc in axes[: counts.n_rubric]:
        rubric, fallback = make_rubric(gen, task, name, desc)
        specs.append(JudgeSpec(kind="rubric", criterion=name, description=desc, task=task, rubric=rubric,
                               origin={**origin, "generic_rubric": fallback}))
    for _ in range(counts.n_example):
        specs.append(example_judge(task, target, inputs, outputs, y, counts, judge.config, rng))
    for _ in range(counts.n_optimized):
        try:
            specs.append(optimized_judge(task, target, inputs, outputs, y, counts, generator, judge, rng))
        except Exception as exc:
            log.warning("prompt optimization failed: %s", exc, exc_info=True)
            notes.append(f"prompt-optimized judge skipped: MIPROv2 failed ({type(exc).__name__}: {str(exc)[:200]})")
    return specs, notes
