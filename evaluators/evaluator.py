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

from ..collectors.files import atomic_write_files, dumps
from ..metricbank import Metric
from ..metricbank.errors import DataError, MissingFile, UserError
from .analysis.reward import EvaluatorReward
from .data import load_dataset, read_table
from .features import metric_from_artifact_spec, score_metrics
from .shapes import pair_contribution, shape_contribution
from .validity import artifact_validity

__all__ = ["Evaluator", "ArtifactError", "check_artifact", "score_metrics", "load_evaluator", "ARTIFACT_FORMAT", "ARTIFACT_VERSION", "LINEAR_ARTIFACT_VERSION",
           "SCORE_COLUMN"]

log = logging.getLogger("autometrics")

ARTIFACT_FORMAT = "autometrics.evaluator"
ARTIFACT_VERSION = 2  # 2: a feature may carry a shape, the artifact pairwise terms (a shape model)
LINEAR_ARTIFACT_VERSION = 1  # what a linear evaluator still writes, so earlier releases keep reading it
SCORE_COLUMN = "autometrics_score"


class ArtifactError(DataError):
    """An evaluator.json that cannot be used as it is; the message names the file and the field."""


def _reject_constant(name: str):
    raise UserError(f"{name} is not a number JSON allows")


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)


def check_artifact(a, where: str = "evaluator") -> None:
    """Check what scoring reads from an artifact: its format, target, intercept and, per feature,
    name, weight, mean, scale, imputation value and metric spec.  Raises :class:`ArtifactError`
    naming ``where`` and the field, e.g. ``features[2].weight``."""
    def bad(field: str, why: str):
        raise ArtifactError(f"{where}: {field} {why}; re-run `autometrics fit` or restore the file `autometrics fit` wrote")

    if not isinstance(a, dict):
        bad("the top level", f"must be a JSON object, not a {type(a).__name__}")
    if a.get("format") != ARTIFACT_FORMAT:
        bad("format", f"must be {ARTIFACT_FORMAT!r} (this is not an autometrics evaluator), not {a.get('format')!r}")
    v = a.get("format_version")
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= ARTIFACT_VERSION:
        if isinstance(v, int) and not isinstance(v, bool) and v > ARTIFACT_VERSION:
            raise ArtifactError(f"{where}: format_version {v} is newer than this package reads ({ARTIFACT_VERSION}); "
                                "upgrade autometrics-sdk")
        bad("format_version", f"must be a whole number from 1 to {ARTIFACT_VERSION} (a version this package knows), not {v!r}")
    if not isinstance(a.get("target"), str) or not a["target"]:
        bad("target", "must be a non-empty string")
    if not _finite(a.get("intercept")):
        bad("intercept", f"must be a finite number, not {a.get('intercept')!r}")
    feats = a.get("features")
    if not isinstance(feats, list):
        bad("features", "must be a list")
    for i, f in enumerate(feats):
        if not isinstance(f, dict):
            bad(f"features[{i}]", "must be an object")
        if not isinstance(f.get("feature"), str):
            bad(f"features[{i}].feature", "must be the metric's feature name (a string)")
        for k in ("weight", "mean", "scale", "impute"):
            if not _finite(f.get(k)):
                bad(f"features[{i}].{k}", f"must be a finite number, not {f.get(k)!r}")
        if f["scale"] == 0:
            bad(f"features[{i}].scale", "must not be 0")
        spec = f.get("metric")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not isinstance(spec.get("signature"), str):
            bad(f"features[{i}].metric", "must be an object with the metric's name and signature")
        if "shape" in f:
            _check_table(bad, f"features[{i}].shape", f["shape"], [f["shape"].get("cuts") if isinstance(f["shape"], dict) else None])
    names = {f.get("feature") for f in a.get("features") or []}
    for i, t in enumerate(a.get("pairs") or []):
        feats = t.get("features") if isinstance(t, dict) else None
        if not (isinstance(feats, list) and len(feats) == 2 and set(feats) <= names):
            bad(f"pairs[{i}].features", "must name two of the evaluator's features")
        cuts = t.get("cuts") if isinstance(t, dict) and isinstance(t.get("cuts"), list) and len(t["cuts"]) == 2 else [None, None]
        _check_table(bad, f"pairs[{i}]", t, cuts)


def _check_table(bad, where: str, table, cuts: list) -> None:
    """A shape or pairwise table: sorted finite cut points per axis, and a score for the missing
    bin, every bin between cuts and the machine's unknown bin (``len(cuts) + 3`` per axis)."""
    if not isinstance(table, dict):
        bad(where, "must be an object with cuts and scores")
    for c in cuts:
        if not (isinstance(c, list) and all(_finite(v) for v in c) and all(x < y for x, y in zip(c, c[1:], strict=False))):
            bad(f"{where}.cuts", "must be increasing finite numbers")
    try:
        scores = np.asarray(table.get("scores"), dtype=float)
    except (TypeError, ValueError):
        bad(f"{where}.scores", "must be numbers")
    if scores.shape != tuple(len(c) + 3 for c in cuts) or not np.isfinite(scores).all():
        bad(f"{where}.scores", f"must be finite numbers of shape {tuple(len(c) + 3 for c in cuts)}, not {scores.shape}")


class Evaluator:
    """A fitted, interpretable evaluator: ``score = intercept + sum_j w_j * z_j`` where ``z_j`` is
    metric j standardised with the training mean/std (missing values imputed with the training
    median)."""

    def __init__(self, artifact: dict):
        if artifact.get("format") != ARTIFACT_FORMAT:
            raise UserError(f"not an autometrics evaluator artifact (format={artifact.get('format')!r})")
        v = artifact.get("format_version", ARTIFACT_VERSION)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= ARTIFACT_VERSION:
            raise UserError(f"evaluator format_version {v!r} is not one this package reads (1 to {ARTIFACT_VERSION}); "
                             "for a newer one, upgrade autometrics-sdk")
        self.artifact = artifact
        self.source = "evaluator"  # the file it was loaded from, for error messages
        self._built: list[Metric] | None = None  # the metric objects, see metrics()

    # ------------------------------------------------------------------ io
    @classmethod
    def load(cls, path) -> Evaluator:
        """Read and check an ``evaluator.json``; every problem is an :class:`ArtifactError` that
        names the file and the field (nothing is scored with a tampered or truncated artifact)."""
        path = Path(path)
        if path.is_dir():
            path = path / "evaluator.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise MissingFile(f"no evaluator at {path}; pass the evaluator.json written by `autometrics fit`") from exc
        except IsADirectoryError:
            raise ArtifactError(f"{path}: is a folder without an evaluator.json; pass the file `autometrics fit` wrote") from None
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"{path}: cannot be read as UTF-8 text ({type(exc).__name__}); "
                                "pass the evaluator.json that `autometrics fit` wrote") from None
        except OSError as exc:
            from ..collectors.files import os_error_fix

            raise ArtifactError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__}); "
                                + (os_error_fix(exc) or "pass the evaluator.json that `autometrics fit` wrote")) from None
        try:
            artifact = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ArtifactError(f"{path}: not valid JSON ({exc}); the file is truncated or was edited by hand — "
                                "re-run `autometrics fit` or restore it") from None
        check_artifact(artifact, str(path))
        ev = cls(artifact)
        ev.source = str(path)
        return ev

    def save(self, path, *, beside: dict | None = None) -> Path:
        """Write the artifact to ``path`` (the one writer of ``evaluator.json``), and the files in
        ``beside`` (path -> text: its reports) in the same step: a failure leaves every target as it
        was, so a folder never holds a new evaluator next to an old report."""
        path = Path(path)
        atomic_write_files({path: dumps(self.artifact, indent=2) + "\n", **(beside or {})})
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

    @property
    def validity(self) -> dict:
        """The validity verdict (``validated``, ``tau``, ``ci``, ``p_value``, ``n_labels``,
        ``n_groups``, ``method``, ``reason``).  An artifact written before validity was recorded
        gets a verdict read from its held-out statistics (``method`` "holdout (recorded before
        validity)"), validated when that τ was positive with p <= 0.05."""
        return artifact_validity(self.artifact)

    @property
    def validated(self) -> bool:
        return bool(self.validity.get("validated"))

    def describe(self) -> str:
        terms = " ".join(f"{'+' if f['weight'] >= 0 else '-'} {abs(f['weight']):.3g}*z({f['feature']})" for f in self.features)
        return f"{self.target} ~ {self.artifact['intercept']:.3g} {terms}"

    # --------------------------------------------------------------- scoring
    def metrics(self) -> list[Metric]:
        """The selected metrics, built once per evaluator (model-based ones load their weights on
        first use, so online scoring must not rebuild them for every batch)."""
        if self._built is not None:
            return self._built
        seen: dict[str, Metric] = {}
        for i, f in enumerate(self.features):
            spec = f["metric"]
            if spec["signature"] not in seen:
                try:
                    seen[spec["signature"]] = metric_from_artifact_spec(spec)
                except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
                    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                    raise ArtifactError(f"{self.source}: features[{i}].metric ({spec.get('name')!r}) cannot be built here: {msg} "
                                        "Re-run `autometrics fit`, or install what the metric needs") from None
        self._built = list(seen.values())
        return self._built


    def score_texts(self, outputs, inputs=None, references=None, *, progress: bool = False) -> pd.DataFrame:
        """Score raw lists; returns ``autometrics_score`` plus one column per selected metric."""
        outputs = list(outputs)
        feats, _, notes = score_metrics(self.metrics(), outputs, None if inputs is None else list(inputs), references, progress=progress)
        missing = [f["feature"] for f in self.features if f["feature"] not in feats.columns]
        if missing:
            raise RuntimeError(f"cannot score: metric(s) {', '.join(missing)} could not run here: {'; '.join(notes)}")
        out = pd.DataFrame({f["feature"]: feats[f["feature"]].to_numpy(dtype=float) for f in self.features},
                           index=range(len(outputs)))
        out.insert(0, SCORE_COLUMN, self.predict(out))
        return out

    # ------------------------------------------------------------ the formula
    def contributions(self, values) -> pd.DataFrame:
        """Per-row contribution of each selected metric — ``w_j * z_j``, or ``shape_j(x_j)`` for a
        shape model, plus one column per pairwise term — from raw metric values
        (a frame or mapping with one column per feature; missing values imputed with the
        training median).  ``predict`` is the intercept plus their row sums: the one place the
        evaluator's formula is written."""
        def raw(name: str) -> np.ndarray:
            col = np.asarray(values[name], dtype=object).ravel()
            return pd.to_numeric(pd.Series(col), errors="coerce").to_numpy(dtype=float)

        cols = {}
        for f in self.features:
            x = raw(f["feature"])
            if "shape" in f:  # a shape model: the stored lookup table (a missing value has its own bin)
                cols[f["feature"]] = shape_contribution(f["shape"], x)
            else:
                filled = np.where(np.isnan(x), f["impute"], x)
                cols[f["feature"]] = f["weight"] * (filled - f["mean"]) / f["scale"]
        for p in self.artifact.get("pairs") or []:
            a, b = p["features"]
            cols[f"{a} × {b}"] = pair_contribution(p, raw(a), raw(b))
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
        ok = _finite(lo) and _finite(hi) and lo <= hi
        return (float(lo), float(hi)) if ok else (None, None)

    def score(self, data, *, progress: bool = False, **columns) -> pd.DataFrame:
        """Score a file or DataFrame laid out like the training data (column names as at fit time
        unless overridden); returns the rows plus ``autometrics_score`` and the metric columns."""
        original, ds = self.read(data, **columns)
        scores = self.score_texts(ds.outputs, ds.inputs if ds.has_input else None, ds.references, progress=progress)
        return pd.concat([original.reset_index(drop=True), scores], axis=1)

    def read(self, data, **columns):
        """(the rows as read, the checked dataset) of a file or DataFrame to score: every problem
        named with its row and column, before anything is scored."""
        cols = self.artifact.get("columns", {})
        # read once: the validated texts and the rows returned to the caller come from one read
        original, source = read_table(data)
        input_col = columns.get("input_col") or cols.get("input") or "input"
        ds = load_dataset(
            original,
            None,
            input_col=input_col,
            output_col=columns.get("output_col") or cols.get("output") or "output",
            reference_cols=columns.get("reference_cols") or cols.get("references") or None,
            id_col=columns.get("id_col", cols.get("id", "id")),
            require_target=False,
            source=source,
        )
        needs_ref = any(m.needs_reference for m in self.metrics())
        if needs_ref and not ds.has_references:
            raise DataError(
                f"{ds.source}: this evaluator uses reference-based metrics but the data has no reference column; "
                "pass --reference-col naming it."
            )
        needs_input = [m.name for m in self.metrics() if m.needs_input]
        if needs_input and not ds.has_input:
            raise DataError(
                f"{ds.source}: this evaluator uses metrics that need the input ({', '.join(needs_input)}) but the data has "
                f"no {input_col!r} column. Columns present: "
                f"{', '.join(map(str, original.columns))}. Pass --input-col NAME naming the column that holds the inputs."
            )
        return original, ds

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
