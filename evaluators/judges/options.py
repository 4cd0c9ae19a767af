"""Options of the LLM half of AutoMetrics: which models, how many judges of each kind, retrieval,
scoring mode, screening (:class:`ScreeningOptions`), budgets and cost control.  One object, :class:`LLMOptions`, passed as
``fit_evaluator(..., llm=..., llm_options=LLMOptions(...))``; the CLI's ``fit --llm`` flags fill it.

A light module on purpose (dataclasses only): the fit entry point and the CLI import it without
loading DSPy, LiteLLM or the judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LLMOptions", "GeneratorCounts", "PAPER_COUNTS", "QUICK_COUNTS", "MIN_LABELS_FOR_BANK", "ScreeningOptions"]

#: below this many training labels only generated judges are candidates (AutoMetrics paper §4.6; measured
#: with known-signal judges in tests/benchmarks/judge_signal.py: the bank cost 0.04 τ at 40, added 0.02-0.03 at 80-160)
MIN_LABELS_FOR_BANK = 80


@dataclass
class GeneratorCounts:
    n_single: int = 10
    n_rubric: int = 5
    n_example: int = 1
    n_optimized: int = 1
    # demonstration sets of the example-based judge; 1: chosen without judge calls (more: the best set by
    # tau on example_eval_rows training rows, example_sets x example_eval_rows calls, measured at
    # 40-49 % of a fit's tokens)
    example_sets: int = 1
    example_eval_rows: int = 30  # training rows used to pick the best set (example_sets > 1)
    optimized_trials: int = 4  # MIPROv2 trials
    optimized_candidates: int = 2  # MIPROv2 instruction candidates
    optimized_rows: int = 12  # training rows given to MIPROv2
    n_code: int = 0  # code-generated metrics (Python functions run in a sandbox, evaluators/code_metric.py)


PAPER_COUNTS = GeneratorCounts(n_code=2)  # the paper's judge counts, plus two code metrics (screened like judges)
QUICK_COUNTS = GeneratorCounts(n_single=2, n_rubric=1, n_example=1, n_optimized=0, example_sets=1, example_eval_rows=6, n_code=1)


@dataclass
class ScreeningOptions:
    """Successive halving over the candidate judges (:mod:`.screening`): every candidate is scored
    on ``first_rows`` training rows, the best 1/``eta`` (at least ``min_keep``) of those that add to
    the evaluator go on to ``eta`` times as many rows, for ``rounds`` rounds, then the rest of the
    training rows.  ``min_keep`` 2 because measured on SimpEval (tests/benchmarks/judge_screening.py)
    the best-third rule alone dropped a weak but useful second judge in the second round.

    Small rounds are noisy (24 rows can be four input groups), so an early round drops a candidate
    only when it is shown not to add: its gain's upper bound (gain + ``z`` cluster-bootstrap
    standard errors) is not above ``min_gain``; a round holds at least ``min_groups`` input groups.  Measured with known-signal judges
    (tests/benchmarks/judge_signal.py): the best-1/eta rule on point estimates lost a
    judge with τ 0.35 in round one on 1 seed of 3."""

    first_rows: int | None = None  # rows of the first round (None: a quarter of the training rows, 16..32)
    eta: int = 3  # each round keeps the best 1/eta (with a positive gain) and grows the rows eta-fold
    rounds: int = 2  # screening rounds before the full training set
    min_gain: float = 0.0  # a candidate goes on only when its out-of-fold R² gain exceeds this
    min_keep: int = 2  # a round keeps at least this many of the candidates whose gain exceeds min_gain
    z: float = 1.0  # early rounds: standard errors in a candidate's upper bound (0: the point estimate decides)
    z_last: float = 1.0  # last round: a candidate is kept when gain - z_last standard errors > min_gain
    # ... and, next to the candidates kept before it, gain - z_next standard errors > min_gain.  0:
    # having added alone by its lower bound, it stays while its point estimate still adds; measured
    # with known-signal judges at 80 labels, 10 seeds (tests/benchmarks/judge_signal.py): z_next 1
    # kept both signal judges on 5/10 Topical-Chat seeds (84 % of the oracle's gain), 0 on 7/10
    # (95 %); SimpEval 9/10 both ways (98 % / 96 %); noise judges kept 1 % vs 3 %.  Rerun on sets it
    # was not chosen on: SimpDA 6/10 vs 7/10, SummEval 6/10 vs 8/10 (docs/benchmarks/judges.md, "Judges with a known signal")
    z_next: float = 0.0
    min_groups: int = 8  # early rounds: at least this many input groups
    n_boot: int = 200  # cluster-bootstrap resamples for a gain's standard error
    chunk_rows: int = 8  # rows asked between two budget checks
    max_missing: float = 0.5  # more unreadable replies than this share: the candidate failed
    probe_output: bool = True  # input-swap probe of each judge in its first round (judges/about_output.py)


@dataclass
class LLMOptions:
    llm: str = "local"  # generator model string (see LLMConfig.parse)
    judge_llm: str | None = None  # judge model string; default: the generator's
    counts: GeneratorCounts = field(default_factory=lambda: PAPER_COUNTS)
    retrieve_k: int = 8  # expensive (model-based) MetricBank metrics scored on every row, chosen by measured signal
    use_bank: str = "auto"  # auto (bank only with >= 80 training labels, paper §4.6) | always | never
    dense: bool = True  # dense (MiniLM) card ranking besides BM25 (the tie-break of the retrieval policy)
    exemplar: bool = True  # a nearest-exemplar candidate (evaluators/exemplar.py), screened like the judges
    rationales: int = 3  # example rationales kept per selected generated judge
    compare_multi: bool = False  # also score the single-criterion judges in one call per example
    judge_mode: str = "auto"  # auto | logprobs | json
    concurrency: int | None = None
    timeout: float | None = None
    max_retries: int | None = None
    backoff: float | None = None  # first retry delay in seconds (doubled per retry)
    cache: str | None = None  # cache path (default: user data dir); "off" disables
    min_labels_for_bank: int = MIN_LABELS_FOR_BANK
    screen: bool = True  # screen candidates on a subset first (False: every candidate on every row, the paper's way)
    screening: ScreeningOptions = field(default_factory=ScreeningOptions)
    budget_seconds: float | None = None  # wall-clock budget of the fit (planned from a measured warm-up)
    max_judge_tokens: int | None = None  # prompt + completion tokens of all LLM calls of the fit (cache hits are free)
    warmup: bool = False  # dry run: measure the server's speed with a warm-up call for a time estimate
    clip_chars: int | None = None  # judges see at most this many characters of input and of output (None: 3000)
    judge_specs: list | None = None  # use these judges (JudgeSpec or dicts) instead of generating them
    candidate_sources: list = field(default_factory=list)  # callables(CandidateContext) -> [Candidate], screened like judges
