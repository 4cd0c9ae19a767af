"""`autometrics fit --llm` through the CLI, as a user runs it, with a stand-in LLM of known signal.

    python tests/benchmarks/judge_cli.py                                    # 4 datasets x sizes 40 80 160 x 10 seeds
    python tests/benchmarks/judge_cli.py --datasets simpeval --sizes 80 --seeds 1
    python tests/benchmarks/judge_cli.py --datasets summeval:relevance --sizes 80 --seeds 5 --first-seed 10
    python tests/benchmarks/judge_cli.py --shuffle --sizes 80               # training labels permuted: how often "validated"?

The LLM is the stand-in server (tests/standin_judge_server.py), and the fit's REAL generation step
runs against it: it proposes a fixed list of criteria (two that carry signal, one worded as the
near-opposite of a signal one that reads the label upside down, ten noise ones), writes rubrics
and code metrics, and answers each judge prompt from a script whose agreement with the human
label is known (Kendall τ ≈ ``--tau`` on the whole dataset; noise for everything else, the
example-based and prompt-optimized judges included).  Nothing of the fit is configured: default
flags, only ``--llm openai/standin@<server>``, ``--target``, ``--task``, ``--out`` and
``--no-progress``.

Per dataset x training size x seed: training rows drawn as whole input groups and a disjoint
held-out set (the remaining groups, at most ``--test-cap`` rows), written to train.csv and
test.csv; ``autometrics fit train.csv --llm ...`` and ``autometrics fit train.csv --no-llm``, each
scored on test.csv with ``autometrics score``; held-out Kendall τ of each against the labels; an
oracle (the LLM-free regression on MetricBank plus the true values of the two signal criteria and
the reversed one flipped, fitted on the training rows, evaluated on the held-out rows).  From the
--llm evaluator.json: the validity block, which evaluator was returned, the criteria its judges
measure (signal kept, reversed used, noise kept), every candidate's fate and the judge-token
report.  A failed CLI run is recorded (exit code, stderr tail), never fatal.  ``--shuffle``
permutes the training labels (seeded) before the --llm fit and records how many fits still say
"validated" (the target is at most 5 %); it runs neither the LLM-free fit nor the oracle.

Per dataset x size the summary gives: seeds with a gain (τ --llm − τ --no-llm) of at least 0.05,
the mean gain, the oracle's mean gain and the share of it reached, the worst seed's gain, the
reversed criterion used (negative weight) and both signal criteria kept, validity methods,
validated fits, judge tokens sent / evaluated over the floor, and the mean wall time of a fit.
Results go to tests/benchmarks/results/judge_cli_<datasets>_<sizes>[_shuffle].json after every
fit; ``--keep --work DIR`` keeps each run's CSVs, evaluators and CLI logs.  The script runs one
CLI process at a time (measured on 2 cores: SimpEval at 80 labels, about 75 s per seed: the --llm
fit 53 s, the --no-llm fit 7 s, scoring 8 s, the oracle 5 s).  Smoke test:
tests/benchmarks/test_judge_cli_smoke.py (``-m slow`` runs one fit end to end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
DATASETS = Path(os.environ.get("AUTOMETRICS_SHARED", ROOT.parent / "shared")) / "datasets"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

from judge_signal import prefix_tokens, sample  # noqa: E402
from standin_judge_server import NOISE, REVERSED, SIGNAL, StandinJudgeServer  # noqa: E402

DEFAULT_DATASETS = ["simpeval", "summeval", "topical_chat", "realhumaneval_chat"]
GAIN = 0.05  # a seed "gains" when τ --llm − τ --no-llm is at least this
FIT_TIMEOUT = 3600  # seconds one CLI run may take before it is recorded as failed


# ------------------------------------------------------------------------------ data


def load(spec: str) -> tuple[pd.DataFrame, str, str, str]:
    """(rows with a label, target, task, dataset name) for ``name`` or ``name:target``."""
    name, _, target = spec.partition(":")
    meta = json.loads((DATASETS / "datasets.json").read_text())[name]
    target = target or next(iter(meta["labels"]))
    full = pd.read_csv(DATASETS / meta.get("file", f"{name}.csv"))
    full = full[full[target].notna()].drop(columns=[c for c in meta["labels"] if c != target])
    full["id"] = full["id"].astype(str)
    full["input"] = full["input"].fillna("")  # a row without an input is its own (empty) group, never a NaN key
    return full.reset_index(drop=True), target, meta["task"], name


def held_out(df: pd.DataFrame, exclude: set, cap: int, seed: int) -> pd.DataFrame:
    """Whole input groups not in ``exclude``, in a seeded order, while they fit in ``cap`` rows."""
    groups = df["input"].astype(str)
    sizes = groups.value_counts()
    chosen, total = [], 0
    for g in np.random.default_rng(seed).permutation([g for g in groups.unique() if g not in exclude]):
        if total + int(sizes[g]) <= cap:
            chosen.append(g)
            total += int(sizes[g])
    return df[groups.isin(chosen)]


def split(full: pd.DataFrame, n_train: int, cap: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    train = sample(full, n_train, set(), seed)
    return train, held_out(full, set(train["input"].astype(str)), cap, 10_000 + seed)


# ------------------------------------------------------------------------------ the CLI


def cli_command() -> list[str]:
    """The ``autometrics`` entry point of this Python's environment (what a user types)."""
    exe = Path(sys.executable).parent / "autometrics"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("autometrics")
    return [found] if found else [sys.executable, "-c", "import sys; from autometrics._cli.main import main; sys.exit(main())"]


def run_cli(args: list[str], home: Path, log: Path) -> dict:
    """Run ``autometrics ARGS``; {rc, seconds, stderr_tail (on failure)}; stdout+stderr to ``log``."""
    env = {**os.environ, "AUTOMETRICS_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for k in ("AUTOMETRICS_LLM_CACHE", "AUTOMETRICS_LOCAL_LLM_URL", "AUTOMETRICS_STORE_URL"):
        env.pop(k, None)  # a fresh reply cache per run: the truth changes with the seed, the prompts do not
    t0 = time.perf_counter()
    try:
        r = subprocess.run([*cli_command(), *args], capture_output=True, text=True, env=env, timeout=FIT_TIMEOUT)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, exc.stdout or "", (exc.stderr or "") + f"\ntimed out after {FIT_TIMEOUT} s"
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x for x in (out, err))
    seconds = round(time.perf_counter() - t0, 1)
    log.write_text(f"$ autometrics {' '.join(args)}\n\n{out}\n--- stderr ---\n{err}")
    res = {"rc": rc, "seconds": seconds}
    if rc != 0:
        res["stderr_tail"] = (err or out)[-2000:]
    return res


def fit(train_csv: Path, out: Path, target: str, task: str, llm: str | None, home: Path) -> dict:
    flags = ["--llm", llm] if llm else ["--no-llm"]
    return run_cli(["fit", str(train_csv), "--target", target, "--task", task, *flags, "--out", str(out), "--no-progress"],
                   home, out.with_suffix(".log"))


def held_out_tau(evaluator: Path, test_csv: Path, labels: pd.Series, home: Path) -> dict:
    """Score ``test_csv`` with ``autometrics score``; {tau, rc, seconds, ...}."""
    from autometrics.evaluators.fit import SCORE_COLUMN
    from autometrics.evaluators.stats import kendall_tau

    scored = evaluator.parent / "scored.csv"
    res = run_cli(["score", str(evaluator), str(test_csv), "--out", str(scored), "--no-progress"], home,
                  evaluator.parent / "score.log")
    res["tau"] = None
    if res["rc"] == 0:
        s = pd.read_csv(scored, dtype={"id": str}).set_index("id")[SCORE_COLUMN]
        y = labels.loc[s.index].to_numpy(dtype=float)
        ok = np.isfinite(s.to_numpy(dtype=float))
        res["tau"] = float(kendall_tau(s.to_numpy(dtype=float)[ok], y[ok])[0])
        res["missing_scores"] = int((~ok).sum())
    return res


# ------------------------------------------------------------------------------ oracle


def oracle_tau(train: pd.DataFrame, test: pd.DataFrame, target: str, task: str, server: StandinJudgeServer,
               seed: int) -> float | None:
    """Held-out τ of the LLM-free regression on MetricBank plus the true values of the signal
    criteria and the reversed one flipped, fitted on the training rows."""
    from autometrics.evaluators.data import load_dataset
    from autometrics.evaluators.induce import fit_on_features
    from autometrics.evaluators.retrieval import score_bank

    df = pd.concat([train, test])
    ds = load_dataset(df.reset_index(drop=True), target)
    lab = ds.with_split(np.arange(len(train)), np.arange(len(train), len(df))).labelled(target)
    (X, meta, notes), *_ = score_bank(lab, target, task, test_size=None, seed=seed)
    X = X.copy()
    inputs = lab.inputs if lab.has_input else [""] * len(lab)
    rows = [server.row(str(o), str(i)) for o, i in zip(lab.outputs, inputs, strict=True)]  # rows of the server's frame
    for c in SIGNAL + REVERSED:
        X[f"oracle:{c}"] = [(-1.0 if c in REVERSED else 1.0) * server.truth[c][r] for r in rows]
        meta[f"oracle:{c}"] = {"feature": f"oracle:{c}", "signature": f"oracle:{c}", "metric": None, "submetric": None,
                               "generated": True, "higher_is_better": True, "seconds": 0.0, "required": True}
    res = fit_on_features(lab, target, (X, meta, notes), task=task, test_size=None, seed=seed, n_boot=0)
    return res.evaluator.statistics["test"]["tau"]


# ------------------------------------------------------------------------------ the artifact


def read_llm_artifact(path: Path, server: StandinJudgeServer) -> dict:
    """What the --llm evaluator.json says: validity, what was returned, which criteria its
    features measure, every candidate's fate, the generated judges and the judge-token report."""
    a = json.loads(path.read_text())
    v = a.get("validity") or {}
    llm = a.get("llm") or {}
    generated = a.get("generated") or []
    crit_of = {g["feature"]: g["criterion"] for g in generated}
    known = {g["feature"]: server.criterion(g["criterion"]) for g in generated}
    weights = {f["feature"]: f.get("weight") for f in a.get("features") or []}
    signed: dict[str, list] = {}  # known criterion -> the weights of its judges in the returned evaluator
    for f, w in weights.items():
        if known.get(f):
            signed.setdefault(known[f], []).append(w or 0.0)
    tokens = (llm.get("tokens") or {}).get("judging") or {}
    rejected = [w for w in a.get("warnings") or [] if "criteria rejected" in w]
    return {
        "validity": {k: v.get(k) for k in ("method", "validated", "tau", "ci", "p_value", "n_labels", "reason")},
        "returned": (a.get("method") or {}).get("returned"),
        "features": [{"feature": f, "weight": w, "criterion": crit_of.get(f)} for f, w in weights.items()],
        "signal_kept": sum(any(w > 0 for w in signed.get(c, [])) for c in SIGNAL),
        "reversed_used": any(w < 0 for c in REVERSED for w in signed.get(c, [])),
        "reversed_positive": any(w > 0 for c in REVERSED for w in signed.get(c, [])),
        "noise_kept": sum(c in signed for c in NOISE),
        "other_judges_kept": sorted(crit_of[f] for f in weights if f in crit_of and not known.get(f)),
        "generated": [f"{g['kind']}: {g['criterion']}" for g in generated],
        "signal_generated": sorted({known[g["feature"]] for g in generated} & set(SIGNAL)),
        "reversed_generated": any(known.get(g["feature"]) in REVERSED for g in generated),
        "criteria_rejected": rejected,
        "candidates": {f"{c.get('kind')}: {crit_of.get(c['feature'], c['feature'])}": f"{c.get('fate')}: {c.get('detail', '')}"
                       for c in llm.get("candidates") or []},
        "tokens": {k: tokens.get(k) for k in ("sent", "evaluated", "floor", "sent_over_floor", "evaluated_over_floor")},
        "llm_free_floor_tau": ((llm.get("floor") or {}).get("llm_free_test") or {}).get("tau"),
        "fit_seconds_reported": a.get("fit_seconds"),
    }


# ------------------------------------------------------------------------------ one run


def run_one(full: pd.DataFrame, target: str, task: str, n_train: int, seed: int, args, work: Path) -> dict:
    train, test = split(full, n_train, args.test_cap, seed)
    row = {"seed": seed, "train": len(train), "test": len(test), "train_groups": int(train["input"].nunique()),
           "test_groups": int(test["input"].nunique()), "load_before": round(os.getloadavg()[0], 2)}
    work.mkdir(parents=True, exist_ok=True)
    fit_train = train.copy()
    if args.shuffle:
        fit_train[target] = np.random.default_rng(20_000 + seed).permutation(fit_train[target].to_numpy())
    fit_train.to_csv(work / "train.csv", index=False)
    test.drop(columns=[target]).to_csv(work / "test.csv", index=False)
    labels = test.set_index("id")[target]
    home = work / "home"
    with StandinJudgeServer(full, target, tau=args.tau, seed=seed) as server:
        server.phase = "fit"
        row["llm_fit"] = fit(work / "train.csv", work / "llm", target, task, f"openai/standin@{server.url}", home)
        fit_prompts = server.prompts("fit")
        sent, evaluated = prefix_tokens(fit_prompts)
        row["server"] = {"judge_requests": len(fit_prompts), "chars_sent": sent, "chars_evaluated": evaluated,
                         "generation_requests": {k: sum(1 for ph, kk in server.generation if kk == k and ph == "fit")
                                                 for k in ("criteria", "rubric", "code")},
                         "unmatched_rows": server.unmatched_rows}
        if row["llm_fit"]["rc"] == 0:
            try:
                row["llm"] = read_llm_artifact(work / "llm" / "evaluator.json", server)
            except Exception as exc:  # an artifact this script cannot read is a recorded failure too
                row["llm_fit"]["artifact_error"] = f"{type(exc).__name__}: {exc}"[:500]
            server.phase = "score"
            row["llm_score"] = held_out_tau(work / "llm" / "evaluator.json", work / "test.csv", labels, home)
            row["server"]["score_judge_requests"] = len(server.prompts("score"))
        if not args.shuffle:
            row["nollm_fit"] = fit(work / "train.csv", work / "nollm", target, task, None, home)
            if row["nollm_fit"]["rc"] == 0:
                row["nollm_score"] = held_out_tau(work / "nollm" / "evaluator.json", work / "test.csv", labels, home)
            t0 = time.perf_counter()
            try:
                row["tau_oracle"] = oracle_tau(train, test, target, task, server, seed)
            except Exception as exc:  # the oracle is a reference figure: record, go on
                row["tau_oracle"], row["oracle_error"] = None, f"{type(exc).__name__}: {exc}"[:500]
            row["oracle_seconds"] = round(time.perf_counter() - t0, 1)
    row["tau_llm"] = (row.get("llm_score") or {}).get("tau")
    row["tau_nollm"] = (row.get("nollm_score") or {}).get("tau")
    row["gain"] = _diff(row["tau_llm"], row["tau_nollm"])
    row["oracle_gain"] = _diff(row.get("tau_oracle"), row["tau_nollm"])
    row["load_after"] = round(os.getloadavg()[0], 2)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def _diff(a, b):
    return None if a is None or b is None else a - b


def line(name: str, n: int, r: dict, shuffle: bool = False) -> str:
    f = r["llm_fit"]
    if "llm" not in r:
        why = f.get("stderr_tail", "")[-300:] if f["rc"] else f"evaluator.json unreadable: {f.get('artifact_error')}"
        return f"{name} n={n} seed {r['seed']}: --llm fit FAILED (exit {f['rc']}, {f['seconds']} s): {why!r}"
    m = r["llm"]
    v, t = m["validity"], m["tokens"]
    versus = "" if shuffle else (f", no-llm {_f(r['tau_nollm'])}, oracle {_f(r.get('tau_oracle'))}, gain {_f(r['gain'])}")
    return (f"{name} n={n} seed {r['seed']}{' (shuffled labels)' if shuffle else ''}: τ llm {_f(r['tau_llm'])} ({m['returned']})"
            f"{versus}; {v['method']} {'validated' if v['validated'] else 'NOT validated'} "
            f"τ {_f(v['tau'])} p {v['p_value']}; signal kept {m['signal_kept']}/2, reversed used {m['reversed_used']}, "
            f"noise kept {m['noise_kept']}; tokens sent {_x(t['sent_over_floor'])}, evaluated {_x(t['evaluated_over_floor'])} "
            f"the floor; fit {f['seconds']} s, load {r['load_after']}")


# ------------------------------------------------------------------------------ summary


def summarize(rows: list[dict], shuffle: bool) -> dict:
    ok = [r for r in rows if "llm" in r]
    val = [r["llm"]["validity"] for r in ok]
    tok = [r["llm"]["tokens"] for r in ok]
    s = {"seeds": len(rows), "llm_fit_failures": len(rows) - len(ok),
         "validated": sum(bool(v["validated"]) for v in val),
         "validity_methods": {m: sum(v["method"] == m for v in val) for m in sorted({str(v["method"]) for v in val})},
         "returned": {m: sum(r["llm"]["returned"] == m for r in ok) for m in sorted({str(r["llm"]["returned"]) for r in ok})},
         "reversed_used": f"{sum(r['llm']['reversed_used'] for r in ok)}/{len(ok)}",
         "both_signal_kept": f"{sum(r['llm']['signal_kept'] == 2 for r in ok)}/{len(ok)}",
         "reversed_generated": f"{sum(r['llm']['reversed_generated'] for r in ok)}/{len(ok)}",
         "mean_noise_kept": _mean([r["llm"]["noise_kept"] for r in ok]),
         "mean_fit_seconds": _mean([r["llm_fit"]["seconds"] for r in rows]),
         "mean_nollm_fit_seconds": _mean([r["nollm_fit"]["seconds"] for r in rows if "nollm_fit" in r])}
    for k in ("sent_over_floor", "evaluated_over_floor"):
        vals = [t[k] for t in tok if t.get(k) is not None]
        s[f"mean_{k}"], s[f"max_{k}"] = _mean(vals), (max(vals) if vals else None)
    if shuffle:
        s["validated_share"] = s["validated"] / len(ok) if ok else None
        s["mean_tau_llm"] = _mean([r["tau_llm"] for r in rows])
        return s
    gains = [r["gain"] for r in rows if r["gain"] is not None]
    both = [r for r in rows if r["gain"] is not None and r["oracle_gain"] is not None]
    s.update({"seeds_with_gain": f"{sum(g >= GAIN for g in gains)}/{len(gains)}", "mean_gain": _mean(gains),
              "mean_oracle_gain": _mean([r["oracle_gain"] for r in both]), "worst_gain": min(gains) if gains else None,
              "mean_tau_llm": _mean([r["tau_llm"] for r in rows]), "mean_tau_nollm": _mean([r["tau_nollm"] for r in rows]),
              "mean_tau_oracle": _mean([r.get("tau_oracle") for r in rows])})
    mg, mo = _mean([r["gain"] for r in both]), s["mean_oracle_gain"]
    s["share_of_oracle"] = mg / mo if mg is not None and mo else None
    return s


def summary_line(name: str, n: int, s: dict, shuffle: bool) -> str:
    head = (f"{name}, {n} training labels ({s['seeds']} seeds, {s['llm_fit_failures']} failed): validated {s['validated']}, "
            f"validity {s['validity_methods']}, returned {s['returned']}; ")
    if shuffle:
        return head + f"shuffled labels: validated share {_pct(s['validated_share'])}, mean held-out τ {_f(s['mean_tau_llm'])}"
    return head + (f"gain ≥ {GAIN} on {s['seeds_with_gain']} seeds, mean gain {_f(s['mean_gain'])} vs oracle "
                   f"{_f(s['mean_oracle_gain'])} ({_pct(s['share_of_oracle'])} of it), worst {_f(s['worst_gain'])}; "
                   f"reversed used {s['reversed_used']} (generated {s['reversed_generated']}), both signal kept "
                   f"{s['both_signal_kept']}, noise kept {_num(s['mean_noise_kept'])} per fit; tokens sent "
                   f"{_x(s['mean_sent_over_floor'])} (max {_x(s['max_sent_over_floor'])}), evaluated "
                   f"{_x(s['mean_evaluated_over_floor'])} (max {_x(s['max_evaluated_over_floor'])}) the floor; "
                   f"--llm fit {_num(s['mean_fit_seconds'], '.0f')} s, --no-llm {_num(s['mean_nollm_fit_seconds'], '.0f')} s")


def _mean(vals):
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else None


def _f(v) -> str:
    return "–" if v is None else f"{v:+.3f}"


def _x(v) -> str:
    return "–" if v is None else f"{v:.1f}×"


def _pct(v) -> str:
    return "–" if v is None else f"{v:.0%}"


def _num(v, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


# ------------------------------------------------------------------------------ main


def result_path(args) -> Path:
    names = "-".join(d.replace(":", "-") for d in args.datasets)
    sizes = "-".join(str(n) for n in args.sizes)
    return Path(args.out) / f"judge_cli_{names}_{sizes}{'_shuffle' if args.shuffle else ''}.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS, help="names in datasets.json, or name:target")
    p.add_argument("--sizes", type=int, nargs="+", default=[40, 80, 160], help="training labels (whole input groups)")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--test-cap", type=int, default=300, help="most held-out rows (whole input groups)")
    p.add_argument("--tau", type=float, default=0.35, help="Kendall τ of the signal criteria with the label")
    p.add_argument("--shuffle", action="store_true", help="permute the training labels before the --llm fit")
    p.add_argument("--out", default=str(ROOT / "tests" / "benchmarks" / "results"), help="folder of the results JSON")
    p.add_argument("--work", default=None, help="folder for the runs' files (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep each run's CSVs, evaluators and CLI logs (in --work)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    path = result_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="autometrics-judge-cli-"))
    doc = {"datasets": {}, "tau": args.tau, "shuffle": args.shuffle, "test_cap": args.test_cap, "gain_threshold": GAIN,
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_start": os.getloadavg()},
           "command": " ".join(["python", "tests/benchmarks/judge_cli.py", *(sys.argv[1:] if argv is None else argv)])}
    for spec in args.datasets:
        full, target, task, name = load(spec)
        entry = doc["datasets"][spec] = {"target": target, "task": task, "rows": len(full), "sizes": {}}
        for n in args.sizes:
            rows: list[dict] = []
            entry["sizes"][str(n)] = {"summary": None, "results": rows}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                rows.append(run_one(full, target, task, n, seed, args, work / f"{name}_{n}_{seed}"))
                print(line(name, n, rows[-1], args.shuffle), flush=True)
                entry["sizes"][str(n)]["summary"] = summarize(rows, args.shuffle)
                doc["machine"]["load_now"] = os.getloadavg()
                path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
            print("\n" + summary_line(name, n, entry["sizes"][str(n)]["summary"], args.shuffle) + "\n", flush=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
