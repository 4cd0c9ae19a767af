"""Benchmark harness: AutoMetrics against the baselines of :mod:`.baselines` on the same
grouped, seeded splits (AutoMetrics paper, Table 2 layout).

For each seed the labelled rows are split with :meth:`.data.Dataset.split_positions` (grouped
by input, so the same input is never on both sides), every method is fitted on the train rows
and predicts the test rows, and the held-out Kendall τ-b is computed on the rows the method
could score (rows it left NaN are counted as missing, never filled).  Per method the harness
reports the mean τ over seeds with a 95 % Student-t interval over seeds
(mean ± t(0.975, k-1) · sd / √k; seeds share data, so this understates the variance of a fresh
dataset), LLM requests/calls/tokens and wall time.

Example::

    res = run_benchmark("simpeval.csv", "score", seeds=5, methods=["best_metric", "autometrics"])
    print(res.table())
    res.save("runs/bench")          # benchmark.json + benchmark.md
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...collectors.files import json_safe, package_version
from ...metricbank import MetricUnavailable
from ...metricbank.errors import DataError, NotFound, UserError
from ..data import load_dataset
from ..sampling import sample_rows
from ..stats import kendall_tau
from .baselines import (
    USAGE_KEYS,
    AutoMetricsBaseline,
    BestMetricBaseline,
    DnAEvalBaseline,
    FinetunedBaseline,
    LLMJudgeBaseline,
    MetaMetricsBaseline,
    MetricFeatures,
    SplitContext,
    most_common,
)

__all__ = ["METHODS", "LLM_METHODS", "run_benchmark", "BenchmarkResult", "dataset_card", "t_interval", "comparison_markdown"]

#: every method, in table order
METHODS = ("best_metric", "metametrics", "finetuned", "autometrics", "llm_judge", "dna_eval")
#: methods that only run when an LLM is configured
LLM_METHODS = ("llm_judge", "dna_eval")
NO_LLM_METHODS = tuple(m for m in METHODS if m not in LLM_METHODS)
CI_METHOD = "95% Student-t interval over seeds: mean ± t(0.975, k-1)·sd/√k"


def t_interval(values) -> tuple[float, float, int]:
    """(mean, half-width of the 95 % t-interval, k) over the finite values; NaN half-width for k < 2."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    k = len(v)
    if k == 0:
        return math.nan, math.nan, 0
    if k == 1:
        return float(v[0]), math.nan, 1
    half = float(stats.t.ppf(0.975, k - 1) * v.std(ddof=1) / math.sqrt(k))
    return float(v.mean()), half, k


def dataset_card(path) -> dict | None:
    """The entry describing ``path`` in a ``datasets.json`` beside it (the shared datasets'
    format: ``{name: {"file", "task", "labels": {target: description}}}``), or None."""
    try:
        p = Path(path)
    except TypeError:
        return None
    index = p.parent / "datasets.json"
    if not index.is_file():
        return None
    try:
        cards = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for name, card in cards.items():
        if isinstance(card, dict) and (card.get("file") == p.name or f"{name}.csv" == p.name):
            return card
    return None


@dataclass
class BenchmarkResult:
    """What a run produced; ``to_dict()`` is what ``benchmark.json`` holds."""

    dataset: dict
    settings: dict
    methods: list[dict]
    shared: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    created_at: str = ""

    def method(self, key: str) -> dict:
        for m in self.methods:
            if m["method"] == key:
                return m
        raise NotFound(f"method {key!r} is not in this benchmark; methods: {[m['method'] for m in self.methods]}")

    def to_dict(self) -> dict:
        return json_safe({"format": "autometrics.benchmark", "format_version": 1, "package_version": package_version(),
                       "created_at": self.created_at, "dataset": self.dataset, "settings": self.settings,
                       "ci": CI_METHOD, "shared": self.shared, "methods": self.methods, "notes": self.notes})

    # --------------------------------------------------------------------- rendering
    def _rows(self) -> list[list[str]]:
        rows = []
        for m in self.methods:
            if m["status"] != "ok":
                rows.append([m["title"], f"{m['status']}: {m.get('note') or m.get('error', '')}"[:90], "", "", "", "", "", ""])
                continue
            t = m["tau"]
            cell = "n/a" if t["mean"] is None or not math.isfinite(t["mean"]) else (
                f"{t['mean']:.3f}" + (f" ± {t['ci95']:.3f}" if t["ci95"] is not None and math.isfinite(t["ci95"]) else ""))
            u = m["llm"]
            rows.append([m["title"], cell, f"{t['k']}/{len(m['per_seed'])}", str(m["missing_predictions"]), str(u["calls"]),
                         str(u["prompt_tokens"]), str(u["completion_tokens"]), f"{m['wall_seconds']:.1f}"])
        return rows

    _HEAD = ["method", "held-out Kendall τ (95% CI)", "seeds", "missing", "LLM calls", "prompt tok", "compl tok", "wall s"]

    def table(self) -> str:
        """Plain-text table for the terminal."""
        rows = self._rows()
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(self._HEAD)]
        line = lambda r: "  ".join((c.ljust(w) if i < 2 else c.rjust(w)) for i, (c, w) in enumerate(zip(r, widths, strict=True)))  # noqa: E731
        out = [self._caption(), line(self._HEAD), line(["-" * w for w in widths])]
        out += [line(r) for r in rows]
        out += ["", *self._footer()]
        return "\n".join(out)

    def markdown(self) -> str:
        rows = self._rows()
        out = [f"# Benchmark: {self.dataset['name']} / {self.dataset['target']}", "", self._caption(), "",
               "| " + " | ".join(self._HEAD) + " |", "|" + "|".join(["---", "---"] + ["---:"] * 6) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out += ["", "## What each method chose", ""]
        for m in self.methods:
            if m["status"] == "ok":
                out.append(f"- **{m['title']}**: {m.get('summary') or '—'}")
        out += ["", "## Notes", ""] + [f"- {n}" for n in self._footer()]
        return "\n".join(out) + "\n"

    def _caption(self) -> str:
        d, s = self.dataset, self.settings
        return (f"{d['name']} / {d['target']} ({d['label_kind']}), {d['n_rows']} labelled rows, {len(s['seeds'])} grouped "
                f"splits (seeds {s['seeds'][0]}..{s['seeds'][-1]}, test {s['test_size']:.0%}, {s['split']})")

    def _footer(self) -> list[str]:
        sh = self.shared
        lines = [f"± is the {CI_METHOD}; 'seeds' = seeds with a defined τ / seeds run; 'missing' = test predictions a "
                 "method could not make (NaN, excluded from its τ, never counted as 0)."]
        if sh.get("metric_scoring_seconds") is not None:
            how = "taken from an earlier run's cache (cost shown pro rata)" if sh.get("metric_scores_reused") else "computed once"
            lines.append(f"MetricBank scores ({sh['n_metric_features']} features, bank '{self.settings['bank']}') were "
                         f"{how} in {sh['metric_scoring_seconds']:.1f} s and shared; that time is included in the "
                         "wall time of every method that uses them.")
        lines += self.notes
        return lines

    def save(self, out) -> dict[str, Path]:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "benchmark.json", "markdown": out / "benchmark.md"}
        paths["json"].write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        paths["markdown"].write_text(self.markdown(), encoding="utf-8")
        return paths


def _summary(key: str, per_seed: list[dict]) -> str:
    det = [p.get("details") or {} for p in per_seed if p.get("tau") is not None or p.get("details")]
    if not det:
        return ""
    if key == "best_metric":
        return "chosen on train: " + most_common([d.get("feature") for d in det])
    if key == "metametrics":
        d = det[0]
        return f"{d.get('backend')} over {d.get('n_features')} metric features, {d.get('n_estimators')} trees of depth {d.get('max_depth')}"
    if key == "finetuned":
        d = det[0]
        alphas = [x.get("alpha") for x in det if x.get("alpha") is not None]
        return f"{d.get('encoder')} (frozen), {d.get('head')} head" + (
            f", ridge α chosen by grouped CV: {', '.join(f'{a:g}' for a in alphas)}" if alphas else "")
    if key == "autometrics":
        feats = [f["feature"] for d in det for f in d.get("selected", [])]
        return f"{det[0].get('method')}; most often selected: " + most_common(feats, 5)
    if key == "llm_judge":
        d = det[0]
        return f"{d.get('model')}, criterion {d.get('criterion')!r} ({d.get('instructions_source')}), scale 1-5"
    if key == "dna_eval":
        d = det[0]
        return f"{d.get('model')}; aspects: " + ", ".join(f"{a['name']} ({a['weight']:.2f})" for a in d.get("aspects", []))
    return ""


def _build(key: str, *, features, llm, judge_llm, task, criterion, opts) -> object:
    llm_kw = {"cache": opts.get("llm_cache"), "concurrency": opts.get("llm_concurrency"), "timeout": opts.get("llm_timeout"),
              "max_retries": opts.get("llm_max_retries")}
    if key == "best_metric":
        return BestMetricBaseline(features)
    if key == "metametrics":
        return MetaMetricsBaseline(features, backend=opts.get("gbm_backend", "auto"))
    if key == "finetuned":
        return FinetunedBaseline(model=opts.get("encoder"), head=opts.get("head", "ridge"))
    if key == "autometrics":
        if llm:
            return AutoMetricsBaseline(llm=llm, judge_llm=judge_llm, top_n=opts.get("top_n", 5), counts=opts.get("counts"),
                                       use_bank=opts.get("use_bank", "auto"), **llm_kw)
        return AutoMetricsBaseline(features, top_n=opts.get("top_n", 5))
    judge = judge_llm or llm
    if key == "llm_judge":
        return LLMJudgeBaseline(judge, task=task, criterion=criterion, judge_mode=opts.get("judge_mode", "auto"), **llm_kw)
    if key == "dna_eval":
        return DnAEvalBaseline(judge, task=task, criterion=criterion, n_aspects=opts.get("dna_aspects", 4),
                               judge_mode=opts.get("judge_mode", "auto"), **llm_kw)
    raise UserError(f"unknown method {key!r}; methods: {', '.join(METHODS)}")


def _usage_delta(before: dict, after: dict) -> dict:
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in USAGE_KEYS}


def run_benchmark(
    data,
    target: str,
    *,
    seeds: int | list[int] = 5,
    methods: list[str] | None = None,
    llm: str | None = None,
    judge_llm: str | None = None,
    task: str | None = None,
    criterion: str | None = None,
    test_size: float = 0.3,
    max_rows: int | None = None,
    sample_seed: int = 0,
    input_col: str = "input",
    output_col: str = "output",
    reference_cols: list[str] | None = None,
    id_col: str | None = "id",
    group_col: str | None = None,
    bank: str = "cpu",
    metrics: list[str] | None = None,
    features: MetricFeatures | None = None,
    echo=lambda *a, **k: None,
    **options,
) -> BenchmarkResult:
    """Run every method on the same splits (module docstring).

    ``seeds``: a count (seeds 0..n-1) or explicit seeds.  ``methods``: keys of :data:`METHODS`
    (default all); LLM methods are skipped with a note when ``llm`` is None, and AutoMetrics
    then runs LLM-free.  ``task``/``criterion`` default to the ``datasets.json`` entry beside
    ``data`` (task, and the target's label description).  ``max_rows``: about that many labelled rows
    in whole input groups (``sample_seed``; the rule of ``fit --max-rows``, :mod:`~autometrics.evaluators.sampling`).  ``bank``: ``cpu`` (metrics without model weights)
    or ``all``; ``metrics``: explicit MetricBank names instead.  ``features``: a
    :class:`.baselines.MetricFeatures` to reuse (e.g. across targets of one dataset: metric
    scores do not depend on the target).

    ``options``: ``top_n``, ``gbm_backend`` (auto|xgboost|sklearn), ``head`` (ridge|mlp),
    ``encoder`` (sentence-transformers folder), ``counts`` (GeneratorCounts for AutoMetrics with
    an LLM), ``use_bank``, ``dna_aspects``, ``judge_mode``, ``llm_cache`` (path or "off"),
    ``llm_concurrency``, ``llm_timeout``, ``llm_max_retries``, ``threads`` (BLAS/OpenMP threads
    while methods fit and predict; default 1, which avoids oversubscription on shared machines
    with these small models; None: library defaults), ``metric_scorer`` (scores the MetricBank
    features instead of one process, e.g. ``distributed.metric_scorer(client)`` on a Dask cluster).
    """
    started_all = time.perf_counter()
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seed_list:
        raise UserError("seeds must be a positive count or a non-empty list")
    chosen = list(methods) if methods else list(METHODS)
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise UserError(f"unknown method(s) {', '.join(unknown)}; methods: {', '.join(METHODS)}")
    chosen = [m for m in METHODS if m in chosen]

    ds = load_dataset(data, target, input_col=input_col, output_col=output_col, reference_cols=reference_cols,
                      id_col=id_col, group_col=group_col)
    lab = ds.labelled(target)
    n_all = len(lab)
    if max_rows is not None:
        lab = sample_rows(lab, target, max_rows, sample_seed)
    y = lab.y(target)
    if len(np.unique(y)) < 2:
        raise DataError(f"the {len(lab)} sampled rows all have the same {target!r}; use more rows")

    card = dataset_card(data) if not hasattr(data, "columns") else None
    notes: list[str] = []
    if task is None and card:
        task = card.get("task")
    if criterion is None and card:
        criterion = (card.get("labels") or {}).get(target)
    if any(m in LLM_METHODS for m in chosen):
        notes.append("LLM judge instructions: " + (f"the dataset's label description ({criterion!r})" if criterion
                                                    else "generic 1-5 rubric (the dataset does not describe its labels)"))

    splits = []
    for s in seed_list:
        tr, te = lab.split_positions(test_size, s)
        splits.append((s, tr, te))

    run_keys = []
    results = []
    for key in chosen:
        if key in LLM_METHODS and not llm:
            msg = f"{key}: skipped (needs an LLM; pass --llm MODEL)"
            echo(f"note: {msg}")
            results.append({"method": key, "title": key, "status": "skipped", "note": "needs an LLM (--llm MODEL)"})
            continue
        run_keys.append(key)
    if "autometrics" in run_keys and not llm:
        notes.append("AutoMetrics ran LLM-free (MetricBank + NNLS); pass --llm for generated judges.")

    shared: dict = {}
    needs_features = any(k in ("best_metric", "metametrics") or (k == "autometrics" and not llm) for k in run_keys)
    if needs_features:
        reused = features is not None
        features = features if features is not None else MetricFeatures(metrics, bank=bank, scorer=options.get("metric_scorer"))
        before = features.seconds
        echo(f"scoring {len(lab)} rows with MetricBank ({'metrics: ' + ','.join(metrics) if metrics else 'bank ' + bank}) ...")
        features.ensure(lab)
        spent = features.seconds - before
        # what scoring these rows cost (a reused cache: its time spread over the rows it holds)
        cost = spent if not reused else features.seconds * len(lab) / max(1, len(features))
        shared = {"metric_scoring_seconds": round(cost, 2), "metric_scores_reused": reused and spent == 0,
                  "n_metric_features": len(features.names), "metric_features": features.names,
                  "metric_notes": features.notes, "unavailable_metrics": sorted(features.unavailable)}

    threads = options.get("threads", 1)

    def limit():
        if threads is None:
            return contextlib.nullcontext()
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=int(threads))

    for key in run_keys:
        try:
            method = _build(key, features=features, llm=llm, judge_llm=judge_llm, task=task, criterion=criterion,
                            opts=options)
            method.check_available()
        except (ImportError, MetricUnavailable) as exc:  # e.g. torch or the MiniLM weights absent: said, not fatal
            results.append({"method": key, "title": key, "status": "skipped", "note": f"cannot run here: {exc}"})
            echo(f"note: {key}: skipped, cannot run here: {exc}")
            continue
        except Exception as exc:  # reported; the other methods still run
            results.append({"method": key, "title": key, "status": "failed", "error": f"{type(exc).__name__}: {exc}"})
            echo(f"{key}: failed to start: {exc}")
            continue
        per_seed, wall = [], 0.0
        for s, tr, te in splits:
            train, test = lab.subset(tr), lab.subset(te)
            ctx = SplitContext(target=target, seed=s, task=task, criterion=criterion)
            u0 = method.usage()
            t0 = time.perf_counter()
            entry = {"seed": s, "n_train": len(tr), "n_test": len(te)}
            try:
                with limit():
                    method.fit(train, y[tr], context=ctx)
                    pred = np.asarray(method.predict(test), dtype=float)
                if pred.shape != (len(te),):
                    raise RuntimeError(f"predict returned {pred.shape} values for {len(te)} rows")
                ok = np.isfinite(pred)
                tau, p = kendall_tau(pred[ok], y[te][ok])
                entry.update({"tau": tau, "p_value": p, "n_scored": int(ok.sum()), "n_missing": int((~ok).sum()),
                              "details": method.details()})
            except Exception as exc:
                entry.update({"tau": None, "error": f"{type(exc).__name__}: {exc}"})
                echo(f"{key} seed {s}: failed: {exc}")
            entry["seconds"] = round(time.perf_counter() - t0, 3)
            entry["llm"] = _usage_delta(u0, method.usage())
            wall += entry["seconds"]
            per_seed.append(entry)
            echo(f"{key} seed {s}: tau = {entry['tau'] if entry['tau'] is None else round(entry['tau'], 4)} "
                 f"({entry['seconds']:.1f} s)")
        mean, half, k = t_interval([e["tau"] for e in per_seed])
        errors = [e["error"] for e in per_seed if e.get("error")]
        shared_s = shared.get("metric_scoring_seconds", 0.0) if getattr(method, "uses_metric_features", False) else 0.0
        results.append({
            "method": key,
            "title": method.title,
            "status": "ok" if len(errors) < len(per_seed) else "failed",
            "error": errors[0] if errors else None,
            "tau": {"mean": mean, "ci95": half, "ci_low": mean - half if math.isfinite(half) else None,
                    "ci_high": mean + half if math.isfinite(half) else None, "k": k},
            "per_seed": per_seed,
            "missing_predictions": int(sum(e.get("n_missing", 0) for e in per_seed)),
            "llm": {kk: int(sum(e["llm"][kk] for e in per_seed)) for kk in USAGE_KEYS},
            "own_seconds": round(wall, 2),
            "wall_seconds": round(wall + shared_s, 2),
            "uses_metric_features": bool(getattr(method, "uses_metric_features", False)),
            "summary": _summary(key, per_seed),
        })
    order = {k: i for i, k in enumerate(METHODS)}
    results.sort(key=lambda r: order[r["method"]])
    src = getattr(ds, "source", "<data>")
    dataset = {"name": Path(src).stem if src != "<DataFrame>" else src, "source": Path(src).name if src != "<DataFrame>" else src,
               "target": target, "label_kind": lab.labels[target].kind, "n_rows": len(lab), "n_labelled_total": n_all,
               "max_rows": max_rows, "sample_seed": sample_seed if max_rows is not None and max_rows < n_all else None,
               "fingerprint": "sha256:" + lab.fingerprint(), "task": task, "criterion": criterion}
    settings = {"seeds": seed_list, "test_size": test_size, "methods": chosen, "llm": llm, "judge_llm": judge_llm or llm,
                "bank": bank, "metrics": metrics, "threads": threads, "split": "grouped by " + (ds.columns.get("group") or ("input" if lab.has_input else "id")),
                "options": {k: (v if isinstance(v, str | int | float | bool | type(None)) else repr(v)) for k, v in options.items()
                            if k != "metric_scorer"},
                "metric_scoring": "distributed" if options.get("metric_scorer") else "one process",
                "total_seconds": round(time.perf_counter() - started_all, 2)}
    return BenchmarkResult(dataset=dataset, settings=settings, methods=results, shared=shared, notes=notes,
                           created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def _cell(m: dict | None) -> tuple[str, float | None]:
    if m is None:
        return "—", None
    t = m.get("tau") or {}
    if m["status"] != "ok" or t.get("mean") is None or not math.isfinite(t["mean"]):
        return m["status"], None
    c = f"{t['mean']:.3f}" + (f" ± {t['ci95']:.3f}" if t.get("ci95") is not None and math.isfinite(t["ci95"]) else "")
    return c, t["mean"]


def comparison_markdown(results: list[BenchmarkResult], *, transpose: bool = False) -> str:
    """Several benchmarks as one table, AutoMetrics paper Table 2 layout: methods as rows, one
    ``dataset / target`` column each (``transpose``: one row per dataset/target instead), cells
    ``τ ± 95 % CI``; the best mean of each dataset/target in bold."""
    names = [f"{r.dataset['name']} / {r.dataset['target']}" for r in results]
    keys = [k for k in METHODS if any(any(m["method"] == k for m in r.methods) for r in results)]
    titles: dict[str, str] = {}
    for r in results:
        for m in r.methods:
            if m["status"] == "ok":
                titles.setdefault(m["method"], m["title"])
    grid = []  # grid[i][j]: result i, method j
    for r in results:
        cells = [_cell(next((m for m in r.methods if m["method"] == k), None)) for k in keys]
        best = max((v for _, v in cells if v is not None), default=None)
        grid.append([f"**{c}**" if v is not None and v == best else c for c, v in cells])
    if transpose:
        out = ["| dataset / target | n | " + " | ".join(titles.get(k, k) for k in keys) + " |",
               "|---|---:|" + "---:|" * len(keys)]
        for name, r, row in zip(names, results, grid, strict=True):
            out.append(f"| {name} | {r.dataset['n_rows']} | " + " | ".join(row) + " |")
        return "\n".join(out)
    out = ["| method | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for j, k in enumerate(keys):
        out.append(f"| {titles.get(k, k)} | " + " | ".join(grid[i][j] for i in range(len(results))) + " |")
    return "\n".join(out)
