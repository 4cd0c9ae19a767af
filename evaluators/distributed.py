"""Scoring on a Dask cluster: the rows cut into partitions, each scored by a worker process with
the evaluator rebuilt there from its artifact (the JSON text ``autometrics fit`` writes: no pickle
of live objects crosses the wire), the results put back in row order.

``engine()`` opens a client: on a scheduler you run (``--scheduler tcp://host:8786``) or on a local
cluster of worker processes (``--workers N``, one thread each: the metrics are CPU-bound Python).
Every row is scored by the same code as in one process, so the scores are identical, unless a
selected metric's score of one row depends on the other rows of its batch (corpus statistics:
CIDEr's document frequencies, SelfBLEU): such an evaluator is refused, with the metric named.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math

import pandas as pd

from ..metricbank.errors import Unavailable, UserError
from ..metricbank.install import install_hint, plain
from .evaluator import Evaluator
from .features import is_llm_judge, score_metrics

__all__ = ["engine", "score_frame", "score_texts", "check_partitionable", "metric_scorer"]


@contextlib.contextmanager
def engine(scheduler: str | None = None, workers: int | None = None):
    """A ``distributed.Client``: connected to ``scheduler``, else on a local cluster of
    ``workers`` processes (default: one per core), closed afterwards."""
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError as exc:
        raise Unavailable(f"distributed scoring needs Dask ({exc}); {plain(install_hint(extra='distributed'))}") from exc
    if scheduler:
        client = Client(scheduler, timeout="30s")
        try:
            yield client
        finally:
            client.close()
        return
    import os

    n = workers or os.cpu_count() or 1
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def check_partitionable(ev: Evaluator) -> None:
    """Refuse an evaluator whose scores depend on how the rows are batched."""
    judges = [m.name for m in ev.metrics() if is_llm_judge(m)]
    if judges:
        raise UserError(f"this evaluator has LLM judges ({', '.join(judges)}): score it with `autometrics worker`, whose judge "
                        "budget, sampling and rate limits hold across workers; the Dask engine scores classic metrics only")
    bad = [m.name for m in ev.metrics() if getattr(m, "batch_dependent", False)]
    if bad:
        raise UserError(f"this evaluator uses {', '.join(bad)}, whose score of a row depends on the other rows scored with it "
                        "(corpus statistics): split into partitions it would score differently; score it in one process "
                        "(drop --engine)")


@functools.lru_cache(maxsize=4)
def _evaluator(text: str) -> Evaluator:
    import json

    return Evaluator(json.loads(text))


def _score_part(shipped: tuple, part: tuple) -> pd.DataFrame:
    """On a worker: one partition's scores (the evaluator built once per process; the artifact's
    hash travels with its text so the task graph names what the cache holds)."""
    text, _key = shipped
    outputs, inputs, references = part
    return _evaluator(text).score_texts(outputs, inputs, references, progress=False)


def _map_parts(client, fn, shared, outputs: list, inputs, references, partition_rows: int | None) -> list:
    """``fn(shared, (outputs, inputs, references) of a partition)`` on the workers, in row order:
    ``shared`` is broadcast once, each partition's texts go to the workers as data (not inside the
    task graph)."""
    shipped = client.scatter(shared, broadcast=True)
    data = client.scatter([(outputs[a:b], None if inputs is None else inputs[a:b], None if references is None else references[a:b])
                           for a, b in _bounds(len(outputs), client, partition_rows)])
    return client.gather([client.submit(fn, shipped, d, pure=False) for d in data])


def _artifact(ev: Evaluator) -> tuple[str, str]:
    import json

    text = json.dumps(ev.artifact, sort_keys=True)
    return text, hashlib.sha256(text.encode()).hexdigest()[:16]


def _bounds(n: int, client, partition_rows: int | None) -> list[tuple[int, int]]:
    workers = max(1, len(client.scheduler_info().get("workers", {})))
    size = partition_rows or max(200, math.ceil(n / (workers * 4)))  # a few partitions per worker balance the load
    return [(i, min(n, i + size)) for i in range(0, n, size)]


def score_frame(ev: Evaluator, data, client, *, partition_rows: int | None = None, **columns) -> pd.DataFrame:
    """``ev.score(data)`` computed on the cluster: the rows are read and checked here (errors name
    the file's rows), scored on the workers, and returned with the same columns, in order."""
    original, ds = ev.read(data, **columns)
    scores = score_texts(ev, list(ds.outputs), list(ds.inputs) if ds.has_input else None, ds.references, client=client,
                         partition_rows=partition_rows)
    return pd.concat([original.reset_index(drop=True), scores], axis=1)


def score_texts(ev: Evaluator, outputs: list, inputs=None, references=None, *, client, partition_rows: int | None = None):
    """``ev.score_texts(...)`` computed on the cluster, in order."""
    check_partitionable(ev)
    parts = _map_parts(client, _score_part, _artifact(ev), outputs, inputs, references, partition_rows)
    return pd.concat(parts, ignore_index=True) if parts else ev.score_texts([], None, None)


def _metrics_part(metrics: list, part: tuple):
    """On a worker: ``score_metrics`` of one partition."""
    outputs, inputs, references = part
    return score_metrics(metrics, outputs, inputs, references)


def metric_scorer(client, *, partition_rows: int | None = None):
    """A drop-in for :func:`~autometrics.evaluators.features.score_metrics` that scores the
    row-independent metrics on the cluster, partition by partition, and the rest (corpus
    statistics, LLM judges) here on the whole batch: the same columns, in the same order, with
    the same values as one process.  A metric that fails on any partition is left out with a note,
    as one process leaves out a metric that fails on the batch."""

    def score(metrics, outputs, inputs, references, *, progress: bool = False):
        here = [m for m in metrics if getattr(m, "batch_dependent", False) or is_llm_judge(m)]
        there = [m for m in metrics if m not in here]
        X_here, meta, notes = score_metrics(here, outputs, inputs, references, progress=progress) if here else (
            pd.DataFrame(index=range(len(outputs))), {}, [])
        parts = _map_parts(client, _metrics_part, there, outputs, inputs, references, partition_rows) if there and len(outputs) else []
        if parts:
            common = set(parts[0][0].columns).intersection(*(set(p[0].columns) for p in parts[1:]))
            for p in parts:
                for note in p[2]:
                    if note not in notes:
                        notes.append(note)
                for k, v in p[1].items():
                    meta.setdefault(k, v)
            lost = sorted({c for p in parts for c in p[0].columns} - common)
            if lost:
                notes.append(f"{', '.join(lost)}: left out, failed on part of the rows")
            X_there = pd.concat([p[0][[c for c in p[0].columns if c in common]] for p in parts], ignore_index=True)
        else:
            X_there = pd.DataFrame(index=range(len(outputs)))
        both = pd.concat([X_here.reset_index(drop=True), X_there.reset_index(drop=True)], axis=1)
        order = [c for m in metrics for c in m.feature_names() if c in both.columns]
        return both[order], {k: meta[k] for k in order if k in meta}, notes

    return score
