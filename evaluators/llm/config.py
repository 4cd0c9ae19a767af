"""Which LLM to call and how: :class:`LLMConfig` parses model strings into an endpoint, a
transport and call limits.

Models are LiteLLM/DSPy model strings (``openai/gpt-4o-mini``, ``anthropic/claude-...``,
``ollama/llama3``, ``openai/<name>`` with an ``api_base``) plus ``local`` / ``local:0.5b`` /
``local:1.5b`` for the embedded llama.cpp server (:mod:`autometrics.evaluators.llm.local`).
API keys come from the usual environment variables (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
... or the variable named by ``api_key_env``); they are read at call time and never stored,
cached or logged.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

__all__ = ["LLMConfig", "estimate_tokens"]


_KEY_ENV_BY_PROVIDER = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
    "groq": "GROQ_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
}


def estimate_tokens(text: str) -> int:
    """Rough token count (≈4 characters per token) for dry runs and missing usage."""
    return max(1, math.ceil(len(text) / 4))


# ---------------------------------------------------------------------------- config


@dataclass
class LLMConfig:
    """One model endpoint.  ``model`` is a LiteLLM/DSPy model string or ``local[:0.5b|:1.5b]``."""

    model: str
    api_base: str | None = None
    api_key_env: str | None = None  # name of the env var holding the key; never the key itself
    temperature: float = 0.0
    max_tokens: int = 256
    timeout: float = 120.0
    concurrency: int = 2
    max_retries: int = 4
    backoff: float = 1.0  # first retry delay in seconds, doubled each time (with jitter)
    deadline: float = 300.0  # one request, its retries included, never takes longer than this (s)
    structured: str = "auto"  # auto | json_schema | json_object | none
    logprobs: str = "auto"  # auto | on | off

    @classmethod
    def parse(cls, text: str | None, **overrides) -> LLMConfig:
        """``"openai/gpt-4o-mini"``, ``"local"``, ``"local:1.5b"``, or
        ``"openai/my-model@http://host:8000/v1"`` (an ``api_base`` after ``@``)."""
        text = (text or "local").strip()
        api_base = None
        if "@" in text and "://" in text.split("@", 1)[1]:
            text, api_base = text.split("@", 1)
        if text == "local":
            text = "local:" + os.environ.get("AUTOMETRICS_LOCAL_MODEL", "1.5b")
        kw = {"model": text, "api_base": api_base or None}
        kw.update({k: v for k, v in overrides.items() if v is not None})
        if kw["model"].startswith("local:"):
            kw.setdefault("concurrency", 1)  # llama_cpp.server handles one request at a time
        return cls(**kw)

    @property
    def is_local(self) -> bool:
        return self.model.startswith("local:")

    @property
    def provider(self) -> str:
        return "local" if self.is_local else (self.model.split("/", 1)[0] if "/" in self.model else "openai")

    def resolved_api_base(self) -> str | None:
        if self.api_base:
            return self.api_base.rstrip("/")
        if self.is_local:
            from .local import shared_server

            return shared_server(self.model.split(":", 1)[1]).api_base
        if self.provider == "openai":
            return (os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or "https://api.openai.com/v1").rstrip("/")
        return None

    def api_key(self) -> str | None:
        """Read at call time from the environment; never stored on the object.

        An endpoint given by URL (``model@http://host/v1``) gets its key from ``api_key_env`` or
        ``AUTOMETRICS_LLM_API_KEY`` only: the provider's own key (e.g. ``OPENAI_API_KEY``) is
        never sent to a host that is not the provider's."""
        if self.api_key_env:
            env = self.api_key_env
        elif self.api_base:
            env = "AUTOMETRICS_LLM_API_KEY"
        else:
            env = _KEY_ENV_BY_PROVIDER.get(self.provider)
        return os.environ.get(env) if env else None

    def cache_identity(self) -> str:
        """What the cache keys on: the model (the local one by its file hash, not its port)."""
        if self.is_local:
            from .local import MODELS

            size = self.model.split(":", 1)[1]
            return f"{self.model}@{MODELS.get(size, {}).get('sha256', '?')[:12]}"
        return self.model + (f"@{self.api_base}" if self.api_base else "")

    def uses_openai_http(self) -> bool:
        return self.is_local or bool(self.api_base) or self.provider == "openai"

    def public(self) -> dict:
        """Safe to store in an artifact / print (no key)."""
        return dataclasses.asdict(self)
