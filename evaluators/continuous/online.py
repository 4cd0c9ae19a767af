"""Online scoring that any number of workers can share on one trace store.

Why a module of its own: several ``autometrics worker`` processes (on one machine or many, one
Postgres; or SQLite for the embedded default) score the same champion at once, and each trace
must be scored once, not once per worker.  :func:`score_new` is what
:meth:`Monitor.score_online <autometrics.evaluators.continuous.monitor.Monitor.score_online>` runs.

- **Claims.**  A worker claims a batch of unscored traces with a lease
  (:meth:`TraceStore.claim_unscored <autometrics.collectors.store.evaluations.EvaluationStore.claim_unscored>`:
  one statement, ``FOR UPDATE SKIP LOCKED`` on Postgres), renews the lease every third of its
  length while it scores (a heartbeat thread), and gives the batch back in the transaction that
  stores its scores.  A worker killed mid-batch stops renewing: once its lease ran out any worker
  takes those traces over.  A trace claimed more than ``max_claims`` times without a result (each
  of its workers died on it) gets an error record instead of killing the next worker too.
- **LLM judges** (an evaluator with generated judges) go to the evaluator's OpenAI-compatible
  endpoint (vLLM, llama.cpp, a hosted API; ``judge_url`` overrides it for every judge): at most
  ``concurrency`` traces in flight, the judges of one trace asked one after the other (the
  trace's text is the shared prompt prefix, so a server's prefix cache serves the later ones).
  Such a worker claims at most ``8 × concurrency`` traces at a time (fewer than ``batch_size``
  when that is smaller): a judge batch takes seconds per trace, and small claims spread the work
  over every worker and keep what a killed worker's batch costs small.
- **Sampling.**  ``judge_sample_rate`` picks the judge-scored traces by a hash of the trace id,
  so every worker (and every version) makes the same choice; the others get a record
  ``not sampled for judge scoring (rate …)``.  MetricBank-only evaluators score every trace.
- **Budget.**  ``judge_calls_per_hour`` / ``judge_tokens_per_hour`` are shared by every worker:
  each trace reserves its calls and estimated tokens in ``judge_usage`` (one atomic conditional
  update per evaluator and hour) before its first request and settles the real figures after.
  A refused trace gets a record ``judge budget for this hour spent`` and is **not** retried the
  next hour: the budget caps what scoring costs, and a backlog replayed into the next hour would
  spend it on old traffic and starve the new (drift and validity read the newest scores).  To
  judge fewer traces steadily instead of all traces until the budget runs out, lower the
  sampling rate.

A judge request that still fails after the client's retries leaves its trace claimed: the lease
brings it back later (to any worker), and on its ``max_claims``-th try it gets an error record; a
batch in which every request failed ends the run (the backlog waits for the next one).  An
endpoint that cannot be reached or refuses the worker (401, 403, 404) releases the batch at once
and ends the run: the traces keep their tries for when it is fixed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from ...metricbank.errors import UserError
from ..evaluator import Evaluator
from ..features import is_llm_judge
from ..fit import SCORE_COLUMN
from ..llm.config import estimate_tokens
from .refit import explain_scores

__all__ = ["ScoringOptions", "ScoringResult", "score_new", "sampled_for_judges"]

log = logging.getLogger("autometrics.continuous.online")

_SAMPLE_SALT = "autometrics-judge-sample:"
# a judge request refused for the whole endpoint (key, permission, model name): like an unreachable
# one, the batch goes back untouched instead of using up its traces' tries
_REFUSALS = ("HTTP 401", "HTTP 403", "HTTP 404", "AuthenticationError", "PermissionDeniedError", "NotFoundError")
JUDGE_BATCH_PER_SLOT = 8  # an evaluator with judges claims at most 8 traces per concurrent request slot


@dataclass
class ScoringOptions:
    """How workers share online scoring (see the module docstring)."""

    lease_seconds: float = 120.0  # a claim's lease, renewed every lease/3 while its batch is scored
    max_claims: int = 3  # a trace claimed this many times without a result gets an error record
    judge_sample_rate: float = 1.0  # fraction of traces scored by an evaluator with LLM judges
    judge_calls_per_hour: int | None = None  # judge requests per evaluator and hour, all workers together
    judge_tokens_per_hour: int | None = None  # prompt + completion tokens per evaluator and hour
    judge_concurrency: int | None = None  # traces judged at once (None: the evaluator's LLM config)
    judge_url: str | None = None  # OpenAI-compatible base URL for every judge (None: the evaluator's)
    # scores a batch's texts instead of the evaluator in this process: (evaluator, outputs, inputs) ->
    # its score_texts frame; e.g. a Dask cluster's (autometrics backfill --engine dask)
    scorer: object = None

    def __post_init__(self):
        if not (self.lease_seconds > 0 and math.isfinite(self.lease_seconds)):
            raise UserError(f"lease_seconds must be a positive number of seconds, not {self.lease_seconds!r}")
        if not (0 < self.judge_sample_rate <= 1):
            raise UserError(f"judge_sample_rate must be in (0, 1], not {self.judge_sample_rate!r}")
        for name in ("max_claims", "judge_calls_per_hour", "judge_tokens_per_hour", "judge_concurrency"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise UserError(f"{name} must be a whole number of at least 1 (or None), not {v!r}")


@dataclass
class ScoringResult:
    """What one :func:`score_new` call did (``written`` rows = every record stored)."""

    written: int = 0
    scored: int = 0  # records with a score
    no_output: int = 0
    not_sampled: int = 0
    over_budget: int = 0
    given_up: int = 0
    retry_later: int = 0  # left claimed after a failed judge request (back after the lease)
    batches: int = 0
    judge_calls: int = 0
    judge_tokens: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        extra = [f"{v} {k.replace('_', ' ')}" for k in ("no_output", "not_sampled", "over_budget", "given_up", "retry_later")
                 if (v := getattr(self, k))]
        judge = f", {self.judge_calls} judge call(s)" if self.judge_calls else ""
        return f"{self.written} record(s) in {self.batches} batch(es): {self.scored} scored" + "".join(f", {x}" for x in extra) + judge


def sampled_for_judges(trace_id: str, rate: float) -> bool:
    """Whether ``trace_id`` is judge-scored at ``rate``: a hash of the id alone, so every worker
    and every evaluator version picks the same traces (versions stay comparable on them)."""
    if rate >= 1:
        return True
    h = int.from_bytes(hashlib.sha256((_SAMPLE_SALT + trace_id).encode()).digest()[:8], "big")
    return h / 2.0**64 < rate


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# ------------------------------------------------------------------ the evaluator, built once per version

_PREPARED: OrderedDict = OrderedDict()  # (evaluator id, judge_url, concurrency) -> (Evaluator, judges)
_PREPARED_LOCK = threading.Lock()


def _prepare(champion: dict, opts: ScoringOptions):
    """The champion's :class:`Evaluator` with its metrics built and every judge bound to a client
    for the configured endpoint; kept for the next batches (model-based metrics load once)."""
    key = (champion["id"], opts.judge_url, opts.judge_concurrency)
    with _PREPARED_LOCK:
        if key in _PREPARED:
            _PREPARED.move_to_end(key)
            return _PREPARED[key]
    ev = Evaluator(champion["artifact"])
    metrics = ev.metrics()
    judges = [m for m in metrics if is_llm_judge(m)]
    if judges:
        from ..llm.client import LLMClient

        clients: dict = {}
        for j in judges:
            over = {k: v for k, v in (("api_base", opts.judge_url), ("concurrency", opts.judge_concurrency)) if v}
            if opts.judge_url:  # another host: its key from $AUTOMETRICS_LLM_API_KEY, never the provider's own
                over["api_key_env"] = None
            cfg = dataclasses.replace(j.llm_config, **over)
            ident = repr(sorted(cfg.public().items()))
            if ident not in clients:
                clients[ident] = LLMClient(cfg)
            j.client = clients[ident]
    with _PREPARED_LOCK:
        _PREPARED[key] = (ev, judges)
        while len(_PREPARED) > 2:
            _PREPARED.popitem(last=False)
    return ev, judges


class _Heartbeat:
    """Renews a claim's lease every third of its length until stopped (a killed worker stops
    renewing, which is what lets another worker take its batch over)."""

    def __init__(self, store, claim_id: str, lease_ns: int):
        self.store, self.claim_id, self.lease_ns = store, claim_id, lease_ns
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{claim_id[:8]}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.lease_ns / 3e9):
            try:
                self.store.renew_claim(self.claim_id, self.lease_ns)
            except Exception as exc:  # a store hiccup: the next beat tries again
                log.warning("could not renew scoring claim %s: %s: %s", self.claim_id[:8], type(exc).__name__, exc)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


# ------------------------------------------------------------------ scoring


def score_new(store, cfg, champ: dict, *, limit_batches: int | None = None, options: ScoringOptions | None = None) -> ScoringResult:
    """Claim, score and store batches of ``champ``'s unscored traces (newest first) in ``store``
    until none is left or ``limit_batches`` (default ``cfg.max_batches``) times ``cfg.batch_size``
    traces were claimed (judge batches are smaller, not fewer traces).  ``cfg`` is the Monitor's
    configuration (project, target, batch sizes, settle time)."""
    opts = options or ScoringOptions()
    res = ScoringResult()
    ev, judges = _prepare(champ, opts)
    for j in judges:  # an endpoint that was down on an earlier tick may be back
        j.client.unreachable = None
    lease_ns = int(opts.lease_seconds * 1e9)
    worker = _worker_name()
    size = cfg.batch_size
    if judges:  # judge batches take seconds per trace: small claims spread them over the workers
        size = min(size, JUDGE_BATCH_PER_SLOT * max(int(j.client.config.concurrency) for j in judges))
    left = (limit_batches or cfg.max_batches) * cfg.batch_size  # the bound on one call's work is in traces
    while left > 0:
        settled = time.time_ns() - int(cfg.settle_seconds * 1e9) if cfg.settle_seconds > 0 else None
        claim_id = uuid.uuid4().hex
        todo = []
        for _try in range(3):  # an empty claim while unclaimed traces exist: a concurrent claimer took them
            todo = store.claim_unscored(cfg.project, champ["id"], min(size, left), claim_id=claim_id, worker=worker,
                                        lease_ns=lease_ns, seen_before_ns=settled)
            if todo or not store.unscored_traces(cfg.project, champ["id"], 1, seen_before_ns=settled, unclaimed=True):
                break
        if not todo:
            break
        res.batches += 1
        left -= len(todo)
        try:
            with _Heartbeat(store, claim_id, lease_ns):
                rows, keep, stop = _score_batch(store, champ, ev, judges, todo, opts, res)
            for r in rows:
                r.update(evaluator_id=champ["id"], project=cfg.project, target=cfg.target, scored_at_ns=time.time_ns())
            store.write_scores(rows, release=claim_id, keep=keep)
        except BaseException:
            try:  # give the batch back at once (the lease would also bring it back, later)
                store.release_claim(claim_id)
            except Exception as exc:
                log.warning("could not release scoring claim %s: %s", claim_id[:8], exc)
            raise
        res.written += len(rows)
        log.debug("claim %s: %d trace(s), %d record(s) stored, %d left claimed", claim_id[:8], len(todo), len(rows), len(keep))
        if stop:
            break
    if res.batches:
        log.info("online scoring of %s/%s v%s: %s", cfg.project, cfg.target, champ["version"], res)
    return res


def _record(tid: str, start, error: str) -> dict:
    return {"trace_id": tid, "score": None, "metrics": None, "contributions": None, "rationales": None, "error": error,
            "trace_start_ns": start}


def _score_batch(store, champ, ev, judges, todo, opts: ScoringOptions, res: ScoringResult):
    """Score one claimed batch: (rows to store, trace ids to keep claimed, stop the run?)."""
    rows: list[dict] = []
    first_seen = {t: seen for t, seen, _ in todo}
    live = []
    for tid, seen, attempts in todo:
        if attempts > opts.max_claims:
            rows.append(_record(tid, seen, f"scoring given up: claimed {attempts - 1} times before without a stored result "
                                           "(each worker was killed, crashed or stalled past its lease on this trace)"))
            res.given_up += 1
        else:
            live.append(tid)
    texts = store.trace_texts(live).set_index("trace_id") if live else None
    ok_ids = [t for t in live if texts is not None and t in texts.index and isinstance(texts.at[t, "output"], str)]
    for tid in live:
        if tid not in ok_ids:
            rows.append(_record(tid, first_seen[tid], "no output captured for this trace"))
            res.no_output += 1
    start = {t: first_seen[t] for t in live}
    if texts is not None:
        start.update({t: int(s) for t, s in texts["start"].dropna().items() if t in start})
    keep: list[str] = []
    stop = False
    if judges and ok_ids:
        ok_ids, keep, stop = _run_judges(store, champ, judges, texts, ok_ids, start, opts, res, rows, {t: a for t, _, a in todo})
    if ok_ids:
        sub = texts.loc[ok_ids]
        outs, ins = sub["output"].astype(str).tolist(), sub["input"].fillna("").astype(str).tolist()
        scored = opts.scorer(ev, outs, ins) if opts.scorer is not None else ev.score_texts(outs, inputs=ins)
        contrib, rats = explain_scores(ev, scored)
        metrics = scored[[f["feature"] for f in ev.features]].to_dict("records")  # whole columns: no per-row pandas
        parts = contrib.to_dict("records")
        for i, (tid, val) in enumerate(zip(ok_ids, scored[SCORE_COLUMN].to_numpy(dtype=float).tolist(), strict=True)):
            rows.append({"trace_id": tid, "score": val if math.isfinite(val) else None, "metrics": metrics[i],
                         "contributions": parts[i], "rationales": rats[i], "error": None, "trace_start_ns": start[tid]})
            res.scored += 1
    return rows, keep, stop


def _run_judges(store, champ, judges, texts, ok_ids, start, opts: ScoringOptions, res: ScoringResult, rows, attempts):
    """Sample, reserve budget and ask the judges for each trace (one trace's judges in a row, at
    most ``concurrency`` traces at once).  Replies are handed to the judges' next ``score``.
    Returns (trace ids judged, trace ids to keep claimed, stop the run?)."""
    from concurrent.futures import ThreadPoolExecutor

    rate = opts.judge_sample_rate
    picked = []
    for tid in ok_ids:
        if sampled_for_judges(tid, rate):
            picked.append(tid)
        else:
            rows.append(_record(tid, start[tid], f"not sampled for judge scoring (rate {rate:g})"))
            res.not_sampled += 1
    hour = int(time.time() // 3600)
    limited = opts.judge_calls_per_hour is not None or opts.judge_tokens_per_hour is not None
    lock = threading.Lock()

    def norm(x) -> str:
        return x if isinstance(x, str) else ""

    def one(tid: str):
        out, inp = norm(texts.at[tid, "output"]), norm(texts.at[tid, "input"])
        reqs = [(j, j.requests([out], [inp])[0]) for j in judges]
        if any(j.client.unreachable for j, _ in reqs):
            return tid, "unreachable", None
        est = sum(estimate_tokens(" ".join(m.get("content") or "" for m in r["messages"])) + int(r.get("max_tokens") or 0)
                  for _, r in reqs)
        if limited and not store.reserve_judge_budget(champ["id"], hour, calls=len(reqs), tokens=est,
                                                      max_calls=opts.judge_calls_per_hour, max_tokens=opts.judge_tokens_per_hour):
            return tid, "budget", None
        replies = [(j, j.client.chat(stage=f"score:{j.spec.kind}", **r)) for j, r in reqs]  # in a row: one prefix
        fresh = [r for _, r in replies if not r.cached and r.error is None]
        calls = sum(1 for _, r in replies if not r.cached)
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in fresh)
        with lock:
            res.judge_calls += calls
            res.judge_tokens += tokens
        if limited:
            try:
                store.settle_judge_usage(champ["id"], hour, calls=calls - len(reqs), tokens=tokens - est)
            except Exception as exc:  # the reservation stands: the budget errs on the safe side
                log.warning("could not settle judge usage: %s", exc)
        failed = next((r.error for _, r in replies if r.error is not None), None)
        if failed:
            return tid, ("unreachable" if "unreachable" in failed or failed.startswith(_REFUSALS) else "failed"), failed
        return tid, "ok", [(j, (out, inp), r) for j, r in replies]

    workers = max(1, min(len(picked), max(int(j.client.config.concurrency) for j in judges))) if picked else 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(one, picked))
    judged, keep, stop, back, reason = [], [], False, 0, None
    for tid, what, payload in outcomes:
        if what == "ok":
            for j, key, r in payload:
                j._prefetched[key] = r
            judged.append(tid)
        elif what == "budget":
            rows.append(_record(tid, start[tid], _over_budget(opts, hour)))
            res.over_budget += 1
        elif what == "unreachable":
            stop, back = True, back + 1  # released with the batch: nothing to gain from the rest of this run
            reason = payload or reason
        elif attempts[tid] >= opts.max_claims:
            rows.append(_record(tid, start[tid], f"judge requests failed on try {attempts[tid]} of {opts.max_claims}: {payload}"))
            res.given_up += 1
        else:
            keep.append(tid)
            res.retry_later += 1
    if stop:
        why = next((j.client.unreachable for j in judges if j.client.unreachable), None) or reason or "?"
        res.notes.append(f"judge endpoint unreachable or refusing ({why}): {back} trace(s) left for a later run")
        log.warning("judge endpoint unreachable or refusing (%s); the unjudged traces go back for a later run", why)
    elif keep and not judged:  # every request of the batch failed: the server is in trouble, try the backlog later
        stop = True
    return judged, keep, stop


def _over_budget(opts: ScoringOptions, hour: int) -> str:
    lim = [f"{opts.judge_calls_per_hour} calls/hour"] if opts.judge_calls_per_hour else []
    lim += [f"{opts.judge_tokens_per_hour} tokens/hour"] if opts.judge_tokens_per_hour else []
    when = time.strftime("%Y-%m-%d %H:00 UTC", time.gmtime(hour * 3600))
    return f"judge budget for this hour spent ({', '.join(lim)}, hour from {when}); not retried"
