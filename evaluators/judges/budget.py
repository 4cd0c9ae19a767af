"""Budgets for the LLM half of a fit: the server's measured speed, what each stage will cost, a
plan that fits a wall-clock or token budget, and the tracker that stops the fit when it is spent.

Why: on a small CPU server a default fit takes hours (measured: 15.5 minutes for four judges on
84 rows at 4–31 prompt tokens/s), and the user learns it only afterwards.  ``fit --budget 20m``
/ ``--max-judge-tokens N`` measure the server with a warm-up call (:func:`measure_speed`), plan
candidates, rows and clipping of long examples so the estimate fits (:func:`plan_fit`), print the
plan, and stop scoring when the :class:`Budget` is spent; the pipeline then returns the best
validated evaluator it has (never a worse one than the LLM-free evaluator).

The cost model (:func:`stage_estimates`) is also the dry run's: calls and tokens per stage, with
judge scoring as the upper bound of the screening schedule.

Example::

    speed = measure_speed(client, [{"role": "user", "content": "..."}])
    plan = plan_fit(Budget(seconds=1200), speed, n_lab=120, test_size=0.3, case_chars=450,
                    counts=QUICK_COUNTS, top_n=5, screening=ScreeningOptions(), local=True)
    print("\\n".join(plan.lines()))
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from ..code_metric import estimate_code_calls
from ..llm.client import LLMClient, estimate_tokens
from .about_output import PROBES
from .metric import MAX_DEMO_CHARS
from .options import GeneratorCounts, ScreeningOptions
from .screening import candidate_calls

__all__ = ["Speed", "Budget", "Plan", "measure_speed", "plan_fit", "stage_estimates", "format_seconds"]

CRITERION_TOKENS = 110  # a judge prompt beyond the case: system line, criterion, scale (rubric judges more)
CLIP_STEPS = (None, 1500, 800, 400)  # characters of input and of output a judge sees, tried in this order



def format_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "?"
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h")


@dataclass
class Speed:
    """Tokens per second the server processes: prompt tokens (evaluated) and completion tokens,
    from two timed warm-up calls (``measured``: what was sent and how long it took)."""

    prompt_tps: float
    completion_tps: float
    measured: dict = field(default_factory=dict)

    def seconds(self, prompt_tokens: float, completion_tokens: float) -> float:
        return prompt_tokens / self.prompt_tps + completion_tokens / self.completion_tps

    def to_dict(self) -> dict:
        return {"prompt_tokens_per_s": round(self.prompt_tps, 2), "completion_tokens_per_s": round(self.completion_tps, 2),
                "measured": self.measured}


def measure_speed(client, messages: list[dict]) -> Speed | None:
    """Two uncached calls (counted in the client's usage as stage ``warmup``): ``messages`` for one
    token (mostly prompt), then a short prompt for 16 tokens (mostly completion); the two timings
    give prompt and completion speed.  None when the server does not answer."""
    probe = LLMClient(client.config, cache=False, usage=client.usage)
    try:
        t0 = time.perf_counter()
        a = probe.chat(messages, stage="warmup", max_tokens=1)
        t1 = time.perf_counter()
        b = probe.chat([{"role": "user", "content": "Count from 1 to 60, the numbers separated by spaces."}],
                       stage="warmup", max_tokens=16)
        t2 = time.perf_counter()
    finally:
        probe.close()
    if not (a.ok and b.ok):
        return None
    ta, tb = max(t1 - t0, 1e-3), max(t2 - t1, 1e-3)
    pa, ca, pb, cb = a.prompt_tokens, max(1, a.completion_tokens), b.prompt_tokens, max(1, b.completion_tokens)
    det = pa * cb - pb * ca
    inv_p = (ta * cb - tb * ca) / det if det else -1.0  # seconds per prompt token
    inv_c = (pa * tb - pb * ta) / det if det else -1.0  # seconds per completion token
    if not (inv_p > 0 and inv_c > 0):  # timings too noisy to separate: charge each call to its main part
        inv_p, inv_c = ta / max(pa, 1), max(tb - pb * ta / max(pa, 1), 0.1 * tb) / cb
    measured = {"prompt_call": {"prompt_tokens": pa, "completion_tokens": ca, "seconds": round(ta, 3)},
                "completion_call": {"prompt_tokens": pb, "completion_tokens": cb, "seconds": round(tb, 3)}}
    return Speed(1.0 / inv_p, 1.0 / inv_c, measured)


class Budget:
    """What the fit may still spend: wall-clock seconds since ``started`` and tokens of all LLM
    calls (``usage``: the fit's :class:`~.llm.usage.Usage`; cache hits cost nothing).  ``speed``
    turns upcoming tokens into seconds."""

    def __init__(self, *, seconds: float | None = None, tokens: int | None = None, usage=None, started: float | None = None,
                 speed: Speed | None = None):
        self.seconds_limit = seconds
        self.tokens_limit = tokens
        self.usage = usage
        self.started = time.perf_counter() if started is None else started
        self.speed = speed
        self.reserve_tokens = 0.0
        self.reserve_seconds = 0.0

    def spent(self) -> dict:
        tokens = 0
        if self.usage is not None:
            total = self.usage.to_dict()["total"]
            tokens = int(total["prompt_tokens"] + total["completion_tokens"])
        return {"seconds": round(time.perf_counter() - self.started, 1), "tokens": tokens}

    def left(self) -> tuple[float, float]:
        s = self.spent()
        return (math.inf if self.seconds_limit is None else self.seconds_limit - s["seconds"],
                math.inf if self.tokens_limit is None else self.tokens_limit - s["tokens"])

    def check(self, upcoming_tokens: float = 0.0, upcoming_seconds: float | None = None) -> str | None:
        """Why the next step (``upcoming_tokens``, timed with ``speed``, or ``upcoming_seconds`` when
        the caller measured it) must not start, or None.  The reserves set aside for the held-out
        scoring are not available to screening."""
        secs, toks = self.left()
        need_s = (upcoming_seconds if upcoming_seconds is not None else
                  self.speed.seconds(upcoming_tokens, 0) if self.speed and upcoming_tokens else 0.0)
        if secs - self.reserve_seconds <= need_s and self.seconds_limit is not None:
            return f"the {format_seconds(self.seconds_limit)} budget is spent ({self.spent()['seconds']:.0f} s used)"
        if toks - self.reserve_tokens < upcoming_tokens and self.tokens_limit is not None:
            return f"the {self.tokens_limit:,}-token budget is spent ({self.spent()['tokens']:,} used)"
        return None

    def to_dict(self) -> dict:
        return {"seconds": self.seconds_limit, "tokens": self.tokens_limit, "spent": self.spent()}


# ------------------------------------------------------------------------- cost model


def stage_estimates(counts: GeneratorCounts, n_train: int, n_test: int, case_tokens: float, *, top_n: int = 5,
                    screening: ScreeningOptions | None = None, rationales: int = 3, bank_used: bool = False,
                    compare_multi: bool = False, local: bool = False, generate: bool = True) -> dict:
    """Calls, prompt and completion tokens per stage, before any call (judge scoring: the upper
    bound of the screening schedule; ``screening`` None = every judge on every row).  With
    ``local`` (a llama.cpp server), ``evaluated_prompt_tokens`` counts an example's text once per
    row and screening round, as its prefix cache serves the other criteria of that row.  ``generate``
    False: the judges are given, no generation stage."""
    c = counts
    code_calls, code_prompt, code_completion = estimate_code_calls(c.n_code, int(min(case_tokens, 200)))
    n_lab = n_train + n_test
    n_judges = c.n_single + c.n_rubric + c.n_example + c.n_optimized
    judge_prompt = case_tokens + CRITERION_TOKENS
    # judges with demonstrations open with their own block (one demonstration per label quintile, its
    # input and output clipped at metric.MAX_DEMO_CHARS characters each): sent with every call; a local
    # server's prefix cache serves it across the rows it asks in a row (prefetch_row_major: chunk_rows rows)
    own = (c.n_example + c.n_optimized) / max(n_judges, 1)
    demo_tokens = 5 * min(case_tokens, 2 * MAX_DEMO_CHARS / 4) + 40
    chunk = max(1, int(screening.chunk_rows)) if screening is not None else 8
    # criteria: up to two proposal rounds (a second one when too few specific criteria survive;
    # measured with the 1.5B model: 2 calls, 355 completion tokens for 3 criteria asked)
    ask = max(c.n_single, c.n_rubric) + 2
    stages = {
        "generate:axes": (2 if max(c.n_single, c.n_rubric) else 0, 10 * case_tokens + 200, 64 * ask + 64),
        "generate:rubric": (c.n_rubric, 350, 200),
        "generate:rubric_check": (6 * c.n_rubric, judge_prompt + 150, 1),
        "generate:example": (c.n_example * c.example_sets * min(c.example_eval_rows, n_train) if c.example_sets > 1 else 0,
                             judge_prompt + 5 * case_tokens, 1),
        "generate:optimize": (c.n_optimized * (8 + c.optimized_candidates * 2 + c.optimized_trials * max(1, c.optimized_rows // 2)),
                              judge_prompt + 300, 30),
        "generate:code": (code_calls, code_prompt / max(code_calls, 1), code_completion / max(code_calls, 1)),
        "score:probe": (n_judges * PROBES if screening is None or screening.probe_output else 0, judge_prompt, 1),
        "rationales": (rationales * min(top_n, n_judges), judge_prompt, 80),
        "score:multi": (n_lab if compare_multi else 0, judge_prompt + 30 * c.n_single, 8 * c.n_single),
    }
    if not generate:
        stages.update({k: (0, 0, 0) for k in stages if k.startswith("generate:")})
    out = {k: {"calls": int(n), "prompt_tokens": int(n * p), "completion_tokens": int(n * q)} for k, (n, p, q) in stages.items()}
    rounds = candidate_calls(n_judges, n_train, n_test, screening, top_n)
    calls = sum(k * rows for k, rows in rounds)
    sent = calls * (judge_prompt + own * demo_tokens)
    if local:  # the case once per row for the case-first judges, again for each own-block judge
        evaluated = sum(rows * (case_tokens + k * CRITERION_TOKENS) + k * own * (rows * case_tokens + math.ceil(rows / chunk)
                                                                                 * demo_tokens) for k, rows in rounds)
    else:
        evaluated = sent
    out["score"] = {"calls": int(calls), "prompt_tokens": int(sent), "completion_tokens": int(calls),
                    "evaluated_prompt_tokens": int(evaluated)}
    out = {k: out[k] for k in [*list(stages)[:6], "score", *list(stages)[6:]]}
    out["total"] = {k: sum(v[k] for v in out.values()) for k in ("calls", "prompt_tokens", "completion_tokens")}
    return out


def estimate_seconds(stages: dict, speed: Speed) -> dict:
    """Seconds per stage at ``speed`` (prompt tokens the server evaluates, completion tokens)."""
    out = {}
    for k, v in stages.items():
        if k == "total":
            continue
        out[k] = speed.seconds(v.get("evaluated_prompt_tokens", v["prompt_tokens"]), v["completion_tokens"])
    out["total"] = sum(out.values())
    return out


# ------------------------------------------------------------------------------ plan

#: a budget plan never scores judges on fewer training rows than this
MIN_TRAIN_ROWS = 16


@dataclass
class Plan:
    """What a budgeted fit will do: generator ``counts``, ``clip_chars`` (None: no extra clipping),
    ``rows`` (labelled rows used; None: all), the estimate (seconds, tokens, per stage) and whether
    it ``fits``; ``notes`` say what was given up to fit."""

    counts: GeneratorCounts
    clip_chars: int | None
    rows: int | None
    n_lab: int
    seconds: float
    tokens: int
    fits: bool
    stages: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    speed: Speed | None = None
    budget: dict = field(default_factory=dict)

    @property
    def n_candidates(self) -> int:
        c = self.counts
        return c.n_single + c.n_rubric + c.n_example + c.n_optimized

    def lines(self) -> list[str]:
        c = self.counts
        b = self.budget
        limit = " and ".join(x for x in (f"{format_seconds(b['seconds'])}" if b.get("seconds") else "",
                                          f"{b['tokens']:,} tokens" if b.get("tokens") else "") if x)
        out = []
        if self.speed:
            out.append(f"measured speed: {self.speed.prompt_tps:.1f} prompt tokens/s, {self.speed.completion_tps:.1f} "
                       "completion tokens/s (warm-up call)")
        out.append(f"budget {limit}: " + ("plan" if self.fits else "no plan fits; the smallest") +
                   f": {self.n_candidates} candidate judges ({c.n_single} single, {c.n_rubric} rubric, {c.n_example} example, "
                   f"{c.n_optimized} optimized)" + (f" and {c.n_code} code metrics" if c.n_code else "")
                   + f", {self.rows or self.n_lab} of {self.n_lab} labelled rows, examples clipped at "
                   f"{self.clip_chars or 3000} characters; estimated {format_seconds(self.seconds)}, {self.tokens:,} tokens")
        out += [f"plan: {n}" for n in self.notes]
        return out

    def to_dict(self) -> dict:
        return {"counts": dataclasses.asdict(self.counts), "clip_chars": self.clip_chars, "rows": self.rows, "n_lab": self.n_lab,
                "estimated_seconds": round(self.seconds, 1), "estimated_tokens": self.tokens, "fits": self.fits,
                "speed": self.speed.to_dict() if self.speed else None, "notes": self.notes, "budget": self.budget,
                "stages": self.stage_seconds()}

    def stage_seconds(self) -> dict:
        """Estimated calls, tokens and seconds per stage (to compare with the fit's usage)."""
        if not self.stages:
            return {}
        secs = estimate_seconds(self.stages, self.speed) if self.speed else {}
        return {k: {**v, "seconds": round(secs.get(k, 0.0), 1)} for k, v in self.stages.items() if k != "total"}


def _count_steps(counts: GeneratorCounts) -> list[GeneratorCounts]:
    """Smaller and smaller generator counts: the costly generators go first (prompt optimisation,
    then extra example sets), then single and rubric judges one at a time, down to one judge."""
    steps = [counts]
    c = counts
    if c.n_optimized:
        c = dataclasses.replace(c, n_optimized=0)
        steps.append(c)
    if c.n_example and c.example_sets > 2:
        c = dataclasses.replace(c, example_sets=2, example_eval_rows=min(c.example_eval_rows, 12))
        steps.append(c)
    if c.n_code > 1:  # code metrics cost a fixed number of calls to write, none per row
        c = dataclasses.replace(c, n_code=1)
        steps.append(c)
    while c.n_single + c.n_rubric + c.n_example > 1:
        if c.n_single > max(c.n_rubric, 1) or (c.n_single and not c.n_rubric and not c.n_example):
            c = dataclasses.replace(c, n_single=c.n_single - 1)
        elif c.n_rubric:
            c = dataclasses.replace(c, n_rubric=c.n_rubric - 1)
        elif c.n_example:
            c = dataclasses.replace(c, n_example=c.n_example - 1)
        else:
            c = dataclasses.replace(c, n_single=c.n_single - 1)
        steps.append(c)
    if c.n_code:
        steps.append(dataclasses.replace(c, n_code=0))
    return steps


def plan_fit(budget: Budget, speed: Speed | None, *, n_lab: int, test_size: float | None, case_chars: float,
             counts: GeneratorCounts, top_n: int, screening: ScreeningOptions | None, rationales: int = 3,
             bank_used: bool = False, local: bool = False, clip_chars: int | None = None, min_rows: int = 40,
             margin: float = 0.85, generate: bool = True) -> Plan:
    """The largest plan whose estimate fits ``margin`` of what the budget has left.  What is given
    up first: clipping long examples (1500, 800, 400 characters of input and of output), then
    candidates (:func:`_count_steps`), then training rows (whole groups, down to ``min_rows``
    labelled rows in all).  Held-out rows are never cut: the evaluator with judges is validated
    on the same rows as the LLM-free one, which keeps every row.  ``test_size`` None: no held-out
    split (validity is cross-fitted on the rows the judges score)."""
    secs_left, toks_left = budget.left()
    secs_ok, toks_ok = secs_left * margin, toks_left * margin
    n_test = max(1, round(n_lab * test_size)) if test_size else 0
    row_steps = [n_lab]  # labelled rows: every held-out row, fewer and fewer training rows
    while True:
        nxt = n_test + int((row_steps[-1] - n_test) * 0.75)
        if nxt < min_rows or nxt - n_test < MIN_TRAIN_ROWS or nxt >= row_steps[-1]:
            break
        row_steps.append(nxt)
    clip_steps = [c for c in CLIP_STEPS if c is None or c * 2 < case_chars]
    if clip_chars:
        clip_steps = [clip_chars] + [c for c in clip_steps if c and c < clip_chars]

    def estimate(k: GeneratorCounts, clip, rows: int):
        case = estimate_tokens("x" * int(min(case_chars, 2 * clip) if clip else case_chars))
        stages = stage_estimates(k, rows - n_test, n_test, case, top_n=top_n, screening=screening, rationales=rationales,
                                 bank_used=bank_used, local=local, generate=generate)
        tokens = stages["total"]["prompt_tokens"] + stages["total"]["completion_tokens"]
        seconds = estimate_seconds(stages, speed)["total"] if speed else 0.0
        return stages, tokens, seconds

    best = None
    for rows in row_steps:
        for k in _count_steps(counts):
            for clip in clip_steps:
                stages, tokens, seconds = estimate(k, clip, rows)
                best = (k, clip, rows, stages, tokens, seconds)
                if tokens <= toks_ok and seconds <= secs_ok:
                    return _plan(best, n_lab, n_test, True, counts, speed, budget, case_chars)
    return _plan(best, n_lab, n_test, False, counts, speed, budget, case_chars)


def _plan(best, n_lab, n_test, fits, wanted: GeneratorCounts, speed, budget: Budget, case_chars: float) -> Plan:
    k, clip, rows, stages, tokens, seconds = best
    notes = []
    if clip:
        notes.append(f"judges see at most {clip} characters of input and of output (examples average {case_chars:.0f})")
    n_want = wanted.n_single + wanted.n_rubric + wanted.n_example + wanted.n_optimized
    n_have = k.n_single + k.n_rubric + k.n_example + k.n_optimized
    if k.n_code < wanted.n_code:
        notes.append(f"{k.n_code} of the {wanted.n_code} requested code metrics")
    if n_have < n_want or k.example_sets < wanted.example_sets:
        notes.append(f"{n_have} of the {n_want} requested candidate judges"
                     + (" (no prompt-optimized judge)" if wanted.n_optimized and not k.n_optimized else ""))
    if rows < n_lab and n_test:
        notes.append(f"judges score a seeded sample of {rows - n_test} of the {n_lab - n_test} training rows (whole "
                     f"groups) and all {n_test} held-out rows; the LLM-free evaluator keeps every row")
    elif rows < n_lab:
        notes.append(f"judges score a seeded sample of {rows} of the {n_lab} labelled rows (whole groups), on which "
                     "the evaluator with judges is cross-fitted and compared with the LLM-free one; the LLM-free "
                     "evaluator is fitted on every row")
    if not fits:
        notes.append("even this plan does not fit: the LLM-free evaluator is returned without LLM work")
    return Plan(k, clip, rows if rows < n_lab else None, n_lab, seconds, int(tokens), fits, stages, notes, speed,
                {"seconds": budget.seconds_limit, "tokens": budget.tokens_limit})
