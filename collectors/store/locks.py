"""One active refit runner per trace store, across processes and machines.

Why: APScheduler 3.x cannot share a job store between processes safely, so two ``autometrics
worker`` processes pointed at one database would both fire the refit job.  Each run therefore
takes a non-blocking lock first and skips when another worker holds it:

- SQLite: ``fcntl.flock`` on ``<db>.refit.lock`` beside the database file (``msvcrt`` on
  Windows).  The kernel drops the lock when the process dies, so a crash never leaves it stuck.
- Postgres: ``pg_try_advisory_lock`` on a dedicated connection, released on unlock or when the
  connection (the process) goes away.
- In-memory SQLite: a process-local lock (nothing else can see that database anyway).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path

import sqlalchemy as sa

__all__ = ["RefitLock", "refit_lock"]

_local_locks: dict[str, threading.Lock] = {}
_local_guard = threading.Lock()


def _pg_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class RefitLock:
    """Non-blocking inter-process lock tied to a store; ``acquire()`` -> bool, ``release()``."""

    def __init__(self, store, name: str = "autometrics.refit"):
        self.store = store
        self.name = name
        self._fh = None
        self._conn = None
        self._local: threading.Lock | None = None
        self.held = False

    def _sqlite_path(self) -> Path | None:
        db = sa.engine.make_url(self.store.url).database
        if not db or db == ":memory:":
            return None
        return Path(db).expanduser().resolve().with_name(Path(db).name + "." + self.name.split(".")[-1] + ".lock")

    def acquire(self) -> bool:
        if self.held:
            return True
        if self.store.dialect == "postgresql":
            conn = self.store.engine.connect()
            try:
                got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": _pg_key(self.name)}).scalar())
                conn.commit()
            except Exception:
                conn.close()
                raise
            if not got:
                conn.close()
                return False
            self._conn = conn
        else:
            path = self._sqlite_path()
            if path is None:
                with _local_guard:
                    lk = _local_locks.setdefault(self.store.url + "#" + self.name, threading.Lock())
                if not lk.acquire(blocking=False):
                    return False
                self._local = lk
            else:
                fh = open(path, "a+b")  # noqa: SIM115 - held until release()
                try:
                    _try_lock_file(fh)
                except OSError:
                    fh.close()
                    return False
                self._fh = fh
                try:  # who holds it (debugging aid; the lock is the flock, not the content)
                    fh.seek(0)
                    fh.truncate()
                    fh.write(f"{os.getpid()}\n".encode())
                    fh.flush()
                except OSError:
                    pass
        self.held = True
        return True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _pg_key(self.name)})
                conn.commit()
            finally:
                conn.close()
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                _unlock_file(fh)
            finally:
                fh.close()
        if self._local is not None:
            lk, self._local = self._local, None
            lk.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


@contextlib.contextmanager
def refit_lock(store, name: str = "autometrics.refit"):
    """``with refit_lock(store) as got: if got: ...`` — ``got`` is False when another runner has it."""
    lock = RefitLock(store, name)
    got = lock.acquire()
    try:
        yield got
    finally:
        if got:
            lock.release()


if os.name == "nt":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock_file(fh) -> None:
        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock_file(fh) -> None:
        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock_file(fh) -> None:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock_file(fh) -> None:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
