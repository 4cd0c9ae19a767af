"""Judge generators (AutoMetrics paper defaults: 10 single-criterion, 5 rubric, 1 example-based,
1 prompt-optimized judge).  Everything reads the *training* rows only.

- single: the generator LLM proposes axes of variation from contrastive pairs (a higher- and a
  lower-rated output of the same input, or of the most similar inputs when inputs are unique),
  each phrased as a property of one output; the proposals are cleaned and filtered
  (:mod:`.criteria_checks`: copies of the prompt's example, comparative wording, generic names,
  duplicates by meaning) and every rejection is reported;
- rubric: 1–5 level descriptions for the leading axes, checked for direction (level texts, and
  the judge on the training pairs with the largest label gaps): inverted ones are flipped or
  rejected;
- example: one typical demonstration per label quintile, chosen without judge calls (with
  ``example_sets`` > 1, the best set by Kendall τ on held-in training rows, the paper's way);
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

from ..llm.client import LLMClient, LLMConfig, dspy_lm
from ..stats import kendall_tau
from .criteria_checks import (
    PROMPT_EXAMPLES,
    CheckedCriteria,
    check_criteria,
    clean_name,
    contrastive_pairs,
    dedupe_by_meaning,
    flip_rubric,
    rubric_text_inverted,
)
from .metric import JudgeSpec, LLMJudgeMetric, prefetch_row_major, read_score

__all__ = ["GeneratorCounts", "PAPER_COUNTS", "QUICK_COUNTS", "generate_judges", "quintile_scores", "check_rubric_direction"]

from .options import PAPER_COUNTS, QUICK_COUNTS, GeneratorCounts  # noqa: F401

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


def _pairs_block(pairs, inputs, outputs) -> str:
    # no rating numbers: small generators copy numbers back as "criteria"
    out = []
    for k, (h, lo, same) in enumerate(pairs, 1):
        if same or not (inputs[h] or inputs[lo]):
            head = f"Input: {_clip(inputs[h], 300)}\n" if inputs[h] else ""
            out.append(f"Pair {k}\n{head}Better output: {_clip(outputs[h])}\nWorse output: {_clip(outputs[lo])}")
        else:
            out.append(f"Pair {k} (two similar inputs)\nInput: {_clip(inputs[h], 300)}\nBetter output: {_clip(outputs[h])}\n"
                       f"Other input: {_clip(inputs[lo], 300)}\nWorse output: {_clip(outputs[lo])}")
    return "\n\n".join(out)


_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*•])?\s*\**\s*([^:*\n]{2,80}?)\s*\**\s*(?::|[—–]|-(?=\s))\s*(.{8,})$")


def _parse_criteria(text: str) -> list[tuple[str, str]]:
    """(name, description) per "name: description" line; names are cleaned later
    (:func:`.criteria_checks.clean_name`), so "[1] Politeness — ..." is kept for the copy check."""
    out = []
    for line in (text or "").splitlines():
        m = _LINE.match(line)
        if m:
            name, desc = m.group(1).strip(" *\"'`"), m.group(2).strip(" *\"'`")
            # small models echo the format hint back ("Name: what a high score means"): not a criterion
            if (name.lower() in {"name", "criterion", "criteria", "description", "short name"}
                    or "what a high score means" in desc.lower() or re.search(r"human rating|\d{2}", name.lower())):
                continue
            if 1 <= len(name.split()) <= 8:
                out.append((name, desc))
    return out


# ---------------------------------------------------------------------- DSPy programs


def _signatures():
    import dspy

    class ProposeCriteria(dspy.Signature):
        """(instructions: _PROPOSE_INSTRUCTIONS)"""

        task: str = dspy.InputField()
        rating: str = dspy.InputField(desc="name of the human rating")
        pairs: str = dspy.InputField(desc="pairs of a better-rated and a worse-rated output")
        count: int = dspy.InputField(desc="how many criteria to propose")
        criteria: str = dspy.OutputField(desc="one criterion per line: short name, colon, one sentence about one output")

    ProposeCriteria = ProposeCriteria.with_instructions(_PROPOSE_INSTRUCTIONS)

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


_EXAMPLE_LINE = f"{PROMPT_EXAMPLES[0][0]}: {PROMPT_EXAMPLES[0][1]}"
_PROPOSE_INSTRUCTIONS = (
    "Humans rated outputs of a task. Each pair shows a better-rated and a worse-rated output for the same input (or for "
    "two similar inputs). Find what makes the better outputs better and write distinct evaluation criteria. Each "
    "criterion describes ONE output, so that a grader can check it by reading a single output: never compare outputs, "
    "never mention ratings, pairs, 'better', 'worse' or 'the other output'. Prefer concrete properties of this task over "
    "general words such as clarity or accuracy. One criterion per line: a short name (2-5 words), a colon, then one "
    "sentence saying what an output that scores high on it does. The format, shown with a criterion of an unrelated "
    f"customer-support task (do not reuse it): '{_EXAMPLE_LINE}'.")


def propose_axes(gen: _Gen, task: str, target: str, inputs, outputs, y, n: int, rng,
                 agreement=None) -> tuple[CheckedCriteria, int, dict]:
    """Criteria from contrastive pairs, checked (:func:`.criteria_checks.check_criteria`; two
    criteria worded alike are one only when ``agreement`` says their judges agree).
    A second round with other pairs runs when too few specific criteria survived.  Returns
    (checked criteria, number proposed, {"pairs": n, "same_input_pairs": m})."""
    proposals: list[tuple[str, str]] = []
    used: set[int] = set()
    info = {"pairs": 0, "same_input_pairs": 0}
    checked = CheckedCriteria()
    for attempt in range(2):
        specific = len(checked.kept) - len(checked.generic_kept)
        if specific >= n:
            break
        pairs = contrastive_pairs(inputs, outputs, y, 5, rng, exclude=used)
        if not pairs:
            break
        used |= {r for p in pairs for r in p[:2]}
        info["pairs"] += len(pairs)
        info["same_input_pairs"] += sum(p[2] for p in pairs)
        block = _pairs_block(pairs, inputs, outputs)
        ask = n - specific + 2  # a few spare: some proposals do not pass the checks
        text = ""
        try:
            pred = gen.run(gen_sigs()[0], "generate:axes", 64 * ask + 64, task=task, rating=target, pairs=block, count=ask)
            text = pred.criteria or ""
        except Exception as exc:  # small models: DSPy may not parse; fall back to a plain prompt
            gen.fallbacks.append(f"axes attempt {attempt + 1}: DSPy failed ({type(exc).__name__}); plain prompt used")
        found = _parse_criteria(text)
        if not found:
            prompt = (f"Task: {task}\nHuman rating: {target}\n\n{_PROPOSE_INSTRUCTIONS}\n\n{block}\n\n"
                      f"Write {ask} criteria, one per line.")
            found = _parse_criteria(gen.plain(prompt, "generate:axes", 64 * ask + 64))
        proposals += found
        checked = check_criteria(proposals, want=n, agreement=agreement)
    return checked, len(proposals), info


#: training outputs each criterion of a pair worded alike is judged on before the two are merged
DEDUPE_CHECK_ROWS = 10


def criteria_agreement(judge: LLMClient | None, task: str, inputs, outputs, y, rows: int = DEDUPE_CHECK_ROWS):
    """``agreement(a, b)`` for :func:`.criteria_checks.dedupe_by_meaning`: Kendall τ between the
    single-criterion judges of criteria ``a`` and ``b`` (``(name, description)``) on the same
    ``rows`` training outputs, one per label level where possible (None without a judge or with
    fewer than 5 readable pairs of scores).  Each criterion is judged once, with the request its
    scoring sends later (served from the LLM cache then for these rows)."""
    if judge is None or len(outputs) < 6:
        return None
    order = np.argsort(np.asarray(y, dtype=float), kind="stable")
    picked = [int(order[k]) for k in np.unique(np.linspace(0, len(order) - 1, min(rows, len(order))).round().astype(int))]
    scored: dict[tuple[str, str], np.ndarray] = {}

    def scores(item):
        if item not in scored:
            spec = JudgeSpec(kind="single", criterion=clean_name(item[0]), description=item[1], task=task)
            metric = LLMJudgeMetric.from_spec(spec, judge.config)
            replies = judge.chat_many(metric.requests([outputs[r] for r in picked], [inputs[r] for r in picked]),
                                      stage="generate:dedupe_check")
            scored[item] = np.array([read_score(r, spec.scale_min, spec.scale_max)[0] for r in replies], dtype=float)
        return scored[item]

    def agreement(a, b):
        sa, sb = scores(a), scores(b)
        ok = np.isfinite(sa) & np.isfinite(sb)
        if ok.sum() < 5:
            return None
        t = kendall_tau(sa[ok], sb[ok])[0]
        return None if not np.isfinite(t) else float(t)

    return agreement


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


_FLAT_SD = 0.1  # judge scores on the check pairs with less spread than this (1-5 scale) get a note


def check_rubric_direction(spec: JudgeSpec, judge: LLMClient | None, inputs, outputs, pairs, *,
                           min_gap: float = 0.5) -> tuple[JudgeSpec, dict]:
    """Is level 5 the good end?  (the spec, level texts reversed when they read upside down;
    the record of the check.)

    1. The level texts: when level 1 reads clearly better than level 5 (lexical polarity,
       :func:`.criteria_checks.rubric_text_inverted`), the levels are reversed.
    2. The training labels: the judge grades both rows of each contrastive ``pairs`` with the
       (possibly reversed) rubric.  When the lower-rated row scores higher on average by at
       least ``min_gap`` and in more pairs than not, the record says so (``reads_reversed``) but
       the rubric is kept: a handful of pairs cannot decide a direction (issue 39 measured: the check
       rejected a rubric that reliably disagrees with the labels in 12 of 12 SimpEval fits, on 3
       pairs, while the same criterion as a single judge was used reversed), so, as for single
       judges, the sign the regression gives it on every training row decides.  These are the
       same requests the fit's scoring later sends for those rows, so the check is served from
       the LLM cache then."""
    rec: dict = {"criterion": spec.criterion}
    inverted, rec["text"] = rubric_text_inverted(spec.rubric or {})
    if inverted:
        spec.rubric = flip_rubric(spec.rubric)
    rec["flipped"] = inverted
    if judge is not None and pairs:
        rows = [r for p in pairs for r in p[:2]]
        metric = LLMJudgeMetric.from_spec(spec, judge.config)
        replies = judge.chat_many(metric.requests([outputs[r] for r in rows], [inputs[r] for r in rows]),
                                  stage="generate:rubric_check")
        sc = np.array([read_score(r, spec.scale_min, spec.scale_max)[0] for r in replies])
        diff = sc[0::2] - sc[1::2]
        diff = diff[~np.isnan(diff)]
        rec.update({"pairs": int(len(diff)), "mean_gap": round(float(diff.mean()), 3) if len(diff) else None,
                    "wins": int((diff > 0).sum()), "losses": int((diff < 0).sum()),
                    "score_sd": round(float(np.nanstd(sc)), 3) if np.isfinite(sc).any() else None})
        rec["reads_reversed"] = bool(len(diff) >= 2 and diff.mean() <= -min_gap and rec["losses"] > rec["wins"])
    rec["verdict"] = "flipped" if inverted else "kept"
    return spec, rec


def _tau(scores: np.ndarray, y) -> float:
    ok = ~np.isnan(scores)
    if ok.sum() < 3:
        return math.nan
    return kendall_tau(scores[ok], np.asarray(y, dtype=float)[ok])[0]


def typical_demonstrations(inputs, outputs, y, rng) -> list[int]:
    """One training row per label quintile, chosen without any judge call: within a level, the
    rows whose output length is nearest the level's median (typical, not the odd one out), one of
    them at random, and no two from the same input where the level has a row of another input."""
    q = quintile_scores(y)
    lengths = np.array([len(o or "") for o in outputs], dtype=float)
    picked, used_inputs = [], set()
    for level in range(1, 6):
        pool = np.flatnonzero(q == level)
        if not len(pool):
            continue
        fresh = [i for i in pool if inputs[i] not in used_inputs] or list(pool)
        fresh = np.asarray(fresh)
        gap = np.abs(lengths[fresh] - np.median(lengths[fresh]))
        near = fresh[gap <= np.quantile(gap, 0.5)]
        i = int(rng.choice(near))
        picked.append(i)
        used_inputs.add(inputs[i])
    return picked


def example_judge(task, target, inputs, outputs, y, counts: GeneratorCounts, judge: LLMConfig, rng) -> JudgeSpec:
    """The example-based judge: demonstrations one per label quintile (:func:`typical_demonstrations`).

    With ``example_sets`` 1 (the default) no judge call is made to choose them: screening then
    measures whether the judge adds, like every other candidate.  With more sets (the paper's way,
    opt-in), each set is judged on the same training rows (not used as demonstrations) and the set
    with the best Kendall τ wins; that costs ``example_sets`` × ``example_eval_rows`` judge calls,
    measured at 40-49 % of a fit's tokens."""
    q = quintile_scores(y)
    n = len(y)
    demo_sets = [typical_demonstrations(inputs, outputs, y, rng) for _s in range(max(1, counts.example_sets))]
    specs = [JudgeSpec(
        kind="example", criterion=f"Overall {target}", task=task,
        description=f"how the human raters would rate the output ({target}); match the scored examples",
        demonstrations=[{"input": _clip(inputs[i], 400), "output": _clip(outputs[i]), "score": int(q[i])} for i in d],
    ) for d in demo_sets]
    if len(specs) == 1:
        specs[0].origin = {"selection": "one demonstration per label quintile (typical output length), no judge calls"}
        return specs[0]
    used = sorted({i for d in demo_sets for i in d})
    rest = np.setdiff1d(np.arange(n), used)
    if len(rest) < 3:  # tiny data: judge on every row rather than none
        rest = np.arange(n)
    eval_idx = rng.choice(rest, size=min(counts.example_eval_rows, len(rest)), replace=False)
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


def _log_checks(clog: list, checked: CheckedCriteria) -> None:
    for name, desc in checked.kept:
        clog.append({"name": name, "description": desc, "status": "kept", "reason": "generic" if name in checked.generic_kept else "",
                     "detail": f"proposed as {checked.proposed_as.get(name, name)!r}"})
    for w in checked.rewritten:
        clog.append({"name": w["name"], "description": w["from"], "status": "rewritten", "reason": w["why"], "detail": w["to"]})
    clog += [{**r.to_dict(), "status": "rejected"} for r in checked.rejected]


def generate_judges(task: str | None, target: str, inputs: list[str], outputs: list[str], y: np.ndarray, *,
                    generator: LLMClient, judge: LLMClient, counts: GeneratorCounts = PAPER_COUNTS,
                    seed: int = 0, criteria_log: list | None = None, rubric_check_pairs: int = 3) -> tuple[list[JudgeSpec], list[str]]:
    """Generate judge specs from training rows.  Returns (specs, notes about fallbacks and the
    criteria checks).  ``criteria_log``, when given, receives one dict per proposed criterion and
    rubric check (``name``, ``status`` kept/rewritten/rejected/rubric_*, ``reason``, ``detail``)
    so the fit can report every rejection.  ``rubric_check_pairs``: training pairs each rubric's
    direction is checked on (2 judge calls per pair; 0 checks the level texts only)."""
    rng = np.random.default_rng(seed)
    task = task or f"Produce outputs that humans rate highly on '{target}'"
    y = np.asarray(y, dtype=float)
    inputs = ["" if i is None or (isinstance(i, float) and math.isnan(i)) else str(i) for i in inputs]
    notes: list[str] = []
    clog = criteria_log if criteria_log is not None else []
    gen = _Gen(generator, notes)
    origin = {"generator": generator.config.model}
    specs: list[JudgeSpec] = []
    n_axes = max(counts.n_single, counts.n_rubric)
    axes: list[tuple[str, str]] = []
    if n_axes:
        agree = criteria_agreement(judge, task, inputs, outputs, y)
        checked, n_proposed, info = propose_axes(gen, task, target, inputs, outputs, y, n_axes, rng, agree)
        axes = list(checked.kept)
        origin["contrastive_pairs"] = info
        notes.append(f"criteria proposed from {info['pairs']} contrastive pairs ({info['same_input_pairs']} with the same input): "
                     f"{n_proposed} proposed, {len(axes)} kept")
        notes += checked.notes
        _log_checks(clog, checked)
        if checked.rejected:
            notes.append(f"criteria rejected ({len(checked.rejected)}): " + "; ".join(r.line() for r in checked.rejected))
        if checked.rewritten:
            notes.append("criteria rewritten to describe one output: " + "; ".join(f"{w['from']!r} -> {w['to']!r}" for w in checked.rewritten))
    if len(axes) < n_axes:
        fill, _dropped, _method = dedupe_by_meaning(axes + GENERIC_AXES)
        generic = [g for g in fill if g in GENERIC_AXES and g not in axes][: n_axes - len(axes)]
        notes.append(f"the generator proposed {len(axes)} usable criteria of {n_axes} asked; "
                     f"{len(generic)} generic task-independent criteria filled in: " + ", ".join(g[0] for g in generic))
        clog += [{"name": g[0], "description": g[1], "status": "kept", "reason": "generic_fill", "detail": "built-in generic criterion"}
                 for g in generic]
        axes = axes + generic
    for name, desc in axes[: counts.n_single]:
        specs.append(JudgeSpec(kind="single", criterion=name, description=desc, task=task, origin=origin))
    check_pairs = contrastive_pairs(inputs, outputs, y, rubric_check_pairs, rng) if counts.n_rubric and rubric_check_pairs else []
    for name, desc in axes[: counts.n_rubric]:
        rubric, fallback = make_rubric(gen, task, name, desc)
        spec = JudgeSpec(kind="rubric", criterion=name, description=desc, task=task, rubric=rubric,
                         origin={**origin, "generic_rubric": fallback})
        checked_spec, rec = check_rubric_direction(spec, judge, inputs, outputs, check_pairs)
        spec.origin["direction_check"] = rec
        clog.append({"name": name, "description": desc, "status": f"rubric_{rec['verdict']}", "reason": "rubric_direction",
                     "detail": rec})
        if rec["flipped"]:
            notes.append(f"rubric {name!r}: levels reversed, level 1 read as the best ({rec['text']})")
        if rec.get("score_sd") is not None and rec["score_sd"] < _FLAT_SD:
            notes.append(f"rubric {name!r}: the judge's scores barely vary on the {rec['pairs']} check pairs with the largest "
                         f"label gaps (sd {rec['score_sd']:.2f} on 1-5); screening decides whether it carries signal")
        if rec.get("reads_reversed"):
            notes.append(f"rubric {name!r}: on {rec['pairs']} training pairs with the largest label gaps the judge scored the "
                         f"lower-rated output higher (mean gap {rec['mean_gap']:+.2f}, {rec['losses']} of {rec['pairs']}); "
                         "kept, and used reversed if every training row agrees (the regression's sign decides)")
        specs.append(checked_spec)
    for _ in range(counts.n_example):
        specs.append(example_judge(task, target, inputs, outputs, y, counts, judge.config, rng))
    for _ in range(counts.n_optimized):
        try:
            specs.append(optimized_judge(task, target, inputs, outputs, y, counts, generator, judge, rng))
        except Exception as exc:
            log.warning("prompt optimization failed: %s", exc, exc_info=True)
            notes.append(f"prompt-optimized judge skipped: MIPROv2 failed ({type(exc).__name__}: {str(exc)[:200]})")
    return specs, notes
