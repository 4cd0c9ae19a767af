"""The evaluator artifact: a fitted, interpretable evaluator as plain JSON, and how it scores.

An :class:`Evaluator` holds metric specs and signatures, imputation values, standardisation,
weights, intercept and statistics.  It loads and scores new data with numpy alone (no training
data, no scikit-learn objects).  :meth:`Evaluator.contributions` / :meth:`Evaluator.predict`
are the one place its formula ``score = intercept + sum_j w_j * z_j`` is written; online scoring,
the reward and the reports read contributions from there.

:func:`score_metrics` scores a batch with a list of metrics (used by the fit and by scoring).

Example::

    ev = Evaluator.load("out/evaluator.json")
    ev.score("new.csv")                      # rows + autometrics_score + one column per metric
    ev.contributions(ev.score_texts(outs))   # w_j * z_j per row and metric
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
from autometrics.collectors.files import atomic_write_text, dumps
from autometrics.evaluators.data import DataError, load_dataset, read_table
from autometrics.evaluators.scoring import metric_from_artifact_spec, score_metrics
from autometrics.metricbank import Metric

__all__ = ["Evaluator", "score_metrics", "load_evaluator", "ARTIFACT_FORMAT", "ARTIFACT_VERSION", "SCORE_COLUMN"]

log = logging.getLogger("autometrics")

ARTIFACT_FORMAT = "autometrics.evaluator"
ARTIFACT_VERSION = 1
SCORE_COLUMN = "autometrics_score"


class Evaluator:
    """A fitted, interpretable evaluator: ``score = intercept + sum_j w_j * z_j`` where ``z_j`` is
    metric j standardised with the training mean/std (missing values imputed with the training
    median)."""

    def __init__(self, artifact: dict):
        if artifact.get("format") != ARTIFACT_FORMAT:
            raise ValueError(f"not an autometrics evaluator artifact (format={artifact.get('format')!r})")
        if int(artifact.get("format_version", 0)) > ARTIFACT_VERSION:
            raise ValueError(
                f"evaluator format version {artifact['format_version']} is newer than this package supports "
                f"({ARTIFACT_VERSION}); upgrade autometrics-sdk"
            )
        self.artifact = artifact

    # ------------------------------------------------------------------ io
    @classmethod
    def load(cls, path) -> Evaluator:
        path = Path(path)
        if path.is_dir():
            path = path / "evaluator.json"
        try:
            return cls(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"no evaluator at {path}; pass the evaluator.json written by `autometrics fit`") from exc

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, dumps(self.artifact, indent=2) + "\n")
        return path

    # ------------------------------------------------------------ properties
    @property
    def target(self) -> str:
        return self.artifact["target"]

    @property
    def features(self) -> list[dict]:
        return self.artifact["features"]

    @property
    def statistics(self) -> dict:
        return self.artifact["statistics"]

    def describe(self) -> str:
        terms = " ".join(f"{'+' if f['weight'] >= 0 else '-'} {abs(f['weight']):.3g}*z({f['feature']})" for f in self.features)
        return f"{self.target} ~ {self.artifact['intercept']:.3g} {terms}"

    # --------------------------------------------------------------- scoring
    def _metrics(self) -> list[Metric]:
        seen: dict[str, Metric] = {}
        for f in self.features:
            spec = f["metric"]
            if spec["signature"] not in seen:
                seen[spec["signature"]] = metric_from_artifact_spec(spec)
        return list(seen.values())

    def score_texts(self, outputs, inputs=None, references=None, *, progress: bool = False) -> pd.DataFrame:
        """Score raw lists; returns ``autometrics_score`` plus one column per selected metric."""
        outputs = list(outputs)
        feats, _, notes = score_metrics(self._metrics(), outputs, None if inputs is None else list(inputs), references, progress=progress)
        missing = [f["feature"] for f in self.features if f["feature"] not in feats.columns]
        if missing:
            raise RuntimeError(f"cannot score: metric(s) {', '.join(missing)} could not run here: {'; '.join(notes)}")
        out = pd.DataFrame({f["feature"]: feats[f["feature"]].to_numpy(dtype=float) for f in self.features},
                           index=range(len(outputs)))
        out.insert(0, SCORE_COLUMN, self.predict(out))
        return out

    # ------------------------------------------------------------ the formula
    def contributions(self, values) -> pd.DataFrame:
        """Per-row contribution ``w_j * z_j`` of each selected metric, from raw metric values
        (a frame or mapping with one column per feature; missing values imputed with the
        training median).  ``predict`` is the intercept plus their row sums: the one place the
        evaluator's formula is written."""
        cols = {}
        for f in self.features:
            raw = pd.to_numeric(pd.Series(np.asarray(values[f["feature"]], dtype=object).ravel()), errors="coerce").to_numpy(dtype=float)
            filled = np.where(np.isnan(raw), f["impute"], raw)
            cols[f["feature"]] = f["weight"] * (filled - f["mean"]) / f["scale"]
        index = values.index if isinstance(values, pd.DataFrame) else None
        return pd.DataFrame(cols, index=index)

    def predict(self, values, *, clip: bool = True) -> np.ndarray:
        """The evaluator's score from raw metric values (see :meth:`contributions`), kept within
        the training labels' range by :func:`soft_clip` (a prediction of 13 on a 1-5 scale means
        nothing more than "5"); ``clip=False`` gives the raw linear value."""
        contrib = self.contributions(values)
        raw = float(self.artifact["intercept"]) + contrib.to_numpy(dtype=float).sum(axis=1)
        lo, hi = self.label_range
        return soft_clip(raw, lo, hi) if clip and lo is not None and hi is not None else raw

    @property
    def label_range(self) -> tuple[float | None, float | None]:
        """(min, max) of the training labels, as stored in the artifact (None when absent)."""
        label = self.artifact.get("label") or {}
        lo, hi = label.get("min"), label.get("max")
        ok = all(isinstance(v, int | float) and np.isfinite(v) for v in (lo, hi)) and lo <= hi
        return (float(lo), float(hi)) if ok else (None, None)

    def score(self, data, *, progress: bool = False, **columns) -> pd.DataFrame:
        """Score a file or DataFrame laid out like the training data (column names as at fit time
        unless overridden); returns the rows plus ``autometrics_score`` and the metric columns."""
        cols = self.artifact.get("columns", {})
        # read once: the validated texts and the rows returned to the caller come from one read
        original, source = read_table(data)
        ds = load_dataset(
            original,
            None,
            input_col=columns.get("input_col") or cols.get("input") or "input",
            output_col=columns.get("output_col") or cols.get("output") or "output",
            reference_cols=columns.get("reference_cols") or cols.get("references") or None,
            id_col=columns.get("id_col", cols.get("id", "id")),
            require_target=False,
            source=source,
        )
        needs_ref = any(metric_from_artifact_spec(f["metric"]).needs_reference for f in self.features)
        if needs_ref and not ds.has_references:
            raise DataError(
                f"{ds.source}: this evaluator uses reference-based metrics but the data has no reference column; "
                "pass --reference-col naming it."
            )
        scores = self.score_texts(ds.outputs, ds.inputs if ds.has_input else None, ds.references, progress=progress)
        return pd.concat([original.reset_index(drop=True), scores], axis=1)

    # ---------------------------------------------------------------- rewards
    def as_dspy_metric(self, *, input_field: str | list[str] | None = None, output_field: str | None = None,
                       reference_field: str | None = None, normalize: bool = True, top_k: int = 3,
                       rationales: bool = True):
        """This evaluator as a DSPy metric for ``dspy.GEPA`` / ``dspy.MIPROv2`` / ``dspy.Evaluate``:
        ``metric(example, prediction, trace=None, pred_name=None, pred_trace=None)`` returns
        ``dspy.Prediction(score=float, feedback=str)``.

        Field names default to the training data's column names (input, output, first reference
        column).  ``normalize``: rescale the predicted judgment to 0..1 with the training labels'
        range (GEPA's default ``perfect_score`` is 1.0).  Feedback: the generated judges'
        rationales (one extra LLM call per judge when ``rationales``) and the ``top_k`` metrics
        that moved the score most.  A prediction without the output field raises
        :class:`~.reward.RewardInputError` naming the field.  See :mod:`.reward`."""
        from autometrics.evaluators.analysis.reward import EvaluatorReward

        return EvaluatorReward(self, input_field=input_field, output_field=output_field, reference_field=reference_field,
                               normalize=normalize, top_k=top_k, rationales=rationales)


def soft_clip(x, lo: float, hi: float, margin: float = 0.05) -> np.ndarray:
    """Keep scores within [lo, hi] without tying them: the identity on the inner part of the range,
    and within ``margin`` (a share of the range) of each bound a smooth, strictly increasing
    compression that approaches the bound and never crosses it.  A hard clip would give every
    out-of-range output the same score, so rankings, Kendall τ and drift statistics would lose
    them; this map keeps their order (every τ is unchanged) while each score reads on the label's
    scale.  Continuous with its first derivative at the joins."""
    x = np.asarray(x, dtype=float)
    d = margin * (hi - lo)
    if not d > 0:
        return np.clip(x, lo, hi)
    a, b = lo + d, hi - d
    # hyperbolic tails (not exponential ones): a score far out of range stays distinguishable in
    # floating point (13 on a 1-5 scale -> 4.9953, 1e6 -> 5 - 4e-8)
    with np.errstate(divide="ignore", invalid="ignore"):
        up = hi - d * d / (x - b + d)
        down = lo + d * d / (a - x + d)
    return np.where(x > b, up, np.where(x < a, down, x))


def load_evaluator(path) -> Evaluator:
    return Evaluator.load(path)
