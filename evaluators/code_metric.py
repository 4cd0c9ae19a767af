"""Code-generated metrics (the AutoMetrics paper's and EvalGen's code judges): the generator LLM
writes a small Python function ``metric(input, output, reference) -> float`` from the task, the
target and a few high- vs low-rated training examples; it runs in the sandbox of
:mod:`.sandbox` (a separate, resource-limited, unprivileged process; see there for what that
does and does not contain).

A code metric costs one LLM call to write and nothing to run: it is deterministic (same rows,
same values; fixed hash seed, no clock, no randomness importable), its source is stored in
the evaluator artifact (``autometrics score`` re-runs it through the sandbox, never in the
scoring process) and shown in the report.  A reply without usable code, a syntax error, a
refused operation or a broken limit makes a *failed candidate* with the reason, never a metric
of zeros; one row that raises or returns a non-number is a missing value (NaN), counted.

Example::

    specs = generate_code_metrics(client, "Simplify a sentence", "score", inputs, outputs, y, n=3)
    metrics = [CodeMetric.from_spec(s) for s in specs if s.ok]
    metrics[0].score(outputs, inputs=inputs)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from ..collectors.files import json_safe
from ..metricbank.base import Metric, MetricUnavailable
from ..metricbank.errors import UserError
from .judges.candidates import FunctionCandidate
from .llm.client import LLMClient
from .sandbox import (
    ALLOWED_MODULES,
    FUNCTION_NAME,
    SandboxLimits,
    SandboxResult,
    check_source,
    run_metric_code,
    sandbox_unavailable,
)
from .stats import kendall_tau

__all__ = ["CodeMetricSpec", "CodeMetric", "CodeMetricFailed", "generate_code_metrics", "code_messages", "extract_code",
           "code_metric_entry", "code_metrics_markdown", "estimate_code_calls", "code_metric_source", "CODE_FACTORY", "STAGE"]

CODE_FACTORY = "autometrics.evaluators.code_metric:CodeMetric"
STAGE = "generate:code"
_EXAMPLES = 3  # high- and low-rated examples shown per candidate
_CLIP = 400  # characters of each example text in the prompt
_SMOKE_ROWS = 16  # training rows a fresh candidate is tried on before it counts
_MAX_TOKENS = 700


def _slug(text: str, n: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", (text or "").lower()).strip("_")
    return s[:n].rstrip("_")


def _clip(text, n: int = _CLIP) -> str:
    t = ("" if text is None else str(text)).strip().replace("\n", " ")
    return t if len(t) <= n else t[:n] + " […]"


class CodeMetricFailed(RuntimeError):
    """A code metric's batch failed in the sandbox (refused operation, limit, crash); the message
    says which.  :func:`~autometrics.evaluators.features.score_metrics` turns it into a note."""


@dataclass
class CodeMetricSpec:
    name: str  # short snake_case name, e.g. "content_word_overlap"
    source: str  # the Python source defining metric(input, output, reference)
    description: str = ""  # the function's docstring: what it measures
    task: str | None = None
    target: str | None = None
    axis: str | None = None  # the criterion it was asked to measure, when one was given
    status: str = "ok"  # ok | failed
    error: str | None = None  # why it failed
    origin: dict = field(default_factory=dict)  # generator model, attempts, smoke-test figures

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CodeMetricSpec:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def sha(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    @property
    def feature_name(self) -> str:
        return f"code.{_slug(self.name, 60) or 'metric'}"

    def card(self) -> str:
        """A Metric Card (the seven MetricBank sections) for this generated code metric."""
        return "\n".join([
            f"# Metric Card: {self.name} (LLM-written code metric)",
            "", "## Metric Details",
            f"A deterministic Python function written by the generator LLM from labelled training examples. "
            f"What it measures: {self.description or '(no docstring)'}"
            + (f" Asked to measure: {self.axis}." if self.axis else ""),
            "", "## Intended Use",
            f"Task: {self.task or '(not given)'}; predicts the human rating `{self.target}` together with the other "
            "selected metrics. Valid for outputs like those it was written from.",
            "", "## Metric Implementation",
            "Runs in a sandbox process (CPU, memory, file-size and wall-clock limits, no network, no file access "
            "outside a temporary folder, import allow-list). A row that raises or returns a non-number is missing.",
            "", _fenced(self.source),
            "", "## Known Limitations",
            "Surface heuristics (lengths, overlaps, patterns) written from a handful of examples: they can track "
            "the label on these data and fail on others; check its held-out τ.",
            "", "## Related Metrics",
            "Other generated judges of this fit; the lexical metrics of MetricBank.",
            "", "## Further Reading",
            "Ryan et al., AutoMetrics (code-generated metrics); Shankar et al., Who Validates the Validators? (EvalGen).",
            "", "## Metric Card Authors",
            f"Generated automatically by autometrics-sdk ({json.dumps(self.origin.get('generator', 'generator LLM'))}).",
        ])


def _fenced(source: str) -> str:
    """A fenced Python block that the source's own backticks cannot close."""
    runs = [len(m) for m in re.findall(r"`+", source)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}python\n{source.rstrip()}\n{fence}"


# ------------------------------------------------------------------------------ prompting


def code_messages(task: str | None, target: str, high: list[tuple], low: list[tuple], *, axis: str | None = None,
                  avoid: list[str] | None = None, has_reference: bool = False) -> list[dict]:
    """The generation prompt.  ``high`` / ``low``: (input, output, reference) rows the humans rated
    high / low; ``axis``: a criterion to measure; ``avoid``: names of metrics already written."""
    def block(rows):
        out = []
        for k, (i, o, r) in enumerate(rows, 1):
            s = f"[{k}]" + (f"\nInput: {_clip(i)}" if i else "") + f"\nOutput: {_clip(o)}"
            out.append(s + (f"\nReference: {_clip(r)}" if r else ""))
        return "\n\n".join(out) or "(none)"

    modules = ", ".join(m for m in ALLOWED_MODULES if m != "__future__")
    parts = [f"Task: {task}" if task else "Task: (not described)",
             f'Humans rated outputs of this task on "{target}" (higher is better).',
             f"Outputs rated HIGH:\n\n{block(high)}", f"Outputs rated LOW:\n\n{block(low)}"]
    if axis:
        parts.append(f"Measure this property: {axis}")
    else:
        parts.append("Choose one concrete, measurable property of the text (for example word overlap with the input, "
                     "length ratio, repeated words, numbers or names kept from the input) that separates the high-rated "
                     "outputs from the low-rated ones.")
    if avoid:
        parts.append("Already written (measure something different): " + ", ".join(avoid))
    parts.append(
        f"Write one Python function that returns a number, higher for outputs humans would rate higher on \"{target}\".\n"
        "Rules:\n"
        f"- First line: a comment `# name: <short_snake_case_name>`.\n"
        f"- Signature exactly: def {FUNCTION_NAME}(input: str, output: str, reference: str | None) -> float\n"
        "- Its first statement is a one-line docstring saying what it measures.\n"
        f"- Import only from: {modules}. No numpy, no files, no network, no randomness, no clock.\n"
        "- Deterministic and fast; never raise: handle empty strings"
        + ("; reference may be None." if has_reference else "; reference is always None here.") + "\n"
        "- Reply with a single ```python code block and nothing else.")
    return [{"role": "system", "content": "You write small, deterministic Python functions that score text."},
            {"role": "user", "content": "\n\n".join(parts)}]


_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_START = re.compile(r"^(?:import |from |def |#|@)", re.M)


def extract_code(text: str | None) -> tuple[str | None, str | None]:
    """(source, None) from a reply, or (None, why not).  The first stretch of the reply between
    fence lines (or before the first, or after the last) in which a line starts ``def metric``,
    from its first code-looking line (else the first fenced block), then checked with
    :func:`~.sandbox.check_source`."""
    text = text or ""
    # the text between fence lines, in order; small models often open no fence and close one
    # (code, then a closing fence, then prose), so a segment counts when a line of it starts the function
    segments = re.split(r"^[ \t]*```[^\n]*$", text, flags=re.M)
    defining = [seg for seg in segments if re.search(rf"^def {FUNCTION_NAME}\b", seg, re.M)]
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    source = None
    if defining:
        m = _START.search(defining[0])
        source = defining[0][m.start():] if m else defining[0]
    elif blocks:
        source = blocks[0]
    if source is None:
        return None, "the reply has no Python code block"
    source = source.strip("\n").rstrip() + "\n"
    _arity, why = check_source(source)
    return (None, why) if why else (source, None)


def _name_and_doc(source: str, fallback: str) -> tuple[str, str]:
    import ast

    m = re.search(r"^#\s*name:\s*([A-Za-z][A-Za-z0-9_ -]{1,60})", source, re.M)
    doc = ""
    try:
        fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION_NAME)
        doc = next(iter((ast.get_docstring(fn) or "").strip().splitlines()), "")
    except (SyntaxError, StopIteration, ValueError):
        pass
    name = _slug(m.group(1)) if m else _slug(" ".join(doc.split()[:5]))
    return name or fallback, doc


# ------------------------------------------------------------------------------ generation


def estimate_code_calls(n: int, example_tokens: int, repairs: int = 1) -> tuple[int, int, int]:
    """(calls, prompt tokens, completion tokens) at most, for the dry-run plan."""
    calls = n * (1 + repairs)
    prompt = 6 * example_tokens + 450
    return calls, calls * prompt, calls * 350


def _first_reference(r) -> str | None:
    """One reference string per row from a string, a list of them (``Dataset.references``) or None."""
    if isinstance(r, (list, tuple)):
        r = next((x for x in r if isinstance(x, str) and x.strip()), None)
    return None if r is None or (isinstance(r, float) and math.isnan(r)) or not str(r).strip() else str(r)


def _rows_by_rating(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(y, kind="stable")
    q = max(1, len(y) // 4)
    return order[::-1][:q], order[:q]  # top and bottom quarter


def generate_code_metrics(client: LLMClient, task: str | None, target: str, inputs, outputs, y, *, n: int = 3,
                          seed: int | np.random.Generator = 0, references=None, axes: list[str] | None = None,
                          limits: SandboxLimits | None = None, repairs: int = 1, stage: str = STAGE) -> list[CodeMetricSpec]:
    """``n`` code-metric candidates written from the *training* rows (inputs, outputs, labels
    ``y``; ``references``: per row a string, a list of strings or None).  Each gets its own
    sample of high- and low-rated examples, the names of those already written, and, when
    ``axes`` is given, the criterion ``axes[k]`` to measure (e.g. the single-criterion judges'
    axes, as the AutoMetrics reference implementation's code generator does).  Each is tried in
    the sandbox on up to 16 training rows; a failure gets ``repairs`` follow-up calls with the
    reason.  Returns every candidate, failed ones with ``status="failed"`` and ``error``
    (duplicates of an earlier source fail as duplicates)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    y = np.asarray(y, dtype=float)
    inputs = ["" if i is None else str(i) for i in (inputs if inputs is not None else [""] * len(outputs))]
    outputs = ["" if o is None else str(o) for o in outputs]
    refs = [_first_reference(r) for r in (references if references is not None else [None] * len(outputs))]
    if not (len(inputs) == len(outputs) == len(refs) == len(y)):
        raise UserError(f"generate_code_metrics: {len(inputs)} inputs, {len(outputs)} outputs, {len(refs)} references "
                         f"and {len(y)} labels; pass one of each per training row")
    has_ref = any(r for r in refs)
    top, bottom = _rows_by_rating(y)
    smoke = list(dict.fromkeys([int(k) for k in np.concatenate([top[:_SMOKE_ROWS // 2], bottom[:_SMOKE_ROWS // 2]])]))
    smoke_limits = limits or SandboxLimits(cpu_seconds=10, wall_seconds=30)
    specs: list[CodeMetricSpec] = []
    seen: dict[str, str] = {}
    for k in range(n):
        hi = rng.choice(top, size=min(_EXAMPLES, len(top)), replace=False)
        lo = rng.choice(bottom, size=min(_EXAMPLES, len(bottom)), replace=False)
        axis = axes[k] if axes and k < len(axes) else None
        messages = code_messages(task, target, [(inputs[j], outputs[j], refs[j]) for j in hi],
                                 [(inputs[j], outputs[j], refs[j]) for j in lo], axis=axis,
                                 avoid=[s.name for s in specs if s.ok], has_reference=has_ref)
        spec = _one_candidate(client, messages, k, task, target, axis, smoke, inputs, outputs, refs, y,
                              smoke_limits, repairs, stage)
        if spec.ok:
            dup = seen.get(re.sub(r"\s+|#[^\n]*", "", spec.source))
            if dup:
                spec.status, spec.error = "failed", f"duplicate of {dup}"
            else:
                seen[re.sub(r"\s+|#[^\n]*", "", spec.source)] = spec.feature_name
        specs.append(spec)
    _unique_names(specs)
    return specs


def _one_candidate(client, messages, k, task, target, axis, smoke, inputs, outputs, refs, y, limits, repairs, stage):
    attempts = []
    source, why, reply = None, None, None
    for attempt in range(1 + max(0, repairs)):
        if attempt:
            messages = messages + [{"role": "assistant", "content": reply or ""},
                                   {"role": "user", "content": f"That function failed: {why}. Reply with a corrected "
                                                               "version, in a single ```python code block."}]
        r = client.chat(messages, stage=stage, max_tokens=_MAX_TOKENS)
        reply = r.text if r.ok else None
        if not r.ok:
            why = f"the LLM request failed ({r.error})"
            attempts.append(why)
            break  # the client already retried transport faults
        source, why = extract_code(reply)
        if source is not None:
            res = run_metric_code(source, [inputs[j] for j in smoke], [outputs[j] for j in smoke], [refs[j] for j in smoke],
                                  limits=limits)
            why = res.failed
            if why is None:
                break
            source = None
        attempts.append(why)
    name, doc = _name_and_doc(source or reply or "", f"code_metric_{k + 1}")
    origin = {"generator": client.config.model, "attempts": len(attempts) + (source is not None), "failures": attempts}
    if source is None:
        return CodeMetricSpec(name=name, source=_failed_source(reply), description=doc, task=task, target=target, axis=axis,
                              status="failed", error=why, origin=origin)
    vals = np.asarray(res.values, dtype=float)
    ok = ~np.isnan(vals)
    tau = kendall_tau(vals[ok], y[smoke][ok])[0] if ok.sum() >= 3 and np.unique(vals[ok]).size > 1 else math.nan
    origin["smoke"] = {"rows": len(smoke), "row_errors": res.n_row_errors, "distinct_values": int(np.unique(vals[ok]).size),
                       "tau": None if math.isnan(tau) else round(float(tau), 4), "seconds": round(res.seconds, 3)}
    return CodeMetricSpec(name=name, source=source, description=doc, task=task, target=target, axis=axis, origin=origin)


def _failed_source(reply: str | None) -> str:
    """What a failed candidate keeps for the report: its code block, or the start of the reply."""
    blocks = _FENCE.findall(reply or "")
    return (blocks[0] if blocks else (reply or ""))[:4000]


def _unique_names(specs: list[CodeMetricSpec]) -> None:
    seen: dict[str, int] = {}
    for s in specs:
        base = _slug(s.name) or "metric"
        seen[base] = seen.get(base, 0) + 1
        s.name = base if seen[base] == 1 else f"{base}_{seen[base]}"


# ------------------------------------------------------------------------------ the metric


class CodeMetric(Metric):
    """A generated code metric: one :class:`CodeMetricSpec` run in the sandbox.  Rebuilt from
    the artifact by ``CodeMetric(**params)`` (params: ``spec``, optional ``limits`` and
    ``feature``), so scoring new data re-runs the stored source through the sandbox."""

    version = "1"
    higher_is_better = True
    needs_reference = False
    needs_input = False
    generated = True
    description = "Python metric written by the generator LLM, run in a sandbox"

    def __init__(self, **params):
        if "spec" not in params:
            raise UserError("CodeMetric needs spec= (a CodeMetricSpec dict with the source)")
        super().__init__(**params)
        self.spec = CodeMetricSpec.from_dict(params["spec"])
        if not self.spec.ok:
            raise UserError(f"code metric {self.spec.name!r} failed when it was generated ({self.spec.error}); it cannot score")
        self.limits = SandboxLimits.from_dict(params.get("limits"))
        self.name = params.get("feature") or self.spec.feature_name
        self.last_result: SandboxResult | None = None

    @classmethod
    def from_spec(cls, spec: CodeMetricSpec, *, feature: str | None = None, limits: SandboxLimits | None = None) -> CodeMetric:
        params = {"spec": spec.to_dict()}
        if feature:
            params["feature"] = feature
        if limits is not None:
            params["limits"] = limits.to_dict()
        return cls(**params)

    def signature(self) -> str:
        return f"{self.name}|kind:code|source:{self.spec.sha()[:12]}|v:{self.version}"

    def to_spec(self) -> dict:
        return {"name": self.name, "params": dict(self.params), "signature": self.signature(), "factory": CODE_FACTORY}

    def check_available(self) -> None:
        why = sandbox_unavailable()
        if why:
            raise MetricUnavailable(why)

    def _compute(self, outputs, inputs, references):
        refs = [r[0] if r else None for r in references]
        res = run_metric_code(self.spec.source, inputs, outputs, refs, limits=self.limits)
        self.last_result = res
        if res.failed:
            raise CodeMetricFailed(f"code metric {self.name} failed in the sandbox: {res.failed}")
        return np.asarray(res.values, dtype=float)


def code_metric_source(ctx, *, n: int = 2) -> list:
    """A candidate source for ``LLMOptions.candidate_sources`` (:mod:`.candidates`): ``n`` code
    metrics written by ``ctx.generator`` from the training rows only (and, when given, measuring
    the generated judges' criteria ``ctx.axes``), each a :class:`~.candidates.FunctionCandidate`
    of kind ``code`` that costs no tokens to score.  A candidate that failed when it was written
    comes with its ``error`` set (screening reports it as failed, with the reason); each carries
    its ``spec`` for the artifact.  The sandbox runs once over every labelled row, on first use."""
    why = sandbox_unavailable()
    if why:
        ctx.echo(f"note: no code metrics: {why}")
        return []
    tr = np.asarray(ctx.train_pos, dtype=int)
    refs = ctx.references if ctx.references is not None else [None] * len(ctx.outputs)
    specs = generate_code_metrics(ctx.generator, ctx.task, ctx.target, [ctx.inputs[p] for p in tr],
                                  [ctx.outputs[p] for p in tr], np.asarray(ctx.y, dtype=float)[tr], n=n, seed=ctx.seed,
                                  references=[refs[p] for p in tr], axes=list(ctx.axes) or None)
    out = []
    for spec in specs:
        if not spec.ok:
            cand = FunctionCandidate(spec.feature_name, "code", lambda pos: np.full(len(pos), np.nan), cost_per_row=0.0)
            cand.error = f"the written code failed: {spec.error}"
        else:
            metric = CodeMetric.from_spec(spec)
            cand = FunctionCandidate(metric.name, "code", _all_rows_once(metric, ctx), metric=metric, cost_per_row=0.0)
        cand.spec = spec
        out.append(cand)
    ok = sum(s.ok for s in specs)
    ctx.echo(f"{len(specs)} code metrics written, {ok} ran on the smoke-test rows"
             + "".join(f"; {s.feature_name} failed: {s.error}" for s in specs if not s.ok))
    return out


def _all_rows_once(metric: CodeMetric, ctx):
    """``fn(positions)`` for a FunctionCandidate: one sandbox run over every labelled row the
    first time (a process per chunk of screening rows would cost more than the metric), then
    lookups; a failed run raises :class:`CodeMetricFailed` (the candidate fails with it)."""
    cache: dict[str, np.ndarray] = {}

    def fn(positions):
        if "values" not in cache:
            cache["values"] = np.asarray(metric.score(list(ctx.outputs), inputs=list(ctx.inputs), references=ctx.references),
                                         dtype=float)
        return cache["values"][np.asarray(positions, dtype=int)]

    return fn


# ------------------------------------------------------------------------------ artifact and report


def code_metric_entry(spec: CodeMetricSpec, *, feature: str | None = None, metric: CodeMetric | None = None,
                      selected: bool = False, stats: dict | None = None) -> dict:
    """One ``code_metrics`` entry of the evaluator artifact (JSON-safe): the spec with its full
    source, its card, whether it was selected, the last scoring run's row errors and ``stats``
    (e.g. ``tau_train``, ``tau_test``, ``missing`` from the fit's candidate table)."""
    entry = {"feature": feature or (metric.name if metric else spec.feature_name), "name": spec.name,
             "description": spec.description, "axis": spec.axis, "status": spec.status, "error": spec.error,
             "source": spec.source, "sha256": spec.sha(), "selected": bool(selected), "spec": spec.to_dict(),
             "card": spec.card() if spec.ok else None,
             "scoring": metric.last_result.to_dict() if metric is not None and metric.last_result is not None else None}
    entry.update(stats or {})
    return json_safe(entry)


def _num(v) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"


def code_metrics_markdown(entries: list[dict], weights: dict[str, float] | None = None, level: int = 2) -> list[str]:
    """The report section: one table row per candidate (status, τ, weight, failed rows) and
    each candidate's source in a fenced block, with the reason when it failed."""
    if not entries:
        return []
    h = "#" * level
    weights = weights or {}
    n_ok = sum(e["status"] == "ok" for e in entries)
    lines = ["", f"{h} Code metrics ({len(entries)} written, {n_ok} ran)", "",
             "Python functions written by the generator LLM and run in a sandbox process (CPU, memory and wall-clock "
             "limits, no network, no file access outside a temporary folder, import allow-list). A row that raised "
             "or returned a non-number is missing.", "",
             "| metric | measures | status | τ train | τ test | weight | failed rows |", "|---|---|---|---:|---:|---:|---:|"]
    for e in entries:
        w = weights.get(e["feature"])
        status = "selected" if e.get("selected") else ("ok" if e["status"] == "ok" else "failed")
        failed_rows = (e.get("scoring") or {}).get("row_errors", "–")
        desc = (e.get("description") or "").replace("|", "\\|")
        lines.append(f"| `{e['feature']}` | {desc} | {status} | {_num(e.get('tau_train'))} | {_num(e.get('tau_test'))} | "
                     f"{'' if w is None else f'{w:+.4f}'} | {failed_rows} |")
    for e in entries:
        lines += ["", f"{h}# `{e['feature']}`{' (selected)' if e.get('selected') else ''}", ""]
        if e["status"] != "ok":
            lines += [f"**Failed:** {e.get('error')}", ""]
        elif e.get("axis"):
            lines += [f"Asked to measure: {e['axis']}", ""]
        errors = (e.get("scoring") or {}).get("errors") or {}
        if errors:
            lines += ["Row errors: " + "; ".join(f"{msg} ({k}×)" for msg, k in errors.items()), ""]
        lines.append(_fenced(e.get("source") or "# (no code in the reply)"))
    return lines
