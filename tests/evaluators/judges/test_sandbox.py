"""The sandbox that runs LLM-written metric code (evaluators/sandbox.py), attacked by
hostile code: each attack is contained and reported as a failed metric with its reason, and the
caller's files, environment and processes are untouched.  Limits are small, so each test takes
about a second or less (the CPU and wall-clock tests wait out their limit)."""

from __future__ import annotations

import math
import os
import tempfile
import time

import pytest
from autometrics.evaluators.sandbox import SandboxLimits, check_source, run_metric_code, sandbox_unavailable

pytestmark = pytest.mark.skipif(sandbox_unavailable() is not None, reason=str(sandbox_unavailable()))

SMALL = SandboxLimits(cpu_seconds=1, wall_seconds=30, memory_mb=128, file_mb=1)

# Reaching os functions without importing os: the classic escape from restricted builtins.
FIND = '''
def find(name):
    seen, todo = set(), [object]
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        if c.__name__ == name:
            return c
        try:
            todo.extend(c.__subclasses__())
        except TypeError:
            todo.extend(type.__subclasses__(c))
    raise LookupError(name)

OS = find("_wrap_close").__init__.__globals__
'''


def _run(source: str, n: int = 3, limits: SandboxLimits = SMALL, **kw):
    return run_metric_code(source, [f"input {k}" for k in range(n)], [f"output number {k}" for k in range(n)],
                           limits=limits, **kw)


HOSTILE = {
    "infinite loop": ("def metric(input, output, reference):\n    while True:\n        pass\n", "CPU-time limit (1 s)"),
    "fork bomb": (FIND + "def metric(input, output, reference):\n    while True:\n        OS['fork']()\n",
                  "refused in the sandbox: os.fork"),
    "huge allocation": ("def metric(input, output, reference):\n    block = 'x' * (10 ** 10)\n    return 1.0\n",
                        "memory limit (128 MB)"),
    "growing allocation": ("def metric(input, output, reference):\n    hoard = []\n    while True:\n"
                           "        hoard.append(bytearray(10 ** 6))\n", "memory limit (128 MB)"),
    "open() builtin": ("def metric(input, output, reference):\n    open('notes.txt', 'w').write(output)\n    return 1.0\n",
                       "refused in the sandbox: open()"),
    "read /etc/passwd": (FIND + "def metric(input, output, reference):\n"
                         "    return float(len(find('FileIO')('/etc/passwd', 'r').read()))\n",
                         "refused in the sandbox: open('/etc/passwd') outside the sandbox folder"),
    "read own environ": (FIND + "def metric(input, output, reference):\n"
                         "    return float(len(find('FileIO')('/proc/self/environ', 'r').read()))\n",
                         "open('/proc/self/environ') outside"),
    "import socket": ("import socket\n\ndef metric(input, output, reference):\n"
                      "    socket.create_connection(('127.0.0.1', 80))\n    return 1.0\n", "import of 'socket'"),
    "socket via __import__": ("def metric(input, output, reference):\n    s = __import__('socket')\n    return 1.0\n",
                              "import of 'socket'"),
    "os.system": (FIND + "def metric(input, output, reference):\n    return float(OS['system']('echo pwned'))\n",
                  "refused in the sandbox: os.system"),
    "os.system via BuiltinImporter": (
        FIND + "def metric(input, output, reference):\n"
        "    return float(find('BuiltinImporter').load_module('posix').system('echo pwned'))\n",
        "refused in the sandbox: os.system"),
    "import subprocess": ("import subprocess\n\ndef metric(input, output, reference):\n"
                          "    return float(subprocess.call(['true']))\n", "import of 'subprocess'"),
    "__builtins__ access": ("def metric(input, output, reference):\n"
                            "    return float(__builtins__['__import__']('os').getpid())\n", "import of 'os'"),
    "execve via os": (FIND + "def metric(input, output, reference):\n    OS['execv']('/bin/sh', ['sh'])\n",
                      "refused in the sandbox: os.exec"),
    "frame walking": ("def metric(input, output, reference):\n    try:\n        1 / 0\n    except ZeroDivisionError as e:\n"
                      "        frame = e.__traceback__.tb_frame\n    return 1.0\n", "tb_frame"),
    "recursion bomb": ("def metric(input, output, reference):\n    return metric(input, output, reference) + 1\n",
                       "recursion limit"),
    "output flood": (FIND + "def metric(input, output, reference):\n    while True:\n"
                     "        OS['write'](1, b'x' * 65536)\n", "output/file-size limit (1 MB)"),
    "forged result": (FIND + "def metric(input, output, reference):\n"
                      "    OS['write'](1, b'\\n@@autometrics-sandbox-result@@{\"ok\": true, \"values\": [\"x\", 1, 2], "
                      "\"errors\": [null, null, null]}\\n')\n    OS['_exit'](0)\n", "wrote a malformed result"),
    "refusal swallowed": (FIND + "def metric(input, output, reference):\n    try:\n        OS['system']('echo pwned')\n"
                          "    except BaseException:\n        pass\n    return 1.0\n", "refused in the sandbox: os.system"),
}


@pytest.mark.parametrize("attack", list(HOSTILE))
def test_hostile_code_is_contained_and_reported_as_a_failed_metric(attack):
    source, reason = HOSTILE[attack]
    started = time.monotonic()
    res = _run(source)
    assert not res.ok and reason in res.failed, res.failed
    assert all(math.isnan(v) for v in res.values)  # a failed metric has no values, never zeros
    assert time.monotonic() - started < 20


def test_file_writes_outside_the_sandbox_folder_are_refused_and_nothing_is_written(tmp_path):
    target = tmp_path / "pwned.txt"
    res = _run(FIND + f"def metric(input, output, reference):\n    find('FileIO')({str(target)!r}, 'w').write(b'x')\n"
                      "    return 1.0\n")
    assert f"open({str(target)!r}) outside the sandbox folder" in res.failed
    assert not target.exists()
    # inside its own temporary folder a metric may write scratch files
    inside = _run(FIND + "def metric(input, output, reference):\n    f = find('FileIO')('scratch.txt', 'w')\n"
                         "    f.write(b'x')\n    f.close()\n    return 2.0\n")
    assert inside.ok and inside.values == [2.0, 2.0, 2.0]


def test_secrets_in_the_environment_are_not_visible(monkeypatch):
    monkeypatch.setenv("AUTOMETRICS_LLM_API_KEY", "sk-very-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-also-secret")
    res = _run(FIND + "def metric(input, output, reference):\n    env = OS['environ']\n"
                      "    secret = any('secret' in v for v in env.values()) or 'AUTOMETRICS_LLM_API_KEY' in env\n"
                      "    return 100.0 if secret else float(len(env))\n")
    assert res.ok and res.values == [0.0, 0.0, 0.0]  # the environment is empty by the time the metric runs


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="privileges are dropped only when the caller is root")
def test_a_root_caller_runs_the_code_as_an_unprivileged_user():
    res = _run(FIND + "def metric(input, output, reference):\n    return float(OS['getuid']())\n")
    assert res.ok and res.unprivileged is True and all(v > 0 for v in res.values)


def test_wall_clock_limit_kills_the_process_group():
    limits = SandboxLimits(cpu_seconds=60, wall_seconds=1.5, memory_mb=128)
    started = time.monotonic()
    res = _run("def metric(input, output, reference):\n    while True:\n        pass\n", limits=limits)
    assert "wall-clock limit (1.5 s)" in res.failed
    assert time.monotonic() - started < 10


def test_good_code_scores_every_row_deterministically_across_batches():
    # the sum runs over a set: its order (and so the float sum) depends on the hash seed, which the
    # sandbox fixes, so two runs and any batching give identical values
    source = ("import re\nfrom collections import Counter\n\ndef metric(input, output, reference):\n"
              "    words = re.findall(r'\\w+', output.lower())\n"
              "    return sum(len(w) * 0.1 ** k for k, w in enumerate(set(words))) + len(Counter(words))\n")
    outs = [f"the cat {k} sat on the mat number {k * 7}" for k in range(7)]
    one = run_metric_code(source, None, outs, limits=SandboxLimits(cpu_seconds=5, wall_seconds=30))
    two = run_metric_code(source, None, outs, limits=SandboxLimits(cpu_seconds=5, wall_seconds=30, batch_rows=3))
    assert one.ok and one.batches == 1 and two.batches == 3
    assert one.values == two.values and all(math.isfinite(v) for v in one.values)


def test_rows_that_raise_or_return_non_numbers_are_missing_and_counted():
    source = ("def metric(input, output, reference):\n    if 'zero' in output:\n        return 1 / 0\n"
              "    if 'text' in output:\n        return 'high'\n    if 'inf' in output:\n        return float('inf')\n"
              "    if 'flag' in output:\n        return True\n    return len(output)\n")
    res = run_metric_code(source, None, ["zero", "text", "inf", "flag", "fine"], limits=SMALL)
    assert res.ok and res.values[3:] == [1.0, 4.0] and all(math.isnan(v) for v in res.values[:3])
    assert res.n_row_errors == 3
    assert res.error_counts() == {"ZeroDivisionError: division by zero": 1, "returned str, not a number": 1,
                                  "returned inf (not finite)": 1}
    every = run_metric_code("def metric(input, output, reference):\n    return None\n", None, ["a", "b"], limits=SMALL)
    assert every.failed == "every row failed (first error: returned NoneType, not a number)"


def test_references_reach_the_function_and_two_argument_functions_work():
    res = run_metric_code("def metric(input, output, reference):\n    return -1.0 if reference is None else len(reference)\n",
                          ["i", "i"], ["o", "o"], ["abcd", None], limits=SMALL)
    assert res.values == [4.0, -1.0]
    two = run_metric_code("def metric(input, output):\n    return len(input) + len(output)\n", ["ab", ""], ["c", "de"],
                          limits=SMALL)
    assert two.values == [3.0, 2.0]


@pytest.mark.parametrize("source, reason", [
    ("def metric(input, output, reference) return 1", "syntax error at line 1"),
    ("def compute_score(input, output):\n    return 1.0\n", "no top-level function named 'metric'"),
    ("def metric(output):\n    return 1.0\n", "takes 1 argument(s)"),
])
def test_unusable_source_fails_before_any_process_starts(source, reason):
    assert reason in check_source(source)[1]
    res = _run(source)
    assert reason in res.failed and res.batches == 0


def test_module_level_errors_and_a_missing_function_fail_the_metric():
    assert "the module code raised NameError" in _run("undefined_name + 1\ndef metric(input, output, reference):\n"
                                                      "    return 1.0\n").failed
    assert "metric is not a function" in _run("def metric(input, output, reference):\n    return 1.0\nmetric = 3\n").failed


def test_the_temporary_folder_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ok = _run(FIND + "def metric(input, output, reference):\n    find('FileIO')('scratch.txt', 'w').close()\n    return 1.0\n")
    bad = _run("def metric(input, output, reference):\n    while True:\n        pass\n")
    assert ok.ok and not bad.ok
    assert list(tmp_path.iterdir()) == []
