"""What one LLM request returned (:class:`LLMResponse`) and what a run of them cost per stage
(:class:`Usage`: requests, cache hits, calls, retries, failures, parse failures, tokens, seconds).
Kept apart from the client so results and accounting read on their own; re-exported by
:mod:`autometrics.evaluators.llm.client`."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass


@dataclass
class LLMResponse:
    text: str | None = None
    finish_reason: str | None = None
    #: first-token alternatives [{token: logprob}] per generated token, when returned
    top_logprobs: list[dict[str, float]] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    def to_cache(self) -> dict:
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "top_logprobs": self.top_logprobs,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass
class StageUsage:
    calls: int = 0  # requests that reached the endpoint (retries included)
    requests: int = 0  # logical requests (one per chat())
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    failures: int = 0  # requests that failed after all retries
    parse_failures: int = 0  # replies that could not be read as a score (-> missing values)
    seconds: float = 0.0


class Usage:
    """Per-stage accounting, thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self.stages: dict[str, StageUsage] = {}

    def _stage(self, stage: str) -> StageUsage:
        if stage not in self.stages:
            self.stages[stage] = StageUsage()
        return self.stages[stage]

    def add(self, stage: str, **delta) -> None:
        with self._lock:
            s = self._stage(stage)
            for k, v in delta.items():
                setattr(s, k, getattr(s, k) + v)

    def to_dict(self) -> dict:
        with self._lock:
            out = {k: dataclasses.asdict(v) for k, v in self.stages.items()}
        total = StageUsage()
        for v in out.values():
            for k in v:
                setattr(total, k, getattr(total, k) + v[k])
        out["total"] = dataclasses.asdict(total)
        for v in out.values():
            v["seconds"] = round(v["seconds"], 2)
        return out

    def summary(self) -> str:
        d = self.to_dict()
        lines = [f"{'stage':<22} {'requests':>8} {'cached':>7} {'calls':>6} {'retries':>7} {'failed':>6} {'unparsed':>8} {'prompt tok':>10} {'compl tok':>9} {'s':>7}"]
        for name, s in d.items():
            lines.append(
                f"{name:<22} {s['requests']:>8} {s['cache_hits']:>7} {s['calls']:>6} {s['retries']:>7} {s['failures']:>6} "
                f"{s['parse_failures']:>8} {s['prompt_tokens']:>10} {s['completion_tokens']:>9} {s['seconds']:>7.1f}"
            )
        return "\n".join(lines)
