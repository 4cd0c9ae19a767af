"""Polling helpers shared by the tests that wait for a background thread or process."""

from __future__ import annotations

import time


def wait_until(pred, timeout: float = 10.0, step: float = 0.05) -> bool:
    """Poll ``pred`` until it returns true (True) or ``timeout`` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


def stored_spans(url: str, n: int, capture, timeout: float = 15.0, settle: float = 0.0):
    """The trace store's spans once at least ``n`` arrived (flushing ``capture`` while waiting:
    LiteLLM records its span from its logging thread just after the call, so it may come a moment
    after flush()); ``settle``: wait that much longer and read again, so a span that should not
    exist would have come by then."""
    from autometrics.collectors.store import TraceStore

    store = TraceStore(url)
    got = {}

    def ready():
        capture.flush(5)
        got["df"] = store.spans_frame()
        return len(got["df"]) >= n

    wait_until(ready, timeout, 0.1)
    if settle:
        time.sleep(settle)
        capture.flush(5)
        got["df"] = store.spans_frame()
    store.dispose()
    return got["df"]


def wait_for_http(url: str, proc=None, timeout: float = 60.0) -> bool:
    """Poll ``url`` (a health endpoint) until it answers 200; False when ``timeout`` passed or the
    server process ``proc`` exited first."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.2)
    return False
