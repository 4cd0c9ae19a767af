"""Work fanned out to threads stays in its request's trace: real @observe spans, a real SQLite
store, the standard ThreadPoolExecutor (the failure it fixes is shown first)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest


def _app(capture, executor_factory):
    @capture.observe(model="gpt-4o-mini", operation="chat")
    def llm(q):
        return f"answer to {q}"

    @capture.observe
    def handle(qs):
        with executor_factory() as pool:
            outs = list(pool.map(llm, qs))
        return outs, capture.current_trace_id()

    return handle


def _trees(sqlite_url):
    from autometrics.collectors.store import TraceStore

    spans = TraceStore(sqlite_url).spans_frame()
    return spans, spans.groupby("trace_id")["name"].apply(sorted).to_dict()


def test_plain_executor_splits_the_request(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)
    _, tid = _app(capture, lambda: ThreadPoolExecutor(3))(["a", "b", "c"])
    assert capture.flush(10)
    _, trees = _trees(sqlite_url)
    assert len(trees) == 4 and trees[tid] == ["handle"]  # what the helpers below fix


@pytest.mark.parametrize("how", ["executor", "propagate", "in_context"])
def test_threads_stay_in_the_request_trace(capture, sqlite_url, how):
    capture.configure(store_url=sqlite_url, langfuse=False)
    if how == "executor":
        handle = _app(capture, lambda: capture.ContextThreadPoolExecutor(3))
    elif how == "propagate":
        capture.propagate_threads()
        handle = _app(capture, lambda: ThreadPoolExecutor(3))
    else:
        @capture.observe(model="gpt-4o-mini", operation="chat")
        def llm(q):
            return q

        @capture.observe
        def handle(qs):
            ts = [threading.Thread(target=capture.in_context(llm), args=(q,)) for q in qs]
            [t.start() for t in ts]
            [t.join() for t in ts]
            return None, capture.current_trace_id()
    try:
        _, tid = handle(["a", "b", "c"])
    finally:
        capture.stop_propagating_threads()
    assert capture.flush(10)
    spans, trees = _trees(sqlite_url)
    assert list(trees) == [tid] and trees[tid] == ["chat gpt-4o-mini"] * 3 + ["handle"]
    root = spans[spans["name"] == "handle"]["span_id"].iloc[0]
    assert set(spans[spans["name"] != "handle"]["parent_span_id"]) == {root}


def test_run_in_executor_joins_the_trace_once_propagating(capture, sqlite_url):
    capture.configure(store_url=sqlite_url, langfuse=False)

    @capture.observe(model="m", operation="chat")
    def llm(q):
        return q

    @capture.observe
    async def handle():
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, llm, q) for q in "xy"))
        return capture.current_trace_id()

    capture.propagate_threads()
    try:
        tid = asyncio.run(handle())
    finally:
        capture.stop_propagating_threads()
    assert capture.flush(10)
    _, trees = _trees(sqlite_url)
    assert list(trees) == [tid] and len(trees[tid]) == 3
