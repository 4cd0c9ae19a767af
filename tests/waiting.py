"""Polling helper shared by the tests that wait for a background thread or process."""

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
