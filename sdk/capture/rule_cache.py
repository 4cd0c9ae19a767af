"""What this process knows of the feedback rules (one kind and scale per feedback name and
project), so ``feedback()`` can refuse a bad value at the call instead of later in the store.

Why only "what it knows": the rules live in the trace store (``feedback_schemas``), which the
application thread must never wait for.  ``feedback()`` checks against a declaration made in
this process (:func:`declare`, i.e. ``autometrics.feedback_schema``) or the rules last read from
the store by a background thread (started on first use, refreshed when an unknown name shows up,
at most every few seconds); a name it knows nothing of is checked for shape only (null, NaN,
objects, likert outside 1..5) and the store's write path makes the final decision.  A feedback
``id`` re-sent in this process with another value is caught here too (a bounded memory of recent
ids per runtime); between processes the store catches it.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref

from autometrics.metricbank.errors import UserError

from ..collectors.exporter import StoreSink
from ..collectors.feedback import FeedbackSchema, FeedbackValueError, make_schema, row_fingerprint
from . import runtime

__all__ = ["declare", "known_schema", "check_id", "persist_declaration", "wait_loaded"]

_REFRESH_UNKNOWN_S = 5.0  # an unknown name re-reads the store's rules at most this often
_REFRESH_S = 60.0  # and the rules are re-read this often anyway
_MAX_IDS = 10_000
_PERSIST_WAIT_S = 60.0  # how long a declaration waits for the writer to open the store

_lock = threading.Lock()
# (project or None for "any project of this process", name) -> declared rule
_declared: dict[tuple[str | None, str], FeedbackSchema] = {}


class _State:
    """One runtime's view of the store's rules and recent ids (dropped with the runtime)."""

    def __init__(self):
        self.stored: dict[str, dict[str, FeedbackSchema]] = {}  # project -> name -> rule
        self.tried: dict[str, float] = {}  # project -> monotonic time of the last load attempt
        self.loaded: dict[str, float] = {}  # project -> monotonic time of the last successful load
        self.loading: set[str] = set()
        self.ids: collections.OrderedDict[str, tuple] = collections.OrderedDict()


_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state(rt) -> _State:
    with _lock:
        st = _states.get(rt)
        if st is None:
            st = _states[rt] = _State()
        return st


def declare(name: str, kind: str, scale=None, project: str | None = None) -> FeedbackSchema:
    """Record a declared rule for this process; raises ValueError for a bad argument."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise UserError(f"feedback name must be a non-empty string of at most 200 characters, not {name!r}")
    schema = make_schema(kind, scale)
    with _lock:
        _declared[(project, name.strip())] = schema
    return schema


def _store_of(rt):
    """The runtime's opened TraceStore when it writes to a store directly, else None.  Only the
    store the writer thread already opened (and migrated) is read: until the first write there
    is nothing to read here that the store's own check would not see anyway."""
    sink = rt.writer.sink
    return sink.store if isinstance(sink, StoreSink) else None


def _load(rt, st: _State, project: str) -> None:
    try:
        store = _store_of(rt)
        if store is not None:
            rules = store.feedback_schemas(project)
            with _lock:
                st.stored[project] = rules
                st.loaded[project] = time.monotonic()
    except Exception as exc:  # the store is down: keep what we know, try again later
        try:
            rt.errors.warning("feedback-rules-load", "autometrics: could not read the feedback rules from the store (checking "
                              "with what this process knows; the store checks on write): %s: %s", type(exc).__name__, exc)
        except Exception:
            pass
    finally:
        with _lock:
            st.loading.discard(project)


def _maybe_load(rt, st: _State, project: str, unknown: bool) -> None:
    now = time.monotonic()
    with _lock:
        if project in st.loading:
            return
        last = st.tried.get(project)
        due = last is None or now - last >= _REFRESH_S or (unknown and now - last >= _REFRESH_UNKNOWN_S)
        if not due:
            return
        st.loading.add(project)
        st.tried[project] = now
    threading.Thread(target=_load, args=(rt, st, project), name="autometrics-feedback-rules", daemon=True).start()


def known_schema(rt, project: str, name) -> FeedbackSchema | None:
    """The rule this process knows for (project, name): declared here, else read from the store.
    Never waits: a missing or stale view starts a background read of the store."""
    if not isinstance(name, str):
        return None
    name = name.strip()
    st = _state(rt)
    with _lock:
        schema = _declared.get((project, name)) or _declared.get((None, name))
        stored = st.stored.get(project, {}).get(name)
    if _store_of(rt) is not None:
        _maybe_load(rt, st, project, unknown=schema is None and stored is None)
    return schema or stored


def check_id(rt, row: dict) -> None:
    """Raise FeedbackValueError (code ``conflict``) when this runtime recently sent the row's id
    with another trace, name, kind or value; remember it otherwise."""
    st = _state(rt)
    fp = row_fingerprint(row)
    with _lock:
        prev = st.ids.get(row["id"])
        if prev is not None and prev != fp:
            raise FeedbackValueError(f"feedback id {row['id']!r} was already sent with another value ({prev[1]!r}="
                                     f"{prev[3] if prev[3] is not None else prev[4]!r} [{prev[2]}] on trace {prev[0]}); a re-sent "
                                     "id must carry the same trace, name and value: send a new id for a new value", field="id",
                                     code="conflict")
        st.ids[row["id"]] = fp
        st.ids.move_to_end(row["id"])
        while len(st.ids) > _MAX_IDS:
            st.ids.popitem(last=False)


def persist_declaration(rt, project: str, name: str, schema: FeedbackSchema) -> None:
    """Write a declaration to the runtime's store in the background, once the writer opened it
    (the items under the name carry the declaration too, so a down store only delays it); a
    store that already has another rule for the name is logged and counted
    (``feedback_schema_conflicts``).  A collector learns it from the items' ``schema``."""
    sink = rt.writer.sink
    if not isinstance(sink, StoreSink):
        return

    def _run():
        try:
            # the store the writer thread opens (and creates or upgrades: one migrator, not two
            # racing on a fresh file); until then the items under the name carry the declaration
            deadline = time.monotonic() + _PERSIST_WAIT_S
            while sink.store is None and time.monotonic() < deadline and runtime._runtime is rt:
                time.sleep(0.05)
            if sink.store is None:
                return
            got = sink.store.declare_feedback_schema(name, schema.kind, schema.scale, project=project)
            st = _state(rt)
            with _lock:
                st.stored.setdefault(project, {})[name] = got
        except FeedbackValueError as exc:
            rt.counters.add("feedback_schema_conflicts")
            rt.errors.warning(f"feedback-schema-{name[:60]}", "autometrics: feedback_schema(%r) disagrees with the store: %s; "
                              "items under this name will be refused by the store", name, exc)
        except Exception as exc:
            rt.errors.warning("feedback-schema-store", "autometrics: feedback_schema(%r) not yet written to the store (its "
                              "feedback items carry it): %s: %s", name, type(exc).__name__, exc)

    threading.Thread(target=_run, name="autometrics-feedback-schema", daemon=True).start()


def wait_loaded(rt, project: str, timeout: float = 5.0) -> bool:
    """Block until the store's rules for ``project`` were read once (tests, scripts); True if they were."""
    st = _state(rt)
    known_schema(rt, project, "")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _lock:
            if project in st.loaded:
                return True
        time.sleep(0.01)
    return False
