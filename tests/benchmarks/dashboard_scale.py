"""How fast the served dashboard answers a filter on a store of 10^5 scored traces.

Builds the store (tests/dashboard_data.py: 360 real SimpEval traces fitted and scored, then
``--extra`` traces added in bulk under the same version), serves it with the real server
(``autometrics dashboard --serve``, uvicorn, in its own process) and times whole HTTP requests
(median of ``--repeat``) for each filter, the overview and a trace view.  Prints a table and
writes ``results/dashboard_scale.json``.

    python tests/benchmarks/dashboard_scale.py [--extra 100000] [--repeat 5] [--store sqlite:///...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

FILTERS = ["", "?version=all", "?range=24h", "?user=user-3", "?session=conv-100", "?model=qwen2.5-7b", "?score_min=80&score_max=90",
           "?label_min=90", "?user=user-3&model=qwen2.5-7b&label_min=50", "?from=2023-11-14T22:14&to=2023-11-14T22:20",
           "?offset=50000", "?model=nobody"]


def main() -> int:
    import httpx
    from dashboard_data import build_served_store
    from waiting import wait_for_http

    ap = argparse.ArgumentParser()
    ap.add_argument("--extra", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--store", default=None, help="an existing store built by this script (else built in /tmp)")
    a = ap.parse_args()
    url = a.store
    if url is None:
        db = Path(f"/tmp/autometrics-dashboard-scale-{a.extra}.db")
        db.unlink(missing_ok=True)
        t = time.perf_counter()
        info = build_served_store(f"sqlite:///{db}", extra=a.extra)
        url = f"sqlite:///{db}"
        print(f"built {url}: {info['n_scored']:,} scored traces in {time.perf_counter() - t:.1f} s", flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "autometrics._cli.main", "dashboard", "--store", url, "--project", "p", "--target",
                             "score", "--serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/health", proc, 60)
        rows = []
        with httpx.Client(base_url=base, timeout=60) as c:
            trace = c.get("/p/p/score/traces").text.split("class='trace' href='", 1)[1].split("'", 1)[0]
            for name, path in ([(f"traces{q or ' (default: champion, newest)'}", f"/p/p/score/traces{q}") for q in FILTERS]
                               + [("overview", "/p/p/score"), ("trace view", trace)]):
                times = []
                for _ in range(a.repeat):
                    t = time.perf_counter()
                    r = c.get(path)
                    times.append(time.perf_counter() - t)
                    assert r.status_code == 200, (path, r.status_code)
                count = r.text.split("id='count'><b>", 1)[1].split("</b>", 1)[0] if "id='count'" in r.text else ""
                rows.append({"request": name, "median_ms": round(statistics.median(times) * 1000, 1),
                             "max_ms": round(max(times) * 1000, 1), "matches": count})
    finally:
        proc.terminate()
        proc.wait(20)
    load = os.getloadavg()[0]
    print(f"\n{'request':62s} {'median ms':>10s} {'max ms':>8s}  matches   (load {load:.2f}, {os.cpu_count()} cores)")
    for r in rows:
        print(f"{r['request']:62s} {r['median_ms']:10.1f} {r['max_ms']:8.1f}  {r['matches']}")
    out = HERE / "results" / "dashboard_scale.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"store": url.split("///")[0], "scored_traces": a.extra + 360, "repeat": a.repeat, "load_1min": load,
                               "cores": os.cpu_count(), "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
