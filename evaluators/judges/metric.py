"""LLM judges as declared specifications, and the metric that runs them.

A :class:`JudgeSpec` holds everything a judge needs (criterion, rubric levels, demonstrations,
extra instructions, scale); it is stored in full in the evaluator artifact, so a loaded
evaluator scores new data without regenerating anything.

Scoring (what works with small local judges, see shared/OFFLINE.md): one bare prompt per
(example, criterion), laid out for a prefix cache (:func:`judge_messages`), one output
token, and the score read as the probability-weighted mean of the scale's digits from the
first token's top logprobs (G-Eval style).  Without logprobs the reply is read as JSON
(``{"score": n}``, requested with structured output where the endpoint supports it) or as a
bare digit.  Anything else is a missing value (NaN, counted as ``parse_failures``), never 0.

Example::

    spec = JudgeSpec(kind="single", criterion="Fluency", description="Is the output fluent English?")
    m = LLMJudgeMetric.from_spec(spec, LLMConfig.parse("local:1.5b"))
    m.score(["The cat sat."], inputs=["..."])
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from dataclasses import asdict, dataclass, field

import numpy as np

from ...metricbank.base import Metric
from ...metricbank.errors import UserError
from ..llm.client import LLMClient, LLMConfig, LLMResponse

__all__ = ["JudgeSpec", "LLMJudgeMetric", "read_score", "score_multi", "judge_messages", "judge_case", "shared_affixes", "elide_text", "FACTORY"]

FACTORY = "autometrics.evaluators.judges:LLMJudgeMetric"
KINDS = ("single", "rubric", "example", "optimized")
_MAX_TEXT = 3000  # characters of input/output shown to a judge
MAX_DEMO_CHARS = 300  # characters of a demonstration's input/output (they are repeated in every call of the judge)


def _slug(text: str, n: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return s[:n].rstrip("_") or "criterion"


def _clip(text: str, limit: int = _MAX_TEXT) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + " […]"


@dataclass
class JudgeSpec:
    kind: str  # single | rubric | example | optimized
    criterion: str  # short name, e.g. "Meaning preservation"
    description: str = ""  # what a high score means
    task: str | None = None
    rubric: dict[str, str] | None = None  # {"1": "...", ..., "5": "..."}
    demonstrations: list[dict] = field(default_factory=list)  # {"input", "output", "score"}
    instructions: str | None = None  # extra instructions (the prompt-optimized judge)
    scale_min: int = 1
    scale_max: int = 5
    origin: dict = field(default_factory=dict)  # how it was made (generator model, selection stats)
    clip_chars: int | None = None  # characters of input and of output shown (None: 3000); a budget plan may lower it
    #: text every training row shares, not shown to the judge: {"input": [opening, ending], "output": [...]}
    elide: dict | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise UserError(f"judge kind must be one of {KINDS}, got {self.kind!r}")
        if not (0 <= self.scale_min < self.scale_max <= 9):
            raise UserError("judge scales are single digits: 0 <= scale_min < scale_max <= 9")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> JudgeSpec:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def sha(self) -> str:
        body = {k: v for k, v in self.to_dict().items() if k != "origin" and not (k in ("clip_chars", "elide") and v is None)}
        return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    @property
    def feature_name(self) -> str:
        return f"llm.{self.kind}.{_slug(self.criterion)}"

    def card(self) -> str:
        """A Metric Card (the seven MetricBank sections) for this generated judge."""
        levels = "\n".join(f"- **{k}**: {v}" for k, v in sorted((self.rubric or {}).items())) or "- (none: the judge uses the criterion alone)"
        demos = f"{len(self.demonstrations)} scored demonstrations from the training data" if self.demonstrations else "none"
        return "\n".join([
            f"# Metric Card: {self.criterion} ({self.kind} LLM judge)",
            "",
            "## Metric Details",
            f"Generated LLM-as-a-judge metric, kind `{self.kind}`, scale {self.scale_min}–{self.scale_max}. "
            f"Criterion: **{self.criterion}** — {self.description}",
            "",
            "## Intended Use",
            f"Task: {self.task or '(not given)'}. Generated from the labelled training data of this fit; "
            "valid for outputs like those it was generated from.",
            "",
            "## Metric Implementation",
            "One prompt per example (example first, criterion last); the score is the probability-weighted mean "
            "of the scale digits from the first token's logprobs when the endpoint returns them, else the parsed "
            f"reply. Unparseable replies are missing values.\n\nRubric:\n{levels}\n\nDemonstrations: {demos}."
            + (f"\n\nInstructions: {self.instructions}" if self.instructions else ""),
            "",
            "## Known Limitations",
            "Small judges separate good from bad weakly and may favour fluent but wrong outputs; scores depend on "
            "the judge model (its name is in the signature).",
            "",
            "## Related Metrics",
            "Other generated judges of this fit; G-Eval (probability-weighted scoring).",
            "",
            "## Further Reading",
            "Ryan et al., AutoMetrics; Liu et al., G-Eval (2023).",
            "",
            "## Metric Card Authors",
            f"Generated automatically by autometrics-sdk ({json.dumps(self.origin.get('generator', 'generator LLM'))}).",
        ])


# ------------------------------------------------------------------------- prompting


_MIN_AFFIX = 80  # shared openings/endings shorter than this are shown (not worth a marker)


def shared_affixes(texts: list[str], min_chars: int = _MIN_AFFIX) -> tuple[str, str]:
    """(opening, ending) that every text shares, each cut back to a line or word boundary and kept
    only when at least ``min_chars`` long; ("", "") for fewer than 3 texts or when all are equal.
    A prompt template that wraps every input is the common case: a judge that sees the first 400
    characters of each input sees only the template (697 shared characters on a code-review set)."""
    texts = [t or "" for t in texts]
    if len(texts) < 3 or len(set(texts)) < 2:
        return "", ""
    lo, hi = min(texts), max(texts)  # the common prefix of all = that of the smallest and largest
    n = 0
    while n < min(len(lo), len(hi)) and lo[n] == hi[n]:
        n += 1
    pre = lo[:n]
    rev = sorted(t[::-1] for t in texts)
    a, b = rev[0], rev[-1]
    m = 0
    while m < min(len(a), len(b)) and a[m] == b[m]:
        m += 1
    suf = a[:m][::-1]
    shortest = min(len(t) for t in texts)
    if len(pre) + len(suf) > shortest:  # overlapping on the shortest text: keep the opening
        suf = suf[len(pre) + len(suf) - shortest:]
    pre = pre[: max(pre.rfind("\n"), pre.rfind(" ")) + 1] if pre and not pre[-1].isspace() else pre
    if suf and not suf[0].isspace():
        cut = [k for k in (suf.find("\n"), suf.find(" ")) if k >= 0]
        suf = suf[min(cut):] if cut else ""
    return (pre if len(pre) >= min_chars else ""), (suf if len(suf) >= min_chars else "")


def elide_text(text: str, affix) -> str:
    """``text`` without a shared opening/ending (when it has them), each replaced by a marker."""
    pre, suf = affix or ("", "")
    if pre and text.startswith(pre):
        text = f"[… {len(pre)} characters every example starts with …]\n" + text[len(pre):]
    if suf and text.endswith(suf) and len(text) > len(suf):
        text = text[: len(text) - len(suf)] + f"\n[… {len(suf)} characters every example ends with …]"
    return text


def judge_case(spec: JudgeSpec, output: str, input_text: str = "") -> tuple[str, str]:
    """(input, output) as the judge sees them: without the text every training row shares
    (``spec.elide``), then clipped to ``spec.clip_chars`` (default 3000)."""
    limit = spec.clip_chars or _MAX_TEXT
    el = spec.elide or {}
    shown_in = _clip(elide_text(input_text, el.get("input")), limit) if input_text else ""
    return shown_in, _clip(elide_text(output or "", el.get("output")), limit)


def judge_messages(spec: JudgeSpec, output: str, input_text: str = "", *, mode: str = "score") -> list[dict]:
    """Messages for one judgment.  ``mode``: ``score`` (one digit), ``json`` ({"score": n}) or
    ``rationale`` (one or two sentences).

    Layout for prefix caches: what is shared comes first.  A judge with demonstrations (the
    example-based and prompt-optimized kinds) puts its block (instructions, demonstrations,
    criterion, rubric; ~500 tokens, the same for every row) before the case, so a cache serves it
    across rows; every other judge puts the case (task, input, output; the same for every
    criterion) first and its short criterion after it, so a cache serves the case across the
    criteria of one row (asked row by row, :func:`prefetch_row_major`)."""
    lo, hi = spec.scale_min, spec.scale_max
    system = "You are a careful, strict evaluator of AI-generated text."
    shown_in, shown_out = judge_case(spec, output, input_text)
    case = ([f"Input:\n{shown_in}"] if shown_in else []) + [f"Output:\n{shown_out}"]
    own = []
    if spec.instructions:
        own.append(f"Instructions: {spec.instructions.strip()}")
    if spec.demonstrations:
        own.append("For calibration, scored examples of other outputs:")
        for i, d in enumerate(spec.demonstrations, 1):
            block = f"Example {i}:\n"
            if d.get("input"):
                block += f"Input: {_clip(elide_text(d['input'], (spec.elide or {}).get('input')), MAX_DEMO_CHARS)}\n"
            block += f"Output: {_clip(d.get('output', ''), MAX_DEMO_CHARS)}\nScore: {d['score']}"
            own.append(block)
    crit = f"Criterion: {spec.criterion}"
    if spec.description:
        crit += f" — {spec.description}"
    own.append(crit)
    if spec.rubric:
        own.append("Score levels:\n" + "\n".join(f"{k}: {v}" for k, v in sorted(spec.rubric.items())))
    head = [f"Task: {spec.task}"] if spec.task else []
    if spec.demonstrations:
        parts = head + own + ["Now judge this case (not the examples above):"] + case
    else:
        parts = head + case + own
    if mode == "rationale":
        parts.append("In one or two sentences, explain how well the output meets this criterion.")
    elif mode == "json":
        parts.append(f'Rate the output on this criterion from {lo} (worst) to {hi} (best). Reply with JSON: {{"score": <integer {lo}-{hi}>}}')
    else:
        parts.append(f"Rate the output on this criterion from {lo} (worst) to {hi} (best). Answer with a single digit.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def _score_schema(lo: int, hi: int) -> dict:
    return {"type": "object", "properties": {"score": {"type": "integer", "minimum": lo, "maximum": hi}},
            "required": ["score"], "additionalProperties": False}


_DIGIT_ONLY = re.compile(r"^\s*\**\s*([0-9])\s*\**\s*\.?\s*$")


def read_score(resp: LLMResponse, lo: int = 1, hi: int = 5) -> tuple[float, dict | None]:
    """(score, digit distribution) from a reply; NaN when it cannot be read.

    Logprobs first (expected value over the scale digits of the first token, when they carry
    at least half the mass), then JSON ``{"score": n}``, then a reply that is only a digit.
    A truncated reply is read only from its logprobs."""
    if not resp.ok:
        return math.nan, None
    if resp.top_logprobs:
        first = resp.top_logprobs[0]
        probs: dict[int, float] = {}
        for tok, lp in first.items():
            t = (tok or "").strip()
            if len(t) == 1 and t.isdigit() and lo <= int(t) <= hi:
                probs[int(t)] = probs.get(int(t), 0.0) + math.exp(lp)
        mass = sum(probs.values())
        if mass >= 0.5:
            return sum(k * p for k, p in probs.items()) / mass, {str(k): round(p / mass, 4) for k, p in sorted(probs.items())}
    text = (resp.text or "").strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    if text.startswith("{"):
        try:
            v = json.loads(text).get("score")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi:
                return float(v), None
        except (ValueError, AttributeError):
            pass
        return math.nan, None
    m = _DIGIT_ONLY.match(text)
    if m and lo <= int(m.group(1)) <= hi:
        return float(m.group(1)), None
    return math.nan, None


# ---------------------------------------------------------------------------- metric

_bound_clients: dict[str, LLMClient] = {}
_bound_lock = threading.Lock()


def bind_client(client: LLMClient) -> None:
    """Make ``client`` the one used by judges whose model matches (the fit does this, so judges
    share its cache and accounting)."""
    with _bound_lock:
        _bound_clients[client.config.model] = client


def unbind_clients() -> None:
    with _bound_lock:
        _bound_clients.clear()


class LLMJudgeMetric(Metric):
    """A generated metric: one :class:`JudgeSpec` run by one judge model."""

    version = "1"
    higher_is_better = True
    needs_reference = False
    needs_input = False
    generated = True
    description = "LLM judge generated from human feedback"

    def __init__(self, **params):
        if "spec" not in params or "llm" not in params:
            raise UserError("LLMJudgeMetric needs spec= (a JudgeSpec dict) and llm= (an LLMConfig dict)")
        super().__init__(**params)
        self.spec = JudgeSpec.from_dict(params["spec"])
        self.llm_config = LLMConfig(**{k: v for k, v in params["llm"].items() if k in LLMConfig.__dataclass_fields__})
        self.name = params.get("feature") or self.spec.feature_name
        self.judge_mode = params.get("mode", "auto")  # auto | logprobs | json
        self.last_details: list[dict] = []
        self._client: LLMClient | None = None
        self._prefetched: dict[tuple[str, str], LLMResponse] = {}

    @classmethod
    def from_spec(cls, spec: JudgeSpec, llm: LLMConfig, *, feature: str | None = None, mode: str = "auto") -> LLMJudgeMetric:
        params = {"spec": spec.to_dict(), "llm": llm.public(), "mode": mode}
        if feature:
            params["feature"] = feature
        return cls(**params)

    def signature(self) -> str:
        return f"{self.name}|kind:{self.spec.kind}|model:{self.llm_config.model}|spec:{self.spec.sha()[:12]}|v:{self.version}"

    def to_spec(self) -> dict:
        return {"name": self.name, "params": dict(self.params), "signature": self.signature(), "factory": FACTORY}

    @property
    def client(self) -> LLMClient:
        if self._client is None:
            with _bound_lock:
                self._client = _bound_clients.get(self.llm_config.model)
            if self._client is None:
                self._client = LLMClient(self.llm_config)
                bind_client(self._client)
        return self._client

    @client.setter
    def client(self, value: LLMClient) -> None:
        self._client = value

    def _use_logprobs(self) -> bool:
        if self.judge_mode == "json":
            return False
        if self.judge_mode == "logprobs":
            return True
        lp = self.llm_config.logprobs
        return lp == "on" or (lp == "auto" and self.llm_config.uses_openai_http())

    def requests(self, outputs, inputs, *, count_cases: bool = True) -> list[dict]:
        """The chat requests that score ``outputs`` (with ``inputs``); ``count_cases`` False: not
        judged examples of the data (probes), left out of the token report's floor."""
        lo, hi = self.spec.scale_min, self.spec.scale_max
        usage = self.client.usage
        if usage.prefixes is not None and count_cases:  # the floor of the fit's token report: each judged case once
            for o, i in zip(outputs, inputs, strict=False):
                usage.note_case("\x1f".join(judge_case(self.spec, o, i)))
        if self._use_logprobs():
            return [{"messages": judge_messages(self.spec, o, i), "max_tokens": 1, "logprobs": True, "top_logprobs": 10}
                    for o, i in zip(outputs, inputs, strict=False)]
        return [{"messages": judge_messages(self.spec, o, i, mode="json"), "max_tokens": 16, "json_schema": _score_schema(lo, hi)}
                for o, i in zip(outputs, inputs, strict=False)]

    def _compute(self, outputs, inputs, references):
        stage = f"score:{self.spec.kind}"
        if self._prefetched and all((o, i) in self._prefetched for o, i in zip(outputs, inputs, strict=False)):
            replies = [self._prefetched[(o, i)] for o, i in zip(outputs, inputs, strict=False)]
        else:
            replies = self.client.chat_many(self.requests(outputs, inputs), stage=stage)
        self._prefetched = {}
        scores = np.full(len(outputs), np.nan)
        details = []
        unparsed = 0
        for k, r in enumerate(replies):
            s, dist = read_score(r, self.spec.scale_min, self.spec.scale_max)
            scores[k] = s
            if math.isnan(s):
                unparsed += 1 if r.ok else 0
            details.append({"score": None if math.isnan(s) else round(s, 4), "dist": dist, "reply": r.text, "error": r.error})
        if unparsed:
            self.client.usage.add(stage, parse_failures=unparsed)
        self.last_details = details
        return scores

    def rationales(self, outputs, inputs, *, max_tokens: int = 96) -> list[str | None]:
        """The judge's explanation for each example (kept as feedback in the report)."""
        reqs = [{"messages": judge_messages(self.spec, o, i, mode="rationale"), "max_tokens": max_tokens}
                for o, i in zip(outputs, inputs, strict=False)]
        return [r.text.strip() if r.ok and r.text else None for r in self.client.chat_many(reqs, stage="rationales")]


def prefetch_row_major(judges: list[LLMJudgeMetric], outputs, inputs) -> None:
    """Ask every judge about one example before moving to the next, so a server that caches
    the last prompt prefix (llama_cpp.server) reuses the example's tokens across criteria
    (OFFLINE.md: example first, criterion last).  Judges whose prompt opens with their own
    block (demonstrations: :func:`judge_messages`) are asked afterwards, each about all rows in
    a row, so the cache serves that block instead: asked between the other judges of a row, the
    example judge's ~800-token prompt was evaluated whole on every row (19 s a call with the 1.5B
    model, half a 20-minute budget; tests/benchmarks/judge_budget.py).  Replies are handed to
    the judges' next ``score`` on the same rows."""
    def norm(x):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)

    inputs = [norm(i) for i in (inputs or [""] * len(outputs))]
    outputs = [norm(o) for o in outputs]
    case_first = [j for j in judges if not j.spec.demonstrations]
    own_first = [j for j in judges if j.spec.demonstrations]
    jobs = []
    for o, i in zip(outputs, inputs, strict=False):
        for j in case_first:
            jobs.append((j, o, i, j.requests([o], [i])[0]))
    for j in own_first:
        for o, i in zip(outputs, inputs, strict=False):
            jobs.append((j, o, i, j.requests([o], [i])[0]))
    if not jobs:
        return
    client = judges[0].client
    workers = max(1, int(client.config.concurrency))

    def run(job):
        j, o, i, req = job
        return j, o, i, j.client.chat(stage=f"score:{j.spec.kind}", **req)

    if workers == 1:
        results = [run(job) for job in jobs]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(run, jobs))
    for j, o, i, r in results:
        j._prefetched[(o, i)] = r


def score_multi(specs: list[JudgeSpec], client: LLMClient, outputs, inputs, *, stage: str = "score:multi") -> dict[str, np.ndarray]:
    """Beyond the paper: all criteria of one example in a single call (JSON object with one
    integer per criterion).  Returns feature name -> scores (NaN where unreadable)."""
    keys = [f"c{i + 1}" for i in range(len(specs))]
    lo = min(s.scale_min for s in specs)
    hi = max(s.scale_max for s in specs)
    schema = {"type": "object", "properties": {k: {"type": "integer", "minimum": lo, "maximum": hi} for k in keys},
              "required": keys, "additionalProperties": False}
    crit = "\n".join(f"{k}: {s.criterion} — {s.description}" for k, s in zip(keys, specs, strict=False))
    task = specs[0].task if specs else None
    reqs = []
    for o, i in zip(outputs, inputs, strict=False):
        parts = ([f"Task: {task}"] if task else []) + ([f"Input:\n{_clip(i)}"] if i else []) + [f"Output:\n{_clip(o)}"]
        parts.append(f"Rate the output from {lo} (worst) to {hi} (best) on each criterion:\n{crit}")
        parts.append("Reply with JSON: {" + ", ".join(f'"{k}": <integer>' for k in keys) + "}")
        reqs.append({"messages": [{"role": "system", "content": "You are a careful, strict evaluator of AI-generated text."},
                                  {"role": "user", "content": "\n\n".join(parts)}],
                     "max_tokens": 12 * len(keys) + 8, "json_schema": schema})
    out = {s.feature_name: np.full(len(reqs), np.nan) for s in specs}
    unparsed = 0
    for n, r in enumerate(client.chat_many(reqs, stage=stage)):
        try:
            obj = json.loads((r.text or "").strip().strip("`").removeprefix("json")) if r.ok else None
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            unparsed += 1 if r.ok else 0
            continue
        for k, s in zip(keys, specs, strict=False):
            v = obj.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and s.scale_min <= v <= s.scale_max:
                out[s.feature_name][n] = float(v)
    if unparsed:
        client.usage.add(stage, parse_failures=unparsed)
    return out
