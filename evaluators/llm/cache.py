"""Persistent SQLite key-value caches: LLM replies (:class:`LLMCache`) and anything else the
project computes once and reuses (the robustness perturbations use :class:`KeyValueCache` too).

Why SQLite: one file, safe across threads (one lock) and processes (WAL), survives a killed
fit, so an interrupted run resumes without paying again.  Keys are sha256 digests of JSON;
values are JSON.  Neither ever contains a credential.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

from ...collectors.files import data_path

__all__ = ["KeyValueCache", "LLMCache", "default_cache_path", "digest"]


def default_cache_path() -> Path:
    """``$AUTOMETRICS_LLM_CACHE``, else ``llm_cache.sqlite`` in the data folder (``$AUTOMETRICS_HOME``)."""
    return data_path("llm_cache.sqlite")


def digest(obj) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class KeyValueCache:
    """One SQLite table ``(key TEXT PRIMARY KEY, model TEXT, value TEXT, created REAL)``."""

    table = "entries"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, model TEXT, value TEXT, created REAL)")
        self._db.commit()

    def get(self, key: str):
        with self._lock:
            row = self._db.execute(f"SELECT value FROM {self.table} WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, model: str, value) -> None:
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO {self.table} (key, model, value, created) VALUES (?, ?, ?, ?)",
                             (key, model, json.dumps(value, ensure_ascii=False), time.time()))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class LLMCache(KeyValueCache):
    """LLM replies: sha256(model identity + messages + parameters) -> reply.  Only successful
    replies are stored, so an interrupted or partly failed fit resumes and retries the rest."""

    table = "replies"

    def __init__(self, path: str | Path | None = None):
        super().__init__(path or default_cache_path())

    @staticmethod
    def key(identity: str, messages, params: dict) -> str:
        return digest({"model": identity, "messages": messages, "params": params})
