"""Judges with a known signal: does the full LLM path keep the judges that carry signal,
use the one that reliably disagrees reversed, drop the noise, and gain what an oracle gains?

The library's harness: it hands the fit its judges (no generation, de-duplication or rubric
check) and fixes its own split.  Figures users can expect come from the CLI benchmark,
tests/benchmarks/judge_cli.py (``autometrics fit --llm`` at default flags, the stand-in server
generating the criteria); this one isolates screening and regression.

    python tests/benchmarks/judge_signal.py                       # simpeval, 80 training labels, 10 seeds
    python tests/benchmarks/judge_signal.py --train 40 160 --seeds 10

The judge is the stand-in OpenAI-compatible server (tests/scripted_judge_server.py) answering
each criterion from a script whose agreement with the human label is known: two "signal"
criteria (one single-criterion, one rubric) read the label through noise calibrated to
Kendall τ ≈ ``--tau`` on the whole dataset, one "reversed" criterion reads it upside down
(τ ≈ −tau), and ``--n-noise`` criteria are deterministic noise, as is an example-based judge
(five demonstrations from the training rows, the longest prompt; ``--no-example`` leaves it out).  Every seed draws ``--train``
training rows and ``--test`` held-out rows as whole input groups (disjoint), fits with the
default flags and the given judges (no generation, so every seed sees the same criteria), and
evaluates on the held-out rows.

Per seed: held-out τ of the returned evaluator, of the LLM-free evaluator (MetricBank alone) and
of an oracle (the same regression on MetricBank plus the true judge values of the signal and the
reversed criteria, the latter flipped); which candidates the returned evaluator uses; tokens:
judge prompt tokens sent, those a prefix cache holding every earlier prompt would not have to
evaluate, and the floor (each judged example's text once).  Summary: the share of seeds that
keep both signal judges, the share of noise candidates kept, the reversed judge's use, and mean
gain over the LLM-free evaluator as a share of the oracle's.  Writes
tests/benchmarks/results/judge_signal_<data>.json.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
DATASETS = Path(os.environ.get("AUTOMETRICS_SHARED", ROOT.parent / "shared")) / "datasets"
sys.path.insert(0, str(ROOT / "tests"))

SIGNAL = {"Meaning preservation": "the output keeps every piece of meaning of the input",
          "Overall adequacy": "how well the output does the task, all things considered"}
REVERSED = {"Needless change": "how much the output changes that did not need changing"}
EXAMPLE = "Overall, like the scored examples"  # the example-based judge (demonstrations from the training rows); noise
NOISE = ["Fluency", "Formality", "Tone", "Style", "Politeness", "Creativity", "Humour", "Vividness", "Rhythm", "Warmth"]
RUBRIC = {str(k): v for k, v in enumerate(["very poor", "poor", "acceptable", "good", "excellent"], 1)}


def levels(values) -> np.ndarray:
    import numpy as np

    q = np.quantile(values, [0.2, 0.4, 0.6, 0.8])
    return np.searchsorted(q, values) + 1


def calibrated(z, tau: float, rng) -> np.ndarray:
    """Levels 1..5 of z + s·noise with s chosen (bisection) so that τ(levels, z) ≈ tau."""
    from autometrics.evaluators.stats import kendall_tau

    noise = rng.normal(size=len(z))
    lo, hi = 0.0, 20.0
    for _ in range(40):
        s = (lo + hi) / 2
        t = kendall_tau(levels(z + s * noise), z)[0]
        lo, hi = (s, hi) if t > tau else (lo, s)
    return levels(z + (lo + hi) / 2 * noise).astype(float)


def judge_values(df, target: str, tau: float, seed: int, n_noise: int) -> dict[str, dict[str, float]]:
    """criterion -> {output text -> score}: the true value of every scripted judge."""
    import numpy as np
    from scripted_judge_server import noise_score

    rng = np.random.default_rng(7000 + seed)
    y = df[target].to_numpy(dtype=float)
    z = (y - y.mean()) / y.std()
    outs = df["output"].astype(str).tolist()
    table = {c: dict(zip(outs, calibrated(z, tau, rng), strict=True)) for c in SIGNAL}
    table |= {c: dict(zip(outs, calibrated(-z, tau, rng), strict=True)) for c in REVERSED}
    table |= {c: {o: float(noise_score(c, o)) for o in outs} for c in [*NOISE[:n_noise], EXAMPLE]}
    return table


def example_spec(task, train, target, seed):
    """The example-based judge as a fit generates it (one typical demonstration per label quintile
    of the training rows, no judge calls): its ~5 demonstrations make it the longest prompt."""
    import numpy as np
    from autometrics.evaluators.judges.generate import quintile_scores, typical_demonstrations
    from autometrics.evaluators.judges.metric import JudgeSpec

    ins, outs = train["input"].astype(str).tolist(), train["output"].astype(str).tolist()
    y = train[target].to_numpy(dtype=float)
    q = quintile_scores(y)
    picked = typical_demonstrations(ins, outs, y, np.random.default_rng(seed))
    return JudgeSpec(kind="example", criterion=EXAMPLE, task=task, description="match the scored examples",
                     demonstrations=[{"input": ins[i][:400], "output": outs[i], "score": int(q[i])} for i in picked])


def specs_for(task: str, n_noise: int) -> list:
    from autometrics.evaluators.judges.metric import JudgeSpec

    out = [JudgeSpec(kind="single", criterion="Meaning preservation", description=SIGNAL["Meaning preservation"], task=task),
           JudgeSpec(kind="rubric", criterion="Overall adequacy", description=SIGNAL["Overall adequacy"], task=task, rubric=RUBRIC),
           JudgeSpec(kind="single", criterion="Needless change", description=REVERSED["Needless change"], task=task)]
    for i, n in enumerate(NOISE[:n_noise]):
        kind = "rubric" if i % 3 == 2 else "single"
        out.append(JudgeSpec(kind=kind, criterion=n, description=f"the output's {n.lower()}", task=task,
                             rubric=RUBRIC if kind == "rubric" else None))
    return out


def prefix_tokens(prompts: list[str]) -> tuple[int, int]:
    """(chars sent, chars a prefix cache holding every earlier prompt would still evaluate)."""
    seen: list[str] = []
    sent = evaluated = 0
    for p in prompts:
        best = 0
        k = bisect.bisect_left(seen, p)
        for q in seen[max(0, k - 1): k + 1]:
            n = 0
            for a, b in zip(p, q, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        sent += len(p)
        evaluated += len(p) - best
        seen.insert(k, p)
    return sent, evaluated


class Recorder:
    """Wraps the scripted server's reply to keep every judge prompt (the full text) in order."""

    def __init__(self, server):
        self.prompts: list[str] = []
        self.cases: set[tuple[str, str]] = set()
        inner = server.reply

        def reply(req, mode):
            if req.get("max_tokens") == 1 and req.get("logprobs"):
                self.prompts.append("\n".join(m.get("content") or "" for m in req["messages"]))
            return inner(req, mode)

        server.reply = reply


def sample(df, n: int, exclude: set, seed: int):
    import numpy as np

    groups = df["input"].astype(str)
    uniq = [g for g in groups.unique() if g not in exclude]
    rng = np.random.default_rng(seed)
    chosen, total = [], 0
    sizes = groups.value_counts()
    for g in rng.permutation(uniq):
        if total >= n:
            break
        chosen.append(g)
        total += int(sizes[g])
    return df[groups.isin(chosen)]


def oracle_tau(ds, target, task, truth, seed, top_n) -> float | None:
    """Held-out τ of the regression on MetricBank plus the true signal values and the reversed
    ones flipped (the oracle knows which criteria carry signal and which way)."""
    from autometrics.evaluators.induce import fit_on_features
    from autometrics.evaluators.retrieval import score_bank

    lab = ds.labelled(target)
    X, meta, notes = score_bank(lab, target, task, test_size=None, seed=seed)[0]
    X = X.copy()
    outs = [str(o) for o in lab.outputs]
    for c in list(SIGNAL) + list(REVERSED):
        sign = -1.0 if c in REVERSED else 1.0
        X[f"oracle:{c}"] = [sign * truth[c][o] for o in outs]
        meta[f"oracle:{c}"] = {"feature": f"oracle:{c}", "signature": f"oracle:{c}", "metric": None, "submetric": None,
                               "generated": True, "higher_is_better": True, "seconds": 0.0, "required": True}
    res = fit_on_features(lab, target, (X, meta, notes), task=task, test_size=None, seed=seed, top_n=top_n, n_boot=0)
    return res.evaluator.statistics["test"]["tau"]


def run_seed(full, target, task, n_train, n_test, seed, args) -> dict:
    import numpy as np
    import pandas as pd
    from autometrics.evaluators.data import load_dataset
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.options import LLMOptions
    from autometrics.evaluators.llm.client import estimate_tokens
    from scripted_judge_server import ScriptedJudgeServer

    test = sample(full, n_test, set(), 10_000 + seed)
    train = sample(full, n_train, set(test["input"].astype(str)), seed)
    df = pd.concat([train, test]).reset_index(drop=True)
    ds = load_dataset(df, target)
    ds = ds.with_split(np.arange(len(train)), np.arange(len(train), len(df)))
    truth = judge_values(full, target, args.tau, seed, args.n_noise)
    specs = specs_for(task, args.n_noise) + ([example_spec(task, train, target, seed)] if args.example else [])
    with ScriptedJudgeServer(lambda c, o, i: truth.get(c, {}).get(o)) as server:
        rec = Recorder(server)
        cache = Path(tempfile.mkdtemp(prefix="autometrics-signal-bench-")) / "llm-cache.sqlite"
        opts = LLMOptions(llm=f"openai/fake@{server.url}", judge_specs=specs, rationales=0, cache=str(cache),
                          exemplar=False, timeout=120, use_bank=args.use_bank)
        if args.z_next is not None:
            opts.screening = dataclasses.replace(opts.screening, z_next=args.z_next)
        t0 = time.perf_counter()
        res = fit_evaluator(df, target, dataset=ds, task=task, llm_options=opts, seed=seed, top_n=args.top_n, n_boot=0)
        wall = time.perf_counter() - t0
    a = res.evaluator.artifact
    used = {f["feature"] for f in a["features"]}
    crit_of = {s.feature_name: s.criterion for s in specs}
    used_crit = {crit_of[f] for f in used if f in crit_of}
    floor = a["llm"]["floor"]
    sent, evaluated = prefix_tokens(rec.prompts)
    judged = {(str(i), str(o)) for i, o in zip(df["input"], df["output"], strict=True)}
    floor_tokens = sum(estimate_tokens(i + o) for i, o in judged)
    t_free = (floor.get("llm_free_test") or {}).get("tau")
    t_oracle = oracle_tau(ds, target, task, truth, seed, args.top_n)
    row = {"seed": seed, "train": int(len(train)), "test": int(len(test)),
           "tau_returned": a["statistics"]["test"]["tau"], "tau_llm_free": t_free, "tau_oracle": t_oracle,
           "returned": a["method"]["returned"], "used": sorted(used_crit),
           "signal_kept": sum(c in used_crit for c in SIGNAL), "reversed_used": any(c in used_crit for c in REVERSED),
           "noise_kept": sum(c in used_crit for c in [*NOISE, EXAMPLE]), "fates": {crit_of.get(c["feature"], c["feature"]): f"{c['fate']}: {c.get('detail', '')}" for c in a["llm"]["candidates"]},
           "tokens_sent": sent // 4, "tokens_evaluated": evaluated // 4, "tokens_floor": floor_tokens,
           "judge_requests": len(rec.prompts), "seconds": round(wall, 1),
           "fit_token_report": (a["llm"].get("tokens") or {}).get("judging")}
    row["gain"] = None if t_free is None else row["tau_returned"] - t_free
    row["oracle_gain"] = None if t_free is None or t_oracle is None else t_oracle - t_free
    return row


def main(argv=None) -> int:
    import numpy as np
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="simpeval")
    p.add_argument("--target", default=None)
    p.add_argument("--train", type=int, nargs="+", default=[80], help="training labels (one curve point each)")
    p.add_argument("--test", type=int, default=60, help="held-out rows per seed")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--tau", type=float, default=0.35, help="agreement of the signal criteria with the label")
    p.add_argument("--n-noise", type=int, default=6)
    p.add_argument("--top-n", type=int, default=5)
    p.add_argument("--use-bank", default="auto", choices=["auto", "always", "never"])
    p.add_argument("--no-example", dest="example", action="store_false", help="leave out the example-based judge")
    p.add_argument("--z-next", type=float, default=None, help="ScreeningOptions.z_next (default: the package's)")
    p.add_argument("--out", default=str(ROOT / "tests" / "benchmarks" / "results"))
    args = p.parse_args(argv)

    meta = json.loads((DATASETS / "datasets.json").read_text())[args.data]
    target = args.target or next(iter(meta["labels"]))
    full = pd.read_csv(DATASETS / meta.get("file", f"{args.data}.csv"))
    full = full[full[target].notna()].reset_index(drop=True)
    curve = {}
    for n in args.train:
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            r = run_seed(full, target, meta["task"], n, args.test, seed, args)
            rows.append(r)
            print(f"train {n} seed {seed}: τ {r['tau_returned']:.3f} ({r['returned']}), LLM-free {_f(r['tau_llm_free'])}, "
                  f"oracle {_f(r['tau_oracle'])}; signal kept {r['signal_kept']}/2, reversed used {r['reversed_used']}, "
                  f"noise kept {r['noise_kept']}; tokens sent {r['tokens_sent']:,}, evaluated {r['tokens_evaluated']:,}, "
                  f"floor {r['tokens_floor']:,}; {r['seconds']} s", flush=True)
        gains = [r["gain"] for r in rows if r["gain"] is not None and r["oracle_gain"] is not None]
        ogains = [r["oracle_gain"] for r in rows if r["gain"] is not None and r["oracle_gain"] is not None]
        s = {"seeds": len(rows),
             "both_signal_kept": sum(r["signal_kept"] == 2 for r in rows),
             "noise_kept_share": sum(r["noise_kept"] for r in rows) / max(1, len(rows) * (args.n_noise + args.example)),
             "reversed_used": sum(r["reversed_used"] for r in rows),
             "mean_gain": float(np.mean(gains)) if gains else None,
             "mean_oracle_gain": float(np.mean(ogains)) if ogains else None,
             "sent_over_floor": float(np.mean([r["tokens_sent"] / r["tokens_floor"] for r in rows])),
             "evaluated_over_floor": float(np.mean([r["tokens_evaluated"] / r["tokens_floor"] for r in rows]))}
        s["gain_share_of_oracle"] = (s["mean_gain"] / s["mean_oracle_gain"]) if gains and s["mean_oracle_gain"] else None
        curve[n] = {"summary": s, "results": rows}
        print(f"\n{args.data}/{target}, {n} training labels: both signal judges kept on {s['both_signal_kept']}/{s['seeds']} seeds; "
              f"noise kept {s['noise_kept_share']:.0%}; reversed used on {s['reversed_used']}; mean gain {_f(s['mean_gain'])} vs "
              f"oracle {_f(s['mean_oracle_gain'])} ({_pct(s['gain_share_of_oracle'])}); tokens sent {s['sent_over_floor']:.1f}× "
              f"the floor, evaluated {s['evaluated_over_floor']:.1f}×\n", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"judge_signal_{args.data}{'' if args.use_bank == 'auto' else '_bank-' + args.use_bank}"
                  f"{'' if args.z_next is None else f'_znext-{args.z_next:g}'}.json")
    path.write_text(json.dumps({"data": args.data, "target": target, "tau": args.tau, "n_noise": args.n_noise,
                                "use_bank": args.use_bank, "z_next": args.z_next, "curve": curve,
                                "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                            "load": os.getloadavg()[0]},
                                "command": " ".join(["python", "tests/benchmarks/judge_signal.py", *(argv or sys.argv[1:])])},
                               indent=1, default=str) + "\n")
    print(f"wrote {path}")
    return 0


def _f(v) -> str:
    return "–" if v is None else f"{v:+.3f}"


def _pct(v) -> str:
    return "–" if v is None else f"{v:.0%} of the oracle's"


if __name__ == "__main__":
    sys.exit(main())
