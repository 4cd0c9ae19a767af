"""Drift as an operator meets it (issue #29): per dataset, 150 labelled traces in a SQLite store and
a real `autometrics worker --once` process (the fit), then 6 rounds of 100 unchanged traces and
100 traces whose outputs are cut to their first 3 words, with a `worker --once` after each round;
the alerts are read back from the store.  The issue's topical_chat, realhumaneval_chat and
three-style support bot (drift_calibration's), and simpeval and summeval, which it does not name.
The worker runs with --promote-unvalidated (summeval's fit on 150 labels is not validated; a
validated fit is promoted the same either way).  LLM-free; about two minutes.

    python tests/benchmarks/drift_operator_check.py [--datasets ...] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from autometrics.collectors.store import TraceStore  # noqa: E402
from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig  # noqa: E402
from drift_calibration import MIX, SHARED, support_bot  # noqa: E402
from monitor_data import write_traces  # noqa: E402

JOBS = {"topical_chat": "overall", "realhumaneval_chat": "copied", "support_bot": "stars", "simpeval": "score",
        "summeval": "relevance"}
FIT_ROWS, ROUNDS, ROUND = 150, 6, 100
DRIFT_KINDS = ("traffic_change", "score_drift", "validity_change", "validity_decay")  # the alerts drift raises


def worker_once(url: str, target: str, dashboard: Path) -> float:
    """One `autometrics worker --once` process (run as the CLI module); its wall time in seconds."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "autometrics._cli.main", "worker", "--store", url, "--project", "p", "--target", target, "--no-llm", "--once",
                        "--min-new-feedback", "1", "--settle-seconds", "0", "--langfuse", "off", "--dashboard", str(dashboard),
                        "--promote-unvalidated"],  # summeval's fit on 150 labels is not validated: watch it anyway
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"worker --once failed ({r.returncode}): {r.stderr[-2000:]}")
    return time.perf_counter() - t


def run(name: str, target: str, out: Path) -> None:
    df = support_bot(1000, MIX, 3) if name == "support_bot" else pd.read_csv(SHARED / f"{name}.csv")
    df = df.dropna(subset=[target]).sample(frac=1.0, random_state=1).reset_index(drop=True)
    fit, pool = df.iloc[:FIT_ROWS], df.iloc[FIT_ROWS:].reset_index(drop=True)
    db = out / f"{name}.db"
    db.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    store = TraceStore(url)
    write_traces(store, fit, project="p", t0_ns=10**12, target=target, value_fn=lambda r: getattr(r, target))
    dt = worker_once(url, target, out / f"{name}.html")
    mon = Monitor(url, MonitorConfig(target=target, project="p"))
    ch = mon.champion()
    print(f"{name} ({target}): fitted on {len(fit)} labelled traces ({dt:.0f} s), champion v{ch['version']}, "
          f"{'validated' if ch['statistics']['validity'].get('validated') else 'NOT validated (promoted by --promote-unvalidated)'}")
    rng = np.random.default_rng(2)
    for k in range(ROUNDS + 1):
        rows = pool.iloc[rng.choice(len(pool), ROUND, replace=False)].copy()
        rows["id"] = [f"{i}-r{k}" for i in rows["id"]]
        if k == ROUNDS:
            rows["output"] = rows["output"].astype(str).str.split().str[:3].str.join(" ")
        write_traces(store, rows, project="p", t0_ns=(2 + k) * 10**12, feedback=False)
        dt = worker_once(url, target, out / f"{name}.html")
        drift = [a for a in mon.alerts() if a["kind"] in DRIFT_KINDS]
        seq = mon.champion()["statistics"].get("sequential") or {}
        a = seq.get("alarm")
        when = f"; alarm {a['at'] - a['change_at'] + 1} trace(s) after the estimated change point" if a else ""
        print(f"  round {k + 1} ({'cut to 3 words' if k == ROUNDS else 'unchanged'}): {len(drift)} drift alert(s), "
              f"{seq.get('n')} traces watched against a reference of {seq.get('reference', {}).get('n')}{when} ({dt:.0f} s)")
        for al in drift:
            print(f"    {al['kind']}: {al['message'][:200]}")
    store.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(JOBS), choices=list(JOBS))
    ap.add_argument("--out-dir", default=None, help="where the stores and dashboards go (default: a temporary folder)")
    a = ap.parse_args()
    out = Path(a.out_dir or tempfile.mkdtemp(prefix="drift-operator-"))
    out.mkdir(parents=True, exist_ok=True)
    for name in a.datasets:
        run(name, JOBS[name], out)
    print(f"stores and dashboards in {out}")


if __name__ == "__main__":
    main()
