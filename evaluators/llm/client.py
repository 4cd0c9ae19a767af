"""The LLM client: an OpenAI-compatible client with retries, the reply cache
(:mod:`autometrics.evaluators.llm.cache`) and per-stage accounting, and a DSPy engine that routes
DSPy programs through it.  Model strings and endpoints: :mod:`autometrics.evaluators.llm.config`
(re-exported here with the cache, so ``from ...llm.client import LLMConfig, LLMCache`` works).

Transport: OpenAI-compatible endpoints (``openai/...``, anything with an ``api_base``, the local
server) are called with plain ``httpx`` (logprobs, ``response_format`` and exact error codes
are needed); other providers go through ``litellm.completion``.  Either way retries, backoff,
the cache and the accounting are ours.

Example::

    client = LLMClient(LLMConfig.parse("openai/gpt-4o-mini"))
    r = client.chat([{"role": "user", "content": "Say hi"}], stage="demo", max_tokens=5)
    r.text, r.ok, client.usage.summary()
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...metricbank.errors import Unreachable

__all__ = [
    "LLMConfig",
    "LLMResponse",
    "LLMClient",
    "LLMCache",
    "LLMUnreachable",
    "Usage",
    "default_cache_path",
    "estimate_tokens",
    "dspy_lm",
]

from .cache import LLMCache, default_cache_path
from .config import LLMConfig, estimate_tokens
from .usage import LLMResponse, StageUsage, Usage  # noqa: F401  (re-exported)

log = logging.getLogger("autometrics.llm")

# ---------------------------------------------------------------------------- client


class _Retryable(Exception):
    def __init__(self, msg: str, retry_after: float | None = None):
        super().__init__(msg)
        self.retry_after = retry_after


class _Fatal(Exception):
    pass


class _Unreachable(Exception):
    """Nothing listens at the endpoint (connection refused, unknown host): not worth a retry."""


class LLMUnreachable(Unreachable):
    """The LLM endpoint cannot be reached at all: raised by :meth:`LLMClient.check_reachable`
    (a fit checks before its first call) and by a fit whose endpoint went away mid-run."""


def _unreachable_cause(exc: BaseException) -> str | None:
    """'connection refused' / 'unknown host' when that is the root cause of a transport error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused"
        text = str(exc).lower()
        if "connection refused" in text or "errno 111" in text:
            return "connection refused"
        if "name or service not known" in text or "nodename nor servname" in text or "getaddrinfo failed" in text:
            return "unknown host"
        exc = exc.__cause__ or exc.__context__
    return None


def _parse_top_logprobs(choice: dict) -> list[dict[str, float]] | None:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    content = lp.get("content")
    if isinstance(content, list) and content:
        out = []
        for tok in content:
            alts = {a.get("token"): float(a.get("logprob")) for a in (tok.get("top_logprobs") or []) if a.get("token") is not None}
            if tok.get("token") is not None and tok.get("token") not in alts and tok.get("logprob") is not None:
                alts[tok["token"]] = float(tok["logprob"])
            out.append(alts)
        return out
    # legacy completions-style shape: {"top_logprobs": [{token: logprob}, ...]}
    tl = lp.get("top_logprobs")
    if isinstance(tl, list) and tl and isinstance(tl[0], dict):
        return [{k: float(v) for k, v in d.items()} for d in tl]
    return None


class LLMClient:
    """Chat completions with bounded concurrency, retries with exponential backoff on
    429/5xx/timeouts/connection errors/malformed bodies, a persistent cache and per-stage
    accounting.  A request that still fails returns an :class:`LLMResponse` with ``error`` set
    (callers turn it into a missing value); it never raises for endpoint trouble."""

    def __init__(self, config: LLMConfig, *, cache: LLMCache | str | Path | None | bool = None, usage: Usage | None = None):
        self.config = config
        if cache is False:
            self.cache = None
        elif isinstance(cache, LLMCache):
            self.cache = cache
        else:
            self.cache = LLMCache(cache)
        self.usage = usage or Usage()
        self._http = None
        self._http_lock = threading.Lock()
        self._no_structured = False  # set when the endpoint refused response_format
        #: a measured server speed (:class:`autometrics.evaluators.judges.budget.Speed`); when set, a
        #: call's timeout is at least 3x the time its size needs at that speed (a slow embedded
        #: model on a long generation prompt is not cut at a fixed timeout)
        self.speed = None
        # set on the first "nothing listens there" error: later calls fail at once, without a
        # network round trip or a retry (a fit then stops with this reason instead of hanging)
        self.unreachable: str | None = None

    # ------------------------------------------------------------------ public
    def chat(
        self,
        messages: list[dict],
        *,
        stage: str = "default",
        max_tokens: int | None = None,
        temperature: float | None = None,
        logprobs: bool = False,
        top_logprobs: int = 10,
        json_schema: dict | None = None,
    ) -> LLMResponse:
        params = {
            "max_tokens": int(max_tokens or self.config.max_tokens),
            "temperature": float(self.config.temperature if temperature is None else temperature),
        }
        if logprobs:
            params["logprobs"] = True
            params["top_logprobs"] = int(top_logprobs)
        if json_schema is not None and self.config.structured != "none":
            params["json_schema"] = json_schema
        key = LLMCache.key(self.config.cache_identity(), messages, params)
        self.usage.add(stage, requests=1)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.usage.add(stage, cache_hits=1)
                return LLMResponse(**hit, cached=True)
        self.usage.note_prompt(stage, messages)
        started = time.perf_counter()
        resp = self._call_with_retries(messages, params, stage, *self.timeouts(messages, params["max_tokens"]))
        self.usage.add(
            stage,
            seconds=time.perf_counter() - started,
            prompt_tokens=resp.prompt_tokens,
            completion_tokens=resp.completion_tokens,
        )
        if resp.error is not None:
            self.usage.add(stage, failures=1)
            log.warning("LLM request failed after retries (%s): %s", stage, resp.error)
        elif self.cache is not None:
            self.cache.put(key, self.config.cache_identity(), resp.to_cache())
        return resp

    def chat_many(self, requests: Sequence[dict], *, stage: str = "default", progress: bool = False) -> list[LLMResponse]:
        """Run ``chat(**request)`` for each request with at most ``config.concurrency`` in flight."""
        requests = list(requests)
        if not requests:
            return []
        workers = max(1, int(self.config.concurrency))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(requests), desc=stage, unit="call", leave=False, disable=None)  # none off a terminal

        def one(req):
            r = self.chat(stage=stage, **req)
            if bar is not None:
                bar.update(1)
            return r

        try:
            if workers == 1:
                return [one(r) for r in requests]
            with ThreadPoolExecutor(max_workers=workers) as pool:
                return list(pool.map(one, requests))
        finally:
            if bar is not None:
                bar.close()

    def check_reachable(self, timeout: float = 10.0) -> None:
        """Raise :class:`LLMUnreachable` when nothing answers at an OpenAI-compatible endpoint
        (connection refused, unknown host, no answer within ``timeout``).  Any HTTP answer, even an
        error status, counts as reachable.  Endpoints called through LiteLLM are not probed."""
        if not self.config.uses_openai_http():
            return
        import httpx

        base = self.config.resolved_api_base()
        try:
            self._client().get(f"{base}/models", timeout=timeout)
        except httpx.TimeoutException:
            self.unreachable = f"no answer from {base} within {timeout:g} s"
        except httpx.TransportError as exc:
            self.unreachable = f"{_unreachable_cause(exc) or type(exc).__name__} at {base}"
        if self.unreachable:
            raise LLMUnreachable(f"cannot reach the LLM endpoint: {self.unreachable}. Start the server, or point --llm at "
                                 "one that runs (e.g. `local` for the embedded model, or openai/MODEL@http://host:port/v1)")

    def timeouts(self, messages, max_tokens: int) -> tuple[float, float]:
        """(per-attempt timeout, deadline of the request) in seconds: the configured ones, raised to
        3x (6x) what the call needs at the measured :attr:`speed` with ``concurrency`` calls queued
        ahead of it."""
        t, d = self.config.timeout, self.config.deadline
        if self.speed is not None:
            prompt = sum(estimate_tokens(str(m.get("content") or "")) for m in messages)
            need = self.speed.seconds(prompt, max_tokens) * max(1, int(self.config.concurrency))
            t = max(t, 3.0 * need)
            d = max(d, 2.0 * t)
        return t, d

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    # ---------------------------------------------------------------- internals
    def _call_with_retries(self, messages, params, stage, timeout: float | None = None, deadline: float | None = None) -> LLMResponse:
        """Retry only what can pass on a second try (429, 5xx, timeouts, dropped connections,
        malformed bodies), with backoff, and never past ``config.deadline`` seconds in all."""
        delay = self.config.backoff
        last = "no attempt"
        timeout = timeout or self.config.timeout
        deadline = deadline or self.config.deadline
        give_up_at = time.monotonic() + deadline
        for attempt in range(self.config.max_retries + 1):
            if self.unreachable:
                return LLMResponse(error=f"endpoint unreachable: {self.unreachable}")
            self.usage.add(stage, calls=1)
            try:
                if self.config.uses_openai_http():
                    return self._call_http(messages, params, timeout)
                return self._call_litellm(messages, params, timeout)
            except _Fatal as exc:
                return LLMResponse(error=str(exc))
            except _Unreachable as exc:
                self.unreachable = str(exc)
                return LLMResponse(error=f"endpoint unreachable: {exc}")
            except _Retryable as exc:
                last = str(exc)
                if attempt >= self.config.max_retries:
                    break
                wait = min(60.0, exc.retry_after if exc.retry_after is not None else delay * (1 + 0.25 * random.random()))
                if time.monotonic() + wait >= give_up_at:
                    return LLMResponse(error=f"gave up after {attempt + 1} attempts ({deadline:g} s deadline): {last}")
                self.usage.add(stage, retries=1)
                log.info("retrying after %s (attempt %d, wait %.2fs)", exc, attempt + 1, wait)
                time.sleep(wait)
                delay *= 2
        return LLMResponse(error=f"gave up after {self.config.max_retries + 1} attempts: {last}")

    def _client(self):
        import httpx

        with self._http_lock:
            if self._http is None:
                self._http = httpx.Client(timeout=httpx.Timeout(self.config.timeout, connect=min(10.0, self.config.timeout)))
            return self._http

    def _structured_field(self, schema: dict) -> dict | None:
        mode = self.config.structured
        if self._no_structured or mode == "none":
            return None
        if mode == "auto":
            mode = "json_object" if self.config.is_local else "json_schema"
        if mode == "json_object":  # llama_cpp.server: a grammar from the schema
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}

    def _call_http(self, messages, params, timeout: float | None = None) -> LLMResponse:
        import httpx

        base = self.config.resolved_api_base()
        model = self.config.model
        if self.config.is_local:
            model = "local"
        elif "/" in model and self.config.provider == "openai":
            model = model.split("/", 1)[1]
        body = {"model": model, "messages": messages, "max_tokens": params["max_tokens"], "temperature": params["temperature"]}
        if params.get("logprobs"):
            body["logprobs"] = True
            body["top_logprobs"] = params["top_logprobs"]
        if "json_schema" in params:
            rf = self._structured_field(params["json_schema"])
            if rf:
                body["response_format"] = rf
        headers = {}
        key = self.config.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            t = timeout or self.config.timeout
            r = self._client().post(f"{base}/chat/completions", json=body, headers=headers,
                                    timeout=httpx.Timeout(t, connect=min(10.0, t)))
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timeout ({type(exc).__name__})") from None
        except httpx.ConnectError as exc:
            why = _unreachable_cause(exc)
            if why:
                raise _Unreachable(f"{why} at {base}") from None
            raise _Retryable(f"connection error ({type(exc).__name__}: {exc})") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"connection error ({type(exc).__name__}: {exc})") from None
        if r.status_code == 429 or r.status_code >= 500:
            ra = r.headers.get("retry-after")
            try:
                ra_s = float(ra) if ra is not None else None
            except ValueError:
                ra_s = None
            raise _Retryable(f"HTTP {r.status_code}", retry_after=ra_s)
        if r.status_code == 400 and "response_format" in body and not self._no_structured:
            # the endpoint does not do structured output: fall back to plain text for good
            self._no_structured = True
            log.warning("endpoint rejected response_format; continuing without structured output")
            raise _Retryable("HTTP 400 with response_format (retrying without it)", retry_after=0.0)
        if r.status_code >= 400:
            raise _Fatal(f"HTTP {r.status_code}: {r.text[:200]}")
        try:
            data = r.json()
            choice = data["choices"][0]
            text = choice["message"].get("content")
            if text is None:
                text = ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _Retryable(f"malformed response body ({type(exc).__name__})") from None
        usage = data.get("usage") or {}
        return LLMResponse(
            text=text,
            finish_reason=choice.get("finish_reason"),
            top_logprobs=_parse_top_logprobs(choice),
            prompt_tokens=int(usage.get("prompt_tokens") or sum(estimate_tokens(m.get("content") or "") for m in messages)),
            completion_tokens=int(usage.get("completion_tokens") or estimate_tokens(text)),
        )

    def _call_litellm(self, messages, params, timeout: float | None = None) -> LLMResponse:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        kw = {"model": self.config.model, "messages": messages, "max_tokens": params["max_tokens"],
              "temperature": params["temperature"], "timeout": timeout or self.config.timeout, "num_retries": 0}
        if params.get("logprobs"):
            kw["logprobs"] = True
            kw["top_logprobs"] = params["top_logprobs"]
        if "json_schema" in params and not self._no_structured:
            kw["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": params["json_schema"]}}
        key = self.config.api_key()
        if key:
            kw["api_key"] = key
        try:
            r = litellm.completion(**kw)
        except (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError, litellm.InternalServerError,
                litellm.ServiceUnavailableError) as exc:
            raise _Retryable(type(exc).__name__) from None
        except litellm.BadRequestError as exc:
            if "response_format" in kw and not self._no_structured:
                self._no_structured = True
                raise _Retryable("bad request with response_format", retry_after=0.0) from None
            raise _Fatal(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        except Exception as exc:
            raise _Fatal(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        d = r.model_dump() if hasattr(r, "model_dump") else dict(r)
        choice = d["choices"][0]
        text = (choice.get("message") or {}).get("content") or ""
        usage = d.get("usage") or {}
        return LLMResponse(
            text=text,
            finish_reason=choice.get("finish_reason"),
            top_logprobs=_parse_top_logprobs(choice),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )


# ------------------------------------------------------------------------------ DSPy


class AutometricsEngine:
    """A DSPy 3.4 engine (``complete(Request) -> Response``) that sends DSPy's requests through
    :class:`LLMClient`, so DSPy programs (generators, MIPROv2) share our cache, retries and
    accounting.  Build it with :func:`dspy_lm`."""

    def __init__(self, client: LLMClient, stage: str):
        self.client = client
        self.stage = stage

    def complete(self, request):
        from dspy.lm15 import Message, Response, TextPart
        from dspy.lm15 import Usage as DUsage

        messages = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(getattr(p, "text", "") or "" for p in request.system)
            messages.append({"role": "system", "content": system})
        messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
        cfg = request.config
        r = self.client.chat(messages, stage=self.stage, max_tokens=cfg.max_tokens, temperature=cfg.temperature)
        if not r.ok:
            raise RuntimeError(f"LLM request failed: {r.error}")
        finish = "length" if r.truncated else "stop"
        return Response(id=None, model=self.client.config.model, message=Message.assistant([TextPart(r.text or "")]),
                        finish_reason=finish, usage=DUsage(input_tokens=r.prompt_tokens, output_tokens=r.completion_tokens))

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self):
        pass


def dspy_lm(client: LLMClient, stage: str, *, max_tokens: int | None = None, temperature: float | None = None):
    """A ``dspy.LM`` whose calls go through ``client`` (DSPy's own cache off: ours is used)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import dspy

    return dspy.LM(
        model=f"openai/{client.config.model}",
        engine=AutometricsEngine(client, stage),
        cache=False,
        max_tokens=max_tokens or client.config.max_tokens,
        temperature=client.config.temperature if temperature is None else temperature,
        num_retries=0,
    )
