"""Row subsets made of whole groups (all outputs of one input stay together): the one sampler
behind ``--max-rows``, the screening rounds' balanced prefixes and the benchmarks' small samples.

Why whole groups: rows of one input share its difficulty, so a sample that splits a group leaks it
between the rows a judge is chosen on and the rows it is measured on, and counts one input twice.
"""

from __future__ import annotations

import numpy as np

from ..metricbank.errors import UserError

__all__ = ["sample_groups", "stratified_groups", "group_prefix", "sample_rows"]


def stratified_groups(positions, y, groups, seed: int = 0, strata: int = 4) -> list[np.ndarray]:
    """The rows at ``positions`` as whole groups (all outputs of one input stay together), in an
    order whose every prefix is balanced over label strata: groups are binned by their mean label,
    shuffled (seeded) within a bin, and taken round-robin across bins."""
    pos = np.asarray(positions, dtype=int)
    g = np.asarray(groups).astype(str)[pos]
    uniq, inv = np.unique(g, return_inverse=True)
    members = [pos[inv == k] for k in range(len(uniq))]
    means = np.array([float(np.mean(y[m])) for m in members])
    k = max(1, min(strata, len(members) // 2))
    edges = np.quantile(means, np.linspace(0, 1, k + 1)[1:-1]) if k > 1 else np.array([])
    level = np.searchsorted(edges, means, side="right")
    rng = np.random.default_rng(seed)
    bins = [list(rng.permutation(np.flatnonzero(level == b))) for b in range(k)]
    order: list[int] = []
    while any(bins):
        for b in bins:
            if b:
                order.append(int(b.pop()))
    return [members[i] for i in order]


def group_prefix(ordered: list[np.ndarray], n: int, min_groups: int = 0) -> np.ndarray:
    """The first groups of ``ordered`` that hold at least ``n`` rows and ``min_groups`` groups."""
    out, total = [], 0
    for m in ordered:
        if total >= n and len(out) >= min_groups:
            break
        out.append(m)
        total += len(m)
    return np.sort(np.concatenate(out)) if out else np.array([], dtype=int)


def sample_groups(groups, n: int, seed: int = 0) -> np.ndarray:
    """Positions of about ``n`` rows made of whole groups, seeded (``fit --max-rows``): groups in a
    random order, each taken when it still fits; at least two groups."""
    g = np.asarray(groups).astype(str)
    uniq, inv = np.unique(g, return_inverse=True)
    rng = np.random.default_rng(seed)
    chosen, total = [], 0
    for k in rng.permutation(len(uniq)):
        size = int((inv == k).sum())
        if total + size <= n or len(chosen) < 2:
            chosen.append(k)
            total += size
        if total >= n:
            break
    return np.sort(np.flatnonzero(np.isin(inv, chosen)))


def sample_rows(ds, target: str, max_rows: int, seed: int = 0):
    """The labelled rows of ``target`` cut to about ``max_rows`` whole groups (seeded); the
    dataset itself when it is not larger.  The cut is recorded in the dataset's warnings, so the
    artifact and the CLI say it."""
    if max_rows < 2:
        raise UserError(f"max_rows must be at least 2, got {max_rows}")
    lab = ds.labelled(target)
    if len(lab) <= max_rows:
        return ds
    sub = lab.subset(sample_groups(lab.frame["group"].to_numpy(), max_rows, seed))
    sub.warnings.append(f"max rows {max_rows}: fitted on a seeded sample of {len(sub)} of {len(lab)} labelled rows "
                        f"({sub.frame['group'].nunique()} whole groups, seed {seed})")
    return sub
