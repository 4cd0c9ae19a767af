"""What one LLM request returned (:class:`LLMResponse`) and what a run of them cost per stage
(:class:`Usage`: requests, cache hits, calls, retries, failures, parse failures, tokens, seconds).
Kept apart from the client so results and accounting read on their own; re-exported by
:mod:`autometrics.evaluators.llm.client`."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
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
    prompt_chars: int = 0  # characters of the prompts sent to the endpoint (cache misses only)
    reusable_chars: int = 0  # of those, the leading characters an earlier prompt of this client shares


class PrefixLedger:
    """What an ideal prefix cache could reuse: for each prompt sent, the length of its longest
    common prefix with any earlier prompt (one of its two neighbours in sorted order holds it).
    Also the *floor*: each judged case (input and output as the judge saw them) counted once.
    Prompts are kept in memory (a fit's judge prompts: a few MB)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: list[str] = []
        self._cases: dict[str, int] = {}

    def add(self, text: str) -> int:
        """Record one prompt; returns the characters of it an earlier prompt shares."""
        with self._lock:
            k = bisect.bisect_left(self._seen, text)
            best = max((_common_prefix(text, q) for q in self._seen[max(0, k - 1): k + 1]), default=0)
            self._seen.insert(k, text)
        return best

    def case(self, text: str) -> None:
        key = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()
        with self._lock:
            self._cases.setdefault(key, len(text))

    @property
    def floor_chars(self) -> int:
        with self._lock:
            return sum(self._cases.values())


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on slice equality: C-speed comparisons, O(log n) of them
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class Usage:
    """Per-stage accounting, thread-safe.  ``track_prefixes``: also keep every prompt sent (a
    :class:`PrefixLedger`, for the fit's token report); off by default, because a long-running
    client (online scoring) would keep every prompt it ever sent."""

    def __init__(self, *, track_prefixes: bool = False):
        self._lock = threading.Lock()
        self.stages: dict[str, StageUsage] = {}
        self.prefixes: PrefixLedger | None = PrefixLedger() if track_prefixes else None

    def note_prompt(self, stage: str, messages) -> None:
        """Count a prompt that goes to the endpoint, and how much of it an earlier one shares
        (nothing unless prefixes are tracked)."""
        if self.prefixes is None:
            return
        text = "\n".join(str(m.get("content") or "") for m in messages)
        self.add(stage, prompt_chars=len(text), reusable_chars=self.prefixes.add(text))

    def note_case(self, text: str) -> None:
        """A judged case (input and output as the judge saw them), for the floor."""
        if self.prefixes is not None:
            self.prefixes.case(text)

    def token_report(self, stages: tuple[str, ...] = ("score:",)) -> dict | None:
        """Prompt tokens sent by the stages whose names start with ``stages``, those an ideal prefix
        cache would reuse, and the floor (each judged case once); tokens estimated as chars / 4
        (the same estimate for all three, so their ratios are exact in characters)."""
        with self._lock:
            picked = [v for k, v in self.stages.items() if k.startswith(stages)]
            sent = sum(v.prompt_chars for v in picked)
            reusable = sum(v.reusable_chars for v in picked)
        floor = self.prefixes.floor_chars if self.prefixes is not None else 0
        if not sent or not floor:
            return None
        return {"sent": sent // 4, "reusable": reusable // 4, "evaluated": (sent - reusable) // 4, "floor": floor // 4,
                "sent_over_floor": round(sent / floor, 2), "evaluated_over_floor": round((sent - reusable) / floor, 2),
                "note": "tokens estimated as characters / 4; reusable: leading text an earlier prompt of the fit shares "
                        "(what an ideal prefix cache would not evaluate again); floor: each judged case's text once"}

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
