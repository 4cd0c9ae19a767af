"""``python -m llama_cpp.server`` that ends when the process which started it dies.

Why: a fit starts the local server from a worker thread, and Linux's parent-death signal fires
when that *thread* ends, so it cannot be used there; a fit killed by ``timeout`` or ``kill -9``
left an orphaned server generating at full CPU (seen on 2026-12-04).  This wrapper watches its
parent pid once a second and kills its own process when the parent is gone (the pid it was
started with is passed in, so a parent that died before the watch began is noticed too).

Usage (what :class:`~autometrics.evaluators.llm.local.LocalLLMServer` runs)::

    python -m autometrics.evaluators.llm._server_child PARENT_PID --model M --port P ...
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time


def _watch(parent: int, period: float = 1.0) -> None:
    while True:
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # SIGTERM does not stop a server mid-generation
        time.sleep(period)


def main(argv: list[str]) -> None:
    if not argv or not argv[0].isdigit():
        raise SystemExit("usage: python -m autometrics.evaluators.llm._server_child PARENT_PID [llama_cpp.server args]")
    threading.Thread(target=_watch, args=(int(argv[0]),), daemon=True, name="parent-watch").start()
    sys.argv = ["llama_cpp.server", *argv[1:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
