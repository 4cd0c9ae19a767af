"""Where ``autometrics fit`` reads its data: a file (CSV / JSONL / Parquet, ``demo:NAME``) or the
trace store itself (``sqlite:///app.db``, ``postgresql+psycopg://...``, or a ``.db`` path).

Why a store source reads :meth:`TraceStore.training_frame` with numeric labels: that is the one
frame the continuous worker refits on and ``autometrics.training_frame`` returns (latest feedback
per trace, traces with a captured output), so a fit by hand and the worker's refit see the same
rows and cannot drift apart.

Why the URL is recognised here, before anything becomes a ``Path``: ``Path("sqlite:////a/b.db")``
collapses the slashes to ``sqlite:/a/b.db``, which no file reader can open.  A SQLite URL or path
must name an existing file (opening a missing one would create an empty store and then report "no traces"), and an empty result is explained: which projects and
feedback names the store does hold, so the user can fix ``--project`` / ``--target``.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from pathlib import Path

from autometrics.collectors.durations import parse_duration
from autometrics.collectors.files import project_name
from autometrics.evaluators.data import load_dataset
from autometrics.metricbank.errors import DataError, UserError

__all__ = ["store_url_of", "parse_since", "load_fit_data", "store_training_frame", "check_scope"]

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_URL_HELP = ("write sqlite:////absolute/path/app.db (four slashes), sqlite:///relative/path/app.db, the path of the "
             ".db file itself, or postgresql+psycopg://user@host/db")


def _hidden(url: str) -> str:
    import sqlalchemy as sa

    return sa.engine.make_url(url).render_as_string(hide_password=True)


class StoreFileMissing(DataError):
    """A SQLite store path that names no file (commands that only read a store refuse to create it)."""


def store_url_of(data: str) -> str | None:
    """The trace-store URL ``data`` names (normalised), or None when it names a file or ``demo:``.

    Raises :class:`DataError` for a store URL that cannot work (wrong slashes, in-memory, a
    missing SQLite file, an unsupported database) with the form that would.
    """
    data = str(data)
    m = _SCHEME.match(data)
    scheme = m.group(1).lower() if m and len(m.group(1)) > 1 else None  # "C:" is a Windows drive, not a scheme
    if scheme is None or scheme == "demo":
        if Path(data).suffix.lower() in SQLITE_SUFFIXES:
            path = Path(data).expanduser().resolve()
            if not path.is_file():
                raise StoreFileMissing(f"no SQLite trace store at {path}: file not found (current folder: {Path.cwd()}).")
            return f"sqlite:///{path}"
        return None
    base, _, driver = scheme.partition("+")
    if base == "sqlite":
        return _sqlite_url(data)
    if base in ("postgresql", "postgres"):
        rest = data[len(m.group(0)):]
        if not rest.startswith("//"):
            raise DataError(f"{data!r} is not a Postgres URL: write postgresql+psycopg://user@host:5432/dbname.")
        if not driver:
            driver = "psycopg" if _has("psycopg") and not _has("psycopg2") else "psycopg2"
        return f"postgresql+{driver}:{rest}"
    if "://" in data:
        raise DataError(f"cannot read {_hidden_or_raw(data)}: {scheme!r} is not a supported data source. `autometrics fit` "
                        "reads a CSV / TSV / JSONL / JSON / Parquet file, demo:NAME, or a trace store (SQLite or Postgres): "
                        f"{_URL_HELP}.")
    return None


def _hidden_or_raw(url: str) -> str:
    try:
        return _hidden(url)
    except Exception:
        return "that URL"  # unparsable: do not echo what may hold a password


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _sqlite_url(data: str) -> str:
    """``sqlite:///rel.db`` / ``sqlite:////abs.db`` checked and made absolute (``~`` expanded)."""
    import sqlalchemy as sa

    if not data.lower().startswith("sqlite:///"):
        rest = data[len("sqlite:"):].lstrip("/")
        guess = next((f"sqlite:///{c}" for c in (f"/{rest}", rest) if rest and Path(c).is_file()), None)
        fix = f"did you mean {guess}? Or " if guess else ""
        raise DataError(f"{data!r} is not a SQLite URL a store can be read from: {fix}{_URL_HELP}.")
    try:
        u = sa.engine.make_url(data)
    except Exception as exc:
        raise DataError(f"{data!r} is not a valid SQLite URL ({exc}): {_URL_HELP}.") from exc
    db = u.database or ""
    if not db or db == ":memory:" or db.startswith("file::memory:"):
        raise DataError(f"{data!r} is an in-memory database, which holds no traces: {_URL_HELP}.")
    path = Path(db).expanduser().resolve()
    if not path.is_file():
        hint = ""
        if not Path(db).is_absolute():
            hint = (f" sqlite:///{db} (three slashes) is relative to the current folder ({Path.cwd()}); "
                    f"for /{db} write sqlite:////{db} (four slashes).")
        raise StoreFileMissing(f"no SQLite trace store at {path}: file not found.{hint}")
    return u.set(database=str(path)).render_as_string(hide_password=False)


def parse_since(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """``--since``: a duration back from now (``30m``, ``12h``, ``7d``, ``2w``) or an ISO date /
    date-time (``2024-05-01``, ``2024-05-01T12:00``, ``...Z`` or ``+02:00``; no zone = UTC)."""
    s = str(text).strip()
    try:
        back = dt.timedelta(seconds=parse_duration(s, field="--since"))
    except UserError:
        back = None
    if back is not None:
        return (now or dt.datetime.now(dt.timezone.utc)) - back
    try:
        when = dt.datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise DataError(f"--since {text!r}: use a duration back from now (30m, 12h, 7d, 2w) or an ISO date / date-time "
                        "(2024-05-01, 2024-05-01T12:00Z).") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def open_store(url: str):
    """The store at ``url``, upgraded like the worker's; DataError when it cannot be one."""
    import sqlalchemy as sa
    from autometrics.collectors.store import StoreError, TraceStore

    shown = _hidden(url)
    _check_sqlite_readonly(url, shown)
    try:
        store = TraceStore(url, migrate=False)
        if store.version() == 0:
            store.dispose()
            raise _not_a_store(shown)  # (Postgres: a SQLite file was already checked read-only)
        store.migrate()  # an older store is upgraded in place, as the worker would
        return store
    except (ModuleNotFoundError, ImportError) as exc:
        raise DataError(f"cannot open {shown}: the database driver is not installed ({exc}). "
                        'Install it (pip install "autometrics-sdk[observe]" brings psycopg) or name it: postgresql+psycopg://...') from exc
    except StoreError as exc:
        raise DataError(str(exc)) from exc
    except sa.exc.SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
        raise DataError(f"cannot open the trace store {shown}: {type(orig).__name__}: {first}") from exc


def _check_sqlite_readonly(url: str, shown: str) -> None:
    """A SQLite file that is no trace store is refused before the store opens it (which would switch
    it to WAL mode and add tables): checked read-only with the standard library."""
    import sqlite3

    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    if u.get_backend_name() != "sqlite":
        return
    try:
        conn = sqlite3.connect(f"{Path(u.database).as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise DataError(f"cannot open the trace store {shown}: {type(exc).__name__}: {exc}") from exc
    if not found:
        raise _not_a_store(shown)


def _not_a_store(shown: str) -> DataError:
    return DataError(f"{shown} is not an autometrics trace store (no schema_version table). Point at the database "
                     "your app's autometrics.configure(store_url=...) or `autometrics collector serve --store` writes to.")


def store_training_frame(url: str, targets: list[str], project: str, since: dt.datetime | None = None):
    """The store's training frame (:meth:`TraceStore.training_frame` with numeric labels, as the
    worker refits on it) for ``targets``: one row per trace labelled with any of them; traces
    started before ``since`` left out.  DataError, naming what the store does hold, when a target
    has no row."""
    import pandas as pd

    store = open_store(url)
    try:
        frame = store.training_frame(targets, project=project, numeric=True)
        if since is not None and len(frame):
            frame = frame[frame["start_time"] >= pd.Timestamp(since)]
        for t in targets:
            if not frame[t].notna().any():
                raise DataError(_why_empty(store, t, project, since))
        return frame.drop(columns=["feedback_ns"]).reset_index(drop=True)
    finally:
        store.dispose()


def _why_empty(store, target: str, project: str, since) -> str:
    """The one-line reason no labelled trace was found, naming the fix."""
    import pandas as pd

    where = _hidden(store.url)
    inv = _inventory(store)
    if not inv["projects"]:
        return (f"the trace store {where} has no traces yet. Capture some first (autometrics.configure(store_url=...) "
                "with @autometrics.observe, or `autometrics collector serve`), or check the URL.")
    if project not in inv["projects"]:
        return (f"no traces of project {project!r} in {where}; it holds {_listing(inv['projects'], 'trace')}. "
                "Pass --project with one of them.")
    names = inv["feedback"].get(project, {})
    if target not in names:
        elsewhere = {p: fb[target] for p, fb in inv["feedback"].items() if target in fb}
        if elsewhere:
            hint = f"{target!r} exists in project {_listing(elsewhere, 'trace')}: pass --project"
        elif names:
            hint = "pass --target with one of them"
        else:
            hint = "record some with autometrics.feedback(trace_id, NAME, value) or POST /v1/feedback"
        there = f"feedback names there: {_listing(names, 'trace')}" if names else "no feedback there at all"
        return (f"no feedback named {target!r} on the {inv['projects'][project]} trace(s) of project {project!r} in {where}; "
                f"{there}. {hint[0].upper()}{hint[1:]}.")
    raw = store.training_frame(target, project=project, include_unlabelled=True)  # rows without output too: say why
    raw = raw[raw[target].notna()]
    n = len(raw)
    if not pd.to_numeric(raw[target], errors="coerce").notna().any():
        kinds = ", ".join(sorted(inv["kinds"].get((project, target), {"?"})))
        return (f"feedback {target!r} of project {project!r} has no numeric value ({n} trace(s), kind {kinds}); an evaluator "
                "is fitted on thumbs, likert, numeric or behavioral feedback. Pick another --target.")
    if not raw["output"].notna().any():
        return (f"the {n} trace(s) of project {project!r} with {target!r} feedback have no captured output "
                "(capture_output=False or capture_content=False?); there is nothing to evaluate.")
    if since is None:
        return (f"none of the {n} trace(s) of project {project!r} with {target!r} feedback has both a numeric value and "
                "a captured output; record numeric feedback on traces that captured their output.")
    newest = pd.Timestamp(raw["start_time"].max()).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"no trace of project {project!r} with {target!r} feedback started since "
            f"{since:%Y-%m-%d %H:%M:%S %Z}; {n} started earlier (newest {newest}). Widen --since or drop it.")


def _listing(counts: dict, unit: str) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    shown = ", ".join(f"{k!r} ({v} {unit}{'s' if v != 1 else ''})" for k, v in items[:12])
    return shown + (f" and {len(items) - 12} more" if len(items) > 12 else "")


def _inventory(store) -> dict:
    """Traces per project, feedback names (traces labelled) per project, feedback kinds, and
    evaluator versions per project and target: what a user needs to fix ``--project`` /
    ``--target``.  Aggregates in SQL (no content read)."""
    import sqlalchemy as sa
    from autometrics.collectors.store.schema import evaluator_versions, feedback, spans

    per_trace = sa.select(spans.c.trace_id, spans.c.project).distinct().subquery()
    q_proj = sa.select(per_trace.c.project, sa.func.count()).group_by(per_trace.c.project)
    q_fb = (sa.select(per_trace.c.project, feedback.c.name, feedback.c.kind, sa.func.count(sa.distinct(feedback.c.trace_id)))
            .join(per_trace, per_trace.c.trace_id == feedback.c.trace_id)
            .group_by(per_trace.c.project, feedback.c.name, feedback.c.kind))
    v = evaluator_versions
    q_ver = sa.select(v.c.project, v.c.target, sa.func.count()).group_by(v.c.project, v.c.target)
    out: dict = {"projects": {}, "feedback": {}, "kinds": {}, "versions": {}}
    with store.engine.connect() as conn:
        for p, n in conn.execute(q_proj):
            out["projects"][p] = int(n)
        for p, t, n in conn.execute(q_ver):
            out["versions"].setdefault(p, {})[t] = int(n)
        for p, name, kind, n in conn.execute(q_fb):
            fb = out["feedback"].setdefault(p, {})
            fb[name] = fb.get(name, 0) + int(n)  # a trace labelled under two kinds counts once per kind (rare)
            out["kinds"].setdefault((p, name), set()).add(kind)
    return out


def check_scope(store, project: str, target: str | None) -> None:
    """Refuse a ``--project`` (and ``--target``, unless None) that names nothing in the store while
    the store holds something else: a UserError naming what it does hold and the flag to pass.  A
    command that reads the store must not answer "no evaluator versions" (exit 0) for a project left
    at its default or misspelt.  Cheap when the scope exists (indexed look-ups); the inventory is
    read only to explain a miss.  A store with nothing to point at passes: the command says what
    it finds."""
    if _scope_holds(store, project, target):
        return
    inv = _inventory(store)
    known = {p for p in (*inv["projects"], *inv["versions"]) if p is not None}
    holds = f"{_hidden(store.url)} holds {_holdings(inv, known)}"
    if project not in known:
        if not known:
            return
        if len(known) == 1:
            only = next(iter(known))
            names = _names(inv, only)
            also = f" --target {shlex.quote(names[0])}" if target is not None and target not in names and len(names) == 1 else ""
            fix = f"Pass --project {shlex.quote(only)}{also}"
        else:
            with_target = sorted(p for p in known if target in _names(inv, p)) if target is not None else []
            fix = (f"Pass --project {shlex.quote(with_target[0])}" if len(with_target) == 1
                   else "Pass --project with one of them")
        raise UserError(f"project {project!r} has no traces or evaluator versions in that store; {holds}. {fix}.")
    if target is None or not any(_names(inv, p) for p in known):
        return
    here = _names(inv, project)
    elsewhere = sorted(p for p in known if target in _names(inv, p))
    if elsewhere:
        fix = f"{target!r} is in project {', '.join(map(repr, elsewhere))}: pass --project " + (
            shlex.quote(elsewhere[0]) if len(elsewhere) == 1 else "with one of them")
    elif here:
        fix = f"Pass --target {shlex.quote(here[0])}" if len(here) == 1 else "Pass --target with one of them"
    else:
        fix = ("Record feedback under that name first (autometrics.feedback(trace_id, NAME, value) or POST /v1/feedback), "
               "or pass --project with another project")
    raise UserError(f"no feedback or evaluator versions named {target!r} in project {project!r}; {holds}. {fix}.")


def _scope_holds(store, project: str, target: str | None) -> bool:
    """Whether the store has evaluator versions or feedback of ``target`` in ``project`` (with
    ``target`` None: versions or traces of ``project``); two indexed look-ups of one row each."""
    import sqlalchemy as sa
    from autometrics.collectors.store.schema import evaluator_versions, feedback, traces

    v = evaluator_versions
    q = sa.select(v.c.id).where(v.c.project == project)
    if target is None:
        other = sa.select(traces.c.trace_id).where(traces.c.project == project)
    else:
        q = q.where(v.c.target == target)
        other = (sa.select(feedback.c.id).join(traces, traces.c.trace_id == feedback.c.trace_id)
                 .where(traces.c.project == project, feedback.c.name == target))
    with store.engine.connect() as conn:
        return any(conn.execute(x.limit(1)).first() is not None for x in (q, other))


def _names(inv: dict, project) -> list[str]:
    """The feedback names and evaluator targets of ``project``, sorted."""
    return sorted({*inv["feedback"].get(project, {}), *inv["versions"].get(project, {})})


def _holdings(inv: dict, projects: set) -> str:
    """Each project with its traces, feedback names and evaluator versions (the 12 largest)."""
    order = sorted(projects, key=lambda p: (-inv["projects"].get(p, 0), str(p)))
    parts = []
    for p in order[:12]:
        n = inv["projects"].get(p, 0)
        bits = [f"{n} trace{'s' if n != 1 else ''}"]
        if inv["feedback"].get(p):
            bits.append("feedback " + _listing(inv["feedback"][p], "trace"))
        if inv["versions"].get(p):
            bits.append("evaluator versions of target " + _listing(inv["versions"][p], "version"))
        parts.append(f"project {p!r} ({'; '.join(bits)})")
    return ", ".join(parts) + (f" and {len(order) - 12} more project(s)" if len(order) > 12 else "")


def load_fit_data(args):
    """``autometrics fit``'s data as a :class:`~autometrics.evaluators.data.Dataset`, plus lines
    to print about where it came from."""
    if str(args.data).lower().startswith(("phoenix+", "langfuse+")):
        return _load_remote(args)
    url = store_url_of(args.data)
    if url is None:
        for flag, val in (("--project", args.project), ("--since", args.since)):
            if val is not None:
                raise DataError(f"{flag} applies to a trace store only; {args.data} is a file: drop {flag}.")
        ds = load_dataset(args.data, args.target, input_col=args.input_col, output_col=args.output_col,
                          reference_cols=args.reference_col, id_col=args.id_col or None, group_col=args.group_col)
        return ds, []
    project = project_name(args.project)
    since = parse_since(args.since) if args.since is not None else None
    frame = store_training_frame(url, list(args.target), project, since)
    window = f", started since {since:%Y-%m-%d %H:%M:%S %Z}" if since else ""
    label = f"{_hidden(url)} (project {project!r}{window})"
    # a conversation (session) is kept whole on one side of every split, as the worker does
    group_col = args.group_col or ("conversation" if "conversation" in frame.columns else None)
    ds = load_dataset(frame, args.target, input_col=args.input_col, output_col=args.output_col,
                      reference_cols=args.reference_col, id_col=args.id_col or None, group_col=group_col, source=label)
    return ds, [f"read {len(frame)} labelled trace(s) from {label}: the frame `autometrics worker` refits on"]


def _load_remote(args):
    """``fit phoenix+http://host:6006/<project>`` or ``fit langfuse+https://host``: the project's
    spans and labels (Phoenix span annotations, Langfuse scores under the target names) copied
    into a throwaway SQLite store, then read as the worker reads a store (same frame, same
    grouping by conversation)."""
    import tempfile

    from autometrics.collectors.store import TraceStore

    since = parse_since(args.since) if args.since is not None else None
    phoenix = str(args.data).lower().startswith("phoenix+")
    if phoenix:
        from autometrics.collectors.phoenix import import_phoenix, parse_phoenix_url, phoenix_client

        base, project = parse_phoenix_url(str(args.data))
        label, what, skipped_key = f"Phoenix {base} (project {project!r})", "annotation", "annotations_skipped"
    else:
        from autometrics.collectors.langfuse_source import import_langfuse, langfuse_api, parse_langfuse_url

        base = parse_langfuse_url(str(args.data))
        project = project_name(args.project) if args.project else "langfuse"
        label, what, skipped_key = f"Langfuse {base}", "score", "scores_skipped"
    with tempfile.TemporaryDirectory(prefix="autometrics-import-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'import.db'}"
        store = TraceStore(url)
        try:
            if phoenix:
                counts = import_phoenix(phoenix_client(base), project, store, names=list(args.target), start_time=since)
            else:
                counts = import_langfuse(langfuse_api(base), store, project=project, names=list(args.target), since=since)
        except Exception as exc:
            if isinstance(exc, (UserError, DataError)):
                raise
            raise DataError(f"could not read {label}: {type(exc).__name__}: {exc}") from exc
        finally:
            store.dispose()
        frame = store_training_frame(url, list(args.target), project, None)
    group_col = args.group_col or "conversation"
    ds = load_dataset(frame, args.target, input_col=args.input_col, output_col=args.output_col,
                      reference_cols=args.reference_col, id_col=args.id_col or None, group_col=group_col, source=label)
    skipped = "; ".join(f"{k}: {v}" for k, v in counts[skipped_key].items())
    return ds, [f"read {counts['spans']} span(s) of {counts['traces']} trace(s) and {counts['feedback']} {what}(s) from "
                f"{label}" + (f" ({what}s not read: {skipped})" if skipped else "")]
