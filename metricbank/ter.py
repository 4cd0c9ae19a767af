"""TER (translation edit rate) against references, with Tercom's block-shift search.

sacrebleu defines the numbers; its pure-Python shift search is too slow for benchmark-sized
batches (17,600 pairs), so the same heuristics run here as a numba kernel, pinned to sacrebleu's
edit counts in the tests (identical on random sequences and on the golden examples).
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import numpy as np

from .base import Metric
from .install import install_hint
from .ngram import NgramCache, clipped_overlap, sacrebleu_metrics
from .registry import register

__all__ = ["TER"]

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- TER
# Tercom's search limits, as sacrebleu sets them (shift length, shift distance, beam width
# of the edit-distance band) plus sacrebleu's cap on evaluated shift candidates per pair.
_TER_MAX_SHIFT_SIZE = 10
_TER_MAX_SHIFT_DIST = 50
_TER_BEAM_WIDTH = 25
_TER_MAX_CANDIDATES = 1000


def _ter_edits_kernel(h, r, max_shift_size, max_shift_dist, beam, max_candidates):  # pragma: no cover - runs compiled
    """Number of TER edits (shifts + word edits) turning ``h`` into ``r`` (int-coded words).

    Numba-compiled (see :func:`_ter_kernel`).  It runs the greedy Tercom search with the
    choices sacrebleu makes, so the numbers agree with sacrebleu exactly (tested): a band
    ("beam") edit distance around the length-scaled diagonal with ties resolved as
    match/substitution, then hypothesis-word deletion, then reference-word insertion; shift
    candidates are blocks of up to 10 words that match the reference within 50 positions,
    are misaligned on both sides and are moved next to the aligned position of the
    reference block (or of its predecessor); the shift with the largest gain wins, ties by
    longer block, earlier block, earlier target; the search stops when no shift gains or
    after 1,000 evaluated candidates.  Every candidate shares the unchanged prefix rows of
    the current edit-distance matrix, which is what makes this fast.
    """
    INF = np.int64(10**16)
    nh = h.shape[0]
    nr = r.shape[0]
    if nr == 0:
        return nh
    ratio = nr / nh if nh > 0 else 1.0
    bw = beam
    if beam < ratio / 2:
        bw = int(math.ceil(ratio / 2 + beam))
    lo = np.zeros(nh + 1, np.int64)
    hi = np.zeros(nh + 1, np.int64)
    for i in range(1, nh + 1):
        diag = int(math.floor(i * ratio))
        lo[i] = max(0, diag - bw)
        hi[i] = min(nr + 1, diag + bw)
        if i == nh:
            hi[i] = nr + 1
    # operations: 0 match, 1 substitution, 2 reference word inserted, 3 hypothesis word deleted, 4 none
    D = np.empty((nh + 1, nr + 1), np.int64)
    OP = np.empty((nh + 1, nr + 1), np.int8)
    prev = np.empty(nr + 1, np.int64)
    cur = np.empty(nr + 1, np.int64)
    words = h.copy()
    cand = np.empty(nh, np.int64)
    best_words = np.empty(nh, np.int64)
    align = np.empty(nr, np.int64)
    ref_err = np.zeros(nr, np.int64)
    hyp_err = np.zeros(nh, np.int64)
    trace = np.empty(nh + nr, np.int8)
    shifts = 0
    checked = 0
    while True:
        # band edit distance of the current words, keeping the operations for the alignment
        for j in range(nr + 1):
            D[0, j] = j
            OP[0, j] = 2
        for i in range(1, nh + 1):
            for j in range(nr + 1):
                D[i, j] = INF
                OP[i, j] = 4
            wi = words[i - 1]
            for j in range(lo[i], hi[i]):
                if j == 0:
                    D[i, 0] = D[i - 1, 0] + 1
                    OP[i, 0] = 3
                    continue
                val = INF
                op = 4
                c = D[i - 1, j - 1] + (0 if wi == r[j - 1] else 1)
                if val > c:
                    val = c
                    op = 0 if wi == r[j - 1] else 1
                c = D[i - 1, j] + 1
                if val > c:
                    val = c
                    op = 3
                c = D[i, j - 1] + 1
                if val > c:
                    val = c
                    op = 2
                D[i, j] = val
                OP[i, j] = op
        pre = D[nh, nr]
        # alignment: reference position -> hypothesis position, and which words are in error
        n_ops = 0
        i = nh
        j = nr
        while i > 0 or j > 0:
            op = OP[i, j]
            trace[n_ops] = op
            n_ops += 1
            if op == 0 or op == 1:
                i -= 1
                j -= 1
            elif op == 2:
                j -= 1
            elif op == 3:
                i -= 1
            else:
                raise ValueError("TER: broken edit trace")
        pos_h = -1
        pos_r = -1
        for k in range(n_ops - 1, -1, -1):
            op = trace[k]
            if op == 0 or op == 1:
                pos_h += 1
                pos_r += 1
                align[pos_r] = pos_h
                hyp_err[pos_h] = op
                ref_err[pos_r] = op
            elif op == 3:
                pos_h += 1
                hyp_err[pos_h] = 1
            else:
                pos_r += 1
                align[pos_r] = pos_h
                ref_err[pos_r] = 1
        # evaluate the shift candidates, keep the best
        found = False
        b_delta = 0
        b_len = 0
        b_sh = 0
        b_idx = 0
        stop = False
        for sh in range(nh):
            if stop:
                break
            for sr in range(nr):
                if stop:
                    break
                if abs(sr - sh) > max_shift_dist:
                    continue
                length = 0
                while words[sh + length] == r[sr + length] and length < max_shift_size:
                    length += 1
                    ok = False
                    for k in range(sh, sh + length):
                        if hyp_err[k] != 0:
                            ok = True
                            break
                    if ok:
                        ok = False
                        for k in range(sr, sr + length):
                            if ref_err[k] != 0:
                                ok = True
                                break
                    if ok and sh <= align[sr] < sh + length:
                        ok = False
                    if ok:
                        prev_idx = -1
                        for offset in range(-1, length):
                            idx = 0 if sr + offset == -1 else align[sr + offset] + 1
                            if idx == prev_idx:
                                continue
                            prev_idx = idx
                            # move words[sh:sh+length] to position idx
                            n = 0
                            if idx < sh:
                                for k in range(0, idx):
                                    cand[n] = words[k]
                                    n += 1
                                for k in range(sh, sh + length):
                                    cand[n] = words[k]
                                    n += 1
                                for k in range(idx, sh):
                                    cand[n] = words[k]
                                    n += 1
                                for k in range(sh + length, nh):
                                    cand[n] = words[k]
                                    n += 1
                            else:
                                m = min(idx, nh) if idx > sh + length else min(length + idx, nh)
                                for k in range(0, sh):
                                    cand[n] = words[k]
                                    n += 1
                                for k in range(sh + length, m):
                                    cand[n] = words[k]
                                    n += 1
                                for k in range(sh, sh + length):
                                    cand[n] = words[k]
                                    n += 1
                                for k in range(m, nh):
                                    cand[n] = words[k]
                                    n += 1
                            # rows 0..p of the matrix depend only on the unchanged prefix
                            p = min(sh, idx)
                            for jj in range(nr + 1):
                                prev[jj] = D[p, jj]
                            for ii in range(p + 1, nh + 1):
                                wi = cand[ii - 1]
                                first = lo[ii]
                                if first == 0:
                                    cur[0] = prev[0] + 1
                                    first = 1
                                else:
                                    cur[first - 1] = INF
                                for jj in range(first, hi[ii]):
                                    val = prev[jj - 1] + (0 if wi == r[jj - 1] else 1)
                                    c = prev[jj] + 1
                                    if c < val:
                                        val = c
                                    c = cur[jj - 1] + 1
                                    if c < val:
                                        val = c
                                    cur[jj] = val
                                # the next row reads this one up to its own band end; beyond ours is INF
                                end = hi[ii + 1] if ii < nh else hi[ii]
                                for jj in range(hi[ii], end):
                                    cur[jj] = INF
                                for jj in range(max(lo[ii] - 1, 0), end):
                                    prev[jj] = cur[jj]
                            delta = pre - prev[nr]
                            checked += 1
                            if not found:
                                better = True
                            elif delta != b_delta:
                                better = delta > b_delta
                            elif length != b_len:
                                better = length > b_len
                            elif sh != b_sh:
                                better = sh < b_sh
                            else:
                                better = idx < b_idx
                            if better:
                                found = True
                                b_delta = delta
                                b_len = length
                                b_sh = sh
                                b_idx = idx
                                best_words[:] = cand
                        if checked >= max_candidates:
                            stop = True
                            break
                    if nh == sh + length or nr == sr + length:
                        break
        if checked >= max_candidates or not found or b_delta <= 0:
            break
        shifts += 1
        words[:] = best_words
    # `pre` is the edit distance of the final words (computed at the top of the last round)
    return shifts + pre


_KERNEL: list = []  # the compiled TER kernel, once built (None when numba is missing)


def _ter_kernel():
    """The numba-compiled TER kernel, or None when numba is not installed.

    Compiling takes a few seconds once; numba caches the machine code on disk when it can.
    """
    if not _KERNEL:
        try:
            import numba
        except ImportError:
            _KERNEL.append(None)
        else:
            try:
                kernel = numba.njit(cache=True, nogil=True)(_ter_edits_kernel)
                kernel(np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 1, 1, 1)
            except Exception:  # no writable cache location: compile in memory
                kernel = numba.njit(cache=False, nogil=True)(_ter_edits_kernel)
            _KERNEL.append(kernel)
    return _KERNEL[0]


@register
class TER(Metric):
    """Translation Edit Rate (Snover et al., 2006), numbers as sacrebleu's ``TER``, 0-100+.

    Minimum number of edits (insertions, deletions, substitutions and block shifts) over the
    references, divided by the average reference length.  sacrebleu's pure-Python shift
    search costs ~0.1 s per pair on 60-word texts (over half an hour for summeval's 1,600
    rows x 11 references), so when numba is installed the same search runs compiled
    (identical numbers, tested).  References are visited in order of a lower bound on their
    edit count (max(length) - bag-of-words overlap); a reference whose bound cannot beat the
    best so far is skipped, which never changes the minimum.
    """

    name = "TER"
    needs_reference = True
    higher_is_better = False
    description = (
        "TER (sacrebleu, 0-100+): edits incl. block shifts to turn output into the closest reference / avg ref length."
    )
    signature_keys: ClassVar[dict[str, str]] = {"case_sensitive": "case", "normalized": "norm", "no_punct": "nopunct"}

    def __init__(self, *, case_sensitive: bool = False, normalized: bool = False, no_punct: bool = False):
        super().__init__(case_sensitive=case_sensitive, normalized=normalized, no_punct=no_punct)

    def _ter(self):
        return sacrebleu_metrics().TER(
            case_sensitive=self.params["case_sensitive"],
            normalized=self.params["normalized"],
            no_punct=self.params["no_punct"],
        )

    def check_available(self) -> None:
        self._ter()

    def _compute(self, outputs, inputs, references) -> np.ndarray:
        ter = self._ter()
        kernel = _ter_kernel()
        if kernel is None:
            if len(outputs) * max(len(r) for r in references) > 2000:
                log.warning("TER without numba runs sacrebleu's pure-Python search (slow); %s", install_hint("numba"))
            from sacrebleu.metrics.lib_ter import translation_edit_rate

            def edits(h: list[str], r: list[str]) -> int:
                return translation_edit_rate(h, r)[0]

        else:

            def edits(h: list[str], r: list[str]) -> int:
                vocab: dict[str, int] = {}
                hc = np.fromiter((vocab.setdefault(w, len(vocab)) for w in h), np.int64, len(h))
                rc = np.fromiter((vocab.setdefault(w, len(vocab)) for w in r), np.int64, len(r))
                return int(
                    kernel(hc, rc, _TER_MAX_SHIFT_SIZE, _TER_MAX_SHIFT_DIST, _TER_BEAM_WIDTH, _TER_MAX_CANDIDATES)
                )

        def words(text: str) -> tuple[list[str], Counter]:
            w = ter.tokenizer(text.rstrip()).split()
            return w, Counter(w)

        ref_words = NgramCache(words)

        def row(i: int) -> float:
            h, h_bag = words(outputs[i])
            refs = [ref_words[r] for r in references[i]]
            avg_len = sum(len(w) for w, _ in refs) / len(refs)
            bounds = sorted((max(len(h), len(w)) - clipped_overlap(h_bag, bag), k) for k, (w, bag) in enumerate(refs))
            best = None
            for bound, k in bounds:
                if best is not None and bound >= best:
                    break
                e = edits(h, refs[k][0])
                if best is None or e < best:
                    best = e
            if avg_len > 0:
                return 100.0 * best / avg_len
            return 100.0 if best > 0 else 0.0

        for refs in references:  # fill the reference cache before going parallel
            for r in refs:
                ref_words[r]
        n_jobs = min(len(outputs), os.cpu_count() or 1) if kernel is not None else 1
        if n_jobs > 1:
            with ThreadPoolExecutor(max_workers=n_jobs) as pool:
                return np.fromiter(pool.map(row, range(len(outputs))), dtype=float, count=len(outputs))
        return np.array([row(i) for i in range(len(outputs))], dtype=float)
