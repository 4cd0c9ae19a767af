"""Language-model metrics: Perplexity, BARTScore, and the reward models (GRM, INF-ORM,
LDL-Reward, Qwen2.5-Math-PRM).

Perplexity and BARTScore read token log-probabilities from a causal / sequence-to-sequence
LM; the reward models read a scalar from a head on the last token of a chat-formatted
(prompt, response) pair.  Every loader takes a local folder (``model=`` or
``$AUTOMETRICS_MODELS_DIR``) and never downloads.  Tests run the same code on tiny randomly
initialised models saved by the test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from . import _text
from ._models import ModelMetric, Resources, batched, inference_mode, load_hf, load_tokenizer, measured
from .base import MetricUnavailable
from .registry import register

__all__ = [
    "Perplexity",
    "BARTScore",
    "GRMRewardModel",
    "INFORMRewardModel",
    "LDLRewardModel",
    "MathProcessRewardModel",
    "chat_texts",
    "split_steps",
]


def pad_id(tokenizer) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if tid is not None:
            return int(tid)
    return 0  # pragma: no cover


def right_pad(seqs: list[list[int]], pad: int):
    import torch

    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for k, s in enumerate(seqs):
        ids[k, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[k, : len(s)] = 1
    return ids, mask


def _token_logprobs(logits, targets, mask):
    """log p(target_t) for each position (float32), zero where mask is 0."""
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked * mask


# ------------------------------------------------------------------------------ Perplexity
@register
class Perplexity(ModelMetric):
    """exp(mean negative log-likelihood) of the output's tokens under a causal LM (GPT-2 large)."""

    name = "Perplexity"
    higher_is_better = False
    description = "Perplexity of the output under GPT-2 large: exp(mean token NLL), lower is more fluent/predictable."
    default_model = "gpt2-large"
    resources = Resources("774M", 3.0, 4.0, False, measured("reference_free/Perplexity.py", gpu_mb=3069.44))
    default_batch_size = 8
    #: longest scored sequence (GPT-2's context); longer outputs are truncated
    MAX_LENGTH: ClassVar[int] = 1024

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _load(self, path: Path, device: str):
        return load_tokenizer(path), load_hf("AutoModelForCausalLM", path, device)

    def sequences(self, tokenizer, texts: list[str]) -> list[list[int]]:
        """Token ids scored for each text: [BOS] + text tokens (truncated); an empty text
        becomes [BOS, EOS] so that it still gets a finite perplexity."""
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else bos
        out = []
        for t in texts:
            ids = tokenizer(t, add_special_tokens=False)["input_ids"][: self.MAX_LENGTH - 1]
            out.append([bos] + (ids or [eos]))
        return out

    def _compute(self, outputs, inputs, references):
        tokenizer, model = self.model()
        seqs = self.sequences(tokenizer, outputs)
        order = np.argsort([len(s) for s in seqs])
        result = np.zeros(len(outputs))
        for _, idx in batched(list(order), self.batch_size):
            ids, mask = right_pad([seqs[i] for i in idx], pad_id(tokenizer))
            ids, mask = ids.to(model.device), mask.to(model.device)
            with inference_mode():
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
                lp = _token_logprobs(logits, ids[:, 1:], mask[:, 1:])
                nll = -(lp.sum(1) / mask[:, 1:].sum(1)).cpu().numpy()
            result[list(idx)] = np.exp(nll)
        return result


# ------------------------------------------------------------------------------ BARTScore
@register
class BARTScore(ModelMetric):
    """BARTScore (Yuan et al., 2021): mean log-likelihood of one text given another under
    BART-large-CNN.  precision = log p(output | reference), recall = log p(reference |
    output), f = their mean; with several references, the one with the best f."""

    name = "BARTScore"
    needs_reference = True
    submetrics = ("precision", "recall", "f")
    description = "BARTScore: mean token log-likelihood ref->output (P), output->ref (R) and their mean (F) under BART-large-CNN."
    default_model = "facebook/bart-large-cnn"
    resources = Resources("406M", 1.5, 3.0, False, measured("reference_based/BARTScore.py", gpu_mb=1558.19))
    default_batch_size = 8
    MAX_LENGTH: ClassVar[int] = 1024

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _load(self, path: Path, device: str):
        return load_tokenizer(path), load_hf("AutoModelForSeq2SeqLM", path, device)

    def loglik(self, sources: list[str], targets: list[str]) -> np.ndarray:
        """Mean log p(target token | source, previous target tokens) over the target's tokens
        (special tokens included, as BARTScore does)."""
        tokenizer, model = self.model()
        out = np.zeros(len(sources))
        pairs = list(zip(sources, targets, strict=True))
        order = np.argsort([len(s) + len(t) for s, t in pairs])
        for _, idx in batched(list(order), self.batch_size):
            src = tokenizer([pairs[i][0] for i in idx], max_length=self.MAX_LENGTH, truncation=True, padding=True, return_tensors="pt")
            tgt = tokenizer([pairs[i][1] for i in idx], max_length=self.MAX_LENGTH, truncation=True, padding=True, return_tensors="pt")
            labels = tgt["input_ids"].to(model.device)
            tmask = tgt["attention_mask"].to(model.device)
            with inference_mode():
                logits = model(
                    input_ids=src["input_ids"].to(model.device),
                    attention_mask=src["attention_mask"].to(model.device),
                    labels=labels.masked_fill(tmask == 0, -100),
                ).logits
                lp = _token_logprobs(logits, labels, tmask)
                out[list(idx)] = (lp.sum(1) / tmask.sum(1)).cpu().numpy()
        return out

    def _compute(self, outputs, inputs, references):
        flat = [(i, o, r) for i, (o, refs) in enumerate(zip(outputs, references, strict=True)) for r in refs]
        p = self.loglik([r for _, _, r in flat], [o for _, o, _ in flat])
        r = self.loglik([o for _, o, _ in flat], [r for _, _, r in flat])
        f = (p + r) / 2
        res = {k: np.full(len(outputs), -np.inf) for k in self.submetrics}
        for k, (i, _, _) in enumerate(flat):
            if f[k] > res["f"][i]:
                res["precision"][i], res["recall"][i], res["f"][i] = p[k], r[k], f[k]
        return res


# ------------------------------------------------------------------------------ reward models
def chat_texts(tokenizer, inputs: list[str], outputs: list[str], system: str | None = None) -> list[str]:
    """Chat-formatted (user = input, assistant = output) strings, through the tokenizer's chat
    template; a plain "User:/Assistant:" layout when the tokenizer has none."""
    texts = []
    for inp, out in zip(inputs, outputs, strict=True):
        conv = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": inp},
            {"role": "assistant", "content": out},
        ]
        if getattr(tokenizer, "chat_template", None):
            texts.append(tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=False))
        else:
            texts.append("\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in conv))
    return texts


class _RewardModel(ModelMetric):
    """Scalar reward from a head on the last token of the chat-formatted pair."""

    needs_input = True
    default_batch_size = 4
    MAX_LENGTH: ClassVar[int] = 4096

    def _encode(self, tokenizer, inputs, outputs):
        texts = chat_texts(tokenizer, inputs, outputs)
        seqs = [tokenizer(t, add_special_tokens=False)["input_ids"][-self.MAX_LENGTH :] for t in texts]
        return seqs

    def _last_hidden(self, base, ids, mask):
        """Hidden state of each row's last real token (right padding, so index = length - 1)."""
        import torch

        hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state
        last = mask.sum(1) - 1
        return hidden[torch.arange(ids.shape[0], device=ids.device), last]

    def _head(self, bundle, pooled):  # pragma: no cover - abstract
        raise NotImplementedError

    def _compute(self, outputs, inputs, references):
        bundle = self.model()
        tokenizer, model = bundle["tokenizer"], bundle["model"]
        seqs = self._encode(tokenizer, inputs, outputs)
        order = np.argsort([len(s) for s in seqs])
        result = np.zeros(len(outputs))
        device = next(model.parameters()).device
        for _, idx in batched(list(order), self.batch_size):
            ids, mask = right_pad([seqs[i] for i in idx], pad_id(tokenizer))
            ids, mask = ids.to(device), mask.to(device)
            with inference_mode():
                pooled = self._last_hidden(bundle["base"], ids, mask)
                result[list(idx)] = self._head(bundle, pooled).float().cpu().numpy()
        return result


@register
class GRMRewardModel(_RewardModel):
    """GRM-Llama3.2-3B (Yang et al., 2024): a Llama-3.2-3B sequence-classification reward model;
    the score is its one-logit head on the last token."""

    name = "GRMRewardModel"
    description = "GRM-Llama3.2-3B reward model: scalar preference reward for (prompt, response)."
    default_model = "Ray2333/GRM-Llama3.2-3B-rewardmodel-ft"
    resources = Resources(
        "3.2B", 8.0, 14.0, True,
        "our estimate from the parameter count and default batch size (bfloat16 on CUDA, float32 on CPU); no "
        "measurement for this model was found in the reference implementation",
    )

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _load(self, path: Path, device: str):
        import torch

        tok = load_tokenizer(path)
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        model = load_hf("AutoModelForSequenceClassification", path, device, dtype=dtype)
        head = getattr(model, "score", None) or getattr(model, "classifier", None)
        if head is None:  # pragma: no cover - every decoder *ForSequenceClassification has .score
            raise MetricUnavailable(f"{self.name}: {path} is not a decoder sequence-classification model (no .score head)")
        return {"tokenizer": tok, "model": model, "base": model.base_model, "head": head}

    def _head(self, bundle, pooled):
        return bundle["head"](pooled)[:, 0]


def _inform_class():
    """INF-ORM's architecture: a Llama backbone with a two-layer MLP head (Linear, ReLU,
    Linear) on the last token, as published with infly/INF-ORM-Llama3.1-70B."""
    import torch.nn as nn
    from transformers import LlamaModel, LlamaPreTrainedModel

    class INFORMForSequenceClassification(LlamaPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.num_labels = config.num_labels
            self.model = LlamaModel(config)
            self.score = nn.Sequential(
                nn.Linear(config.hidden_size, config.hidden_size),
                nn.ReLU(),
                nn.Linear(config.hidden_size, self.num_labels),
            )
            self.post_init()

    return INFORMForSequenceClassification


@register
class INFORMRewardModel(_RewardModel):
    """INF-ORM-Llama3.1-70B (INF AI, 2024): Llama-3.1-70B with an MLP reward head."""

    name = "INFORMRewardModel"
    description = "INF-ORM-Llama3.1-70B reward model: scalar preference reward for (prompt, response)."
    default_model = "infly/INF-ORM-Llama3.1-70B"
    # measured in bfloat16, summed over the GPUs the model was sharded on; we load it on one device
    resources = Resources("70B", 130.0, 290.0, True, measured("reference_free/INFORMRewardModel.py", gpu_mb=132727.05))
    default_batch_size = 1

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _load(self, path: Path, device: str):
        import torch

        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        model = _inform_class().from_pretrained(str(path), local_files_only=True, dtype=dtype).eval().to(device)
        return {"tokenizer": load_tokenizer(path), "model": model, "base": model.model}

    def _head(self, bundle, pooled):
        return bundle["model"].score(pooled)[:, 0]


def _ldl_class():
    """LDL-Reward-Gemma-2-27B's architecture: a Gemma-2 backbone; a regression MLP predicting
    ``num_objectives / 10`` ten-bin label distributions and a gating MLP weighting them; the
    reward is the expectation of the mixed distribution over bin values linspace(0, 1, 10).
    The MLPs live in ``regression_layer.pt`` / ``gating_layer.pt`` next to the backbone."""
    import torch
    import torch.nn as nn
    from transformers import Gemma2Model, Gemma2PreTrainedModel

    def mlp(dims: list[int]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for k in range(len(dims) - 1):
            layers.append(nn.Linear(dims[k], dims[k + 1]))
            if k < len(dims) - 2:
                layers.append(nn.LeakyReLU())
        return nn.Sequential(*layers)

    class _Regression(nn.Module):
        def __init__(self, hidden, n_obj, width):
            super().__init__()
            self.network = mlp([hidden, width, width, n_obj])

        def forward(self, x):
            return torch.softmax(self.network(x).view(x.size(0), -1, 10), dim=-1)

    class _Gating(nn.Module):
        def __init__(self, hidden, n_out, width, temperature, softmax):
            super().__init__()
            self.temperature, self.softmax = temperature, softmax
            self.network = mlp([hidden, width, width, n_out])

        def forward(self, x):
            out = self.network(x)
            return torch.softmax(out / self.temperature, dim=1) if self.softmax else out

    class LDLRewardGemma2(Gemma2PreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.model = Gemma2Model(config)
            cfg = config.to_dict()
            n_obj = int(cfg.get("num_objectives", 220))
            width = int(cfg.get("ldl_hidden_dim", 4096))
            self.regression_layer = _Regression(config.hidden_size, n_obj, width)
            self.gating_layer = _Gating(
                config.hidden_size, n_obj // 10, width, float(cfg.get("temperature", 1.0)), bool(cfg.get("softmax", False))
            )
            self.post_init()

        def reward(self, pooled):
            pooled = pooled.float()
            dists = self.regression_layer(pooled)  # batch x objectives/10 x 10
            weights = self.gating_layer(pooled).unsqueeze(1)  # batch x 1 x objectives/10
            total = torch.bmm(weights, dists).squeeze(1)
            return (total * torch.linspace(0, 1, total.size(-1), device=pooled.device)).sum(-1)

    return LDLRewardGemma2


@register
class LDLRewardModel(_RewardModel):
    """LDL-Reward-Gemma-2-27B (Chen et al., 2025): label-distribution-learning reward model."""

    name = "LDLRewardModel"
    description = "LDL-Reward-Gemma-2-27B reward model: expected reward of a gated mixture of label distributions."
    default_model = "ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1"
    resources = Resources(
        "27B", 55.0, 110.0, True,
        "our estimate: GPU memory is half of the gpu_mem = 104172 MB measured in SALT-NLP/autometrics "
        "`autometrics/metrics/reference_free/LDLRewardModel.py` (it loads float32; we load bfloat16 on CUDA) "
        "plus activations; RAM for a CPU-only run (float32) from the parameter count and default batch size",
    )
    default_batch_size = 2

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def check_available(self) -> None:
        super().check_available()
        path = self.model_path()
        missing = [f for f in ("regression_layer.pt", "gating_layer.pt") if not (path / f).is_file()]
        if missing:
            raise MetricUnavailable(f"{self.name}: {path} lacks {', '.join(missing)} (the reward head files of {self.default_model})")

    def _load(self, path: Path, device: str):
        import torch

        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        model = _ldl_class().from_pretrained(str(path), local_files_only=True, dtype=dtype)
        model.regression_layer.load_state_dict(torch.load(path / "regression_layer.pt", map_location="cpu", weights_only=True))
        model.gating_layer.load_state_dict(torch.load(path / "gating_layer.pt", map_location="cpu", weights_only=True))
        model.regression_layer.float()
        model.gating_layer.float()
        model = model.eval().to(device)
        return {"tokenizer": load_tokenizer(path), "model": model, "base": model.model}

    def _head(self, bundle, pooled):
        return bundle["model"].reward(pooled)


# ------------------------------------------------------------------------------ process RM
_BLANK = re.compile(r"\n\s*\n")


def split_steps(text: str) -> list[str]:
    """Reasoning steps: blank-line-separated paragraphs; a single paragraph is split into
    sentences.  An empty text is one empty step."""
    paras = [p.strip() for p in _BLANK.split(text) if p.strip()]
    if len(paras) > 1:
        return paras
    sents = _text.split_sentences(text) if text.strip() else []
    return sents or [text.strip()]


@register
class MathProcessRewardModel(ModelMetric):
    """Qwen2.5-Math-PRM-7B (Zhang et al., 2025): probability that each reasoning step is
    correct, read at ``<extra_0>`` separators; min / max / mean over steps."""

    name = "MathProcessRewardModel"
    needs_input = True
    submetrics = ("min", "max", "mean")
    description = "Qwen2.5-Math-PRM-7B process reward: P(step correct) at each step separator; min/max/mean over steps."
    default_model = "Qwen/Qwen2.5-Math-PRM-7B"
    resources = Resources(
        "7.6B", 18.0, 32.0, True,
        "our estimate from the parameter count and default batch size (the gpu_mem = 130000 MB in "
        "SALT-NLP/autometrics `autometrics/metrics/reference_free/PRMRewardModel.py` is marked there as an "
        "unmeasured guess, so it was not used)",
    )
    default_batch_size = 2
    SEPARATOR: ClassVar[str] = "<extra_0>"
    SYSTEM: ClassVar[str] = "Please reason step by step, and put your final answer within \\boxed{}."
    MAX_LENGTH: ClassVar[int] = 4096

    def __init__(self, *, model: str | None = None, trust_remote_code: bool = True, **kw):
        super().__init__(model=model, **kw)
        #: the released checkpoint defines its head in code shipped with the weights
        self.trust_remote_code = bool(trust_remote_code)

    def _load(self, path: Path, device: str):
        import json

        import torch

        archs = json.loads((path / "config.json").read_text()).get("architectures") or []
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        if any(a.endswith("ForTokenClassification") for a in archs):
            model = load_hf("AutoModelForTokenClassification", path, device, dtype=dtype)
        else:
            model = load_hf("AutoModel", path, device, dtype=dtype, trust_remote_code=self.trust_remote_code)
        tok = load_tokenizer(path, trust_remote_code=self.trust_remote_code)
        sep = tok.convert_tokens_to_ids(self.SEPARATOR)
        if sep is None or sep == tok.unk_token_id:
            raise MetricUnavailable(f"{self.name}: the tokenizer in {path} has no {self.SEPARATOR} token")
        return {"tokenizer": tok, "model": model, "sep": int(sep)}

    def _compute(self, outputs, inputs, references):
        import torch

        bundle = self.model()
        tok, model, sep = bundle["tokenizer"], bundle["model"], bundle["sep"]
        answers = [self.SEPARATOR.join(split_steps(o)) + self.SEPARATOR for o in outputs]
        texts = chat_texts(tok, inputs, answers, system=self.SYSTEM)
        seqs = [tok(t, add_special_tokens=False)["input_ids"][-self.MAX_LENGTH :] for t in texts]
        res = {k: np.zeros(len(outputs)) for k in self.submetrics}
        device = next(model.parameters()).device
        order = np.argsort([len(s) for s in seqs])
        for _, idx in batched(list(order), self.batch_size):
            ids, mask = right_pad([seqs[i] for i in idx], pad_id(tok))
            ids, mask = ids.to(device), mask.to(device)
            with inference_mode():
                out: Any = model(input_ids=ids, attention_mask=mask)
                logits = out.logits if hasattr(out, "logits") else out[0]
                probs = torch.softmax(logits.float(), dim=-1)[..., 1].cpu().numpy()
            at_sep = ((ids == sep) & (mask == 1)).cpu().numpy()
            for row, i in enumerate(idx):
                steps = probs[row][at_sep[row]]
                if steps.size == 0:  # every separator truncated away
                    steps = np.array([np.nan])
                res["min"][i], res["max"][i], res["mean"][i] = steps.min(), steps.max(), steps.mean()
        return res
