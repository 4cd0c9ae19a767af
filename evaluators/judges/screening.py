"""Screening: score each expensive candidate feature on a few training rows first, and pay for the
rest of the rows only when it adds something to the evaluator.

Why: scoring every generated judge on every row is what a fit spends its LLM tokens on, and on
small data most judges add nothing (measured: 339 judge calls, no judge selected, and the fit did
not know until every judge had scored every row).  The :class:`Screener` runs successive halving:
every candidate scores a small subset of the training rows (whole input groups, balanced over
label strata), the best 1/eta (at least two) of those that add to the evaluator go on to eta
times as many rows, and the survivors of the last round score the remaining training rows; those
that still add on all of them go to the regression.  Only the candidates the regression then selects are scored on
the held-out rows (the pipeline does that).

A candidate's screening figure is what it adds, not its own τ: :func:`added_tau` is the gain in
out-of-fold R² (squared-error reduction, over repeated grouped folds) when the candidate joins
the metrics already in (summarised by their own out-of-fold prediction, :func:`base_predictions`),
over the same procedure without it; the τ gain is reported next to it.  A judge that only repeats
what the metrics already say gains nothing, and one that reliably disagrees gains as much as one
that agrees (it is used reversed).  Small rounds are noisy: an early round drops a candidate only
when its upper bound does not add; the last round (:func:`forward_keep`) keeps a candidate when
its lower bound still adds next to the candidates kept before it.  The regression then takes
every finalist (``required``), so a judge is not lost to first-stage weights among correlated
bank metrics.

Any feature can be screened: a candidate (:mod:`.candidates`) is a name, a kind, a per-row cost
estimate and a way to score a subset of the labelled rows — LLM judges, code-generated metrics,
nearest-exemplar metrics alike.

Example::

    screener = Screener(y, groups, train_pos, base_pred=base_predictions(Xbase, y, groups, train_pos))
    outcome = screener.run([JudgeCandidate(j, outputs, inputs) for j in judges])
    outcome.finalists, outcome.fates["llm.single.fluency"]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..sampling import group_prefix, stratified_groups
from .about_output import PROBES
from .added_value import (
    added_tau,
    base_predictions,
    finite_or_floor,
    forward_keep,
    screened_fold_fit,
    stacked_predictions,
    std_error,
)
from .candidates import Candidate, CandidateContext, FunctionCandidate, JudgeCandidate
from .options import ScreeningOptions

__all__ = ["Candidate", "FunctionCandidate", "JudgeCandidate", "CandidateContext", "Screener", "ScreeningOutcome",
           "added_tau", "base_predictions", "schedule", "candidate_calls",
           "screened_fold_fit", "forward_keep", "stacked_predictions"]

log = logging.getLogger("autometrics")


def schedule(n_train: int, opts: ScreeningOptions) -> list[int]:
    """Rows per round: ``first_rows``, then eta times as many, ... (``rounds`` rounds, none that
    would already cover three quarters of the training rows), then all training rows."""
    first = opts.first_rows or int(min(32, max(16, n_train // 4)))
    sizes, n = [], first
    for _ in range(max(0, opts.rounds)):
        if n >= 0.75 * n_train:
            break
        sizes.append(int(n))
        n *= max(2, opts.eta)
    return sizes + [int(n_train)]


def candidate_calls(n_candidates: int, n_train: int, n_test: int, opts: ScreeningOptions | None, top_n: int) -> list[tuple[int, int]]:
    """Upper bound on what scoring costs: ``[(candidates asked, rows), ...]`` per round, the last
    entry being the held-out rows for the selected ones.  ``opts`` None: every candidate on every row."""
    if opts is None:
        return [(n_candidates, n_train + n_test)] if n_candidates else []
    out, alive, prev = [], n_candidates, 0
    sizes = schedule(n_train, opts)
    for r, n in enumerate(sizes):
        if alive and n > prev:
            out.append((alive, n - prev))
        prev = n
        if r < len(sizes) - 1 and opts.z <= 0:  # with bounds (z > 0) a round may keep every candidate
            alive = min(alive, max(math.ceil(alive / max(2, opts.eta)), opts.min_keep))
    if alive and n_test:
        out.append((min(top_n, alive), n_test))
    return out


# ------------------------------------------------------------------------- the screener


@dataclass
class ScreeningOutcome:
    """``finalists`` scored every training row; ``fates`` (name -> dict) holds the candidates
    dropped on the way (failed, screened out, budget); ``rounds`` what each round did; ``stopped``
    the budget's reason when it ran out; ``figures`` each candidate's figure per round;
    ``output_checks`` each judge's input-swap probe (:mod:`.about_output`)."""

    finalists: list[Candidate]
    fates: dict[str, dict]
    rounds: list[dict]
    stopped: str | None
    figures: dict[str, list[dict]]
    output_checks: dict[str, dict] = field(default_factory=dict)


class Screener:
    """Successive halving over candidates (module docstring).  ``y`` and ``groups`` cover the
    labelled rows; ``train_pos`` are the training rows (the only ones screening reads labels
    of); ``base_pred`` from :func:`base_predictions`; ``budget`` anything with
    ``check(upcoming_tokens=...) -> reason | None`` (:class:`~.budget.Budget`)."""

    def __init__(self, y, groups, train_pos, *, base_pred=None, opts: ScreeningOptions | None = None, budget=None,
                 seed: int = 0, echo: Callable = lambda *a, **k: None, reserve_rows: int = 0, top_n: int = 5):
        self.y = np.asarray(y, dtype=float)
        self.groups = np.asarray(groups).astype(str)
        self.train_pos = np.sort(np.asarray(train_pos, dtype=int))
        self.base_pred = base_pred
        self.opts = opts or ScreeningOptions()
        self.budget = budget
        self.seed = seed
        self.echo = echo
        self.values: dict[str, np.ndarray] = {}  # name -> values over the labelled rows (NaN: not scored)
        self.figures: dict[str, list[dict]] = {}
        self._done: dict[str, set[int]] = {}  # name -> rows already asked
        self.reserve_rows = int(reserve_rows)  # held-out rows the selected candidates will be scored on
        self.top_n = int(top_n)
        self.shed: dict[str, str] = {}  # candidates dropped because the budget cannot pay for them -> why
        self.output_checks: dict[str, dict] = {}  # name -> input-swap probe evidence (judges, first scored round)

    def _check(self, live: list[Candidate], rows: int) -> str | None:
        """The budget's verdict on asking ``live`` about ``rows`` more rows, keeping back what the
        held-out scoring of the costliest ``top_n`` of them would take (when ``reserve_rows``)."""
        costs = sorted((c.cost_per_row for c in live if c.cost_per_row > 0), reverse=True)
        per_row = sorted((self._row_seconds(c) for c in live if c.cost_per_row > 0), reverse=True)
        if self.reserve_rows:
            b = self.budget
            b.reserve_tokens = self.reserve_rows * sum(costs[: self.top_n])
            b.reserve_seconds = self.reserve_rows * sum(per_row[: self.top_n])
        return self.budget.check(upcoming_tokens=sum(costs) * rows, upcoming_seconds=sum(per_row) * rows)

    def _row_seconds(self, c: Candidate) -> float:
        """Seconds one more row of ``c`` costs: measured on the rows it has scored (a long prompt
        runs slower than the warm-up call, and the prefix cache serves some); before that, its
        token estimate at the budget's warm-up speed."""
        if c.spent["rows"]:
            return c.seconds / c.spent["rows"]
        speed = getattr(self.budget, "speed", None)
        return speed.seconds(c.cost_per_row, 1) if speed else 0.0

    def score(self, candidates: list[Candidate], positions, *, shed: bool = False) -> str | None:
        """Score ``candidates`` on ``positions`` (rows a candidate already scored are skipped), a
        chunk of rows at a time with every candidate asked about a row before the next row; the
        budget is checked before each chunk.  Returns its stop reason when it ran out.  With
        ``shed`` (screening rounds) the budget first drops the costliest candidates, one at a time
        (recorded in ``self.shed``), and candidates that cost no tokens always go on; it stops only
        when none is left."""
        positions = np.asarray(positions, dtype=int)
        done = {c.name: self._done.setdefault(c.name, set()) for c in candidates}
        for c in candidates:
            self.values.setdefault(c.name, np.full(len(self.y), np.nan))
        todo = [int(p) for p in positions if any(int(p) not in done[c.name] for c in candidates if c.error is None)]
        step = max(1, int(self.opts.chunk_rows))
        for start in range(0, len(todo), step):
            chunk = np.array(todo[start:start + step], dtype=int)
            live = [c for c in candidates if c.error is None and c.name not in self.shed]
            if self.budget is not None:
                reason = self._check(live, len(chunk))
                while reason and shed and any(c.cost_per_row > 0 for c in live):
                    worst = max((c for c in live if c.cost_per_row > 0), key=lambda c: c.cost_per_row)
                    secs, toks = self.budget.left()
                    left = " and ".join(x for x in (f"{toks:,.0f} tokens" if math.isfinite(toks) else "",
                                                    f"{secs:,.0f} s" if math.isfinite(secs) else "") if x)
                    self.shed[worst.name] = (f"the budget left ({left}) cannot pay for its next rows and its held-out "
                                             "scoring next to the other candidates")
                    live.remove(worst)
                    self.echo(f"budget: {worst.name} dropped ({worst.cost_per_row:,.0f} tokens per row): {self.shed[worst.name]}")
                    if not live:  # every candidate was dropped: the budget stopped screening
                        return reason
                    reason = self._check(live, len(chunk))
                if reason:
                    return reason
            by_class: dict[type, list[Candidate]] = {}
            for c in live:
                by_class.setdefault(type(c), []).append(c)
            for cls, group in by_class.items():
                try:
                    cls.prepare(group, chunk)
                except Exception as exc:  # asking failed as a whole: each candidate retries alone in score()
                    log.warning("preparing %s candidates failed: %s", cls.__name__, exc)
                for c in group:
                    try:
                        self.values[c.name][chunk] = c.score(chunk)
                    except Exception as exc:  # one broken candidate must not sink the fit
                        log.warning("candidate %s failed: %s", c.name, exc, exc_info=True)
                        c.error = f"{type(exc).__name__}: {exc}"
                    done[c.name].update(int(p) for p in chunk)
        return None

    def figure(self, c: Candidate, rows, *, bounds: bool = False) -> dict:
        f = added_tau(self.values[c.name], self.y, self.groups, rows, self.base_pred, max_missing=self.opts.max_missing,
                      n_boot=self.opts.n_boot if bounds and (self.opts.z > 0 or self.opts.z_last > 0) else 0, seed=self.seed)
        self.figures.setdefault(c.name, []).append(f)
        return f

    def _failed(self, c: Candidate, fig: dict) -> str | None:
        if c.error:
            return c.error
        if fig["rows"] and fig["missing"] / fig["rows"] > self.opts.max_missing:
            why = []
            if c.spent["parse_failures"]:
                why.append(f"{c.spent['parse_failures']} unreadable replies")
            if c.spent["failures"]:
                why.append(f"{c.spent['failures']} failed requests")
            return f"{fig['missing']} of {fig['rows']} rows missing" + (f" ({', '.join(why)})" if why else "")
        return None

    def run(self, candidates: list[Candidate]) -> ScreeningOutcome:
        """Successive halving on the training rows; the finalists end with every training row scored."""
        sizes = schedule(len(self.train_pos), self.opts)
        ordered = stratified_groups(self.train_pos, self.y, self.groups, self.seed)
        alive, fates, rounds = list(candidates), {}, []
        eta = max(2, int(self.opts.eta))
        for r, n in enumerate(sizes):
            last = r == len(sizes) - 1
            rows = self.train_pos if last else group_prefix(ordered, n, self.opts.min_groups)
            if not last and len(rows) >= 0.75 * len(self.train_pos):
                continue  # the round's groups already cover most rows: go to the last round
            if not alive:
                break
            stopped = self.score(alive, rows, shed=True)
            for c in [c for c in alive if c.name in self.shed]:
                fates[c.name] = {"fate": "budget", "detail": f"dropped in round {r + 1} ({len(rows)} rows) as the costliest "
                                                             f"candidate left: {self.shed[c.name]}"}
            alive = [c for c in alive if c.name not in self.shed]
            if stopped:
                for c in alive:
                    fates[c.name] = {"fate": "budget", "detail": f"not scored further: {stopped} (round {r + 1}, {len(rows)} rows)"}
                rounds.append({"round": r + 1, "rows": int(len(rows)), "candidates": len(alive), "kept": 0, "stopped": stopped})
                return ScreeningOutcome([], fates, rounds, stopped, self.figures, self.output_checks)
            figs = {c.name: self.figure(c, rows, bounds=True) for c in alive}
            survivors = []
            for c in alive:
                why = self._failed(c, figs[c.name])
                if why:
                    fates[c.name] = {"fate": "failed", "detail": why}
                else:
                    survivors.append(c)
            if last:  # what the regression gets: the candidates that still add on all the training rows
                survivors = self._about_output(survivors, rows, fates, f"round {r + 1}")
                idx, given = forward_keep([self.values[c.name] for c in survivors], self.y, self.groups, rows, self.base_pred,
                                          min_gain=self.opts.min_gain, first=[figs[c.name] for c in survivors],
                                          z=self.opts.z_last, n_boot=self.opts.n_boot, z_next=self.opts.z_next)
                finalists = [survivors[i] for i in idx]
                for i, c in enumerate(survivors):
                    if c not in finalists:
                        g, g2 = figs[c.name]["gain"], given[i]["gain"]
                        detail = f"last round: adds {g:+.3f} R² on all {len(rows)} training rows" if math.isfinite(g) else "no figure"
                        if given[i].get("next_to") and math.isfinite(g2):
                            detail += f", {g2:+.3f} next to the {given[i]['next_to']} candidate(s) kept before it"
                            self.figures[c.name].append(given[i])
                        zz = self.opts.z_next if given[i].get("next_to") else self.opts.z_last
                        if math.isfinite(g) and zz > 0:
                            detail += f" (lower bound {g2 - zz * std_error(given[i]):+.3f} ≤ {self.opts.min_gain:+.3f})"
                        elif math.isfinite(g2):
                            detail += f" (≤ {self.opts.min_gain:+.3f})"
                        fates[c.name] = {"fate": "screened out", "detail": detail}
                rounds.append({"round": r + 1, "rows": int(len(rows)), "candidates": len(alive), "kept": len(finalists)})
                return ScreeningOutcome(finalists, fates, rounds, None, self.figures, self.output_checks)
            ranked = sorted(survivors, key=lambda c: -finite_or_floor(figs[c.name]["gain"]))
            if self.opts.z > 0:  # drop only what is shown to be worse (ScreeningOptions)
                keep, bar, why_not = self._bounded(ranked, figs)
            else:  # the point estimates decide: the best 1/eta that add
                quota = max(math.ceil(len(alive) / eta), self.opts.min_keep)
                keep = [c for c in ranked[:quota] if finite_or_floor(figs[c.name]["gain"]) > self.opts.min_gain]
                why_not = f" (not among the best {quota})"
            for c in survivors:
                if c not in keep:
                    g = figs[c.name]["gain"]
                    why = (f"adds {g:+.3f} R²" if math.isfinite(g) else "no figure") + f" on {len(rows)} rows"
                    if self.opts.z > 0 and math.isfinite(g):
                        why += f" (upper bound {g + self.opts.z * std_error(figs[c.name]):+.3f} ≤ {bar:+.3f})"
                    elif math.isfinite(g) and g > self.opts.min_gain:
                        why += why_not
                    fates[c.name] = {"fate": "screened out", "detail": f"round {r + 1}: {why}"}
            keep = self._about_output(keep, rows, fates, f"round {r + 1}")
            rounds.append({"round": r + 1, "rows": int(len(rows)), "candidates": len(alive), "kept": len(keep)})
            self.echo(f"screening round {r + 1}: {len(alive)} candidates on {len(rows)} rows, {len(keep)} go on")
            alive = keep
        return ScreeningOutcome(alive, fates, rounds, None, self.figures, self.output_checks)

    def _about_output(self, alive: list[Candidate], rows, fates: dict, when: str) -> list[Candidate]:
        """The input-swap probe of each candidate going on that was not probed yet, on ``rows`` it
        has just scored (candidates screened out are not paid a probe): one shown to grade the
        input instead of the output is rejected (fate ``about the input``).
        Skipped (and said) when the budget cannot pay for the probe."""
        if not self.opts.probe_output:
            return alive

        kept = []
        for c in alive:
            if c.input_probe and c.name not in self.output_checks and c.error is None:
                reason = (self.budget.check(upcoming_tokens=c.cost_per_row * PROBES, upcoming_seconds=self._row_seconds(c) * PROBES)
                          if self.budget is not None else None)
                try:
                    ev = {"grades_input": False, "detail": f"not checked: {reason}"} if reason else \
                        c.about_output(np.asarray(rows, dtype=int), self.values[c.name])
                except Exception as exc:  # a failed probe must not sink the fit: the judge goes on, unchecked
                    log.warning("input-swap probe of %s failed: %s", c.name, exc)
                    ev = {"grades_input": False, "detail": f"not checked: the probe failed ({type(exc).__name__})"}
                self.output_checks[c.name] = ev
            ev = self.output_checks.get(c.name)
            if ev and ev.get("grades_input"):
                fates[c.name] = {"fate": "about the input", "detail": f"{when}: {ev['detail']}"}
                self.echo(f"{c.name} rejected: {ev['detail']}")
            else:
                kept.append(c)
        return kept

    def _bounded(self, ranked: list[Candidate], figs: dict) -> tuple[list[Candidate], float, str]:
        """Early-round rule: keep each candidate whose upper bound (gain + z·se) is above
        ``min_gain``; (kept, bar, '').  Not "as good as the best": the evaluator wants every
        candidate that adds, and dropping those below the best one's lower bound lost a τ 0.35
        judge next to a better one (tests/benchmarks/judge_signal.py)."""
        z = self.opts.z
        bar = self.opts.min_gain
        keep = [c for c in ranked if math.isfinite(figs[c.name]["gain"])
                and figs[c.name]["gain"] + z * std_error(figs[c.name]) > bar]
        return keep, bar, ""

    def run_all(self, candidates: list[Candidate], positions) -> ScreeningOutcome:
        """No screening (the paper's way): every candidate on every row of ``positions``; the
        figures are computed on the training rows for the report."""
        stopped = self.score(candidates, positions)
        fates = {}
        if stopped:
            fates = {c.name: {"fate": "budget", "detail": f"not scored on every row: {stopped}"} for c in candidates}
            return ScreeningOutcome([], fates, [{"round": 1, "rows": len(positions), "stopped": stopped}], stopped, self.figures,
                                    self.output_checks)
        finalists = []
        for c in candidates:
            why = self._failed(c, self.figure(c, self.train_pos))
            if why:
                fates[c.name] = {"fate": "failed", "detail": why}
            else:
                finalists.append(c)
        finalists = self._about_output(finalists, self.train_pos, fates, "all training rows")
        rounds = [{"round": 1, "rows": int(len(positions)), "candidates": len(candidates), "kept": len(finalists)}]
        return ScreeningOutcome(finalists, fates, rounds, None, self.figures, self.output_checks)
