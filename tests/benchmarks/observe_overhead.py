"""Per-call overhead of ``@autometrics.observe`` next to an undecorated call and next to
Langfuse's own ``@observe`` (langfuse 5.x SDK), measured in the same run.

Both decorators capture input and output and export in the background: ours to a SQLite trace
store (and, in the third row, also to Langfuse), Langfuse's to a Langfuse-compatible test
endpoint on loopback (tests/langfuse_server.py; no Langfuse server runs here).  The
background export threads share the CPU with the caller, as they would in an application, so
the figures are per-call wall time of a tight loop (the worst case: real calls take
milliseconds and leave the exporters idle time).

The second table (``--part clients``, run in a fresh interpreter so each SDK starts clean) is the
comparison with client instrumentation on: an ``openai`` client call to a loopback
OpenAI-compatible endpoint (tests/fake_llm_server.py, in a child process so its request handling
does not share our GIL) made inside ``@autometrics.observe`` with ``autometrics.instrument("openai")``
(the official OpenTelemetry OpenAI instrumentation writing a GenAI client span into the SQLite
store), next to the same call inside Langfuse's ``@observe`` with its OpenAI wrapper
(``langfuse.openai``, exporting to the Langfuse-compatible double, also a child process), and next
to the bare call.  Overhead = time per call minus the bare call's; target: ours <= 0.3x Langfuse's.
The variants alternate round by round; both SDKs wrap ``Completions.create`` process-wide, so each
round puts the wrapper it measures in place.

    python tests/benchmarks/observe_overhead.py [--calls 20000] [--rounds 5] [--client-calls 2000]
    python tests/benchmarks/observe_overhead.py --part clients [--client-calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
    ap.add_argument("--client-calls", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--part", choices=("all", "decorator", "clients"), default="all")
    ap.add_argument("--json", help="also write the clients table's raw figures to this file")
    args = ap.parse_args()
    if args.part == "clients":
        return clients_part(args)
    decorator_part(args)
    if args.part == "all":
        print(flush=True)
        subprocess.run([sys.executable, __file__, "--part", "clients", "--client-calls", str(args.client_calls),
                        "--rounds", str(args.rounds)], check=True)


def decorator_part(args) -> None:
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


# --------------------------------------------------------------------------- with client instrumentation

_CHILD = """import sys, json
sys.path.insert(0, {tests!r})
{body}
print(json.dumps(info), flush=True)
sys.stdin.read()  # runs until the benchmark closes our stdin
{after}
"""


def _child(body: str, after: str = "") -> tuple[subprocess.Popen, dict]:
    """A helper server in a child process; returns it and the JSON line it printed."""
    code = _CHILD.format(tests=str(ROOT / "tests"), body=body, after=after)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def per_call_wall_cpu_us(fn, n: int) -> tuple[float, float]:
    """Wall time and the calling thread's CPU time per call (the CPU time leaves out waiting for
    the endpoint and for background export threads holding the GIL)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn("What is the capital of France?")
    return (time.perf_counter() - t0) / n * 1e6, (time.thread_time() - c0) / n * 1e6


def clients_part(args) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    llm, info = _child("from fake_llm_server import FakeLLMServer\nsrv = FakeLLMServer().__enter__()\ninfo = {'url': srv.url}")
    lf_srv, lf = _child("from langfuse_server import LangfuseTestServer\n"
                        "srv = LangfuseTestServer(public_key='pk-lf-bench-clients', secret_key='sk-lf-bench-clients').__enter__()\n"
                        "info = {'url': srv.url, 'pk': srv.public_key, 'sk': srv.secret_key}",
                        after="print(len(srv.spans), flush=True)")
    os.environ.update(LANGFUSE_PUBLIC_KEY=lf["pk"], LANGFUSE_SECRET_KEY=lf["sk"], LANGFUSE_BASE_URL=lf["url"])
    tmp = tempfile.mkdtemp(prefix="am-bench-clients-")
    try:
        import openai
        from openai.resources.chat.completions import Completions

        bare = Completions.__dict__["create"]
        import autometrics.capture as am
        from autometrics.capture.instrumentation import instrument
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
        from opentelemetry.sdk.trace import TracerProvider

        # the official instrumentation's own cost: a plain SDK provider, no processor, content on
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
        OpenAIInstrumentor().instrument(tracer_provider=TracerProvider())
        library_only = Completions.__dict__["create"]
        OpenAIInstrumentor().uninstrument()
        del os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"]
        am.configure(store_url=f"sqlite:///{tmp}/c.db", langfuse="off", spool=False, queue_size=100_000)
        instrument("openai")  # stays instrumented: both wrappers pass through only while it is
        ours = Completions.__dict__["create"]
        Completions.create = bare  # langfuse.openai wraps the bare method on import
        import langfuse.openai  # noqa: F401
        from langfuse import get_client
        from langfuse import observe as lf_observe

        lf_wrapped = Completions.__dict__["create"]
        lf_client = get_client()
        client = openai.OpenAI(base_url=info["url"], api_key="k", max_retries=0)
        messages = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": ""}]

        def call(q: str) -> str:
            r = client.chat.completions.create(model="m", messages=[messages[0], {"role": "user", "content": q}],
                                               max_tokens=16, temperature=0.0)
            return r.choices[0].message.content

        @am.observe
        def am_call(q: str) -> str:
            return call(q)

        @lf_observe()
        def lf_call(q: str) -> str:
            return call(q)

        variants = {  # name: (the Completions.create in place, the function called, flush after the round)
            "bare openai call": (bare, call, None),
            "bare call, OpenTelemetry OpenAI instrumentation only": (library_only, call, None),
            "autometrics @observe, client not instrumented": (bare, am_call, lambda: am.flush(60)),
            "autometrics @observe + instrument('openai')": (ours, am_call, lambda: am.flush(60)),
            "langfuse @observe + langfuse.openai wrapper": (lf_wrapped, lf_call, lf_client.flush),
        }
        rows: dict[str, list[float]] = {k: [] for k in variants}
        cpu: dict[str, list[float]] = {k: [] for k in variants}
        for create, fn, flush in variants.values():  # warm-up: connections, imports, first spans
            Completions.create = create
            per_call_us(fn, 50)
            if flush:
                flush()
        for _ in range(args.rounds):
            for name, (create, fn, flush) in variants.items():
                Completions.create = create
                wall, on_thread = per_call_wall_cpu_us(fn, args.client_calls)
                rows[name].append(wall)
                cpu[name].append(on_thread)
                if flush:
                    flush()
        st = am.stats()
        am.shutdown(30)
        lf_client.shutdown()
    finally:
        llm.stdin.close()
        lf_srv.stdin.close()
        lf_spans = lf_srv.stdout.readline().strip()
        llm.wait(10)
        lf_srv.wait(10)

    ours, lf = "autometrics @observe + instrument('openai')", "langfuse @observe + langfuse.openai wrapper"
    med = {k: statistics.median(v) for k, v in rows.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    base, base_cpu = med["bare openai call"], med_cpu["bare openai call"]
    lf_oh, lf_oh_cpu = med[lf] - base, med_cpu[lf] - base_cpu
    print(f"openai client call to a loopback endpoint, per call, median of {args.rounds} rounds x {args.client_calls} "
          f"calls ({os.cpu_count()} CPUs, Python {sys.version.split()[0]}, openai {openai.__version__})")
    print(f"{'':54s} {'wall µs':>8s} {'overhead':>9s} {'÷ langfuse':>10s}  {'caller CPU µs':>13s} {'overhead':>9s} "
          f"{'÷ langfuse':>10s}")
    for name in rows:
        print(f"{name:54s} {med[name]:8.1f} {med[name] - base:9.1f} {(med[name] - base) / lf_oh:9.2f}x  "
              f"{med_cpu[name]:13.1f} {med_cpu[name] - base_cpu:9.1f} {(med_cpu[name] - base_cpu) / lf_oh_cpu:9.2f}x")
    print(f"ratio of overheads, autometrics (@observe + client span) / langfuse (@observe + OpenAI wrapper): wall "
          f"{(med[ours] - base) / lf_oh:.2f}x, caller CPU {(med_cpu[ours] - base_cpu) / lf_oh_cpu:.2f}x (target <= 0.3x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "calls": args.client_calls, "wall_us": rows,
                                               "caller_cpu_us": cpu}, indent=1))
    print(f"autometrics spans: written {st.get('span_written', 0)}, dropped {st.get('span_dropped', 0)}; "
          f"langfuse double received {lf_spans} spans")


if __name__ == "__main__":
    main()
