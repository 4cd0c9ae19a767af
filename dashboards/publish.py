"""What the continuous-evaluation worker publishes after each job, as publishers the CLI wires
into :class:`~autometrics.evaluators.continuous.worker.Worker` (``publishers=[...]``):

- :class:`DashboardPublisher` rewrites the built-in dashboard HTML;
- :class:`LangfusePublisher` delivers the champion's undelivered scores and alerts to Langfuse
  (a trace's scores count as pushed only once Langfuse acknowledged them);
- :class:`EchoPublisher` prints the one-line summary of each job (``autometrics worker``).

Why hooks: the worker belongs to the evaluators stage and must not import this later stage; the
dependency points one way (dashboards -> evaluators), and a deployment can add its own publisher.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..collectors.langfuse_client import langfuse_configured
from .langfuse_push import LangfusePush, push_pending
from .render import write_dashboard

__all__ = ["DashboardPublisher", "LangfusePublisher", "EchoPublisher", "default_publishers"]

log = logging.getLogger("autometrics.worker")


class DashboardPublisher:
    def __init__(self, path):
        self.path = Path(path)

    def publish(self, monitor, result: dict) -> None:
        try:
            write_dashboard(monitor, self.path)
            result["dashboard"] = str(self.path)
        except Exception as exc:
            log.warning("dashboard not written: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        pass


class LangfusePublisher:
    """``mode``: ``auto`` (push when LANGFUSE_PUBLIC_KEY/SECRET_KEY are set), ``on`` (warn when
    they are not), ``off``.  Pushes after ``score`` jobs only."""

    def __init__(self, mode: str = "auto", *, max_attempts: int = 10):
        self.mode = (mode or "auto").lower()
        self.max_attempts = max_attempts
        self._pusher = None
        self._disabled = self.mode == "off"

    def _client(self):
        if self._disabled:
            return None
        if self._pusher is None:
            if not langfuse_configured():
                if self.mode == "on":
                    log.warning("langfuse=on but LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are not set; not pushing")
                self._disabled = True
                return None
            try:
                self._pusher = LangfusePush()
            except Exception as exc:
                log.warning("Langfuse push disabled: %s: %s", type(exc).__name__, exc)
                self._disabled = True
                return None
        return self._pusher

    def publish(self, monitor, result: dict) -> None:
        if result.get("job") != "score":
            return
        pusher = self._client()
        if pusher is None:
            return

        # delivered synchronously: a trace's scores are marked pushed only once Langfuse acknowledged them
        result["langfuse"] = push_pending(monitor, pusher, max_attempts=self.max_attempts)

    def close(self) -> None:
        if self._pusher is not None:
            self._pusher.shutdown(5.0)


class EchoPublisher:
    """Prints one line per job (what it refit, scored, pushed, alerted)."""

    def __init__(self, key: str, echo=print):
        self.key, self.echo = key, echo

    def publish(self, monitor, result: dict) -> None:
        from ..evaluators.continuous.worker import job_line

        self.echo(job_line(self.key, result), flush=True) if self.echo is print else self.echo(job_line(self.key, result))

    def close(self) -> None:
        pass


def default_publishers(*, dashboard=None, langfuse: str = "auto", langfuse_max_attempts: int = 10, echo_key: str | None = None,
                       phoenix: str | None = None):
    """The publishers ``autometrics worker`` uses: Langfuse and Phoenix first (their counts reach
    the echo line), then the dashboard, then the echo."""
    pubs: list = [LangfusePublisher(langfuse, max_attempts=langfuse_max_attempts)]
    if phoenix:
        from .phoenix_push import PhoenixPublisher

        pubs.append(PhoenixPublisher(phoenix))
    if dashboard:
        pubs.append(DashboardPublisher(dashboard))
    if echo_key:
        pubs.append(EchoPublisher(echo_key))
    return pubs
