"""Spool cost and replay throughput: what an outage costs the writer, and how fast the backlog
drains once the backend is back.

In one run, on the same spans (real OpenTelemetry spans with GenAI content) and feedback rows:

- direct store write: ``StoreSink.write`` per batch into a SQLite store (WAL, synchronous=FULL),
  what the writer does when the store is up;
- spool write: ``encode`` + ``Spool.append`` per batch (zlib, WAL, synchronous=FULL), what the
  writer does instead while the backend is down; per item, next to the direct write;
- replay to the store: a fresh writer (as after a restart) drains the spool into a fresh store;
- replay to a collector: the same items spooled as OTLP/feedback JSON, drained into
  ``autometrics collector serve`` running as a separate process.

Every replay is checked: the store then holds every item once and the spool is empty.

    python tests/benchmarks/spool_replay.py [--spans 20000] [--feedback 5000] [--batch 512] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_spans(n: int):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    tr = tp.get_tracer("autometrics")
    for i in range(n):
        with tr.start_as_current_span("chat gpt-4o-mini") as s:
            s.set_attribute("gen_ai.operation.name", "chat")
            s.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            s.set_attribute("gen_ai.usage.input_tokens", 42)
            s.set_attribute("gen_ai.usage.output_tokens", 17)
            s.set_attribute("gen_ai.input.messages", json.dumps(
                [{"role": "system", "parts": [{"type": "text", "content": "You answer billing questions briefly."}]},
                 {"role": "user", "parts": [{"type": "text", "content": f"question number {i} about my invoice"}]}]))
            s.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": f"answer {i}: " + "a typical answer " * 8}],
                  "finish_reason": "stop"}]))
    return list(exp.get_finished_spans())


def make_feedback(spans, n: int):
    from autometrics.collectors.feedback import make_feedback_row

    return [make_feedback_row(f"{spans[i % len(spans)].context.trace_id:032x}", "thumbs", i % 2 == 0, comment="ok")
            for i in range(n)]


def batches(spans, fb, size: int):
    """Writer-shaped batches: spans with the feedback interleaved proportionally."""
    per = max(1, len(spans) // max(1, len(fb))) if fb else None
    out, cur_s, cur_f, j = [], [], [], 0
    for i, s in enumerate(spans):
        cur_s.append(s)
        if per and i % per == 0 and j < len(fb):
            cur_f.append(fb[j])
            j += 1
        if len(cur_s) + len(cur_f) >= size:
            out.append((cur_s, cur_f))
            cur_s, cur_f = [], []
    cur_f += fb[j:]
    if cur_s or cur_f:
        out.append((cur_s, cur_f))
    return out


def drain(writer, timeout: float = 600) -> float:
    t0 = time.perf_counter()
    if not writer.flush(timeout):
        raise SystemExit(f"replay did not finish: {writer.counters.snapshot()}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spans", type=int, default=20_000)
    ap.add_argument("--feedback", type=int, default=5_000)
    ap.add_argument("--batch", type=int, default=512, help="items per writer batch (the SDK's default)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    from autometrics.collectors.exporter import BatchWriter, CollectorSink, Counters, StoreSink
    from autometrics.collectors.spool import Spool
    from autometrics.collectors.store import TraceStore

    tmp = Path(tempfile.mkdtemp(prefix="spool-bench-"))
    spans = make_spans(args.spans)
    fb = make_feedback(spans, args.feedback)
    work = batches(spans, fb, args.batch)
    n_items = len(spans) + len(fb)

    # direct write (the backend is up)
    direct = StoreSink(store=TraceStore(f"sqlite:///{tmp / 'direct.db'}"))
    t0 = time.perf_counter()
    for s, f in work:
        direct.write(s, f)
    t_direct = time.perf_counter() - t0

    # spool write (the backend is down): encode + append, per batch
    replay_store = StoreSink(store=TraceStore(f"sqlite:///{tmp / 'replayed.db'}"))
    spool = Spool(tmp / "spool.db", 4 << 30)
    t_encode = t_append = 0.0
    for s, f in work:
        t0 = time.perf_counter()
        recs = replay_store.encode(s, f)
        t1 = time.perf_counter()
        ok = spool.append(replay_store.target, [(r.kind, r.encoding, r.items, r.payload) for r in recs])
        t_append += time.perf_counter() - t1
        t_encode += t1 - t0
        assert all(ok)
    t_spool = t_encode + t_append
    spool_mb = spool.size_bytes() / 2**20
    spool.close()

    # replay into the store, by a fresh writer (as after a restart)
    c = Counters()
    w = BatchWriter(replay_store, counters=c, spool=Spool(tmp / "spool.db", 4 << 30))
    t_replay = drain(w)
    snap = c.snapshot()
    store = replay_store.store
    assert snap.get("span_replayed") == len(spans) and snap.get("feedback_replayed") == len(fb), snap
    assert store.count("spans") == len(spans) and store.count("feedback") == len(fb)
    assert direct.store.spans_frame().sort_values("span_id").reset_index(drop=True).equals(
        store.spans_frame().sort_values("span_id").reset_index(drop=True)), "replayed rows differ from direct rows"
    w.shutdown(5)

    # replay into a collector in another process
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    col_db = tmp / "collector.db"
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "collector", "serve", "--store", f"sqlite:///{col_db}",
                             "--port", str(port), "--no-auth", "--langfuse", "off"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LANGFUSE_PUBLIC_KEY": ""})
    try:
        assert "listening on" in proc.stdout.readline()
        csink = CollectorSink(f"http://127.0.0.1:{port}")
        cspool = Spool(tmp / "spool-collector.db", 4 << 30)
        t0 = time.perf_counter()
        for s_, f in work:
            cspool.append(csink.target, [(r.kind, r.encoding, r.items, r.payload) for r in csink.encode(s_, f)])
        t_cspool = time.perf_counter() - t0
        cspool.close()
        c2 = Counters()
        w2 = BatchWriter(csink, counters=c2, spool=Spool(tmp / "spool-collector.db", 4 << 30))
        t_creplay = drain(w2)
        w2.shutdown(5)
        cstore = TraceStore(f"sqlite:///{col_db}")
        assert cstore.count("spans") == len(spans) and cstore.count("feedback") == len(fb), c2.snapshot()
    finally:
        proc.terminate()
        proc.wait(10)

    us = 1e6 / n_items
    res = {
        "items": n_items, "spans": len(spans), "feedback": len(fb), "batch": args.batch, "cpus": os.cpu_count(),
        "direct_store_write_us_per_item": t_direct * us,
        "spool_write_us_per_item": t_spool * us,
        "spool_encode_us_per_item": t_encode * us,
        "spool_append_us_per_item": t_append * us,
        "spool_vs_direct": t_spool / t_direct,
        "spool_mb": spool_mb, "spool_bytes_per_item": spool_mb * 2**20 / n_items,
        "replay_store_items_per_s": n_items / t_replay,
        "collector_spool_write_us_per_item": t_cspool * us,
        "replay_collector_items_per_s": n_items / t_creplay,
    }
    print(f"spool replay benchmark: {len(spans):,} spans + {len(fb):,} feedback in batches of {args.batch} "
          f"({os.cpu_count()} CPUs; SQLite WAL synchronous=FULL everywhere)")
    print(f"  direct store write      {res['direct_store_write_us_per_item']:8.1f} us/item")
    print(f"  spool write (store rows){res['spool_write_us_per_item']:8.1f} us/item  = {res['spool_vs_direct']:.2f}x direct "
          f"(encode {res['spool_encode_us_per_item']:.1f} + append {res['spool_append_us_per_item']:.1f}); "
          f"{res['spool_bytes_per_item']:.0f} bytes/item on disk")
    print(f"  spool write (OTLP)      {res['collector_spool_write_us_per_item']:8.1f} us/item")
    print(f"  replay -> SQLite store  {res['replay_store_items_per_s']:10,.0f} items/s  (rows identical to direct: yes)")
    print(f"  replay -> collector     {res['replay_collector_items_per_s']:10,.0f} items/s  (separate process, loopback)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
