"""Per-call overhead of ``@autometrics.observe`` next to an undecorated call and next to
Langfuse's own ``@observe`` (langfuse 5.x SDK), measured in the same run.

Both decorators capture input and output and export in the background: ours to a SQLite trace
store (and, in the third row, also to Langfuse), Langfuse's to a Langfuse-compatible test
endpoint on loopback (tests/langfuse_server.py; no Langfuse server runs here).  The
background export threads share the CPU with the caller, as they would in an application, so
the figures are per-call wall time of a tight loop (the worst case: real calls take
milliseconds and leave the exporters idle time).

    python tests/benchmarks/observe_overhead.py [--calls 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def per_call_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn("What is the capital of France?")
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from langfuse_server import LangfuseTestServer as LangfuseDouble

    tmp = tempfile.mkdtemp(prefix="am-bench-")
    with LangfuseDouble(public_key="pk-lf-bench-native", secret_key="sk-lf-bench-native") as native, \
            LangfuseDouble(public_key="pk-lf-bench-am", secret_key="sk-lf-bench-am") as ours_lf:
        # Langfuse's own decorator (its client reads these; it installs the global provider)
        os.environ.update(LANGFUSE_PUBLIC_KEY=native.public_key, LANGFUSE_SECRET_KEY=native.secret_key, LANGFUSE_BASE_URL=native.url)
        from langfuse import get_client
        from langfuse import observe as lf_observe

        lf_client = get_client()

        @lf_observe()
        def lf_call(q: str) -> str:
            return "Paris"

        import autometrics.capture as am

        def plain(q: str) -> str:
            return "Paris"

        am.configure(store_url=f"sqlite:///{tmp}/a.db", langfuse="off", queue_size=100_000)

        @am.observe(model="gpt-4o-mini")
        def am_call(q: str) -> str:
            return "Paris"

        rows: dict[str, list[float]] = {"undecorated": [], "autometrics @observe (SQLite store)": [], "langfuse @observe (SDK 5.x)": []}
        for _ in range(args.rounds):
            rows["undecorated"].append(per_call_us(plain, args.calls))
            rows["autometrics @observe (SQLite store)"].append(per_call_us(am_call, args.calls))
            am.flush(60)
            rows["langfuse @observe (SDK 5.x)"].append(per_call_us(lf_call, args.calls))
            lf_client.flush()
        st = am.stats()

        # ours with the Langfuse export on as well (private provider, second key)
        os.environ.update(LANGFUSE_PUBLIC_KEY=ours_lf.public_key, LANGFUSE_SECRET_KEY=ours_lf.secret_key, LANGFUSE_BASE_URL=ours_lf.url)
        am.configure(store_url=f"sqlite:///{tmp}/b.db", langfuse="on", queue_size=100_000)

        @am.observe(model="gpt-4o-mini")
        def am_lf_call(q: str) -> str:
            return "Paris"

        key = "autometrics @observe (SQLite + Langfuse export)"
        rows[key] = []
        for _ in range(args.rounds):
            rows[key].append(per_call_us(am_lf_call, args.calls))
            am.flush(60)
        am.shutdown(30)
        lf_client.shutdown()

    base = statistics.median(rows["undecorated"])
    lf = statistics.median(rows["langfuse @observe (SDK 5.x)"])
    print(f"per-call time, median of {args.rounds} rounds x {args.calls} calls ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    print(f"{'':50s} {'µs/call':>9s} {'overhead µs':>12s} {'÷ undecorated':>14s} {'÷ langfuse':>11s}")
    for name, vals in rows.items():
        m = statistics.median(vals)
        print(f"{name:50s} {m:9.2f} {m - base:12.2f} {m / base:13.0f}x {m / lf:10.2f}x")
    print(f"autometrics spans: written {st.get('span_written', 0)}, dropped {st.get('span_dropped', 0)}; "
          f"langfuse double received {len(native.spans)} spans (ours-with-export double: {len(ours_lf.spans)})")


if __name__ == "__main__":
    main()
