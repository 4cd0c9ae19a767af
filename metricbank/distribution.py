"""Distribution-based metrics: MAUVE (corpus-level divergence frontier between the outputs and
the references in an LM's feature space) and InfoLM (divergence between the masked-LM
token distributions of output and reference).

The divergence-frontier code is our own implementation of Pillutla et al. (2021) with
scikit-learn's PCA and k-means (the ``mauve-text`` package needs faiss); its defaults follow
the paper's released code: L2-normalised features, PCA keeping 90 % of the variance,
k = n/10 clusters, 5 k-means restarts, 25 mixture weights, scaling constant 5.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from ._models import ModelMetric, Resources, batched, inference_mode, load_hf, load_tokenizer, measured
from .errors import UserError
from .lm import pad_id, right_pad
from .registry import register

__all__ = ["MAUVE", "InfoLM", "mauve_from_features", "divergence_curve", "information_measure"]


# ------------------------------------------------------------------------------ MAUVE maths
def _kl(p: np.ndarray, q: np.ndarray) -> float:
    nz = p > 0
    return float(np.sum(p[nz] * np.log(p[nz] / q[nz])))


def divergence_curve(p: np.ndarray, q: np.ndarray, n_weights: int = 25, scaling: float = 5.0) -> np.ndarray:
    """Points (exp(-c KL(Q || R_l)), exp(-c KL(P || R_l))) for R_l = l P + (1 - l) Q, l in (0, 1),
    plus the end points (1, 0) and (0, 1)."""
    pts = [(0.0, np.inf)]
    for w in np.linspace(1e-6, 1 - 1e-6, n_weights):
        r = w * p + (1 - w) * q
        pts.append((_kl(q, r), _kl(p, r)))
    pts.append((np.inf, 0.0))
    return np.exp(-scaling * np.asarray(pts))


def mauve_from_histograms(p: np.ndarray, q: np.ndarray, n_weights: int = 25, scaling: float = 5.0) -> float:
    """Area under the divergence frontier, integrated along the curve in mixture-weight order
    (from (1, 0) to (0, 1)); 1 when P = Q, near 0 for disjoint supports."""
    curve = divergence_curve(p, q, n_weights, scaling)
    x, y = curve[:, 0], curve[:, 1]
    return float(-np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


def mauve_from_features(
    p_feats: np.ndarray,
    q_feats: np.ndarray,
    *,
    n_clusters: int | None = None,
    explained_variance: float = 0.9,
    n_init: int = 5,
    seed: int = 25,
    n_weights: int = 25,
    scaling: float = 5.0,
) -> float:
    """MAUVE between two samples of feature vectors (P = human/reference, Q = model outputs)."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import normalize

    data = normalize(np.vstack([p_feats, q_feats]).astype(np.float64), norm="l2", axis=1)
    if data.shape[0] > 2 and data.shape[1] > 1:
        pca = PCA(n_components=None, whiten=False, random_state=seed + 1).fit(data)
        keep = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= explained_variance)) + 1
        data = pca.transform(data)[:, :keep]
    k = n_clusters or max(2, int(round(min(len(p_feats), len(q_feats)) / 10)))
    k = min(k, len(np.unique(data.round(12), axis=0)))
    if k < 2:  # every point identical: the two samples are indistinguishable
        return 1.0
    labels = KMeans(n_clusters=k, n_init=n_init, max_iter=500, random_state=seed).fit(data).labels_
    p = np.bincount(labels[: len(p_feats)], minlength=k) / len(p_feats)
    q = np.bincount(labels[len(p_feats) :], minlength=k) / len(q_feats)
    return mauve_from_histograms(p, q, n_weights, scaling)


@register
class MAUVE(ModelMetric):
    """MAUVE (Pillutla et al., 2021): how close the batch of outputs is, as a distribution, to
    the batch of references, in GPT-2-large feature space.  Corpus-level: every row of a batch
    gets the batch's score."""

    name = "MAUVE"
    needs_reference = True
    batch_dependent = True
    description = "MAUVE: divergence-frontier area between output and reference distributions (GPT-2 large features); one score per batch."
    default_model = "gpt2-large"
    resources = Resources(
        "774M", 3.0, 4.2, False,
        measured(
            "reference_based/MAUVE.py",
            cpu_mb=4322.96,
            rest="our estimate, taken from Perplexity's measured gpu_mem = 3069 MB for the same gpt2-large "
            "(`autometrics/metrics/reference_free/Perplexity.py`; the MAUVE measurement ran on CPU: gpu_mem 0 MB)",
        ),
    )
    default_batch_size = 8
    MAX_LENGTH: ClassVar[int] = 1024

    def __init__(self, *, model: str | None = None, seed: int = 25, **kw):
        super().__init__(model=model, seed=int(seed), **kw)

    def _load(self, path: Path, device: str):
        return load_tokenizer(path), load_hf("AutoModel", path, device)

    def features(self, texts: list[str]) -> np.ndarray:
        """Last layer's hidden state at the last token for decoders (the paper's GPT-2
        featurisation), the mean over tokens for encoders."""
        import torch

        tokenizer, model = self.model()
        decoder = not getattr(model.config, "is_encoder_decoder", False) and bool(
            getattr(model.config, "is_decoder", False) or "CausalLM" in " ".join(model.config.architectures or [])
            or model.config.model_type in {"gpt2", "gpt_neo", "gptj", "gpt_neox", "llama", "qwen2", "mistral", "gemma", "gemma2", "opt"}
        )
        fallback = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else (tokenizer.sep_token_id or 0)
        uniq = sorted(set(texts), key=len)
        seqs = {t: (tokenizer(t, truncation=True, max_length=self.MAX_LENGTH)["input_ids"] or [fallback]) for t in uniq}
        feats: dict[str, np.ndarray] = {}
        for _, chunk in batched(uniq, self.batch_size):
            ids, mask = right_pad([seqs[t] for t in chunk], pad_id(tokenizer))
            ids, mask = ids.to(model.device), mask.to(model.device)
            with inference_mode():
                h = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
                if decoder:
                    pooled = h[torch.arange(len(chunk), device=h.device), mask.sum(1) - 1]
                else:
                    pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            for t, v in zip(chunk, pooled.cpu().numpy(), strict=True):
                feats[t] = v
        return np.stack([feats[t] for t in texts])

    def _compute(self, outputs, inputs, references):
        refs = [r for rs in references for r in rs]
        q = self.features(outputs)
        p = self.features(refs)
        score = mauve_from_features(p, q, seed=self.params["seed"])
        return np.full(len(outputs), score)


# ------------------------------------------------------------------------------ InfoLM
def information_measure(p: np.ndarray, q: np.ndarray, measure: str) -> float:
    """Divergence between two vocabulary distributions (p = reference, q = output)."""
    eps = 1e-12
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    if measure == "fisher_rao":
        # 2 arccos(sum sqrt(p q)), written as 4 arcsin(||sqrt p - sqrt q|| / 2): the same value,
        # without arccos's loss of precision next to identical distributions
        return float(4 * np.arcsin(min(1.0, 0.5 * np.linalg.norm(np.sqrt(p) - np.sqrt(q)))))
    if measure == "kl":
        return float(np.sum(p * (np.log(p + eps) - np.log(q + eps))))
    if measure == "l1":
        return float(np.abs(p - q).sum())
    if measure == "l2":
        return float(np.sqrt(((p - q) ** 2).sum()))
    if measure == "linf":
        return float(np.abs(p - q).max())
    raise UserError(f"unknown information measure {measure!r}; use fisher_rao, kl, l1, l2 or linf")


@register
class InfoLM(ModelMetric):
    """InfoLM (Colombo et al., 2022): mask each token in turn, average the masked LM's
    predicted vocabulary distributions over positions, and compare output and reference
    distributions with an information measure (default Fisher-Rao distance)."""

    name = "InfoLM"
    needs_reference = True
    higher_is_better = False
    description = "InfoLM: Fisher-Rao distance between BERT masked-LM bag-of-distributions of output and reference (lower = closer)."
    default_model = "bert-base-uncased"
    resources = Resources(
        "110M", 1.5, 1.1, False,
        measured(
            "reference_based/InfoLM.py",
            cpu_mb=1142.16,
            rest="our estimate from the parameter count and default batch size (the published gpu_mem is 0 MB: "
            "that measurement ran on CPU)",
        ),
    )
    default_batch_size = 64  # masked copies per forward pass
    MEASURES: ClassVar[tuple[str, ...]] = ("fisher_rao", "kl", "l1", "l2", "linf")
    signature_keys = {"model": "model", "measure": "measure", "temperature": "T"}

    def __init__(self, *, model: str | None = None, measure: str = "fisher_rao", temperature: float = 0.25, **kw):
        if measure not in self.MEASURES:
            raise UserError(f"measure must be one of {self.MEASURES}")
        super().__init__(model=model, measure=measure, temperature=float(temperature), **kw)

    def _load(self, path: Path, device: str):
        return load_tokenizer(path), load_hf("AutoModelForMaskedLM", path, device)

    def distribution(self, text: str) -> np.ndarray:
        import torch

        tokenizer, model = self.model()
        enc = tokenizer(text, truncation=True, max_length=min(512, tokenizer.model_max_length or 512), return_special_tokens_mask=True)
        ids = list(enc["input_ids"])
        positions = [k for k, s in enumerate(enc["special_tokens_mask"]) if not s]
        if not positions:  # empty text: what the LM expects in an empty slot
            ids = tokenizer(tokenizer.mask_token)["input_ids"]
            positions = [k for k, t in enumerate(ids) if t == tokenizer.mask_token_id]
        base = torch.tensor(ids, dtype=torch.long)
        total = None
        for _, chunk in batched(positions, self.batch_size):
            batch = base.repeat(len(chunk), 1)
            batch[torch.arange(len(chunk)), torch.tensor(chunk)] = tokenizer.mask_token_id
            with inference_mode():
                logits = model(input_ids=batch.to(model.device)).logits.float()
                picked = logits[torch.arange(len(chunk)), torch.tensor(chunk)] / self.params["temperature"]
                probs = torch.softmax(picked, dim=-1).sum(0).cpu().numpy().astype(np.float64)
            total = probs if total is None else total + probs
        return total / len(positions)

    def _compute(self, outputs, inputs, references):
        cache: dict[str, np.ndarray] = {}

        def dist(t):
            if t not in cache:
                cache[t] = self.distribution(t)
            return cache[t]

        m = self.params["measure"]
        return np.array(
            [min(information_measure(dist(r), dist(o), m) for r in refs) for o, refs in zip(outputs, references, strict=True)]
        )
