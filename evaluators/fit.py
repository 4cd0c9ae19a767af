"""The AutoMetrics fit (LLM-free path) and the evaluator artifact.

``fit_evaluator`` scores every candidate metric on the labelled data, splits train/test grouped
by input, runs two-stage PLS selection on train and reports held-out agreement.  The resulting
:class:`Evaluator` is a plain JSON artifact: metric specs and signatures, imputation values,
standardisation, weights, intercept and statistics.  It loads and scores new data with numpy
alone (no training data, no scikit-learn objects).

Example::

    result = fit_evaluator("simpeval.csv", target="score", task="Simplify a sentence")
    result.evaluator.save("out/evaluator.json")
    Evaluator.load("out/evaluator.json").score("new.csv")
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import __version__
from ..metricbank import Metric, MetricUnavailable, default_metrics, get_metric, metric_from_spec
from .data import DataError, Dataset, load_dataset, read_table
from .regression import PLSMetricSelector
from .stats import Agreement, agreement, kendall_tau

__all__ = ["Evaluator", "FitResult", "fit_evaluator", "load_evaluator", "score_metrics", "ARTIFACT_FORMAT"]

log = logging.getLogger("autometrics")

ARTIFACT_FORMAT = "autometrics.evaluator"
ARTIFACT_VERSION = 1
SCORE_COLUMN = "autometrics_score"
MIN_LABELS_FOR_CONFIDENCE = 80  # below this the paper's own results become noisy (Section 4.6)


# Metric classes outside MetricBank that an artifact may name (generated LLM judges).  Only
# these are imported: an artifact never makes us import arbitrary code.
_FACTORIES = {"autometrics.evaluators.judges:LLMJudgeMetric"}


def _metric_from_spec(spec: dict) -> Metric:
    factory = spec.get("factory")
    if not factory:
        return metric_from_spec(spec)
    if factory not in _FACTORIES:
        raise ValueError(f"evaluator names an unknown metric factory {factory!r}")
    import importlib

    module, cls = factory.split(":")
    return getattr(importlib.import_module(module), cls)(**spec.get("params", {}))


def _progress(iterable, *, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="metric", leave=False)


def score_metrics(
    metrics: list[Metric],
    outputs: list[str],
    inputs: list[str] | None,
    references: list[list[str]] | None,
    *,
    progress: bool = False,
) -> tuple[pd.DataFrame, dict[str, dict], list[str]]:
    """Score a batch with every metric.  A metric that cannot run (missing dependency, a bug,
    bad data) is skipped with a note, never a crash of the whole batch.

    Returns (features frame, feature metadata by column, notes about skipped metrics).
    """
    columns: dict[str, np.ndarray] = {}
    meta: dict[str, dict] = {}
    notes: list[str] = []
    for metric in _progress(metrics, total=len(metrics), desc="scoring metrics", enabled=progress):
        if metric.needs_reference and references is None:
            notes.append(f"{metric.name}: skipped, the data has no references")
            continue
        if metric.needs_input and inputs is None:
            notes.append(f"{metric.name}: skipped, the data has no inputs")
            continue
        started = time.perf_counter()
        try:
            metric.check_available()
            values = metric.score_all(outputs, inputs=inputs, references=references)
        except MetricUnavailable as exc:
            notes.append(f"{metric.name}: unavailable here ({exc})")
            continue
        except Exception as exc:  # one broken metric must not sink the fit
            log.warning("metric %s failed: %s", metric.name, exc, exc_info=True)
            notes.append(f"{metric.name}: failed ({type(exc).__name__}: {exc})")
            continue
        seconds = time.perf_counter() - started
        for fname, fsig, hib in zip(metric.feature_names(), metric.feature_signatures(), metric.feature_higher_is_better(), strict=True):
            columns[fname] = values[fname]
            meta[fname] = {
                "feature": fname,
                "signature": fsig,
                "metric": metric.to_spec(),
                "submetric": fname.split(".", 1)[1] if "." in fname and metric.submetrics else None,
                "higher_is_better": hib,
                "generated": bool(getattr(metric, "generated", False)),
                "seconds": seconds / max(1, len(metric.feature_names())),
            }
    return pd.DataFrame(columns, index=range(len(outputs))), meta, notes


def _clean(v):
    """JSON-safe floats (NaN/inf -> None)."""
    if isinstance(v, float | np.floating):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


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
        path.write_text(json.dumps(_clean(self.artifact), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
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
                seen[spec["signature"]] = _metric_from_spec(spec)
        return list(seen.values())

    def score_texts(self, outputs, inputs=None, references=None, *, progress: bool = False) -> pd.DataFrame:
        """Score raw lists; returns ``autometrics_score`` plus one column per selected metric."""
        outputs = list(outputs)
        feats, _, notes = score_metrics(self._metrics(), outputs, None if inputs is None else list(inputs), references, progress=progress)
        missing = [f["feature"] for f in self.features if f["feature"] not in feats.columns]
        if missing:
            raise RuntimeError(f"cannot score: metric(s) {', '.join(missing)} could not run here: {'; '.join(notes)}")
        total = np.full(len(outputs), float(self.artifact["intercept"]))
        out = pd.DataFrame(index=range(len(outputs)))
        for f in self.features:
            raw = feats[f["feature"]].to_numpy(dtype=float)
            filled = np.where(np.isnan(raw), f["impute"], raw)
            total += f["weight"] * (filled - f["mean"]) / f["scale"]
            out[f["feature"]] = raw
        out.insert(0, SCORE_COLUMN, total)
        return out

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
        needs_ref = any(_metric_from_spec(f["metric"]).needs_reference for f in self.features)
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
        from .reward import EvaluatorReward

        return EvaluatorReward(self, input_field=input_field, output_field=output_field, reference_field=reference_field,
                               normalize=normalize, top_k=top_k, rationales=rationales)


@dataclass
class FitResult:
    """Everything the report needs: the evaluator plus per-row predictions and candidate table."""

    evaluator: Evaluator
    train: pd.DataFrame  # id, human, predicted, and selected metric values
    test: pd.DataFrame
    candidates: pd.DataFrame  # one row per candidate feature
    notes: list[str] = field(default_factory=list)


def _feature_tau(values: np.ndarray, y: np.ndarray) -> float:
    return kendall_tau(values, y)[0]


def fit_evaluator(
    data,
    target: str,
    *,
    task: str | None = None,
    input_col: str = "input",
    output_col: str = "output",
    reference_cols: list[str] | None = None,
    id_col: str | None = "id",
    group_col: str | None = None,
    test_size: float = 0.3,
    seed: int = 0,
    top_n: int = 5,
    metrics: list[Metric | str] | None = None,
    n_boot: int = 1000,
    progress: bool = False,
    dataset: Dataset | None = None,
    features: tuple[pd.DataFrame, dict, list[str]] | None = None,
) -> FitResult:
    """Fit an evaluator for ``target`` from labelled data (see module docstring).

    ``dataset``/``features`` let callers (benchmarks, refit jobs) reuse a loaded dataset and an
    already-scored feature matrix across several splits.
    """
    started = time.perf_counter()
    ds = dataset or load_dataset(
        data,
        target,
        input_col=input_col,
        output_col=output_col,
        reference_cols=reference_cols,
        id_col=id_col,
        group_col=group_col,
    )
    if target not in ds.targets:
        raise DataError(f"target {target!r} was not loaded; loaded targets: {ds.targets}")
    lab = ds.labelled(target)
    warnings = list(ds.warnings)
    info = ds.labels[target]

    unavailable: dict[str, str] = {}
    if features is None:
        if metrics is None:
            bank = default_metrics(with_reference=lab.has_references, with_input=lab.has_input, unavailable=unavailable)
        else:
            bank = [get_metric(m) if isinstance(m, str) else m for m in metrics]
        X, meta, notes = score_metrics(
            bank, lab.outputs, lab.inputs if lab.has_input else None, lab.references, progress=progress
        )
    else:
        X, meta, notes = features
        if len(X) != len(lab):
            raise ValueError(f"features have {len(X)} rows, labelled data has {len(lab)}")
    if X.shape[1] == 0:
        raise DataError("no metric could score this data: " + "; ".join(notes))

    y = lab.y(target)
    train_pos, test_pos = lab.split_positions(test_size, seed)
    names = list(X.columns)
    Xa = X.to_numpy(dtype=float)
    generated = [meta[c]["generated"] for c in names]
    selector = PLSMetricSelector(top_n=top_n).fit(Xa[train_pos], y[train_pos], generated=generated)

    pred_train = selector.predict(Xa[train_pos])
    pred_test = selector.predict(Xa[test_pos])
    stats_train = agreement(pred_train, y[train_pos], n_boot=n_boot, seed=seed)
    stats_test = agreement(pred_test, y[test_pos], n_boot=n_boot, seed=seed)

    # per-candidate agreement, and the best single existing metric chosen on train (its sign too)
    rows = []
    for j, name in enumerate(names):
        t_tr = _feature_tau(Xa[train_pos, j], y[train_pos])
        t_te = _feature_tau(Xa[test_pos, j], y[test_pos])
        rows.append(
            {
                "feature": name,
                "signature": meta[name]["signature"],
                "generated": meta[name]["generated"],
                "higher_is_better": meta[name]["higher_is_better"],
                "tau_train": t_tr,
                "tau_test": t_te,
                "stage1_weight": selector.stage1_coef_[j],
                "usable": bool(selector.usable_[j]),
                "selected": bool(j in set(selector.selected_.tolist())),
                "missing": int(np.isnan(Xa[:, j]).sum()),
                "seconds": meta[name]["seconds"],
            }
        )
    candidates = pd.DataFrame(rows)
    best = None
    usable_c = candidates[candidates["usable"] & candidates["tau_train"].notna() & ~candidates["generated"]]
    if len(usable_c):
        b = usable_c.loc[usable_c["tau_train"].abs().idxmax()]
        sign = 1.0 if b["tau_train"] >= 0 else -1.0
        j = names.index(b["feature"])
        best_test = agreement(sign * Xa[test_pos, j], y[test_pos], n_boot=n_boot, seed=seed)
        best = {"feature": b["feature"], "sign": sign, "tau_train": abs(float(b["tau_train"])), "test": best_test.to_dict()}

    n_lab = len(lab)
    if not (stats_test.p_value <= 0.05):
        warnings.append(
            f"held-out agreement is not significant (p={stats_test.p_value:.3g} > 0.05, n={stats_test.n}): "
            "treat the evaluator as unvalidated and collect more feedback."
        )
    if n_lab < MIN_LABELS_FOR_CONFIDENCE:
        warnings.append(
            f"only {n_lab} labelled examples (< {MIN_LABELS_FOR_CONFIDENCE}): held-out estimates are noisy; "
            "see the confidence interval."
        )
    n_usable = int(selector.usable_.sum())
    if n_usable > len(train_pos):
        warnings.append(
            f"more candidate metrics ({n_usable}) than training rows ({len(train_pos)}): metric selection may overfit."
        )
    for note in notes:
        warnings.append(f"metric skipped: {note}")

    feats = []
    importance = selector.importance_
    cand_by_name = candidates.set_index("feature")
    for k, j in enumerate(selector.selected_):
        name = names[j]
        feats.append(
            {
                "feature": name,
                "signature": meta[name]["signature"],
                "metric": meta[name]["metric"],
                "submetric": meta[name]["submetric"],
                "generated": meta[name]["generated"],
                "higher_is_better": meta[name]["higher_is_better"],
                "impute": float(selector.impute_[j]),
                "mean": float(selector.mean_[j]),
                "scale": float(selector.scale_[j]),
                "weight": float(selector.coef_[k]),
                "importance": float(importance[k]),
                "tau_train": cand_by_name.loc[name, "tau_train"],
                "tau_test": cand_by_name.loc[name, "tau_test"],
            }
        )

    artifact = {
        "format": ARTIFACT_FORMAT,
        "format_version": ARTIFACT_VERSION,
        "package_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "target": target,
        "task": task,
        "label": info.to_dict(),
        "columns": {k: v for k, v in ds.columns.items() if k != "group"},
        "method": {
            "name": "autometrics-pls",
            "top_n": top_n,
            "drop_negative_generated": selector.drop_negative_generated,
            "test_size": test_size,
            "seed": seed,
            "split": "grouped by " + (ds.columns.get("group") or ("input" if ds.has_input else "id")),
            "n_boot": n_boot,
        },
        "intercept": float(selector.intercept_),
        "features": feats,
        "statistics": {
            "train": stats_train.to_dict(),
            "test": stats_test.to_dict(),
            "best_single_metric": best,
            "n_candidates": len(names),
            "n_usable_candidates": n_usable,
        },
        "dataset": {
            "source": Path(ds.source).name if ds.source != "<DataFrame>" else ds.source,
            "fingerprint": "sha256:" + lab.fingerprint(),
            "n_rows": len(ds),
            "n_labelled": n_lab,
            "n_excluded_missing_target": info.n_missing,
            "n_train": len(train_pos),
            "n_test": len(test_pos),
        },
        "warnings": warnings,
        # MetricBank metrics that could not run in this environment (e.g. model weights absent)
        "unavailable_metrics": unavailable,
        "fit_seconds": round(time.perf_counter() - started, 2),
    }
    evaluator = Evaluator(_clean(artifact))

    sel_names = [names[j] for j in selector.selected_]

    def frame(pos, pred):
        f = pd.DataFrame({"id": lab.frame["id"].to_numpy()[pos], "human": y[pos], "predicted": pred})
        for nm in sel_names:
            f[nm] = Xa[pos, names.index(nm)]
        return f

    return FitResult(evaluator, frame(train_pos, pred_train), frame(test_pos, pred_test), candidates, notes)


def load_evaluator(path) -> Evaluator:
    return Evaluator.load(path)


__all__ += ["SCORE_COLUMN", "Agreement", "MetricUnavailable"]
