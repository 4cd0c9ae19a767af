"""Options of the LLM half of AutoMetrics: which models, how many judges of each kind, retrieval,
scoring mode and cost control.  One object, :class:`LLMOptions`, passed as
``fit_evaluator(..., llm=..., llm_options=LLMOptions(...))``; the CLI's ``fit --llm`` flags fill it.

A light module on purpose (dataclasses only): the fit entry point and the CLI import it without
loading DSPy, LiteLLM or the judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LLMOptions", "GeneratorCounts", "PAPER_COUNTS", "QUICK_COUNTS", "MIN_LABELS_FOR_BANK"]

MIN_LABELS_FOR_BANK = 80  # below this only generated judges are candidates (AutoMetrics paper §4.6)


@dataclass
class GeneratorCounts:
    n_single: int = 10
    n_rubric: int = 5
    n_example: int = 1
    n_optimized: int = 1
    example_sets: int = 5  # candidate demonstration sets for the example-based judge
    example_eval_rows: int = 30  # training rows used to pick the best set
    optimized_trials: int = 4  # MIPROv2 trials
    optimized_candidates: int = 2  # MIPROv2 instruction candidates
    optimized_rows: int = 12  # training rows given to MIPROv2


PAPER_COUNTS = GeneratorCounts()
QUICK_COUNTS = GeneratorCounts(n_single=2, n_rubric=1, n_example=1, n_optimized=0, example_sets=2, example_eval_rows=6)


@dataclass
class LLMOptions:
    llm: str = "local"  # generator model string (see LLMConfig.parse)
    judge_llm: str | None = None  # judge model string; default: the generator's
    counts: GeneratorCounts = field(default_factory=lambda: PAPER_COUNTS)
    retrieve_k: int = 30
    use_bank: str = "auto"  # auto (bank only with >= 80 labels, paper §4.6) | always | never
    rerank: bool = True  # LLM re-rank of the fused retrieval
    dense: bool = True  # dense (MiniLM) retrieval besides BM25
    rationales: int = 3  # example rationales kept per selected generated judge
    compare_multi: bool = False  # also score the single-criterion judges in one call per example
    judge_mode: str = "auto"  # auto | logprobs | json
    concurrency: int | None = None
    timeout: float | None = None
    max_retries: int | None = None
    backoff: float | None = None  # first retry delay in seconds (doubled per retry)
    cache: str | None = None  # cache path (default: user data dir); "off" disables
    min_labels_for_bank: int = MIN_LABELS_FOR_BANK
