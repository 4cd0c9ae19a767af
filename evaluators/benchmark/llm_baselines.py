"""LLM baselines: a zero-shot LLM judge with the dataset's annotation description, and DnA-Eval
(aspects with weights proposed by the LLM, each scored by the judge, weighted sum)."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np

from ..data import Dataset
from ..judges.metric import JudgeSpec, LLMJudgeMetric
from ..llm.client import LLMCache, LLMClient, LLMConfig, Usage
from .interface import GENERIC_RUBRIC, USAGE_KEYS, Baseline, row_inputs

log = logging.getLogger("autometrics")


# --------------------------------------------------------------------------- LLM methods


def _llm_client(llm, *, cache=None, concurrency=None, timeout=None, max_retries=None):
    """An :class:`.llm.LLMClient` with its own Usage (per-method accounting).  ``cache``: a path,
    an LLMCache, ``"off"``/False, or None for the default cache."""
    cfg = llm if isinstance(llm, LLMConfig) else LLMConfig.parse(
        llm, concurrency=concurrency, timeout=timeout, max_retries=max_retries)
    if cache in ("off", False):
        c = False
    elif isinstance(cache, LLMCache):
        c = cache
    else:
        c = LLMCache(cache)
    return LLMClient(cfg, cache=c, usage=Usage())


def _usage_total(usage) -> dict:
    total = usage.to_dict()["total"]
    return {k: int(total.get(k, 0)) for k in USAGE_KEYS}


class _LLMBaseline(Baseline):
    needs_llm = True

    def __init__(self, llm, *, cache=None, concurrency=None, timeout=None, max_retries=None, judge_mode: str = "auto"):
        self.client = _llm_client(llm, cache=cache, concurrency=concurrency, timeout=timeout, max_retries=max_retries)
        self.judge_mode = judge_mode

    def usage(self):
        return _usage_total(self.client.usage)

    def _judge(self, spec, feature: str | None = None):
        j = LLMJudgeMetric.from_spec(spec, self.client.config, feature=feature, mode=self.judge_mode)
        j.client = self.client  # our cache and accounting, never a globally bound client
        return j


class LLMJudgeBaseline(_LLMBaseline):
    """Zero-shot judge on a 1-5 scale (nothing is learnt from the labels).

    ``criterion``: the annotation instructions for the target (e.g. from datasets.json); when
    None the judge rates overall quality with :data:`GENERIC_RUBRIC`.  A context's task and
    criterion are used when the constructor did not get them."""

    key = "llm_judge"

    def __init__(self, llm, *, task: str | None = None, criterion: str | None = None, **kw):
        super().__init__(llm, **kw)
        self.task = task
        self.criterion = criterion

    @property
    def title(self) -> str:
        return f"LLM-as-a-judge ({self.client.config.model})"

    def fit(self, train, y, *, context=None):
        self._check_fit_args(train, y)
        task = self.task or (context.task if context else None)
        criterion = self.criterion or (context.criterion if context else None)
        target = context.target if context else "quality"
        if criterion:
            spec = JudgeSpec(kind="single", criterion=target, description=f"as annotated by human raters: {criterion}", task=task,
                             origin={"baseline": "llm_judge", "instructions": "dataset annotation description"})
        else:
            spec = JudgeSpec(kind="single", criterion="Overall quality",
                             description="How well the output accomplishes the task for this input.", task=task,
                             rubric=dict(GENERIC_RUBRIC), origin={"baseline": "llm_judge", "instructions": "generic rubric"})
        self.spec_ = spec
        self.judge_ = self._judge(spec, feature="llm_judge")
        return self

    def predict(self, rows):
        return np.asarray(self.judge_.score(rows.outputs, inputs=row_inputs(rows)), dtype=float)

    def details(self):
        s = self.spec_
        return {"model": self.client.config.model, "criterion": s.criterion, "description": s.description,
                "rubric": s.rubric, "instructions_source": s.origin.get("instructions"),
                "scale": [s.scale_min, s.scale_max]}


_ASPECT_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*\**(?P<name>[A-Za-z][^:\n]{1,60}?)\**\s*:\s*(?P<desc>\S.*)$")
_WEIGHT = re.compile(r"(?:weight\s*[:=]?\s*)?(?P<w>\d*\.?\d+)\s*(?P<pct>%)?", re.I)


def parse_aspects(text: str | None, max_aspects: int = 5) -> list[dict]:
    """Aspects ``[{"name", "description", "weight"}]`` from a DnA proposal reply: JSON
    (``{"aspects": [...]}`` or a list) or ``Name: description`` lines, a weight in brackets
    optional.  Weights are normalised to sum 1; when any is missing or invalid all become equal.
    Returns [] when nothing can be read."""
    text = (text or "").strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    items: list[dict] = []
    obj = None
    for start, end in (("{", "}"), ("[", "]")):
        a, b = text.find(start), text.rfind(end)
        if a != -1 and b > a:
            try:
                obj = json.loads(text[a:b + 1])
                break
            except ValueError:
                continue
    if isinstance(obj, dict):
        obj = obj.get("aspects")
    if isinstance(obj, list):
        for it in obj:
            if isinstance(it, dict) and isinstance(it.get("name"), str) and it["name"].strip():
                w = it.get("weight")
                items.append({"name": it["name"].strip(), "description": str(it.get("description") or "").strip(),
                              "weight": float(w) if isinstance(w, int | float) and not isinstance(w, bool) else None})
    if not items:
        for line in text.splitlines():
            m = _ASPECT_LINE.match(line)
            if not m:
                continue
            name, desc, w = m.group("name").strip(), m.group("desc").strip(), None
            bracket = re.search(r"[(\[]([^)\]]*\d[^)\]]*)[)\]]", name + " " + desc)
            if bracket:
                wm = _WEIGHT.search(bracket.group(1))
                if wm:
                    w = float(wm.group("w")) / (100.0 if wm.group("pct") else 1.0)
                name = re.sub(r"\s*[(\[][^)\]]*[)\]]\s*", " ", name).strip()
                desc = re.sub(r"\s*[(\[][^)\]]*\d[^)\]]*[)\]]\s*", " ", desc).strip()
            items.append({"name": name, "description": desc, "weight": w})
    seen, out = set(), []
    for it in items:
        k = it["name"].lower()
        if k not in seen:
            seen.add(k)
            out.append(it)
    out = out[:max_aspects]
    if not out:
        return []
    ws = [it["weight"] for it in out]
    if any(w is None or not math.isfinite(w) or w < 0 for w in ws) or sum(ws) <= 0:
        for it in out:
            it["weight"] = 1.0 / len(out)
    else:
        s = sum(ws)
        for it in out:
            it["weight"] = it["weight"] / s
    return out


class DnAEvalBaseline(_LLMBaseline):
    """DnA-Eval: propose ``n_aspects`` weighted aspects (one LLM call per task, JSON), score each
    aspect with the judge (1-5), aggregate as the weighted mean over the aspects that could be
    read for that row (weights renormalised); NaN only when no aspect could be read."""

    key = "dna_eval"

    def __init__(self, llm, *, task: str | None = None, criterion: str | None = None, n_aspects: int = 4, **kw):
        super().__init__(llm, **kw)
        self.task = task
        self.criterion = criterion
        self.n_aspects = n_aspects
        self.notes: list[str] = []

    @property
    def title(self) -> str:
        return f"DnA-Eval ({self.client.config.model})"

    def _proposal_messages(self, task, target, criterion) -> list[dict]:
        what = f"{target}" + (f" ({criterion})" if criterion else "")
        user = (
            (f"Task: {task}\n\n" if task else "")
            + f"Human raters judged the outputs of this task for: {what}.\n\n"
            f"Decompose this judgment into {self.n_aspects} distinct, non-overlapping aspects an evaluator can check "
            "in one output, and give each a weight for how much it matters (weights sum to 1).\n"
            'Reply with JSON only: {"aspects": [{"name": "<short name>", "description": "<what a good output does>", '
            '"weight": <number>}]}'
        )
        return [{"role": "system", "content": "You design evaluation criteria for AI-generated text."},
                {"role": "user", "content": user}]

    def fit(self, train, y, *, context=None):
        self._check_fit_args(train, y)
        task = self.task or (context.task if context else None)
        criterion = self.criterion or (context.criterion if context else None)
        target = context.target if context else "overall quality"
        schema = {"type": "object", "properties": {"aspects": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string"}, "description": {"type": "string"},
                                             "weight": {"type": "number"}},
            "required": ["name", "description", "weight"], "additionalProperties": False}}},
            "required": ["aspects"], "additionalProperties": False}
        aspects, reply = [], None
        for temperature in (0.0, 0.7):  # a second, sampled try when the first reply cannot be read
            r = self.client.chat(self._proposal_messages(task, target, criterion), stage="dna:aspects", max_tokens=600,
                                 temperature=temperature, json_schema=schema)
            reply = r.text
            aspects = parse_aspects(r.text, self.n_aspects) if r.ok else []
            if aspects:
                break
            if r.ok:
                self.client.usage.add("dna:aspects", parse_failures=1)
        if not aspects:
            raise RuntimeError(f"DnA-Eval: no aspects could be read from the LLM's proposal (last reply: {str(reply)[:200]!r})")
        self.aspects_ = aspects
        self.judges_ = []
        for k, a in enumerate(aspects):
            spec = JudgeSpec(kind="single", criterion=a["name"], description=a["description"], task=task,
                             origin={"baseline": "dna_eval", "weight": a["weight"]})
            self.judges_.append(self._judge(spec, feature=f"dna.{k + 1}"))
        return self

    def aspect_scores(self, rows: Dataset) -> np.ndarray:
        """(n_rows, n_aspects) judge scores, NaN where a reply could not be read."""
        outs, ins = rows.outputs, row_inputs(rows)
        return np.column_stack([np.asarray(j.score(outs, inputs=ins), dtype=float) for j in self.judges_])

    def predict(self, rows):
        S = self.aspect_scores(rows)
        w = np.array([a["weight"] for a in self.aspects_], dtype=float)
        ok = ~np.isnan(S)
        wsum = (ok * w).sum(axis=1)
        total = np.where(ok, S, 0.0) @ w
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(wsum > 0, total / np.where(wsum > 0, wsum, 1.0), np.nan)

    def details(self):
        return {"model": self.client.config.model, "aspects": self.aspects_,
                "aggregation": "weighted mean over readable aspects", "per_instance_weights": False}
