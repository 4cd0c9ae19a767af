"""Several processes opening one new SQLite store at once: exactly one migrates, the others wait
and find nothing left to do (without the lock they race: 15 of 15 trials of 4 openers failed
on ``schema_version``'s key)."""

from __future__ import annotations

import multiprocessing as mp

from autometrics.collectors.store.schema import SCHEMA_VERSION


def _open(path: str, q) -> None:
    from autometrics.collectors.store import TraceStore

    try:
        q.put(("ok", TraceStore(f"sqlite:///{path}").migrate()))
    except Exception as exc:  # reported to the test, which names it
        q.put(("error", repr(exc)[:300]))


def test_concurrent_openers_of_a_new_sqlite_store_all_succeed(tmp_path):
    ctx = mp.get_context("spawn")
    for trial in range(3):
        path = str(tmp_path / f"store{trial}.sqlite")
        q = ctx.Queue()
        procs = [ctx.Process(target=_open, args=(path, q)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert results == [("ok", SCHEMA_VERSION)] * 4, results
