"""LENS and LENS-SALSA (Maddela et al., 2023; Heineman et al., 2023): learned simplification
metrics, through the ``lens-metric`` package with a local checkpoint (never downloaded).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._models import (
    ModelMetric,
    Resources,
    locate_model,
    measured,
    pick_device,
    search_locations,
)
from .registry import register

__all__ = ["LENS", "LENS_SALSA"]

_LENS_GPU = (
    "our estimate from the parameter count and default batch size (the published gpu_mem is 0 MB: "
    "that measurement ran the model on CPU)"
)


# ------------------------------------------------------------------------------ LENS
class _LensBase(ModelMetric):
    """LENS models are COMET-style checkpoints scored through the ``lens-metric`` package."""

    requires = ("torch", "lens")
    default_batch_size = 16

    def model_path(self) -> Path:
        for loc in search_locations(self.model_name):
            if loc.name == "snapshots" and loc.is_dir():
                cands = sorted(loc.glob("*/checkpoints/*.ckpt"))
            elif loc.is_file() and loc.suffix == ".ckpt":
                cands = [loc]
            elif loc.is_dir():
                cands = sorted(loc.glob("checkpoints/*.ckpt")) or sorted(loc.glob("*.ckpt"))
            else:
                cands = []
            if cands:
                return cands[-1]

        return locate_model(self.name, self.model_name, file="checkpoints/model.ckpt", how=(
            f"on a machine with Hugging Face access run `huggingface-cli download {self.model_name} --local-dir X` "
            f"and copy X (with its checkpoints/*.ckpt) to ${'AUTOMETRICS_MODELS_DIR'}/{self.model_name}; LENS also loads "
            "its roberta-large encoder by name, which must be in the local Hugging Face cache"
        ))

    def _devices(self, device: str):
        if device.startswith("cuda"):
            return [int(device.split(":")[1]) if ":" in device else 0]
        return None


@register
class LENS(_LensBase):
    """LENS (Maddela et al., 2023): a learned simplification metric (RoBERTa-large, trained on
    human ratings) scoring (complex input, simplified output, references); rescaled 0-100."""

    name = "LENS"
    needs_input = True
    needs_reference = True
    description = "LENS: learned text-simplification metric on (input, output, references), rescaled to about 0-100."
    default_model = "davidheineman/lens"
    resources = Resources("355M", 3.0, 3.3, False, measured("reference_based/LENS.py", cpu_mb=3330.29, rest=_LENS_GPU))

    def __init__(self, *, model: str | None = None, rescale: bool = True, **kw):
        super().__init__(model=model, rescale=bool(rescale), **kw)

    def _load(self, path: Path, device: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import lens

        return lens.LENS(str(path), rescale=self.params["rescale"])

    def _compute(self, outputs, inputs, references):
        scorer = self.model()
        scores = scorer.score(inputs, outputs, references, batch_size=self.batch_size, devices=self._devices(pick_device(self.device)))
        return np.asarray(scores, dtype=float)


@register
class LENS_SALSA(_LensBase):
    """LENS-SALSA (Heineman et al., 2023): reference-free simplification quality from a model
    trained on SALSA edit annotations; scores (complex input, simplified output)."""

    name = "LENS_SALSA"
    needs_input = True
    description = "LENS-SALSA: reference-free learned simplification quality of (input, output), about 0-100."
    default_model = "davidheineman/lens-salsa"
    resources = Resources("355M", 3.0, 2.8, False, measured("reference_free/LENS_SALSA.py", cpu_mb=2909.67, rest=_LENS_GPU))

    def __init__(self, *, model: str | None = None, **kw):
        super().__init__(model=model, **kw)

    def _load(self, path: Path, device: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import lens

        return lens.LENS_SALSA(str(path))

    def _compute(self, outputs, inputs, references):
        scorer = self.model()
        res = scorer.score(inputs, outputs, batch_size=self.batch_size, devices=self._devices(pick_device(self.device)))
        scores = res[0] if isinstance(res, tuple) else res  # (scores, word-level edit tags)
        return np.asarray(scores, dtype=float)
