"""Robustness of an evaluator (AutoMetrics paper, §3.2): *sensitivity* to outputs made worse and
*stability* under changes that keep the meaning.

Perturbations of the outputs of a data sample:

- meaning-preserving (stability): ``reorder_sentences`` and ``synonyms`` (rule-based; synonyms
  from an offline WordNet 3.0 folder, e.g. Debian's ``wordnet-base``, found as METEOR finds it),
  ``paraphrase`` and ``style`` (LLM);
- degrading (sensitivity): ``truncate``, ``drop_sentences`` and ``shuffle_words`` (rule-based,
  no LLM needed), ``llm_errors`` (the LLM introduces errors) and ``llm_omit`` (the LLM removes
  the key content).

Definitions (scores oriented so that higher means better):

- **sensitivity** = the share of (row, degrading perturbation) pairs whose perturbed output the
  scorer rates strictly *lower* than the original (a tie is not a detection), with a Wilson 95 %
  interval.  ``mean Δ`` beside it is the mean normalised change (perturbed − original), the
  quantity the AutoMetrics reference implementation reports as sensitivity.
- **stability** = 1 − mean |Δ| over (row, meaning-preserving perturbation) pairs, where every
  score is normalised as ``(s − min) / (max − min)`` with the minimum and maximum of the
  scorer's scores on the *original* outputs of the sample, then clipped to [0, 1] (so a
  perturbed score outside the originals' range counts as at most a full-range change).  1 means
  the score never moved; 95 % percentile-bootstrap interval over pairs.

A perturbation that does not apply (one sentence cannot be reordered), an LLM reply that fails
or cannot be read, or one that returns the text unchanged is a missing pair: excluded and
counted, never scored as 0.  A scorer's missing score (NaN) also excludes the pair.

Perturbations are cached on disk (SQLite; default next to the LLM cache, override with
``$AUTOMETRICS_PERTURBATION_CACHE`` or ``cache=``) keyed by sha256 of (output text, kind,
generator), where the generator names the rule and its seed or the LLM and prompt version.  A
second run with the same cache makes no LLM call.  Only successful LLM perturbations are
cached, so failed ones are retried on the next run.

Example::

    from autometrics.evaluators.analysis.robustness import run_robustness
    rob = run_robustness("simpeval.csv", {"evaluator": result.evaluator, "BLEU": get_metric("BLEU")}, n=40)
    print(rob.summary)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...collectors.files import json_safe
from ...metricbank import Metric, get_metric
from ...metricbank.errors import UserError
from ..data import Dataset, load_dataset
from ..fit import SCORE_COLUMN, Evaluator, FitResult
from .perturb import (  # noqa: F401  (re-exported)
    PERTURBATIONS,
    Perturbation,
    PerturbationCache,
    Perturbed,
    Perturber,
    default_cache_path,
)

__all__ = [
    "PERTURBATIONS",
    "Perturbation",
    "PerturbationCache",
    "Perturber",
    "RobustnessResult",
    "as_scorer",
    "best_metric_scorer",
    "default_cache_path",
    "markdown_section",
    "run_robustness",
    "sensitivity",
    "stability",
]

log = logging.getLogger("autometrics")


# --------------------------------------------------------------------------- the measures


def _bounds(original) -> tuple[float, float]:
    o = np.asarray(original, dtype=float)
    o = o[np.isfinite(o)]
    if not len(o):
        return math.nan, math.nan
    return float(o.min()), float(o.max())


def _normalise(values, lo: float, hi: float) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo <= 1e-12:
        return np.full(v.shape, np.nan)
    return np.clip((v - lo) / (hi - lo), 0.0, 1.0)


def _wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def sensitivity(original, degraded, *, bounds: tuple[float, float] | None = None) -> dict:
    """Share of pairs with ``degraded < original`` (ties are not detections) with a Wilson 95 %
    interval, and the mean normalised change (``bounds``: the originals' min/max; default: of
    ``original``).  Pairs with a NaN on either side are excluded."""
    o = np.asarray(original, dtype=float)
    d = np.asarray(degraded, dtype=float)
    ok = np.isfinite(o) & np.isfinite(d)
    n = int(ok.sum())
    lo, hi = bounds if bounds is not None else _bounds(o)
    if not n:
        return {"n": 0, "value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "mean_delta": math.nan}
    k = int((d[ok] < o[ok]).sum())
    ci = _wilson(k, n)
    delta = _normalise(d[ok], lo, hi) - _normalise(o[ok], lo, hi)
    return {"n": n, "value": k / n, "ci_low": ci[0], "ci_high": ci[1],
            "mean_delta": float(np.mean(delta)) if np.isfinite(delta).all() else math.nan}


def stability(original, perturbed, *, bounds: tuple[float, float] | None = None, n_boot: int = 1000,
              seed: int = 0) -> dict:
    """1 − mean |Δ| of min/max-normalised scores (``bounds``: the originals' min and max;
    default: of ``original``), normalised values clipped to [0, 1]; percentile-bootstrap 95 %
    interval over pairs.  NaN when the originals are constant (no scale to normalise by)."""
    o = np.asarray(original, dtype=float)
    p = np.asarray(perturbed, dtype=float)
    ok = np.isfinite(o) & np.isfinite(p)
    n = int(ok.sum())
    lo, hi = bounds if bounds is not None else _bounds(o)
    delta = np.abs(_normalise(p[ok], lo, hi) - _normalise(o[ok], lo, hi))
    if not n or not np.isfinite(delta).all():
        return {"n": n, "value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "mean_delta": math.nan}
    value = 1.0 - float(delta.mean())
    ci_low = ci_high = math.nan
    if n_boot > 0 and n > 1:
        rng = np.random.default_rng(seed)
        boots = 1.0 - delta[rng.integers(0, n, (n_boot, n))].mean(axis=1)
        ci_low, ci_high = (float(x) for x in np.percentile(boots, [2.5, 97.5]))
    signed = _normalise(p[ok], lo, hi) - _normalise(o[ok], lo, hi)
    return {"n": n, "value": value, "ci_low": ci_low, "ci_high": ci_high, "mean_delta": float(signed.mean())}


# ------------------------------------------------------------------------------ scorers

Scorer = Callable[[list[str], "list[str] | None", "list[list[str]] | None"], Sequence[float]]


def _rows(outputs, inputs, references):
    """A Dataset of unlabelled rows with fresh ids (baselines look rows up by id: a perturbed
    output must never be mistaken for a row they were fitted on)."""
    n = len(outputs)
    tag = hashlib.sha256(json.dumps([outputs, inputs, references], ensure_ascii=False).encode()).hexdigest()[:10]
    frame = pd.DataFrame({
        "id": [f"robustness-{tag}-{i}" for i in range(n)],
        "input": list(inputs) if inputs is not None else [""] * n,
        "output": list(outputs),
        "references": [list(r) for r in references] if references is not None else [[] for _ in range(n)],
    })
    frame["group"] = frame["input"] if inputs is not None else frame["id"]
    return Dataset(frame=frame, targets=[], labels={}, source="<robustness>",
                   columns={"input": "input" if inputs is not None else None, "output": "output",
                            "references": ["references"] if references is not None else [], "id": "id", "group": None},
                   has_references=references is not None, has_input=inputs is not None)


def as_scorer(obj, *, feature: str | None = None, sign: float | None = None) -> tuple[Scorer, dict]:
    """A callable ``scorer(outputs, inputs, references) -> scores`` (higher = better) from:
    a fitted :class:`~.fit.Evaluator` or :class:`~.fit.FitResult`; a MetricBank ``Metric``
    (``feature`` picks a sub-score; lower-is-better metrics are negated unless ``sign`` is
    given, e.g. the sign a fit chose from the data); a baseline from
    :mod:`.baselines` (anything with ``fit`` and ``predict(rows)``); or a plain callable.
    Returns (scorer, info) where info says what it needs."""
    if isinstance(obj, FitResult):
        obj = obj.evaluator
    if isinstance(obj, Evaluator):
        ev = obj

        def score_ev(outputs, inputs, references):
            return ev.score_texts(outputs, inputs, references)[SCORE_COLUMN].to_numpy(dtype=float)

        return score_ev, {"kind": "evaluator"}
    if isinstance(obj, Metric):
        metric = obj
        names = metric.feature_names()
        name = feature or names[0]
        if name not in names:
            raise UserError(f"{metric.name} has no feature {name!r}; it has {names}")
        if sign is None:
            sign = 1.0 if metric.feature_higher_is_better()[names.index(name)] else -1.0

        def score_metric(outputs, inputs, references):
            vals = metric.score_all(outputs, inputs=inputs, references=references)
            return sign * np.asarray(vals[name], dtype=float)

        return score_metric, {"kind": "metric", "feature": name, "sign": sign,
                              "needs_reference": metric.needs_reference, "needs_input": metric.needs_input}
    if hasattr(obj, "predict") and hasattr(obj, "fit"):
        model = obj

        def score_baseline(outputs, inputs, references):
            return np.asarray(model.predict(_rows(outputs, inputs, references)), dtype=float)

        return score_baseline, {"kind": "baseline", "title": getattr(obj, "title", type(obj).__name__)}
    if callable(obj):
        return obj, {"kind": "callable"}
    raise TypeError(f"cannot score with {type(obj).__name__}: pass an Evaluator, FitResult, Metric, baseline or callable")


def best_metric_scorer(evaluator) -> tuple[str, Scorer] | None:
    """The fit's best single existing metric (chosen on train, with the sign the fit gave it) as
    a scorer, to compare the evaluator's robustness with; None when the fit has none or it
    cannot be built here."""
    best = (evaluator.statistics or {}).get("best_single_metric")
    if not best:
        return None
    feature = best["feature"]
    try:
        metric = get_metric(feature.split(".", 1)[0])
        fn, _ = as_scorer(metric, feature=feature, sign=float(best.get("sign", 1.0)))
    except Exception as exc:  # a metric that cannot be rebuilt only loses the comparison row
        log.warning("best single metric %s unavailable for robustness: %s", feature, exc)
        return None
    return f"best single metric ({feature})", fn


# --------------------------------------------------------------------------------- driver


@dataclass
class RobustnessResult:
    """``table``: one row per (scorer, perturbation kind); ``summary``: one row per scorer with
    sensitivity pooled over the degrading kinds and stability over the meaning-preserving ones."""

    table: pd.DataFrame
    summary: pd.DataFrame
    perturbations: dict  # kind -> {group, method, generator, counts by status}
    examples: list[dict]
    settings: dict
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return json_safe({"table": self.table.to_dict(orient="records"), "summary": self.summary.to_dict(orient="records"),
                       "perturbations": self.perturbations, "examples": self.examples, "settings": self.settings,
                       "notes": self.notes, "seconds": round(self.seconds, 2)})

    def markdown(self, level: int = 2) -> str:
        return "\n".join(markdown_section(self.to_dict(), level=level)) + "\n"


def _load_rows(data, *, input_col="input", output_col="output", reference_cols=None, id_col="id"):
    if isinstance(data, Dataset):
        return data
    return load_dataset(data, None, input_col=input_col, output_col=output_col, reference_cols=reference_cols,
                        id_col=id_col, require_target=False)


def run_robustness(
    data,
    scorers,
    *,
    n: int = 40,
    seed: int = 0,
    kinds: Sequence[str] | None = None,
    llm=None,
    cache=None,
    llm_cache=None,
    ids: Sequence[str] | None = None,
    perturber: Perturber | None = None,
    n_boot: int = 1000,
    echo=lambda *a, **k: None,
    **columns,
) -> RobustnessResult:
    """Perturb the outputs of a sample of ``data`` (at most ``n`` rows, seeded; only rows whose
    id is in ``ids`` when given) and measure each scorer's sensitivity and stability.

    ``scorers``: a name -> scorer mapping, or a list (named by position); each entry anything
    :func:`as_scorer` takes.  ``kinds`` default: every rule-based kind that can run here, plus
    the LLM kinds when ``llm`` (or a ``perturber`` with an LLM) is given.  ``columns``:
    ``input_col``, ``output_col``, ``reference_cols``, ``id_col`` as for :func:`~.data.load_dataset`."""
    started = time.perf_counter()
    ds = _load_rows(data, **columns)
    notes: list[str] = []
    pos = np.arange(len(ds))
    if ids is not None:
        wanted = {str(i) for i in ids}
        pos = np.array([i for i, x in enumerate(ds.frame["id"].astype(str)) if x in wanted], dtype=int)
    if len(pos) > n:
        pos = np.sort(np.random.default_rng(seed).choice(pos, size=n, replace=False))
    if not len(pos):
        raise UserError("no rows to perturb (empty sample)")
    rows = ds.subset(pos)
    outputs = rows.outputs
    inputs = rows.inputs if rows.has_input else None
    refs = rows.references

    pert = perturber or Perturber(llm, cache=cache, seed=seed, llm_cache=llm_cache)
    if kinds is None:
        kinds = [k for k in PERTURBATIONS if PERTURBATIONS[k].method == "rule" or pert.client is not None]
    kinds = list(kinds)
    perturbed: dict[str, list[Perturbed]] = {}
    info: dict[str, dict] = {}
    for kind in kinds:
        reason = pert.unavailable_reason(kind)
        p = PERTURBATIONS[kind]
        if reason:
            notes.append(f"{kind}: skipped, {reason}")
            info[kind] = {"group": p.group, "method": p.method, "description": p.description, "skipped": reason}
            continue
        echo(f"robustness: perturbing {len(outputs)} outputs ({kind}) ...")
        perturbed[kind] = pert.perturb(outputs, kind)
        counts = Counter(x.status for x in perturbed[kind])
        info[kind] = {"group": p.group, "method": p.method, "description": p.description,
                      "generator": pert.generator(kind), "counts": dict(counts)}
        if counts.get("failed"):
            notes.append(f"{kind}: {counts['failed']} LLM perturbation(s) failed or were unreadable: missing, excluded")

    examples = []
    for kind, items in perturbed.items():
        for o, x in zip(outputs, items, strict=True):
            if x.status == "ok":
                examples.append({"kind": kind, "original": o, "perturbed": x.text})
                break

    if isinstance(scorers, dict):
        named = list(scorers.items())
    else:
        named = [(f"scorer {i + 1}", s) for i, s in enumerate(scorers)]

    # one batch per scorer: the originals, then every usable perturbation (corpus-level metrics
    # see one corpus)
    batch_out, batch_row, batch_kind = list(outputs), list(range(len(outputs))), [None] * len(outputs)
    for kind, items in perturbed.items():
        for i, x in enumerate(items):
            if x.status == "ok":
                batch_out.append(x.text)
                batch_row.append(i)
                batch_kind.append(kind)
    b_inputs = [inputs[i] for i in batch_row] if inputs is not None else None
    b_refs = [refs[i] for i in batch_row] if refs is not None else None
    kind_arr = np.array(batch_kind, dtype=object)
    row_arr = np.array(batch_row)

    table, summary = [], []
    for name, obj in named:
        try:
            fn, sinfo = as_scorer(obj)
        except (TypeError, ValueError) as exc:
            notes.append(f"{name}: skipped ({exc})")
            continue
        if sinfo.get("needs_reference") and refs is None:
            notes.append(f"{name}: skipped, it needs references and the data has none")
            continue
        echo(f"robustness: scoring {len(batch_out)} texts with {name} ...")
        try:
            scores = np.asarray(fn(batch_out, b_inputs, b_refs), dtype=float).reshape(-1)
        except Exception as exc:  # one scorer failing must not lose the others
            log.warning("robustness scorer %s failed: %s", name, exc, exc_info=True)
            notes.append(f"{name}: failed ({type(exc).__name__}: {exc})")
            continue
        if len(scores) != len(batch_out):
            notes.append(f"{name}: returned {len(scores)} scores for {len(batch_out)} texts; skipped")
            continue
        orig = scores[: len(outputs)]
        bounds = _bounds(orig)
        if not (np.isfinite(bounds[0]) and bounds[1] > bounds[0]):
            notes.append(f"{name}: constant (or missing) scores on the originals: stability is undefined")
        pooled: dict[str, tuple[list, list]] = {"sensitivity": ([], []), "stability": ([], [])}
        for kind in perturbed:
            p = PERTURBATIONS[kind]
            m = kind_arr == kind
            o_k = orig[row_arr[m]]
            s_k = scores[m]
            if p.group == "sensitivity":
                r = sensitivity(o_k, s_k, bounds=bounds)
            else:
                r = stability(o_k, s_k, bounds=bounds, n_boot=n_boot, seed=seed)
            pooled[p.group][0].extend(o_k.tolist())
            pooled[p.group][1].extend(s_k.tolist())
            excluded = len(outputs) - r["n"]
            table.append({"scorer": name, "kind": kind, "group": p.group, "method": p.method, "n": r["n"],
                          "excluded": excluded, "value": r["value"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                          "mean_delta": r["mean_delta"]})
        sens = sensitivity(*pooled["sensitivity"], bounds=bounds)
        stab = stability(*pooled["stability"], bounds=bounds, n_boot=n_boot, seed=seed)
        summary.append({"scorer": name, "sensitivity": sens["value"], "sensitivity_ci_low": sens["ci_low"],
                        "sensitivity_ci_high": sens["ci_high"], "n_sensitivity": sens["n"],
                        "stability": stab["value"], "stability_ci_low": stab["ci_low"],
                        "stability_ci_high": stab["ci_high"], "n_stability": stab["n"],
                        "score_min": bounds[0], "score_max": bounds[1]})
    settings = {"n_rows": len(outputs), "n_requested": n, "seed": seed, "kinds": kinds,
                "from_ids": ids is not None, "cache": str(pert.cache.path) if pert.cache is not None else None,
                "cache_hits": pert.cache_hits, "llm_requests": pert.llm_requests,
                "llm": pert.client.config.model if pert.client is not None else None}
    return RobustnessResult(pd.DataFrame(table), pd.DataFrame(summary), info, examples, settings, notes,
                            time.perf_counter() - started)


# ------------------------------------------------------------------------------ report


def _f(v, d: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{d}f}"


def _ci(lo, hi) -> str:
    return "" if lo is None or hi is None else f" [{_f(lo)}, {_f(hi)}]"


def _short(text: str, k: int = 220) -> str:
    t = " ".join(str(text).split()).replace("|", "\\|")
    return t if len(t) <= k else t[: k - 1] + "…"


def _excerpts(a: str, b: str, before: int = 6, k: int = 200) -> tuple[str, str]:
    """Both texts from a few words before their first difference, so the change is visible."""
    wa, wb = str(a).split(), str(b).split()
    i = next((j for j, (x, y) in enumerate(zip(wa, wb, strict=False)) if x != y), min(len(wa), len(wb)))
    start = max(0, i - before)
    lead = "…" if start else ""
    return lead + _short(" ".join(wa[start:]), k), lead + _short(" ".join(wb[start:]), k)


def markdown_section(d: dict, level: int = 2) -> list[str]:
    """The report's Robustness section from :meth:`RobustnessResult.to_dict` (empty if None).
    The HTML report renders it with ``report.safe_markdown`` (raw HTML in example texts stays text)."""
    if not d:
        return []
    h = "#" * level
    s = d["settings"]
    lines = ["", f"{h} Robustness", "",
             f"{s['n_rows']} outputs{' of the held-out rows' if s.get('from_ids') else ''} (seed {s['seed']}) perturbed; "
             "**sensitivity** = share of degraded outputs scored lower than the original (Wilson 95% CI); **stability** = "
             "1 − mean |Δ| under meaning-preserving changes, scores normalised by the min/max of the scorer's scores on the "
             "originals and clipped to [0, 1] (bootstrap 95% CI). Missing perturbations are excluded, never scored. "
             "AutoMetrics paper §3.2.", "",
             "| scorer | sensitivity ↑ | n | stability ↑ | n |", "|---|---:|---:|---:|---:|"]
    for r in d["summary"]:
        lines.append(f"| {r['scorer']} | {_f(r['sensitivity'])}{_ci(r['sensitivity_ci_low'], r['sensitivity_ci_high'])} | "
                     f"{r['n_sensitivity']} | {_f(r['stability'])}{_ci(r['stability_ci_low'], r['stability_ci_high'])} | "
                     f"{r['n_stability']} |")
    lines += ["", "| scorer | perturbation | kind | by | n | excluded | value | mean Δ (normalised) |",
              "|---|---|---|---|---:|---:|---:|---:|"]
    for r in d["table"]:
        lines.append(f"| {r['scorer']} | `{r['kind']}` | {r['group']} | {r['method']} | {r['n']} | {r['excluded']} | "
                     f"{_f(r['value'])}{_ci(r['ci_low'], r['ci_high'])} | {_f(r['mean_delta'])} |")
    lines += ["", "| perturbation | what it does | produced | not applicable | unchanged | failed |", "|---|---|---:|---:|---:|---:|"]
    for kind, p in d["perturbations"].items():
        if p.get("skipped"):
            lines.append(f"| `{kind}` | {p['description']} | skipped: {p['skipped']} | | | |")
            continue
        c = p.get("counts", {})
        lines.append(f"| `{kind}` | {p['description']} | {c.get('ok', 0)} | {c.get('not_applicable', 0)} | "
                     f"{c.get('unchanged', 0)} | {c.get('failed', 0)} |")
    if d.get("examples"):
        lines += ["", "Examples (first produced perturbation of each kind):", ""]
        for e in d["examples"]:
            o, p = _excerpts(e["original"], e["perturbed"])
            lines.append(f"- `{e['kind']}`: “{o}” → “{p}”")
    for n in d.get("notes") or []:
        lines.append(f"- note: {n}")
    lines += ["", f"Perturbation cache: {s.get('cache') or 'off'} ({s.get('cache_hits', 0)} hits, "
              f"{s.get('llm_requests', 0)} LLM requests); {d.get('seconds')} s."]
    return lines
