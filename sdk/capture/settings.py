"""Capture settings: :class:`ObserveConfig` and how ``configure()`` arguments and environment
variables resolve into it.

Kept apart from the runtime so the rules are pure and readable in one place: an argument of
:func:`autometrics.capture.configure` wins over its ``AUTOMETRICS_*`` environment variable, which
wins over the default (the full table is in the :mod:`autometrics.capture` docstring).  Nothing
here builds a provider, opens a store or touches module state; the only side effect is a logged
warning for an unusable environment value.  Invalid *arguments* raise ``ValueError`` here, before
any earlier configuration is torn down.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

from autometrics.collectors.files import project_name
from autometrics.metricbank.errors import UserError

# The one logger of the capture package (its name predates the split into modules).
log = logging.getLogger("autometrics.capture")


def env_bool(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


@dataclass
class ObserveConfig:
    """Resolved configuration (arguments win over environment variables)."""

    store_url: str | None = None
    collector_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    project: str = "default"
    task: str | None = None
    sample_rate: float = 1.0
    langfuse: str = "auto"
    capture_content: bool = True
    max_content_chars: int = 32_000
    queue_size: int = 10_000
    batch_size: int = 512
    flush_interval: float = 0.5
    feedback_aggregate: str | dict = "latest"
    enabled: bool = True
    # durable local spool for outages: a path, or None for ``spool.db`` in the data folder; False = off
    spool: str | bool | None = None
    spool_max_mb: float = 256.0
    # what feedback() does with a value it rejects: "return" (None, logged + counted) or "raise"
    feedback_errors: str = "return"
    # the application's own TracerProvider: @observe spans are made by it (one trace tree in the
    # app's APM and the trace store); None = a private provider
    tracer_provider: object | None = field(default=None, repr=False)


def resolve_config(
    *,
    store_url: str | None,
    collector_url: str | None,
    api_key: str | None,
    project: str | None,
    task: str | None,
    sample_rate: float | None,
    langfuse: str | bool | None,
    capture_content: bool | None,
    max_content_chars: int | None,
    queue_size: int | None,
    flush_interval: float | None,
    feedback_aggregate: str | dict | None,
    enabled: bool | None,
    spool: str | bool | None = None,
    spool_max_mb: float | None = None,
    feedback_errors: str | None = None,
    tracer_provider: object | None = None,
) -> ObserveConfig:
    """The :class:`ObserveConfig` for ``configure()``'s arguments (``None``: not given)."""
    env = os.environ
    cfg = ObserveConfig()
    cfg.store_url = store_url or env.get("AUTOMETRICS_STORE_URL") or None
    cfg.collector_url = collector_url or env.get("AUTOMETRICS_COLLECTOR_URL") or None
    cfg.api_key = api_key or env.get("AUTOMETRICS_API_KEY") or None
    cfg.project = project_name(project)
    cfg.task = task or env.get("AUTOMETRICS_TASK") or None
    if sample_rate is None:
        try:
            sample_rate = float(env.get("AUTOMETRICS_SAMPLE_RATE", "1"))
        except ValueError:
            log.warning("autometrics: AUTOMETRICS_SAMPLE_RATE is not a number; using 1.0")
            sample_rate = 1.0
    if not (0.0 <= float(sample_rate) <= 1.0) or math.isnan(float(sample_rate)):
        raise UserError(f"sample_rate must be between 0 and 1, not {sample_rate!r}")
    cfg.sample_rate = float(sample_rate)
    if isinstance(langfuse, bool):
        langfuse = "on" if langfuse else "off"
    cfg.langfuse = langfuse or env.get("AUTOMETRICS_LANGFUSE", "auto")
    cfg.capture_content = capture_content if capture_content is not None else env_bool("AUTOMETRICS_CAPTURE_CONTENT", True)
    if max_content_chars is not None:
        cfg.max_content_chars = int(max_content_chars)
    if queue_size is not None:
        if queue_size < 1:
            raise UserError("queue_size must be >= 1")
        cfg.queue_size = int(queue_size)
    if flush_interval is not None:
        cfg.flush_interval = float(flush_interval)
    if feedback_aggregate is not None:
        cfg.feedback_aggregate = feedback_aggregate
    cfg.enabled = enabled if enabled is not None else not env_bool("AUTOMETRICS_DISABLED", False)
    if spool is None:
        env_spool = env.get("AUTOMETRICS_SPOOL", "").strip()
        spool = False if env_spool.lower() in ("0", "false", "no", "off") else (env_spool or None)
    cfg.spool = spool
    if spool_max_mb is None and env.get("AUTOMETRICS_SPOOL_MAX_MB"):
        try:
            spool_max_mb = float(env["AUTOMETRICS_SPOOL_MAX_MB"])
        except ValueError:
            log.warning("autometrics: AUTOMETRICS_SPOOL_MAX_MB is not a number; using %s", cfg.spool_max_mb)
    if spool_max_mb is not None:
        if not spool_max_mb > 0:
            raise UserError(f"spool_max_mb must be > 0, not {spool_max_mb!r}")
        cfg.spool_max_mb = float(spool_max_mb)
    feedback_errors = (feedback_errors or env.get("AUTOMETRICS_FEEDBACK_ERRORS") or "return").strip().lower()
    if feedback_errors not in ("return", "raise"):
        raise UserError(f"feedback_errors must be 'return' or 'raise', not {feedback_errors!r}")
    cfg.feedback_errors = feedback_errors
    cfg.tracer_provider = tracer_provider
    return cfg


def langfuse_wanted(mode: str) -> bool:
    """Whether ``cfg.langfuse`` (``auto``/``on``/``off``) turns the Langfuse export on here:
    only ever with LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY set (``on`` without them warns)."""
    mode = (mode or "auto").lower()
    if mode in ("off", "false", "0", "no"):
        return False
    from autometrics.collectors.langfuse_client import langfuse_configured

    have_keys = langfuse_configured()
    if mode in ("on", "true", "1", "yes") and not have_keys:
        log.warning("autometrics: langfuse=on but LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are not set; Langfuse export off")
    return have_keys
