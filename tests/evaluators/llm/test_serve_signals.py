"""``autometrics llm serve`` as a real process: SIGTERM and SIGINT (even when started the way a
shell starts a background job, with SIGINT ignored) stop it and its llama_cpp.server child and
remove the temporary log; kill -9 of the serve process takes the child down too (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from autometrics.evaluators.llm import local as local_llm

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def _start(ignore_sigint: bool):
    pre = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    p = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "llm", "serve", "--model", "0.5b"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=pre)
    line = ""
    deadline = time.monotonic() + 240
    while "serving" not in line and time.monotonic() < deadline and p.poll() is None:
        line = p.stdout.readline()
    assert "serving" in line, f"llm serve did not start: {line!r}"
    kids = _children(p.pid)
    assert len(kids) == 1 and _alive(kids[0])
    return p, kids[0]


def _gone(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module", autouse=True)
def _needs_model():
    if not local_llm.llama_cpp_available():
        pytest.skip('llama-cpp-python[server] is not installed (pip install ".[llm]")')
    if local_llm.model_path("0.5b") is None:
        pytest.skip("the 0.5B model is not installed (autometrics llm install --model 0.5b)")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_serve_and_its_child(sig, tmp_path):
    logs_before = {f for f in os.listdir("/tmp") if f.startswith("autometrics-llama-")}
    p, child = _start(ignore_sigint=(sig == signal.SIGINT))  # SIGINT ignored, as for `serve &`
    p.send_signal(sig)
    assert p.wait(timeout=30) == 0
    assert _gone(child)
    logs_after = {f for f in os.listdir("/tmp") if f.startswith("autometrics-llama-")}
    assert logs_after <= logs_before  # its temporary log was removed


def test_kill_9_of_serve_takes_the_child_down():
    p, child = _start(ignore_sigint=False)
    p.kill()
    p.wait(timeout=10)
    assert _gone(child)


_THREAD_PARENT = """
import sys, threading
from autometrics.evaluators.llm.local import LocalLLMServer
srv = LocalLLMServer("0.5b", n_threads=1)
t = threading.Thread(target=srv.start)  # a fit starts its server from a worker thread
t.start(); t.join()
print("child", srv.proc.pid, flush=True)
threading.Event().wait()
"""


def test_kill_9_of_a_process_whose_thread_started_the_server_takes_the_server_down():
    """The parent-death signal cannot serve here (it fires when the starting *thread* ends); the
    server's wrapper watches its parent pid instead."""
    p = subprocess.Popen([sys.executable, "-c", _THREAD_PARENT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line, deadline = "", time.monotonic() + 240
    while not line.startswith("child") and time.monotonic() < deadline and p.poll() is None:
        line = p.stdout.readline()
    assert line.startswith("child"), f"the server did not start: {line!r}"
    child = int(line.split()[1])
    assert _alive(child)  # the thread that started it has ended: the server must still be up
    p.kill()
    p.wait(timeout=10)
    assert _gone(child, within=10)
