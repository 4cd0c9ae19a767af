"""Is a generated judge about the output the task grades?  The input-swap probe.

Why: asked to grade review comments of code changes, a small generator wrote criteria about the
code change itself ("the diff is well structured"); its judge scored the *input*, identical for
every review of one change, and could never tell a good review from a bad one.  Words
do not settle it (a criterion about a review may well mention "the code"), so the check asks the
judge: a criterion about the output keeps its score when the output is shown under another input,
one about the input takes the score of that other input.

The probe uses rows the judge has already scored in the first screening round.  It pairs rows
``i`` and ``j`` with different inputs whose scores differ, ``s_j`` above ``s_i``, and asks the judge
about (input ``j``, output ``i``).  A judge that reads the output answers near ``s_i``; a judge that
punishes the mismatch answers low, also nearer ``s_i``; only a judge that grades the input answers
near ``s_j``.  The judge is rejected when every informative probe, at least :data:`MIN_PROBES`,
follows the input (the chance of that for a judge whose answers follow neither is at most 1/32).

Example::

    pairs = probe_pairs(values, inputs, positions, k=6)
    verdict = input_verdict([(values[i], values[j], s) for (i, j), s in zip(pairs, asked)])
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["PROBES", "MIN_PROBES", "MIN_GAP", "probe_pairs", "input_verdict"]

#: pairs asked per judge (one extra judge call each)
PROBES = 6
#: informative probes needed before a judge can be rejected
MIN_PROBES = 5
#: a pair is informative when its two scores differ by at least this share of the scale's range
MIN_GAP = 0.125


def probe_pairs(values, inputs, positions, *, k: int = PROBES, scale: tuple[float, float] = (1.0, 5.0)) -> list[tuple[int, int]]:
    """Up to ``k`` pairs (i, j) of ``positions`` with different inputs, finite scores and ``s_j`` at
    least :data:`MIN_GAP` of the scale above ``s_i``; the widest gaps first, each row used once."""
    values = np.asarray(values, dtype=float)
    rows = [int(p) for p in positions if math.isfinite(values[int(p)])][:200]  # enough pairs; O(rows²) below
    gap = MIN_GAP * (scale[1] - scale[0])
    cands = sorted(((values[j] - values[i], i, j) for i in rows for j in rows
                    if values[j] - values[i] >= gap and inputs[i] != inputs[j]), reverse=True)
    used: set[int] = set()
    out = []
    for _g, i, j in cands:
        if i in used or j in used:
            continue
        out.append((i, j))
        used |= {i, j}
        if len(out) == k:
            break
    return out


def input_verdict(probes: list[tuple[float, float, float]]) -> dict:
    """``probes``: (s_i, s_j, s_swapped) per pair.  Returns the evidence and ``grades_input``: True
    when at least :data:`MIN_PROBES` probes were answered and every one lies nearer the other
    input's score ``s_j`` than the output's own ``s_i``."""
    answered = [(a, b, s) for a, b, s in probes if math.isfinite(s)]
    follows_input = sum(abs(s - b) < abs(s - a) for a, b, s in answered)
    n = len(answered)
    verdict = n >= MIN_PROBES and follows_input == n
    return {"probes": len(probes), "answered": n, "follows_input": int(follows_input), "grades_input": bool(verdict),
            "detail": (f"with the output of another row under its input, the judge gave the score of the other input in "
                       f"{follows_input} of {n} probes: it grades the input, not the output the task grades") if verdict else
                      (f"follows the output in {n - follows_input} of {n} input-swap probes" if n else "no probe answered")}
