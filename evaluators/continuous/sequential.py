"""Sequential change detection on a deployed evaluator's online streams (pure functions; the
monitor keeps the state and stores the alerts).

Why sequential: the windowed test (:func:`.drift.drift_windows`) looks at nothing short of a full
window and alerts after two significant windows, so even an answer cut to three words needs 400
traces after it starts.  Here every new trace updates a two-sided CUSUM (Page 1954) of the
evaluator's score standardised by a frozen reference (the first scores after the fit):

    S+_t = max(0, S+_{t-1} + z_t - k),   S-_t = max(0, S-_{t-1} - z_t - k),   z_t = (x_t - mean_ref) / sd_ref

and the alarm is ``max(S+, S-) > h``.  ``k`` (default 0.25 reference SDs) is half the shift the
detector is tuned for (0.5 SD); a shift of d SDs is detected after about ``h / (d - k)`` traces,
so large changes are caught in a handful of traces and small ones later.  The estimated change
point is the last trace where the alarming sum was 0.  Each ``z_t`` is clipped to ``[-clip, clip]``
(default 3 SDs, a Huber-type CUSUM) in calibration and monitoring alike: a reference of a few
hundred scores under-samples a heavy tail (a length ratio, a judge that is rarely far off), and
unclipped, one extreme trace the reference never saw could cross ``h`` alone; clipped, a large
change still adds ``clip - k`` per trace.

The false-alarm budget is stated as an expected run length: on unchanged traffic, about ``arl``
traces (default 10,000) between false alarms, for all detectors of a version together.  ``h`` is
not read off a normal-theory table: it is calibrated on the reference itself by a bootstrap that
includes the reference's own estimation error (each simulated stream standardises by the mean and
SD of a bootstrap copy of the reference and draws its traces from the reference), so discrete and
lumpy score distributions (answers in a few styles, judges on a 1-5 scale) get their own
threshold.  ``h`` is the quantile of the simulated streams' largest statistic over ``length``
traces at ``exp(-length / arl)``, the probability of no false alarm in that many traces when run
lengths are geometric.

The same detector runs on each metric of the evaluator (so an alert says which metric moved:
length collapsed, overlap fell) and, as a Bernoulli CUSUM of log-likelihood ratios, on the rate of
failed or empty outputs (tuned for the rate rising to ``max(3 p0, p0 + 0.05)``).  The budget is
split evenly among them (each detector gets ``arl * n_detectors``), so the version's false-alarm
rate stays within the budget.  A shift of the score's distribution that keeps its mean (mass
moving between levels) is the windowed test's: both run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...metricbank.errors import UserError

__all__ = ["SequentialSettings", "cusum_paths", "calibrate_mean", "calibrate_rate", "reference_stats", "start_state",
           "update_state", "sequential_message", "concordance", "validity_step", "validity_change_message"]


@dataclass(frozen=True)
class SequentialSettings:
    """The sequential detectors' settings.

    - ``arl``: the false-alarm budget, expected traces between false alarms on unchanged traffic
      (all detectors of a version together; default 10,000).
    - ``k``: allowance in reference SDs (default 0.25: tuned for shifts of 0.5 SD).
    - ``clip``: standardised values are clipped to ``[-clip, clip]`` reference SDs before they enter a
      sum, in calibration and monitoring alike (default 3): one extreme trace from a heavy tail the
      reference did not sample cannot cross the threshold alone, while a large change still adds
      ``clip - k`` per trace.
    - ``streams`` / ``length``: bootstrap streams and their length that calibrate each threshold.
    """

    arl: int = 10_000
    k: float = 0.25
    clip: float = 3.0
    streams: int = 400
    length: int = 2_000

    def __post_init__(self):
        if not (isinstance(self.arl, int) and not isinstance(self.arl, bool) and self.arl >= 100):
            raise UserError(f"drift ARL (expected traces between false alarms) must be a whole number >= 100, got {self.arl!r}")
        if not (isinstance(self.k, int | float) and math.isfinite(self.k) and 0 < self.k <= 2):
            raise UserError(f"CUSUM allowance k must be in (0, 2] reference SDs, got {self.k!r}")
        if not (isinstance(self.clip, int | float) and math.isfinite(self.clip) and self.k < self.clip <= 100):
            raise UserError(f"CUSUM clip must be above k ({self.k}) and at most 100 reference SDs, got {self.clip!r}")
        for name, low in (("streams", 50), ("length", 100)):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
                raise UserError(f"sequential setting {name} must be a whole number >= {low}, got {v!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def cusum_paths(x, s0: float = 0.0):
    """``S_t = max(0, S_{t-1} + x_t)`` from ``S_0 = s0`` for every t, along the last axis, without a
    Python loop: ``S_t = P_t - min(-s0, min_{j<=t} P_j)`` with ``P`` the running sum of ``x``."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    p = np.cumsum(x, axis=-1)
    low = np.minimum.accumulate(p, axis=-1)
    return p - np.minimum(low, -np.asarray(s0, dtype=float)[..., None] if np.ndim(s0) else -float(s0))


def _quantile_h(maxima, length: int, arl: float) -> float:
    import numpy as np

    q = math.exp(-length / arl)  # P(no false alarm within `length` traces) for geometric run lengths
    # the order statistic at position q (n + 1) covers q of the distribution on average ("weibull");
    # numpy's default, q (n - 1) + 1, covers less: at q = 0.975 of 400 maxima, 390/401 = 0.9726, so
    # 10 % more exceedances than 0.025 (the drift benchmark's null runs had 2-12 % more false alarms)
    return float(np.quantile(maxima, q, method="weibull"))


def calibrate_mean(reference, k: float, arl: float, *, clip: float | None = None, sides=("up", "down"), streams: int = 400,
                   length: int = 2_000, seed: int = 0) -> float:
    """The threshold ``h`` of a mean CUSUM on ``reference``-standardised values (clipped to
    ``[-clip, clip]`` when given), watching ``sides`` (both by default; ``("down",)`` for a fall
    only), with about ``arl`` traces between false alarms (bootstrap: estimation error of the
    reference included)."""
    import numpy as np

    ref = np.asarray(reference, dtype=float)
    n = len(ref)
    rng = np.random.default_rng(seed)
    boot = ref[rng.integers(0, n, size=(streams, n))]
    mu, sd = boot.mean(axis=1), boot.std(axis=1, ddof=1)
    sd = np.where(sd > 0, sd, ref.std(ddof=1) or 1.0)
    maxima = np.empty(streams)
    for i0 in range(0, streams, 100):  # 100 streams at a time: bounded memory
        sl = slice(i0, min(streams, i0 + 100))
        x = ref[rng.integers(0, n, size=(sl.stop - sl.start, length))]
        z = _clipped((x - mu[sl, None]) / sd[sl, None], clip)
        paths = [cusum_paths(sign * z - k).max(axis=1) for side, sign in (("up", 1), ("down", -1)) if side in sides]
        maxima[sl] = np.maximum.reduce(paths)
    return _quantile_h(maxima, length, arl)


def _clipped(z, clip: float | None):
    import numpy as np

    return z if clip is None else np.clip(z, -clip, clip)


def rate_increments(p0: float):
    """(log-likelihood ratio of a failure, of a success) for a rate rising from ``p0`` to ``p1``."""
    p1 = min(0.99, max(3 * p0, p0 + 0.05))
    return math.log(p1 / p0), math.log((1 - p1) / (1 - p0)), p1


def calibrate_rate(failures: int, n: int, arl: float, *, streams: int = 400, length: int = 2_000, seed: int = 0) -> float:
    """The threshold of a Bernoulli CUSUM for a rise of the failure rate, reference ``failures`` of
    ``n``: the detector uses the smoothed rate; the simulated streams draw their true rate from its
    posterior (Jeffreys), so a reference with no failure is not taken as a rate of 0."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p0 = (failures + 0.5) / (n + 1)
    up, down, _ = rate_increments(p0)
    truth = rng.beta(failures + 0.5, n - failures + 0.5, size=streams)
    maxima = np.empty(streams)
    for i0 in range(0, streams, 100):
        sl = slice(i0, min(streams, i0 + 100))
        fail = rng.random((sl.stop - sl.start, length)) < truth[sl, None]
        maxima[sl] = cusum_paths(np.where(fail, up, down)).max(axis=1)
    return _quantile_h(maxima, length, arl)


def reference_stats(values) -> dict | None:
    """Mean and SD of a reference (None when it has fewer than 2 distinct values: nothing to standardise by)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 10 or len(np.unique(v)) < 2:
        return None
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)), "n": int(len(v))}


def start_state(reference: dict, settings: SequentialSettings, *, seed: int = 0) -> dict:
    """Detectors for a frozen reference: ``reference`` holds ``score`` (values), ``metrics``
    ({name: values}) and ``failed`` (0/1 per reference trace).  Each gets its threshold for an even
    share of the budget; a constant stream (one distinct value) gets none and is said."""
    import numpy as np

    specs: dict[str, dict] = {}
    streams = {"score": reference["score"], **{f"metric:{m}": v for m, v in (reference.get("metrics") or {}).items()}}
    skipped = []
    for name, vals in streams.items():
        st = reference_stats(vals)
        if st is None:
            skipped.append(name)
            continue
        specs[name] = {"kind": "mean", **st}
    failed = np.asarray(reference["failed"] if reference.get("failed") is not None else [], dtype=float)
    if len(failed) >= 10:
        specs["failed_or_empty"] = {"kind": "rate", "failures": int(failed.sum()), "n": int(len(failed))}
    share = settings.arl * max(1, len(specs))
    for i, (name, d) in enumerate(specs.items()):
        if d["kind"] == "mean":
            vals = np.asarray(streams[name], dtype=float)
            d["h"] = calibrate_mean(vals[np.isfinite(vals)], settings.k, share, clip=settings.clip, streams=settings.streams,
                                    length=settings.length, seed=seed + i)
        else:
            d["h"] = calibrate_rate(d["failures"], d["n"], share, streams=settings.streams, length=settings.length, seed=seed + i)
            d["p0"] = (d["failures"] + 0.5) / (d["n"] + 1)
            d["p1"] = rate_increments(d["p0"])[2]
        d.update(s_up=0.0, s_down=0.0, zero_up=0, zero_down=0, alarm=None)
    return {"settings": settings.to_dict(), "detectors": specs, "constant": skipped, "n": 0, "until_ns": None,
            "alarm": None}


def _advance(d: dict, x, times, k: float, n0: int, clip: float | None = None) -> None:
    """Move one detector over its new values ``x`` (traces ``n0 + 1 ...``, started at ``times``), in
    place; standardised values are clipped as in its calibration."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    if d["kind"] == "mean":
        ok = np.isfinite(x)
        z = _clipped(np.where(ok, (x - d["mean"]) / (d["sd"] or 1.0), 0.0), clip)
        sides = {"up": np.where(ok, z - k, 0.0), "down": np.where(ok, -z - k, 0.0)}  # a missing value moves nothing
    else:
        up, down, _ = rate_increments(d["p0"])
        z = x - d["p0"]
        sides = {"up": np.where(x > 0, up, down)}  # a falling failure rate is good news: no alarm for it
    sides = {side: inc for side, inc in sides.items() if side in d.get("sides", sides)}
    for side, inc in sides.items():
        path = cusum_paths(inc, d[f"s_{side}"])
        zeros = np.flatnonzero(path <= 0)
        if d["alarm"] is None:
            over = np.flatnonzero(path > d["h"])
            if len(over):
                t = int(over[0])
                before = zeros[zeros < t]
                lo = int(before[-1]) + 1 if len(before) else 0  # the sum was last 0 just before the change began
                # within that stretch, the most likely start of a shift of unknown size (GLR: the largest
                # (sum of z from j to t)^2 / (t - j + 1)); a stretch that began in an earlier batch, with
                # half the threshold or more carried over, is dated by where it began (the earlier values are gone)
                tail = np.cumsum(z[lo:t + 1][::-1])[::-1]
                j = lo + int(np.argmax(tail ** 2 / np.arange(t + 1 - lo, 0, -1)))
                if len(before) or j > 0 or d[f"s_{side}"] < d["h"] / 2:  # little carried over: it began here
                    change_at, change_ns = n0 + j + 1, int(times[j])
                else:
                    change_at, change_ns = d[f"zero_{side}"] + 1, d.get(f"zero_{side}_ns")
                lo = max(0, change_at - n0 - 1)
                seg = x[lo:t + 1]
                seg = seg[np.isfinite(seg)]
                d["alarm"] = {"side": side, "at": n0 + t + 1, "at_ns": int(times[t]), "change_at": change_at,
                              "change_ns": change_ns, "statistic": float(path[t]),
                              "mean_after": float(seg.mean()) if len(seg) else None, "n_after": int(len(seg))}
        if len(zeros):
            d[f"zero_{side}"], d[f"zero_{side}_ns"] = n0 + int(zeros[-1]) + 1, int(times[int(zeros[-1])])
        d[f"s_{side}"] = float(path[-1])


def update_state(state: dict, times, score, metrics: dict, failed) -> dict:
    """Advance every detector over new traces (in start order, all after ``state['until_ns']``);
    ``metrics`` maps each metric to its values, ``failed`` is 0/1 per trace.  The first alarm of
    the version (``state['alarm']``: the trace count and time at the alarm, the estimated change
    point, the detectors over their threshold) stays; later crossings are added to its detectors."""
    import numpy as np

    times = np.asarray(times)  # int64 nanoseconds stay exact (a float64 loses ~256 ns at today's times)
    if not len(times):
        return state
    k, n0, clip = state["settings"]["k"], state["n"], state["settings"].get("clip")  # a state from before clipping: none
    for name, d in state["detectors"].items():
        if name == "score":
            vals = score
        elif name == "failed_or_empty":
            vals = failed
        else:
            vals = metrics.get(name.split(":", 1)[1], np.full(len(times), np.nan))
        _advance(d, vals, times, k, n0, clip)
    state["n"], state["until_ns"] = n0 + len(times), int(times[-1])
    fired = {n: d["alarm"] for n, d in state["detectors"].items() if d["alarm"] is not None}
    if fired and state["alarm"] is None:
        at = min(a["at"] for a in fired.values())
        first = {n: a for n, a in fired.items() if a["at"] == at}
        starts = [(a["change_at"], a["change_ns"]) for a in first.values()]
        change_at, change_ns = min(starts, key=lambda c: c[0])
        state["alarm"] = {"at": at, "at_ns": next(iter(first.values()))["at_ns"], "change_at": change_at,
                          "change_ns": change_ns, "detectors": sorted(first)}
    if fired:
        state["alarm"]["later"] = sorted(set(fired) - set(state["alarm"]["detectors"]))
    return state


def _moved(name: str, d: dict) -> str:
    a = d["alarm"]
    if d["kind"] == "rate":
        rate = a.get("mean_after")
        return (f"failed or empty outputs rose from {d['p0']:.1%} to {rate:.1%}" if rate is not None
                else "failed or empty outputs rose")
    what = "the score" if name == "score" else name.split(":", 1)[1]
    after = a.get("mean_after")
    if after is None:
        return f"{what} moved"
    sds = (after - d["mean"]) / (d["sd"] or 1.0)
    verb = "rose" if sds > 0 else "fell"
    return f"{what} {verb} from {d['mean']:.3g} to {after:.3g} ({sds:+.1f} SD of the reference)"


def sequential_message(state: dict) -> str:
    """One alert sentence: what changed, by how much, since when, and what to do."""
    import datetime as dt

    a = state["alarm"]
    dets = state["detectors"]
    fired = list(a["detectors"]) + [n for n in a.get("later", []) if n not in a["detectors"]]
    names = (["score"] if "score" in fired else []) + [n for n in fired if n != "score"]
    parts = [_moved(n, dets[n]) for n in names]
    since = (" since about " + dt.datetime.fromtimestamp(a["change_ns"] / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
             if a.get("change_ns") else "")
    n_since = a["at"] - a["change_at"] + 1
    return (f"traffic changed{since} (the alert came {n_since} trace(s) after the estimated change point): "
            + "; ".join(parts)
            + f". Sequential CUSUM against the first scores after the fit (false-alarm budget: 1 per "
              f"{state['settings']['arl']:,} traces of unchanged traffic). Check recent releases, prompts and model "
              "changes; if the change is intended, refit on feedback for the new traffic.")


# ---------------------------------------------------------------------- live validity, label by label
def concordance(scores, labels, pool_scores, pool_labels):
    """Per new labelled trace: how its (score, label) orders against the pool's pairs, the mean of
    ``sign(score - pool score) * sign(label - pool label)`` over pool traces with another label
    (Kendall's tau, one trace at a time: its mean over traces is the tau of new against pool).
    NaN where no pool label differs."""
    import numpy as np

    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    ps, py = np.asarray(pool_scores, dtype=float), np.asarray(pool_labels, dtype=float)
    out = np.full(len(s), np.nan)
    for i0 in range(0, len(s), 500):
        dy = np.sign(y[i0:i0 + 500, None] - py[None, :])
        ds = np.sign(s[i0:i0 + 500, None] - ps[None, :])
        n = (dy != 0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[i0:i0 + 500] = np.where(n > 0, (ds * dy).sum(axis=1) / np.maximum(n, 1), np.nan)
    return out


def validity_step(state: dict, values, times, *, reference_n: int, settings: SequentialSettings, seed: int = 0) -> dict:
    """Advance the live-validity detector over new labels' concordance ``values`` (feedback order,
    given at ``times``).  The first ``reference_n`` values after the fit are its reference (the
    evaluator's agreement on current feedback when it was new); then a one-sided CUSUM watches for
    the agreement falling, its threshold calibrated on that reference for about ``settings.arl``
    labels between false alarms.  The pool the values are measured against is the caller's (the
    labels before the fit): its in-sample lean is the same for reference and watched labels."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    t = np.asarray(times)
    ok = np.isfinite(v)
    v, t = v[ok], t[ok]
    ref = state.setdefault("reference_values", [])
    need = max(0, reference_n - len(ref))
    ref.extend(float(x) for x in v[:need])
    v, t = v[need:], t[need:]
    if state.get("detector") is None:
        if len(ref) < reference_n:
            state["state"] = f"collecting reference ({len(ref)}/{reference_n} labels after the fit)"
            return state
        st = reference_stats(ref)
        if st is None:
            state["state"] = "reference agreement is constant: nothing to standardise by"
            return state
        h = calibrate_mean(np.asarray(ref), settings.k, settings.arl, clip=settings.clip, sides=("down",),
                           streams=settings.streams, length=settings.length, seed=seed)  # a fall only: the budget on one side
        state["detector"] = {"kind": "mean", **st, "h": h, "sides": ["down"], "s_up": 0.0, "s_down": 0.0, "zero_up": 0,
                             "zero_down": 0, "alarm": None}
        state["n"] = 0
    if len(v):
        _advance(state["detector"], v, t, settings.k, state["n"], settings.clip)
        state["n"] += len(v)
    d = state["detector"]
    state["alarm"] = d["alarm"]
    state["state"] = (f"watching {state['n']} label(s) after a reference of {reference_n}" if d["alarm"] is None else "alarm")
    return state


def validity_change_message(state: dict) -> str:
    import datetime as dt

    d, a = state["detector"], state["detector"]["alarm"]
    since = (" since about " + dt.datetime.fromtimestamp(a["change_ns"] / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
             if a.get("change_ns") else "")
    after = a.get("mean_after")
    moved = (f"from {d['mean']:.2f} to {after:.2f} ({(after - d['mean']) / (d['sd'] or 1.0):+.1f} SD)" if after is not None
             else f"below {d['mean']:.2f}")
    return (f"live validity fell{since}: the agreement of new feedback with the evaluator's scores (each label's "
            f"concordance with the labels before the fit, a per-label Kendall tau) fell {moved} over {a['n_after']} label(s), "
            f"against its first {d['n']} labels after the fit. Sequential CUSUM, false-alarm budget 1 per "
            f"{state['settings']['arl']:,} labels. Either the evaluator no longer tracks people on current traffic or the "
            "feedback changed (a new rater, automated labels): look at recent feedback, and refit once it is trusted.")
