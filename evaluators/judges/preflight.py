"""Before the first judge call: what a fit will cost (:func:`estimate_plan`, the dry run), how fast
the judge server is (:func:`pace`: per-call timeouts then follow the measured speed), and what the
judges need not read (:func:`affixes_of`: text every row shares).

Split from :mod:`.pipeline` so the fit reads as the method's stages; nothing here calls a judge
except the two timed warm-up calls.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..llm.client import LLMClient, LLMConfig, estimate_tokens
from .budget import Speed, estimate_seconds, measure_speed, stage_estimates
from .metric import JudgeSpec, judge_messages, shared_affixes
from .options import LLMOptions

__all__ = ["case_chars", "estimate_plan", "warmup_messages", "dry_run", "pace", "affixes_of"]


def case_chars(lab) -> float:
    inputs = lab.inputs if lab.has_input else [""] * len(lab)
    return float(np.mean([len(i or "") + len(o or "") for i, o in zip(inputs, lab.outputs, strict=False)])) if len(lab) else 0.0


def estimate_plan(n_labelled: int, n_train: int, avg_chars: float, opts: LLMOptions, *, bank_used: bool, top_n: int = 5) -> dict:
    """Expected LLM calls and tokens per stage, before any call is made (judge scoring: the upper
    bound of the screening schedule)."""
    clip = opts.clip_chars
    case = estimate_tokens("x" * int(min(avg_chars, 2 * clip) if clip else avg_chars))
    local = LLMConfig.parse(opts.judge_llm or opts.llm).is_local
    return stage_estimates(opts.counts, n_train, n_labelled - n_train, case, top_n=top_n,
                           screening=opts.screening if opts.screen else None, rationales=opts.rationales, bank_used=bank_used,
                           compare_multi=opts.compare_multi, local=local,
                           generate=not opts.judge_specs)


def warmup_messages(lab, task) -> list[dict]:
    """A judge prompt on a training example of median length: what the warm-up call times."""
    lengths = [len(o or "") for o in lab.outputs]
    k = int(np.argsort(lengths)[len(lengths) // 2])
    spec = JudgeSpec(kind="single", criterion="Overall quality", description="how well the output does the task", task=task)
    return judge_messages(spec, lab.outputs[k], lab.inputs[k] if lab.has_input else "")


def dry_run(lab, opts, train_pos, task, bank_used, top_n, *, judge: LLMClient | None, bank_note: str | None) -> dict:
    """The plan per stage; with a ``judge`` client (``--warmup``) also seconds per stage at the speed
    two warm-up calls measure (``speed``), and ``notes`` (e.g. that MetricBank is not a candidate)."""
    if opts.judge_specs:  # given judges: no generation, that many candidates
        n = len(opts.judge_specs)
        opts = dataclasses.replace(opts, counts=dataclasses.replace(opts.counts, n_single=n, n_rubric=0, n_example=0,
                                                                    n_optimized=0, n_code=0))
    plan = estimate_plan(len(lab), len(train_pos), case_chars(lab), opts, bank_used=bank_used, top_n=top_n)
    if judge is not None:
        judge.check_reachable()
        speed = measure_speed(judge, warmup_messages(lab, task))
        if speed is not None:
            secs = estimate_seconds(plan, speed)
            for k, v in plan.items():
                v["seconds"] = round(secs[k], 1)
            plan["speed"] = speed.to_dict()
    plan["notes"] = [bank_note] if bank_note else []
    return plan


def pace(clients, lab, task, measured: Speed | None = None) -> list[str]:
    """Give each client a measured speed, so its per-call timeouts follow it
    (:meth:`LLMClient.timeouts`): ``measured`` (the budget's warm-up) for the judge, else two
    warm-up calls to the embedded server (measured: one criteria-generation call of a 1.5B model
    took 262 s against a fixed 120 s timeout).  Remote endpoints keep their configured timeouts."""
    said = []
    for c in dict.fromkeys(clients):
        speed = measured if measured is not None and c is clients[-1] else None
        if speed is None and c.config.is_local:
            speed = measure_speed(c, warmup_messages(lab, task))
        if speed is not None:
            c.speed = speed
            said.append(f"{c.config.model}: {speed.prompt_tps:.0f} prompt and {speed.completion_tps:.1f} completion tokens/s "
                        "measured; per-call timeouts follow it")
    return said


def affixes_of(lab, positions) -> dict | None:
    """The openings and endings every training input (and every output) shares, when long enough to
    matter (:func:`~.metric.shared_affixes`): judges and generators are shown the part that
    differs.  None when nothing is shared."""
    inputs = lab.inputs if lab.has_input else None
    out = {}
    for key, texts in (("input", inputs), ("output", lab.outputs)):
        if texts is None:
            continue
        pre, suf = shared_affixes([str(texts[i] or "") for i in positions])
        if pre or suf:
            out[key] = [pre, suf]
    return out or None
