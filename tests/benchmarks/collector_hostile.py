"""Hostile clients against the collector on 127.0.0.1, while a normal client keeps sending spans.

Starts ``autometrics collector serve`` as a separate process (SQLite store in a temp dir, the
default limits except a 10 s body timeout so the run stays short), then runs bounded phases, each
with the normal client sending a 20-span OTLP protobuf+gzip batch every 20 ms on a keep-alive
connection:

  baseline      the normal client alone
  slow headers  300 connections sending one header byte every 2 s (never finishing)
  slow bodies   100 authenticated requests declaring 1 MB, sending one body byte every 2 s
  idle sockets  1,000 connections that send nothing
  one client    1,100 connections from one address, each a request head never finished
  gzip bombs    16 concurrent ~250 KB bodies that decompress to 256 MiB, again and again
  all at once   all four together

Hostile connections come from other loopback addresses than the normal client (8 addresses for
the many-client phases, one for the one-client phase); a probe asks ``/health`` once a second.
Every 20 ms it samples the collector's thread count and RSS (``/proc/PID/status``), and prints per
phase: peak threads, peak RSS against the baseline, the normal client's success rate and latency
percentiles, and what the server did to the hostile connections.  Loopback only; every loop is
bounded by its phase's deadline.

    python tests/benchmarks/collector_hostile.py [--phase-seconds 14] [--out tests/benchmarks/results/collector_hostile.json]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collector_throughput import otlp_body  # noqa: E402  (the same span batches as the throughput benchmark)

KEY = "hostile-bench-key"


def proc_status(pid: int) -> tuple[int, int]:
    """(RSS bytes, threads) of process ``pid`` and its child processes (granian serves from a worker process)."""
    rss = threads = 0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Threads:"):
                        threads += int(line.split()[1])
        except OSError:
            pass
    return rss, threads


class Monitor(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.stop, self.peak_rss, self.peak_threads = pid, threading.Event(), 0, 0

    def reset(self) -> None:
        self.peak_rss = self.peak_threads = 0

    def run(self) -> None:
        while not self.stop.is_set():
            rss, th = proc_status(self.pid)
            self.peak_rss, self.peak_threads = max(self.peak_rss, rss), max(self.peak_threads, th)
            time.sleep(0.02)


class NormalClient(threading.Thread):
    """Keeps sending span batches; records (time, ok, latency) per request."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.stop, self.log, self.seq = port, threading.Event(), [], 10_000_000

    def run(self) -> None:
        conn = None
        hdr = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
        while not self.stop.is_set():
            self.seq += 1
            body = otlp_body(20, self.seq)
            t0 = time.monotonic()
            try:
                conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", "/v1/traces", body=body, headers=hdr)
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException):
                ok, conn = False, None
            self.log.append((t0, ok, time.monotonic() - t0))
            time.sleep(0.02)

    def window(self, start: float, end: float) -> dict:
        got = [(ok, lat) for t, ok, lat in self.log if start <= t < end]
        lat = sorted(x * 1000 for ok, x in got if ok)

        def pct(p):
            return round(lat[min(len(lat) - 1, int(p / 100 * len(lat)))], 1) if lat else None

        return {"requests": len(got), "ok": sum(ok for ok, _ in got), "success_rate": round(sum(ok for ok, _ in got) / max(1, len(got)), 4),
                "p50_ms": pct(50), "p95_ms": pct(95), "p99_ms": pct(99), "max_ms": round(lat[-1], 1) if lat else None}


class HealthProbe(threading.Thread):
    """``GET /health`` on a new connection once a second (2 s timeout); records (time, ok)."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.stop, self.log = port, threading.Event(), []

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
            except (OSError, http.client.HTTPException):
                ok = False
            self.log.append((t0, ok))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))

    def window(self, start: float, end: float) -> dict:
        got = [ok for t, ok in self.log if start <= t < end]
        return {"probes": len(got), "ok": sum(got)}


# hostile clients come from other loopback addresses than the normal client's 127.0.0.1 (Linux
# routes 127.0.0.0/8 to lo): the many-clients phases spread over 8 addresses, the one-client phase uses one
MANY = tuple(f"127.0.0.{i}" for i in range(10, 18))
ONE = ("127.0.0.2",)


def trickle(port: int, n: int, first: bytes | None, drip: bytes | None, end: float, every: float = 2.0,
            sources: tuple[str, ...] = MANY) -> dict:
    """Open ``n`` connections (from ``sources`` in turn), send ``first``, then ``drip`` every
    ``every`` s until ``end``; report how long the server let them live and what it answered."""
    socks, opened, closed, answers = [], {}, {}, {}
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(sources[i % len(sources)], 0))
        except OSError:
            continue
        s.setblocking(False)
        opened[s] = time.monotonic()
        if first:
            try:
                s.send(first)
            except OSError:
                pass
        socks.append(s)
    next_drip = time.monotonic() + every
    while time.monotonic() < end and len(closed) < len(socks):
        for s in socks:
            if s in closed:
                continue
            try:
                data = s.recv(4096)
                if data:
                    answers[s] = answers.get(s, b"") + data
                    continue
                closed[s] = time.monotonic() - opened[s]
            except BlockingIOError:
                pass
            except OSError:
                closed[s] = time.monotonic() - opened[s]
        if drip and time.monotonic() >= next_drip:
            next_drip += every
            for s in socks:
                if s not in closed:
                    try:
                        s.send(drip)
                    except OSError:
                        pass
        time.sleep(0.05)
    for s in socks:
        s.close()
    codes: dict[str, int] = {}
    for data in answers.values():
        code = data[9:12].decode("latin-1", "replace") if data.startswith(b"HTTP/1.1 ") else "?"
        codes[code] = codes.get(code, 0) + 1
    held = sorted(closed.values())
    return {"connections": len(socks), "closed_by_server": len(closed), "still_open_at_phase_end": len(socks) - len(closed),
            "answers": codes, "held_s_median": round(statistics.median(held), 2) if held else None,
            "held_s_max": round(held[-1], 2) if held else None}


def bombs(port: int, k: int, end: float, bomb: bytes) -> dict:
    codes: dict[int, int] = {}
    lock = threading.Lock()
    rounds = 0

    def one():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("POST", "/v1/traces", body=bomb, headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/x-protobuf",
                                                               "Content-Encoding": "gzip"})
            code = c.getresponse().status
            c.close()
        except (OSError, http.client.HTTPException):
            code = 0
        with lock:
            codes[code] = codes.get(code, 0) + 1

    while time.monotonic() < end - 1:
        ts = [threading.Thread(target=one) for _ in range(k)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        rounds += 1
    return {"rounds": rounds, "bombs": sum(codes.values()), "answers": {str(c): n for c, n in codes.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase-seconds", type=float, default=14.0)
    ap.add_argument("--front", choices=["builtin", "granian"], default="builtin", help="the collector's HTTP server")
    ap.add_argument("--out", default=None, help="default results/collector_hostile.json (builtin) or collector_hostile_granian.json")
    args = ap.parse_args()
    if args.out is None:
        name = "collector_hostile.json" if args.front == "builtin" else f"collector_hostile_{args.front}.json"
        args.out = str(Path(__file__).resolve().parent / "results" / name)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192, hard))

    tmp = tempfile.mkdtemp(prefix="am-hostile-")
    env = {**os.environ, "AUTOMETRICS_COLLECTOR_BODY_TIMEOUT": "10", "LANGFUSE_PUBLIC_KEY": ""}
    want = 0
    if args.front != "builtin":  # the server binds in its own worker: give it a free port
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            want = sk.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "collector", "serve", "--store", f"sqlite:///{tmp}/traces.db",
                             "--port", str(want), "--api-key", KEY, "--langfuse", "off", "--front", args.front],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    if args.front != "builtin":
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
    print(line.strip().replace(KEY, "***"))
    bomb = gzip.compress(b"\0" * (256 << 20), 9)
    mon = Monitor(proc.pid)
    mon.start()
    normal = NormalClient(port)
    normal.start()
    probe = HealthProbe(port)
    probe.start()
    results = {"front": args.front, "limits": line.split("limits: ")[-1].rstrip(")\n"), "phases": []}
    slow_head = b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    slow_body = (f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                 "Content-Type: application/x-protobuf\r\nContent-Length: 1000000\r\n\r\n").encode()
    try:
        time.sleep(2)  # warm up: imports, first commits
        base_rss, base_threads = proc_status(proc.pid)
        results["baseline"] = {"rss_mib": round(base_rss / 2**20, 1), "threads": base_threads}
        phases = [("baseline", []),
                  ("slow headers x300", [lambda end: trickle(port, 300, slow_head, b"X", end)]),
                  ("slow bodies x100", [lambda end: trickle(port, 100, slow_body, b"\0", end)]),
                  ("idle sockets x1000", [lambda end: trickle(port, 1000, None, None, end)]),
                  ("one client, 1100 half-open heads", [lambda end: trickle(port, 1100, slow_head, None, end, sources=ONE)]),
                  ("gzip bombs x16", [lambda end: bombs(port, 16, end, bomb)]),
                  ("all at once", [lambda end: trickle(port, 300, slow_head, b"X", end), lambda end: trickle(port, 100, slow_body, b"\0", end),
                                   lambda end: trickle(port, 1000, None, None, end), lambda end: bombs(port, 16, end, bomb)])]
        for name, attacks in phases:
            mon.reset()
            start = time.monotonic()
            end = start + (5.0 if name == "baseline" else args.phase_seconds)
            out: list[dict] = [{} for _ in attacks]
            ts = [threading.Thread(target=lambda i=i, a=a, o=out, e=end: o.__setitem__(i, a(e))) for i, a in enumerate(attacks)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(args.phase_seconds + 120)
            time.sleep(max(0.0, end - time.monotonic()))
            row = {"phase": name, "peak_threads": mon.peak_threads, "peak_rss_mib": round(mon.peak_rss / 2**20, 1),
                   "peak_rss_over_baseline_mib": round((mon.peak_rss - base_rss) / 2**20, 1), "normal_client": normal.window(start, end),
                   "health_probes": probe.window(start, end), "hostile": out}
            results["phases"].append(row)
            nc = row["normal_client"]
            print(f"{name:20s} threads {row['peak_threads']:3d}  RSS {row['peak_rss_mib']:7.1f} MiB "
                  f"({row['peak_rss_over_baseline_mib']:+6.1f})  normal: {nc['ok']}/{nc['requests']} ok "
                  f"p50 {nc['p50_ms']} p95 {nc['p95_ms']} p99 {nc['p99_ms']} max {nc['max_ms']} ms; /health "
                  f"{row['health_probes']['ok']}/{row['health_probes']['probes']}", flush=True)
            for h in out:
                print(f"{'':22s}{json.dumps(h)}", flush=True)
            time.sleep(1.5)  # let lingering connections close before the next phase
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/health")
        health = json.loads(c.getresponse().read())
        results["server_counters"] = health["counters"]
        results["connections"] = health.get("connections")
    finally:
        normal.stop.set()
        probe.stop.set()
        normal.join(35)
        mon.stop.set()
        proc.terminate()
        proc.wait(30)
    print("server counters:", json.dumps(results["server_counters"], sort_keys=True))
    results["machine"] = f"{os.cpu_count()} CPUs, client and collector on the same machine"
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
