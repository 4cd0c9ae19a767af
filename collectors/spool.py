"""A bounded, durable local spool: where spans and feedback wait while the trace store or the
collector is unreachable, so an outage delays them instead of losing them.

Why SQLite (WAL, ``synchronous=FULL``): a committed append survives ``kill -9`` of the
application and a power cut, several processes can share one file (SQLite's own locking), and it
is in the standard library.  One *record* is one batch the writer could not deliver, serialised
by the sink (store rows as JSON, or OTLP protobuf bytes) and zlib-compressed; records are
replayed oldest first and deleted only after the backend accepted them, so delivery is
at-least-once and the idempotent store writes make it exactly-once in rows.

Several processes may share one spool file (the default is one per data folder): every record
carries its *target* (a hash of the store URL or collector URL, never a secret), a process only
replays records for its own target, and replaying claims records with a short lease so two live
processes do not send the same records at once.  A process that died (``kill -9``) leaves its
records unclaimed, or claimed by a dead pid, and the next process with that target replays them.

The size bound (``max_bytes``) is on the pages the records use; an append that does not fit is
refused (the caller counts the loss).  :class:`FileIdentity` notices when the file was deleted or
replaced under the open connection (a folder removed, a file swapped); the spool then moves its
records out of the old, still-open file into a new one instead of writing to an unlinked inode.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from .files import pid_alive

__all__ = ["Spool", "SpoolRecord", "FileIdentity"]

FORMAT_VERSION = 1  # PRAGMA user_version of a spool file this code writes and reads
LEASE_S = 60.0  # how long a claim protects records being replayed by one process


@dataclass
class SpoolRecord:
    seq: int
    kind: str  # "span" | "feedback"
    encoding: str  # the sink's serialisation (e.g. "rows-json", "otlp-protobuf", "feedback-json")
    items: int
    payload: bytes  # decompressed


class FileIdentity:
    """The (device, inode) of a file when it was opened, to detect it being deleted or replaced.

    SQLite keeps writing to an open file after it was unlinked (its folder removed) or renamed
    over, and the rows are gone with the old inode; comparing the path's identity with the one
    opened before and after each write is the portable way to notice."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.ident: tuple[int, int] | None = None
        self.wal_ident: tuple[int, int] | None = None
        self._wal = Path(str(self.path) + "-wal")

    def record(self) -> None:
        st = os.stat(self.path)
        self.ident = (st.st_dev, st.st_ino)
        self.note_wal()

    def note_wal(self) -> None:
        """Remember the write-ahead log our connections use (call after a write)."""
        try:
            st = os.stat(self._wal)
            self.wal_ident = (st.st_dev, st.st_ino)
        except OSError:
            self.wal_ident = None

    def set_aside_stale_wal(self) -> str | None:
        """After our connections to a *replaced* file were closed: SQLite leaves the old file's
        ``-wal`` at the path (it does not checkpoint or delete it for a renamed file), and a
        connection to the new file would read the old pages through it.  If the ``-wal`` there
        is still the one we wrote, move it aside (and drop the ``-shm`` index, which is rebuilt);
        returns where it went."""
        if self.wal_ident is None:
            return None
        try:
            st = os.stat(self._wal)
        except OSError:
            return None
        if (st.st_dev, st.st_ino) != self.wal_ident:
            return None  # a log of the new file (someone opened it already): not ours to move
        dest = self._wal.with_name(f"{self._wal.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        os.replace(self._wal, dest)
        try:
            os.unlink(str(self.path) + "-shm")
        except OSError:
            pass
        self.wal_ident = None
        return str(dest)

    def changed(self) -> str | None:
        """None while the path is still the file opened; else "deleted" or "replaced"."""
        if self.ident is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "deleted"
        except OSError:
            return "unreadable"
        return None if (st.st_dev, st.st_ino) == self.ident else "replaced"


def _pid_alive(owner: str) -> bool:
    """Whether the claiming process (``host:pid:token``) still runs; True when unknown."""
    try:
        host, pid, _ = owner.split(":", 2)
        pid = int(pid)
    except ValueError:
        return True
    if host != socket.gethostname():
        return True  # another machine (shared folder): the lease decides
    return pid_alive(pid)


class Spool:
    """Records waiting for their backend, in one SQLite file (see the module docstring).

    Opened lazily: reads open the file only if it exists, the first append or memory record
    creates it (feedback passes through it, and writers record what they hold in memory, so an
    application that sends traffic has one).  Thread-safe (one connection
    behind a lock).  Raises ``sqlite3.Error``/``OSError`` for an unusable file; the writer counts
    those and carries on without the spool.
    """

    def __init__(self, path: str | os.PathLike, max_bytes: int, *, on_reopen=None):
        self.path = Path(path).expanduser()
        self.max_bytes = int(max_bytes)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.on_reopen = on_reopen  # callback(reason: str, moved_records: int), for a warning
        self._conn: sqlite3.Connection | None = None
        self._file = FileIdentity(self.path)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"Spool({str(self.path)!r})"

    @classmethod
    def from_config(cls, spool: str | os.PathLike | bool | None, max_mb: float) -> Spool | None:
        """The spool ``configure(spool=..., spool_max_mb=...)`` asks for: None/True = ``spool.db`` in
        the data folder, a path, or False = none.  Nothing is opened or created here."""
        if spool is False:
            return None
        if spool is None or spool is True:
            from .files import data_dir

            spool = data_dir() / "spool.db"
        return cls(spool, int(max_mb * 2**20))

    # ---- file
    def exists(self) -> bool:
        return self._conn is not None or self.path.exists()

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=10.0, isolation_level=None, check_same_thread=False)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > FORMAT_VERSION:
                raise sqlite3.DatabaseError(f"spool {self.path} has format v{version}, newer than this autometrics "
                                            f"(v{FORMAT_VERSION}); upgrade autometrics-sdk or use another spool path")
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect on a new file: space is returned
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")  # a committed record survives a crash of the machine
            conn.execute("PRAGMA journal_size_limit=4194304")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL, "
                         "kind TEXT NOT NULL, encoding TEXT NOT NULL, items INTEGER NOT NULL, bytes INTEGER NOT NULL, "
                         "created_ns INTEGER NOT NULL, owner TEXT, lease_until REAL, payload BLOB NOT NULL)")
            conn.execute("CREATE INDEX IF NOT EXISTS spool_target_seq ON spool (target, seq)")
            # what each live writer holds in memory only (its heartbeat): a process killed with -9
            # leaves its row, and the next process counts those items as lost (see note_memory)
            conn.execute("CREATE TABLE IF NOT EXISTS memory (owner TEXT NOT NULL, target TEXT NOT NULL, spans INTEGER NOT NULL, "
                         "feedback INTEGER NOT NULL, updated_ns INTEGER NOT NULL, PRIMARY KEY (owner, target))")
            conn.execute(f"PRAGMA user_version={FORMAT_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _db(self, create: bool = True) -> sqlite3.Connection | None:
        """The open connection, (re)opening the file when it is missing, deleted or replaced."""
        if self._conn is not None:
            why = self._file.changed()
            if why is None:
                return self._conn
            self._reopen(why)
            return self._conn
        if not create and not self.path.exists():
            return None
        self._conn = self._connect()
        self._file.record()
        return self._conn

    def _reopen(self, why: str) -> None:
        # The old connection still reads the unlinked/renamed file: move its records into a fresh
        # file at the path rather than losing them with the old inode.
        old, self._conn = self._conn, None
        rows = []
        try:
            rows = old.execute("SELECT seq, target, kind, encoding, items, bytes, created_ns, owner, lease_until, payload "
                               "FROM spool ORDER BY seq").fetchall()
        except sqlite3.Error:
            pass
        finally:
            try:
                old.close()
            except sqlite3.Error:
                pass
        if why == "replaced":
            self._file.set_aside_stale_wal()
        self._conn = self._connect()
        self._file.record()
        if rows:
            with self._tx() as c:
                for r in rows:
                    # the same seq (claims and acks in flight still name the right record), same order;
                    # a seq the new file already uses (another spool moved in): a new one, unclaimed
                    if not c.execute("INSERT OR IGNORE INTO spool (seq, target, kind, encoding, items, bytes, created_ns, "
                                     "owner, lease_until, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", r).rowcount:
                        c.execute("INSERT INTO spool (target, kind, encoding, items, bytes, created_ns, payload) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?)", (*r[1:7], r[9]))
        if self.on_reopen is not None:
            self.on_reopen(why, len(rows))

    def _tx(self):
        conn = self._conn
        spool = self

        class _Tx:
            def __enter__(self):
                conn.execute("BEGIN IMMEDIATE")
                return conn

            def __exit__(self, et, ev, tb):
                if et is None:
                    conn.execute("COMMIT")
                    spool._check_after_commit()
                else:
                    conn.execute("ROLLBACK")
                return False

        return _Tx()

    def _check_after_commit(self) -> None:
        # A commit that raced with the file being deleted/replaced may have landed in the old
        # inode: reopen (moving the records) so what the caller was told is durable really is.
        why = self._file.changed()
        if why is not None:
            self._reopen(why)
        else:
            self._file.note_wal()

    # ---- records
    def _used_bytes(self, c: sqlite3.Connection) -> int:
        """Bytes of the pages in use, less the two root pages of the ``memory`` table (writers'
        heartbeats, a few rows): ``max_bytes`` bounds the records as it did before that table."""
        page = c.execute("PRAGMA page_size").fetchone()[0]
        used = c.execute("PRAGMA page_count").fetchone()[0] - c.execute("PRAGMA freelist_count").fetchone()[0]
        heartbeat = c.execute("SELECT COUNT(*) FROM sqlite_master WHERE tbl_name = 'memory' AND rootpage > 0").fetchone()[0]
        return page * max(0, used - heartbeat)

    def append(self, target: str, records: list[tuple[str, str, int, bytes]]) -> list[bool]:
        """Store ``(kind, encoding, items, payload)`` records in order, durably (committed, fsynced).

        Returns, per record, whether it was stored: False when it would push the spool past
        ``max_bytes`` (a later, smaller record may still fit)."""
        if not records:
            return []
        packed = [(k, e, n, zlib.compress(p, 1)) for k, e, n, p in records]
        with self._lock:
            c = self._db()
            out = []
            with self._tx():
                used = self._used_bytes(c)
                for kind, enc, n, blob in packed:
                    cost = len(blob) + 64  # payload plus the row and index overhead, roughly
                    if used + cost > self.max_bytes:
                        out.append(False)
                        continue
                    c.execute("INSERT INTO spool (target, kind, encoding, items, bytes, created_ns, payload) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)", (target, kind, enc, n, len(blob), time.time_ns(), blob))
                    used += cost
                    out.append(True)
            return out

    def claim(self, target: str, *, max_records: int = 64, max_items: int = 10_000,
              max_bytes: int = 8 << 20) -> list[SpoolRecord]:
        """The oldest records of ``target`` not being replayed by another live process, claimed
        for this one (a lease of :data:`LEASE_S`); [] when there are none."""
        with self._lock:
            c = self._db(create=False)
            if c is None:
                return []
            now = time.time()
            with self._tx():
                rows = c.execute("SELECT seq, items, bytes, owner, lease_until FROM spool WHERE target = ? ORDER BY seq "
                                 "LIMIT ?", (target, max_records * 4)).fetchall()
                seqs, items, size = [], 0, 0
                for seq, n, b, owner, until in rows:
                    if owner and owner != self.owner and until and until > now and _pid_alive(owner):
                        continue  # another live process is sending it
                    if seqs and (len(seqs) >= max_records or items + n > max_items or size + b > max_bytes):
                        break
                    seqs.append(seq)
                    items += n
                    size += b
                if seqs:
                    c.executemany("UPDATE spool SET owner = ?, lease_until = ? WHERE seq = ?",
                                  [(self.owner, now + LEASE_S, s) for s in seqs])
            if not seqs:
                return []
            c = self._conn  # (reopened if the file was swapped during the claim)
            marks = ",".join("?" * len(seqs))
            got = c.execute(f"SELECT seq, kind, encoding, items, payload FROM spool WHERE seq IN ({marks}) ORDER BY seq",
                            seqs).fetchall()
        return [SpoolRecord(s, k, e, n, zlib.decompress(p)) for s, k, e, n, p in got]

    def ack(self, seqs: list[int]) -> list[int]:
        """Delete delivered records this process claimed; returns the seqs this call deleted (a
        record whose lease ran out and that another process took over is left to that process,
        so nothing is counted twice)."""
        if not seqs:
            return []
        with self._lock:
            c = self._db()
            done = []
            with self._tx():
                for s in seqs:
                    if c.execute("DELETE FROM spool WHERE seq = ? AND owner = ?", (s, self.owner)).rowcount:
                        done.append(s)
            c = self._conn
            if done and not c.execute("SELECT 1 FROM spool LIMIT 1").fetchone():
                try:  # empty again: give the pages back (PASSIVE: never waits for another process's reader)
                    c.execute("PRAGMA incremental_vacuum")
                    c.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass
            return done

    def release(self, seqs: list[int]) -> None:
        """Give back a claim after a failed delivery, so the records are retried (by anyone)."""
        if not seqs:
            return
        with self._lock:
            c = self._db()
            with self._tx():
                c.executemany("UPDATE spool SET owner = NULL, lease_until = NULL WHERE seq = ? AND owner = ?",
                              [(s, self.owner) for s in seqs])

    def pending(self, target: str | None = None) -> tuple[int, int]:
        """(records, items) waiting, for ``target`` or in all; (0, 0) when the file does not exist."""
        with self._lock:
            c = self._db(create=False)
            if c is None:
                return 0, 0
            if target is None:
                r = c.execute("SELECT COUNT(*), COALESCE(SUM(items), 0) FROM spool").fetchone()
            else:
                r = c.execute("SELECT COUNT(*), COALESCE(SUM(items), 0) FROM spool WHERE target = ?", (target,)).fetchone()
            return int(r[0]), int(r[1])

    def note_memory(self, target: str, spans: int, feedback: int) -> None:
        """Record how many items this process holds for ``target`` in memory only (not yet in the
        backend or the spool); 0 and 0 removes the record.  Does not create the file for zeros."""
        with self._lock:
            c = self._db(create=bool(spans or feedback))
            if c is None:
                return
            with self._tx():
                if spans or feedback:
                    c.execute("INSERT OR REPLACE INTO memory (owner, target, spans, feedback, updated_ns) VALUES (?, ?, ?, ?, ?)",
                              (self.owner, target, int(spans), int(feedback), time.time_ns()))
                else:
                    c.execute("DELETE FROM memory WHERE owner = ? AND target = ?", (self.owner, target))

    def lost_in_memory(self, target: str) -> list[tuple[str, int, int, int]]:
        """The memory records of ``target`` left by processes that no longer run (killed before
        they could write or spool what they held): ``(owner, spans, feedback, updated_ns)`` each,
        removed as they are returned, so each loss is counted once."""
        with self._lock:
            c = self._db(create=False)
            if c is None:
                return []
            with self._tx():
                rows = c.execute("SELECT owner, spans, feedback, updated_ns FROM memory WHERE target = ?", (target,)).fetchall()
                dead = [r for r in rows if r[0] != self.owner and not _pid_alive(r[0])]
                c.executemany("DELETE FROM memory WHERE owner = ? AND target = ?", [(r[0], target) for r in dead])
            return [(o, int(sp), int(fb), int(t)) for o, sp, fb, t in dead]

    def size_bytes(self) -> int:
        """Bytes the records use in the file (what ``max_bytes`` bounds)."""
        with self._lock:
            c = self._db(create=False)
            return 0 if c is None else self._used_bytes(c)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
                self._conn = None
