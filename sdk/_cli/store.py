"""``autometrics store``: maintenance of the trace store.

  autometrics store prune --older-than 30d [--store URL] [--project P] [--dry-run] [--batch-size N] [--vacuum]

Deletes traces first seen longer ago than ``--older-than`` (``30d``, ``12h``, ``90m``) that have no
feedback, with their spans, online scores and claims, in batches of short transactions (the
collector and the worker keep writing meanwhile).  Labelled traces and their scores, all
feedback, evaluator versions, alerts and refit runs are kept.  ``--dry-run`` prints the same counts
and deletes nothing.  See :mod:`autometrics.collectors.store.retention`.
"""

from __future__ import annotations

import argparse
import json
import sys

from autometrics.metricbank.errors import UserError

from .checks import count, duration

__all__ = ["add_parser", "cmd_store"]


def _duration(text: str) -> str:
    """argparse type: checked here (as every duration flag is) so a bad value is one ``error:`` line
    before the store opens; the text itself goes on to ``prune``, which reports it as written."""
    duration(text)
    return text


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``store`` on ``autometrics``' sub-parsers; returns the sub-parser."""
    s = subparsers.add_parser("store", help="trace store maintenance (retention)")
    ssub = s.add_subparsers(dest="store_command")
    p = ssub.add_parser("prune", help="delete old traces that have no feedback (labelled traces, feedback and versions are kept)")
    p.add_argument("--older-than", required=True, type=_duration, metavar="AGE",
                   help="delete traces first seen longer ago than AGE: 30d (days), 12h (hours), 90m (minutes)")
    p.add_argument("--store", default=None, help="trace store URL (default: $AUTOMETRICS_STORE_URL, else SQLite in the user data dir)")
    p.add_argument("--project", default=None,
                   help="only traces of this project (default: every project; $AUTOMETRICS_PROJECT is not applied here)")
    p.add_argument("--dry-run", action="store_true", help="print what would be deleted and delete nothing")
    p.add_argument("--batch-size", type=count(1, 10_000), default=None, help="traces per transaction (default 1000)")
    p.add_argument("--vacuum", action="store_true", help="SQLite: rewrite the file afterwards so it shrinks (blocks writers meanwhile)")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    return s


def cmd_store(args) -> int:
    if args.store_command != "prune":
        print("error: say what to do: autometrics store prune --older-than 30d [--store URL] [--project P] [--dry-run]",
              file=sys.stderr)
        return 2
    from autometrics.collectors.store import default_store_url
    from autometrics.collectors.store.retention import sqlite_vacuum_hint, vacuum

    from .store_source import open_store, store_url_of

    given = args.store or default_store_url()
    url = store_url_of(given)
    if url is None:
        raise UserError(f"--store {given!r} is not a trace store URL: write sqlite:////absolute/path/app.db, the path of a .db "
                        "file, or postgresql+psycopg://user@host/db.")
    store = open_store(url)  # refuses a missing file or a database that is no trace store
    try:
        res = store.prune(args.older_than, project=args.project, dry_run=args.dry_run, batch_size=args.batch_size)
        sizes = vacuum(store) if args.vacuum and not args.dry_run else None
        if args.json:
            out = res.as_dict()
            if sizes:
                out["sqlite_mib_before"], out["sqlite_mib_after"] = round(sizes[0], 2), round(sizes[1], 2)
            print(json.dumps(out))
            return 0
        print(f"store {store.shown_url}:")
        print(res.summary())
        if sizes and sizes[0]:
            print(f"VACUUM: SQLite file {sizes[0]:,.1f} MiB -> {sizes[1]:,.1f} MiB")
        elif not args.dry_run and res.traces and (hint := sqlite_vacuum_hint(store)):
            print(hint)
        return 0
    finally:
        store.dispose()
