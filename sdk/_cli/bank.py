"""``autometrics bank list [--unavailable]`` and ``autometrics bank show NAME``: browse MetricBank.

Kept out of main.py (the longest of the CLI modules) with its table and wrapping helpers.
"""

from __future__ import annotations

import sys

__all__ = ["cmd_bank"]


def _bank_status(cls) -> tuple[str, str]:
    """(short status for the table, full reason) of one metric class; the reason is "" when it runs here."""
    from autometrics.metricbank import MetricUnavailable

    try:
        cls().check_available()
        return "ok", ""
    except MetricUnavailable as exc:
        reason = str(exc)
    except Exception as exc:  # a broken optional install must not break the listing
        reason = f"{type(exc).__name__}: {exc}"
    if "needs the Python package" in reason:
        return "no package", reason
    if "weights for model" in reason:
        return "no weights", reason
    return "unavailable", reason


def _wrapped(text: str, indent: str = "    ") -> str:
    """``text`` wrapped to the terminal width, never cut: long words (paths, URLs, commands) stay whole."""
    import shutil
    import textwrap

    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _print_unavailable(rows: list[tuple]) -> None:
    """One block per metric that cannot run here: name, declared resources (model metrics), full reason."""
    for k, (name, cls, _status, reason) in enumerate(rows):
        res = getattr(cls, "resources", None)
        extra = ""
        if res is not None and res.params != "?":
            if res.is_estimate:
                kind = "our estimates"
            elif "our estimate" in res.source:
                kind = "partly measured"
            else:
                kind = "measured"
            extra = f"  [{res.describe()}; {kind}: `autometrics bank show {name}`]"
        if k:
            print()
        print(f"{name}{extra}")
        print(_wrapped(reason))


def cmd_bank(args) -> int:
    from autometrics.metricbank import list_metrics, load_card, metric_class

    if args.bank_command == "show":
        print(load_card(metric_class(args.name).name))
        return 0
    if args.bank_command != "list":
        print("error: name a subcommand: autometrics bank {list [--unavailable],show NAME} "
              "(see `autometrics bank --help`)", file=sys.stderr)
        return 2
    rows = []
    for name in list_metrics():
        cls = metric_class(name)
        status, reason = _bank_status(cls)
        rows.append((name, cls, status, reason))
    missing = [r for r in rows if r[3]]
    if args.unavailable:
        if not missing:
            print(f"all {len(rows)} metrics can run here")
            return 0
        print(f"{len(missing)} of {len(rows)} metrics cannot run here:\n")
        _print_unavailable(missing)
        return 0
    w = max(len(r[0]) for r in rows)
    sw = max(len("status"), *(len(r[2]) for r in rows))
    print(f"{'metric':<{w}}  dir  needs      {'status':<{sw}}  description")
    for name, cls, status, _reason in rows:
        d = "↑" if cls.higher_is_better else "↓"
        needs = "+".join(x for x, on in (("ref", cls.needs_reference), ("input", cls.needs_input)) if on) or "-"
        print(f"{name:<{w}}  {d:^3}  {needs:<9}  {status:<{sw}}  {cls.description}")
    print(f"{len(rows)} metrics; ↑ higher is better, ↓ lower is better")
    if missing:
        print(f"\nWhy {len(missing)} cannot run here (also: `autometrics bank list --unavailable`):\n")
        _print_unavailable(missing)
    return 0
