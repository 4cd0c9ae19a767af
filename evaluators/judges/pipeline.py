"""The full AutoMetrics method: retrieve -> generate -> screen -> regress -> validate -> report.

:func:`fit_with_judges` scores the MetricBank metrics the retrieval policy picks
(:func:`~.retrieve.score_bank`: every cheap one, model-based ones by measured signal), generates
LLM judges from the training rows, adds the other candidate sources (code metrics written by the
LLM and run in a sandbox, the nearest-exemplar metric, ``LLMOptions.candidate_sources``), and
screens every candidate before paying for it (:mod:`.screening`): each is scored on a small
stratified subset of the training rows, and only those that add to the evaluator are scored on
the rest; only the candidates the regression selects are scored on the held-out rows.  The
features go to :func:`~autometrics.evaluators.induce.fit_on_features` (same split, same
selection; a judge that reliably disagrees with the labels is used reversed, and says so).

The LLM-free evaluator (MetricBank alone, what ``fit`` without ``--llm`` gives) is fitted first
and is the floor: when no judge is selected, or the evaluator with judges does not beat it on the
held-out rows, the LLM-free evaluator is returned and the artifact says so (``llm.floor``; both
held-out τ are stored, so the one-bit choice on the held-out rows is visible).  With a budget
(``budget_seconds`` / ``max_judge_tokens``, :mod:`.budget`) the server's speed is measured with
a warm-up call, candidates, rows and clipping are planned to fit, and scoring stops when the
budget is spent.  Before any judge call (:mod:`.preflight`): the embedded server's speed is
measured so per-call timeouts follow it, and text every training row shares (a prompt template)
is elided from what generators and judges read.  The fit reports the judge prompt tokens sent,
those a prefix cache could reuse, and the floor (``llm.tokens``).

The artifact gains ``llm`` (models, per-stage usage, every candidate's fate and tokens, the
screening rounds, the budget plan, the floor decision), ``generated`` (each judge's spec, Metric
Card, τ and example rationales) and ``retrieval``.  Users call it through the one entry point::

    fit_evaluator("simpeval.csv", "score", task="Simplify a sentence", llm="local:1.5b",
                  llm_options=LLMOptions(counts=QUICK_COUNTS, budget_seconds=1200))
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import asdict

import numpy as np
import pandas as pd

from ...collectors.files import json_safe
from ...metricbank.errors import DataError
from ..evaluator import Evaluator
from ..induce import fit_on_features, fold_selector
from ..llm.client import LLMCache, LLMClient, LLMConfig, LLMUnreachable, Usage
from ..retrieval import score_bank
from ..sampling import sample_groups
from ..validity import CrossFit, choose, fold_plan, inner_taus
from . import artifact as art
from .budget import Budget, measure_speed, plan_fit
from .generate import generate_judges
from .metric import JudgeSpec, LLMJudgeMetric, bind_client, elide_text, unbind_clients
from .options import LLMOptions
from .preflight import (
    affixes_of,
    case_chars,
    estimate_plan,
    pace,
    warmup_messages,
)
from .preflight import (
    dry_run as plan_only,
)
from .screening import (
    CandidateContext,
    JudgeCandidate,
    Screener,
    base_predictions,
    screened_fold_fit,
)

__all__ = ["fit_with_judges", "estimate_plan"]

log = logging.getLogger("autometrics")


def llm_clients(opts: LLMOptions) -> tuple[LLMClient, LLMClient]:
    """The generator and judge clients of ``opts`` (one client when the judge model is the
    generator), sharing one cache and one accounting."""
    over = {"concurrency": opts.concurrency, "timeout": opts.timeout, "max_retries": opts.max_retries, "backoff": opts.backoff}
    cache = False if opts.cache == "off" else LLMCache(opts.cache)
    usage = Usage(track_prefixes=True)  # the fit reports judge-prompt tokens against the floor (llm.tokens)
    gen = LLMClient(LLMConfig.parse(opts.llm, **over), cache=cache, usage=usage)
    if not opts.judge_llm or opts.judge_llm == opts.llm:
        return gen, gen
    return gen, LLMClient(LLMConfig.parse(opts.judge_llm, **over), cache=cache, usage=usage)


def _bank_used(opts: LLMOptions, n_train: int) -> bool:
    """MetricBank's metrics are candidates next to the judges from ``min_labels_for_bank`` *training*
    labels (held-out rows do not count: they choose nothing).  Measured with known-signal judges
    (tests/benchmarks/judge_signal.py, SimpEval, 10 seeds, 60 held-out rows): generated-only was
    0.040 τ better at 40 training labels (sd 0.083), the bank 0.019 better at 80 and 0.031 at 160."""
    return opts.use_bank == "always" or (opts.use_bank == "auto" and n_train >= opts.min_labels_for_bank)


def _bank_note(opts: LLMOptions, n_train: int) -> str:
    """Said when MetricBank metrics are not candidates next to the judges (never silently)."""
    why = "--use-bank never" if opts.use_bank == "never" else f"{n_train} training labels < {opts.min_labels_for_bank}"
    return (f"MetricBank metrics are not candidates next to the judges ({why}; AutoMetrics paper §4.6"
            + ("; --use-bank always includes them); the LLM-free evaluator is still fitted as the floor"
               if opts.use_bank != "never" else ")"))


def _llm_free(lab, target, common, progress: bool = False, k: int = 8, dense: bool = True, metrics=None) -> tuple:
    """The floor: the MetricBank metrics the retrieval policy scores (every cheap one, the
    expensive ones by measured signal; or exactly ``metrics``), fitted like ``fit`` without --llm."""
    feats, bank, unavailable, plan = score_bank(lab, target, common["task"], test_size=common["test_size"],
                                                seed=common["seed"], k=k, progress=progress, dense=dense, metrics=metrics)
    try:
        free = fit_on_features(lab, target, feats, unavailable=unavailable, **common)
    except (DataError, ValueError) as exc:
        return None, feats, plan, f"no LLM-free evaluator to compare with ({exc})"
    free.evaluator.artifact["retrieval"] = json_safe(plan.to_dict())
    return free, feats, plan, None


def fit_with_judges(ds, target: str, opts: LLMOptions, *, task: str | None = None, test_size: float | None = None,
                    seed: int = 0, top_n: int = 5, n_boot: int = 1000, regression: str = "nnls", progress: bool = False,
                    dry_run: bool = False, crossfit=None, metrics=None, echo=lambda *a, **k: None):
    """Run the full method (module docstring) on a loaded dataset.  With ``dry_run=True``
    returns the plan from :func:`estimate_plan` (with ``opts.warmup`` also seconds per stage from
    a measured warm-up call) and makes no other call.  Called by
    :func:`autometrics.evaluators.fit.fit_evaluator` when it is given an LLM."""
    started = time.perf_counter()
    lab = ds.labelled(target)
    n_train = lambda: len(lab.split_positions(test_size, seed)[0])  # noqa: E731  (lab changes with a plan)
    bank_used = _bank_used(opts, n_train())
    if dry_run:
        return plan_only(lab, opts, lab.split_positions(test_size, seed)[0], task, bank_used, top_n,
                        judge=llm_clients(opts)[1] if opts.warmup else None, bank_note=None if bank_used else _bank_note(opts, n_train()))
    say = lambda m: echo(f"[{target}] {m}")  # noqa: E731
    notes: list[str] = []
    gen, judge = llm_clients(opts)
    for client in dict.fromkeys((gen, judge)):
        client.check_reachable()  # a down endpoint: a clear error now, not minutes of retries
    common = {"task": task, "test_size": test_size, "seed": seed, "top_n": top_n, "n_boot": n_boot, "regression": regression,
              "crossfit": crossfit}
    # the floor first (CPU only), so a budget plan knows the time that is left for the LLM
    free, (Xb, meta_b, notes_b), retrieval, why_no_free = (None, (pd.DataFrame(index=range(len(lab))), {}, []), None, None)
    if opts.use_bank != "never":
        free, (Xb, meta_b, notes_b), retrieval, why_no_free = _llm_free(lab, target, common, progress, opts.retrieve_k,
                                                                        opts.dense, metrics)
        if why_no_free:
            notes.append(why_no_free)
    counts, clip, budget, plan, free_same = opts.counts, opts.clip_chars, None, None, None
    given = [s if isinstance(s, JudgeSpec) else JudgeSpec.from_dict(s) for s in opts.judge_specs or []]
    if given:  # planned as that many candidates; a plan may keep only the first ones
        counts = dataclasses.replace(counts, n_single=len(given), n_rubric=0, n_example=0, n_optimized=0, n_code=0)
    if opts.budget_seconds or opts.max_judge_tokens:
        budget = Budget(seconds=opts.budget_seconds, tokens=opts.max_judge_tokens, usage=gen.usage, started=started)
        budget.speed = measure_speed(judge, warmup_messages(lab, task))
        if budget.speed is None:
            notes.append("the warm-up call failed: the budget is enforced while scoring but not planned")
        plan = plan_fit(budget, budget.speed, n_lab=len(lab), test_size=test_size, case_chars=case_chars(lab), counts=counts,
                        top_n=top_n, screening=opts.screening if opts.screen else None, rationales=opts.rationales,
                        bank_used=bank_used,
                        local=judge.config.is_local, clip_chars=clip, generate=not given)
        for line in plan.lines():
            say(line)
        counts, clip = plan.counts, plan.clip_chars
        if plan.rows:  # judges on fewer training rows; every held-out row stays, and the floor keeps every row
            tr_full, te_full = lab.split_positions(test_size, seed)
            keep = tr_full[sample_groups(lab.frame["group"].to_numpy()[tr_full], plan.rows - len(te_full), seed)]
            lab, Xb = lab.with_split(keep, te_full), Xb.iloc[np.r_[keep, te_full]].reset_index(drop=True)
            if free is not None and not len(te_full):
                # cross-fitted: the floor is compared on the rows the judges score (the same folds)
                try:
                    free_same = fit_on_features(lab, target, (Xb, meta_b, notes_b), **common)
                except (DataError, ValueError) as exc:
                    notes.append(f"the LLM-free evaluator could not be cross-fitted on the judges' rows ({exc})")
            bank_used = _bank_used(opts, n_train())
    if not bank_used:
        note = _bank_note(opts, n_train())
        say(f"note: {note}")
        notes.append(note)
    if free is not None:
        say(f"LLM-free evaluator (the floor): {'held-out' if lab.has_holdout(test_size) else 'cross-fitted'} τ {_tau(free)}")

    y = lab.y(target)
    train_pos, test_pos = lab.split_positions(test_size, seed)
    n_lab = len(lab)
    inputs = lab.inputs if lab.has_input else [""] * n_lab
    outputs = lab.outputs
    groups = lab.frame["group"].astype(str).to_numpy()
    for line in pace((gen, judge), lab, task, budget.speed if budget else None):
        say(line)
    affix = affixes_of(lab, train_pos)  # text every row shares: judges and generators see what differs
    if affix:
        say("not shown to the judges (every training row has it): " + ", ".join(
            f"{len(t)} characters at the {w} of each {k}" for k, (a, b) in affix.items() for t, w in ((a, "start"), (b, "end")) if t))
    bind_client(judge)
    try:
        if plan is not None and not plan.fits and free is not None:
            return _return_free(free, lab, started, gen, judge, opts, plan, budget, notes,
                                "the budget does not cover the smallest plan; no LLM work was done")
        # ---------------------------------------------------------------- generate
        if given:
            specs = given[: counts.n_single]
            say(f"{len(specs)} given judges (no generation)")
        else:
            say(f"generating judges with {gen.config.model} (judge: {judge.config.model}) ...")
            specs, gen_notes = generate_judges(
                task, target, [elide_text(inputs[i], (affix or {}).get("input")) for i in train_pos],
                [elide_text(outputs[i], (affix or {}).get("output")) for i in train_pos], y[train_pos],
                generator=gen, judge=judge, counts=counts, seed=seed,
            )
            notes += gen_notes
        specs = [dataclasses.replace(s, clip_chars=clip or s.clip_chars, elide=s.elide or affix) for s in specs]
        judges = [LLMJudgeMetric.from_spec(s, judge.config, feature=f, mode=opts.judge_mode)
                  for s, f in zip(specs, _unique_features(specs), strict=False)]
        for j in judges:
            j.client = judge
        say(f"{len(judges)} generated judges: " + ", ".join(j.name for j in judges))

        # ------------------------------------------- the candidates: judges and the other sources
        # MetricBank's metrics were chosen by the retrieval policy (score_bank); the judges and the
        # other candidates are not ranked by cards: each is screened by what it adds
        base_cols = list(Xb.columns) if bank_used else []
        if bank_used:
            say(f"{len(base_cols)} MetricBank features are the base the candidates must add to")
        cands = [JudgeCandidate(j, outputs, inputs) for j in judges]
        ctx = CandidateContext(task, target, list(outputs), list(inputs), lab.references, y, train_pos, groups, gen, judge,
                               seed, say, axes=[s.criterion for s in specs if s.kind == "single"])
        for source in _sources(opts, counts, given):
            try:
                cands += list(source(ctx))
            except Exception as exc:  # a broken source must not sink the fit
                log.warning("candidate source %r failed: %s", source, exc, exc_info=True)
                notes.append(f"candidate source {getattr(source, '__name__', source)!r} failed: {type(exc).__name__}: {exc}")
        base = Xb[base_cols].to_numpy(dtype=float) if base_cols else None
        # with screening, what the held-out scoring of the selected candidates will cost is kept back
        screener = Screener(y, groups, train_pos, base_pred=base_predictions(base, y, groups, train_pos, top_n=top_n),
                            opts=opts.screening, budget=budget, seed=seed, echo=say, top_n=top_n,
                            reserve_rows=len(test_pos) if opts.screen else 0)
        before = art.scoring_counters(judge)
        say(f"scoring {len(cands)} candidates " + (f"(screened; first on a subset of the {len(train_pos)} training rows)"
                                                  if opts.screen else f"on all {n_lab} rows (no screening)") + " ...")
        outcome = screener.run(cands) if opts.screen else screener.run_all(cands, np.arange(n_lab))
        _check_reachable_still(gen, judge)

        # ----------------------------------------------------------------- regress
        X = Xb[base_cols].copy()
        meta = {c: meta_b[c] for c in base_cols}
        for c in outcome.finalists:
            X[c.name] = screener.values[c.name]
            # passed screening on its added value: it enters the regression (oriented by its τ)
            # instead of competing with correlated bank metrics on first-stage weights
            meta[c.name] = {**c.meta(), "required": bool(opts.screen)}
        fold = None
        if opts.screen and not lab.has_holdout(test_size) and outcome.finalists:
            # cross-fitted validity re-screens the finalists inside each fold (on its training rows only)
            names = list(X.columns)
            fold = screened_fold_fit([names.index(c) for c in base_cols], [names.index(c.name) for c in outcome.finalists],
                                     [c.positive for c in outcome.finalists], groups, min_gain=opts.screening.min_gain,
                                     z=opts.screening.z_last, n_boot=opts.screening.n_boot, z_next=opts.screening.z_next,
                                     regression=regression, top_n=top_n, generated=[meta[c]["generated"] for c in names])
        result, stopped = _fit_with_candidates(lab, target, X, meta, notes_b, outcome, screener, test_pos, train_pos, y,
                                               budget=budget, screened=opts.screen, free=free, common=common, started=started,
                                               fold=fold)
        prefix_cache = art.prefix_cache_report(before, art.scoring_counters(judge))
        if result is None and free is None:
            fates = "; ".join(f"{k}: {v['fate']} ({v['detail']})" for k, v in outcome.fates.items()) or "no candidate"
            raise DataError("no candidate judge reached the regression and there is no LLM-free evaluator to return "
                            f"(--use-bank never): {fates}. " + " ".join(notes))

        # ----------------------------------------------------------------- the floor
        names = {c.name for c in cands}
        chooses = (result is not None and free is not None and free_same is None
                   and any(f["feature"] in names for f in result.evaluator.features))
        procs = _procedures(lab, target, Xb, meta_b, X, meta, fold, common) if chooses else None
        train_taus = None
        if procs and lab.has_holdout(test_size):  # held out: the choice is made on the training rows alone
            train_taus = inner_taus(procs, train_pos, y, groups, folds=(crossfit or CrossFit()).folds, seed=seed)
        returned, why = _floor(result, free, names, stopped, bool(outcome.finalists), free_same, train_taus)
        # each procedure's own figure, kept before the returned one's becomes the whole procedure's
        own_tests = [dict(r.evaluator.statistics["test"]) if r is not None else None for r in (free, result)]
        nested = None
        if procs and not lab.has_holdout(test_size):
            nested = _validate_the_choice(returned, lab, target, procs, common, say)
        tok = judge.usage.token_report(_JUDGING)
        if tok:
            say(f"judge prompts: {tok['sent']:,} tokens sent, {tok['evaluated']:,} not reusable from a prefix cache; the floor "
                f"(each judged case once) {tok['floor']:,}: {tok['sent_over_floor']:.1f}x and {tok['evaluated_over_floor']:.1f}x")
        say(("returned the evaluator with judges: " if returned is result else "returned the LLM-free evaluator: ") + why)
        a = returned.evaluator.artifact
        weights = {f["feature"]: f["weight"] for f in (result.evaluator.features if result else [])}
        fates = art.candidate_fates(cands, outcome, result.candidates if result else None, weights,
                                    returned="with-judges" if returned is result else "llm-free", floor_why=why)
        by_name = {f["feature"]: f for f in fates}
        selected = {f["feature"] for f in a["features"]}
        allow = (lambda: budget.check() is None) if budget is not None else (lambda: True)
        generated = art.generated_entries(judges, result.candidates if result else None, selected, by_name, X=X, y=y,
                                          train_pos=train_pos, lab=lab, outputs=outputs, inputs=inputs,
                                          rationales=opts.rationales, allow=allow)
        multi = None
        singles = [j for j in judges if j.spec.kind == "single" and j.name in X.columns]
        if opts.compare_multi and singles and result is not None:
            multi = art.compare_multi(singles, judge, X, y, outputs, inputs, train_pos, refit=lambda Xm: fit_on_features(
                lab, target, (Xm, meta, notes_b), **common))
            multi["tau_test_fit_single"] = result.evaluator.artifact["statistics"]["test"]["tau"]

        a["method"]["name"] = "autometrics-full"
        a["method"]["generator_counts"] = asdict(counts)
        a["method"]["retrieve_k"] = opts.retrieve_k if bank_used else None
        a["method"]["bank_used"] = bank_used
        a["method"]["returned"] = "with-judges" if returned is result else "llm-free"
        screening = {"screened": opts.screen, "options": asdict(opts.screening) if opts.screen else None,
                     "rounds": outcome.rounds, "stopped": stopped,
                     "base": {"features": base_cols, "note": "the metrics already in: a candidate's screening figure is the "
                                                             "out-of-fold R² it adds to their out-of-fold prediction"}}
        floor = {"returned": a["method"]["returned"], "why": why, "llm_free_test": own_tests[0],
                 "with_judges_test": own_tests[1], "nested": nested,
                 "note": ("each figure is that procedure's alone; the returned evaluator's τ, CI and p are those of the "
                          "whole procedure, the choice made inside each fold" if nested else
                          "the choice was made on the training rows; the held-out rows chose nothing"
                          if train_taus is not None else "no choice between the two was made on the labels")}
        a["llm"] = {"generator": gen.config.public(), "judge": judge.config.public(), "usage": gen.usage.to_dict(),
                    "candidates": fates, "screening": screening, "floor": floor,
                    "budget": ({"plan": plan.to_dict() if plan else None, **budget.to_dict()} if budget else None),
                    "multi_vs_single": multi, "scoring_prefix_cache": prefix_cache,
                    "tokens": {"judging": judge.usage.token_report(_JUDGING), "all_stages": judge.usage.token_report(("",))},
                    "seconds": round(time.perf_counter() - started, 1)}
        a["generated"] = generated
        # which MetricBank metrics were scored: part of the returned evaluator when the bank is in it
        a["retrieval"] = json_safe(retrieval.to_dict()) if retrieval is not None and (bank_used or returned is free) else None
        a["code_metrics"], a["candidate_cards"] = art.other_candidates(cands, selected, by_name)
        usage = a["llm"]["usage"]["total"]
        if usage["failures"] or usage["parse_failures"]:
            a["warnings"].append(f"LLM: {usage['failures']} failed requests and {usage['parse_failures']} unparseable replies "
                                 "became missing values (imputed with the training median)")
        if not any(f["fate"] == "kept" for f in fates):
            a["warnings"].append(f"LLM: the judges added nothing: {why} ({usage['prompt_tokens'] + usage['completion_tokens']:,} "
                                 "LLM tokens spent; see the candidates' fates)")
        a["warnings"] += [f"LLM: {n}" for n in notes]
        a["fit_seconds"] = round(time.perf_counter() - started, 2)
        returned.evaluator = Evaluator(json_safe(a))
        returned.notes = list(returned.notes) + notes
        return returned
    finally:
        unbind_clients()


def _fit_with_candidates(lab, target, X, meta, notes_b, outcome, screener, test_pos, train_pos, y, *, budget, screened: bool,
                         free, common: dict, started: float, fold=None) -> tuple:
    """(the evaluator with the finalists, the budget's stop reason): with screening, the finalists
    the regression selects on the training rows are scored on the held-out rows first.  None when
    there is nothing to fit, the budget stopped, or the regression finds nothing it may use (then
    the finalists' fates say why; without an LLM-free evaluator to return that is an error)."""
    stopped = outcome.stopped
    if not (outcome.finalists or (free is None and X.shape[1])):
        return None, stopped
    feats = (X, meta, list(notes_b))
    try:
        if screened and outcome.finalists and len(test_pos):
            first = fit_on_features(lab, target, feats, **{**common, "n_boot": 0, "crossfit": None})
            chosen = {f["feature"] for f in first.evaluator.features}
            screener.reserve_rows = 0
            if budget is not None:
                budget.reserve_tokens = budget.reserve_seconds = 0.0
            stopped = screener.score([c for c in outcome.finalists if c.name in chosen], test_pos) or stopped
            for c in outcome.finalists:
                X[c.name] = screener.values[c.name]
                if stopped:
                    outcome.fates[c.name] = {"fate": "budget", "detail": f"passed screening, not validated: {stopped}"}
        if stopped:
            return None, stopped
        scope = ("judge generation and the early screening rounds used every labelled row; the last screening "
                 "round, selection and weighting ran inside each fold") if fold is not None else ""
        return fit_on_features(lab, target, feats, started=started, fold_fit=fold, scope=scope, **common), stopped
    except ValueError as exc:  # e.g. every candidate disagrees with the labels: nothing the regression may use
        if free is None:
            raise
        from ..stats import kendall_tau

        for c in outcome.finalists:
            t = kendall_tau(X[c.name].to_numpy(dtype=float)[train_pos], y[train_pos])[0]
            fate = "negative weight" if t < 0 else "constant"
            outcome.fates[c.name] = {"fate": fate, "detail": f"the regression could not use it (τ train {t:+.3f}): {exc}"}
        return None, stopped


def _procedures(lab, target, Xb, meta_b, X, meta, fold, common) -> list:
    """The two fold procedures a fit with judges chooses between, simplest first: the LLM-free
    regression on the MetricBank features, and the fit with the candidates (``fold``: with the
    last screening round inside the fold)."""
    groups = lab.frame["group"].astype(str).to_numpy()
    names_b, names = list(Xb.columns), list(X.columns)
    Ab, A = Xb.to_numpy(dtype=float), X.to_numpy(dtype=float)
    free_fold = fold_selector(common["regression"], common["top_n"], [meta_b[c]["generated"] for c in names_b], groups)
    judge_fold = fold or fold_selector(common["regression"], common["top_n"], [meta[c]["generated"] for c in names], groups,
                                       [j for j, c in enumerate(names) if meta[c].get("required")])
    return [lambda tr, te, yy: free_fold(Ab, tr, te, yy), lambda tr, te, yy: judge_fold(A, tr, te, yy)]


#: what ran inside each fold of a fit with judges whose choice is validated with it
_NESTED_SCOPE = ("the choice between the evaluator with judges and the LLM-free one (an inner {k}-fold cross-fit on "
                 "the fold's training rows), the last screening round, selection and weighting ran inside each fold; "
                 "judge generation and the early screening rounds used every labelled row")


def _validate_the_choice(returned, lab, target, procedures, common, say) -> dict:
    """Cross-fitted: the returned evaluator's τ, CI, p and verdict become those of the whole
    procedure, the choice between judges and LLM-free included (:func:`..validity.nested_choice`:
    in each fold the choice is made on that fold's training rows alone).  Returns what the
    choice did (``llm.floor.nested``)."""
    from ..validity import INNER_FOLDS, crossfit_validity, nested_choice

    cf = common.get("crossfit") or CrossFit(n_boot=common["n_boot"])
    y, groups = lab.y(target), lab.frame["group"].astype(str).to_numpy()
    chosen: list[int] = []
    plan = fold_plan(groups, cf, common["seed"])
    v, oof = crossfit_validity(nested_choice(procedures, groups, seed=common["seed"], record=chosen), y, groups, plan, cf,
                               seed=common["seed"], scope=_NESTED_SCOPE.format(k=INNER_FOLDS))
    n_folds = sum(len(np.unique(f)) for f in plan)
    a = returned.evaluator.artifact
    a["validity"] = v.to_dict()
    a["statistics"]["test"] = {"n": v.n_labels, "tau": v.tau, "ci_low": v.ci[0], "ci_high": v.ci[1], "p_value": v.p_value,
                               "method": "cross-fit"}
    a["method"]["validation"] = v.method
    a["warnings"] = [w for w in a["warnings"] if not w.startswith("not validated:")]
    if not v.validated:
        a["warnings"].append(f"not validated: {v.reason}. Treat its scores as unvalidated.")
    if len(returned.test) == oof.shape[1]:
        returned.test = returned.test.assign(score=np.nanmean(oof, axis=0))
    nested = {"judges_chosen_in_folds": int(sum(chosen[:n_folds])), "folds": int(n_folds), "inner_folds": INNER_FOLDS,
              "tau": v.tau, "note": "the reported τ, CI and p are those of the whole procedure: in each fold the choice "
                                    "between judges and LLM-free was made on that fold's training rows"}
    say(f"the choice, validated with it: judges chosen in {nested['judges_chosen_in_folds']} of {n_folds} folds; "
        f"cross-fitted τ of the whole procedure {_num(v.tau)}")
    return nested


def _num(v) -> str:
    return "undefined" if v is None else f"{v:.3f}"


def _tau(res) -> str:
    t = res.evaluator.statistics["test"]["tau"] if res is not None else None
    return "undefined" if t is None else f"{t:.3f}"


#: the stages that send judge prompts (scoring, and choosing demonstration sets when asked to)
_JUDGING = ("score:", "generate:example")


def _floor(result, free, candidate_names: set, stopped: str | None, finalists: bool = False, free_same=None,
           train_taus=None) -> tuple:
    """(returned result, why): the evaluator with judges only when one of them is in it and it
    beats the LLM-free evaluator: cross-fitted, on the same folds (``free_same`` is the LLM-free
    procedure on the judges' rows when a budget cut them); with a held-out split, on the
    training rows alone (``train_taus``: the two procedures' cross-fitted τ there, LLM-free
    first), so the held-out rows reported chose nothing."""
    if result is None:
        if stopped:
            return free, f"the evaluator with judges could not be validated ({stopped})"
        return free, ("the regression could use no candidate (each disagrees with the labels or is constant)" if finalists
                      else "no candidate reached the regression (each was screened out or failed)")
    if free is None:
        return result, "no LLM-free evaluator to compare with"
    if not any(f["feature"] in candidate_names for f in result.evaluator.features):
        return free, "no judge was selected"
    if train_taus is not None:
        tf, tj = train_taus
        if choose(train_taus) == 0:
            return free, f"cross-fitted τ on the training rows with judges {tj:.3f} is not above the LLM-free {tf:.3f}"
        return result, f"cross-fitted τ on the training rows with judges {tj:.3f} > LLM-free {tf:.3f}"
    cmp = free_same or free
    tj, tf = result.evaluator.statistics["test"]["tau"], cmp.evaluator.statistics["test"]["tau"]
    what = "held-out" if result.evaluator.statistics["test"].get("method") != "cross-fit" else "cross-fitted"
    if tj is None or (tf is not None and tj <= tf):
        return free, f"{what} τ with judges {_tau(result)} is not above the LLM-free {_tau(cmp)}"
    return result, f"{what} τ with judges {_tau(result)} > LLM-free {_tau(cmp)}"


def _return_free(free, lab, started, gen, judge, opts, plan, budget, notes, why):
    a = free.evaluator.artifact
    a["method"]["name"] = "autometrics-full"
    a["method"]["returned"] = "llm-free"
    a["llm"] = {"generator": gen.config.public(), "judge": judge.config.public(), "usage": gen.usage.to_dict(),
                "candidates": [], "screening": None,
                "floor": {"returned": "llm-free", "why": why, "llm_free_test": free.evaluator.statistics["test"],
                          "with_judges_test": None},
                "budget": {"plan": plan.to_dict() if plan else None, **budget.to_dict()} if budget else None,
                "seconds": round(time.perf_counter() - started, 1)}
    a["generated"] = []
    a["warnings"].append(f"LLM: the judges added nothing: {why}")
    a["warnings"] += [f"LLM: {n}" for n in notes]
    free.evaluator = Evaluator(json_safe(a))
    return free


def _sources(opts: LLMOptions, counts, given: list) -> list:
    """The candidate sources of this fit: the code metrics (``counts.n_code``; none when the
    judges are given: nothing is generated then), the nearest-exemplar metric (``opts.exemplar``)
    and the caller's own (``opts.candidate_sources``)."""
    from functools import partial

    out = []
    if counts.n_code and not given:
        from ..code_metric import code_metric_source

        out.append(partial(code_metric_source, n=counts.n_code))
    if opts.exemplar:
        from ..exemplar import exemplar_source

        out.append(exemplar_source)
    return out + list(opts.candidate_sources)


def _check_reachable_still(gen, judge) -> None:
    for client in dict.fromkeys((gen, judge)):
        if client.unreachable:  # went away mid-run: no evaluator from all-missing judges
            raise LLMUnreachable(f"the LLM endpoint went away during the fit ({client.unreachable}); nothing was "
                                 "written. Restart the server and run the fit again (cached replies are reused)")


def _unique_features(specs) -> list[str]:
    names, seen = [], {}
    for s in specs:
        base = s.feature_name
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return names

