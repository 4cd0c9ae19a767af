"""CharCut: parity with the ``charcut`` package, multi-reference rule, caps, edge cases."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from autometrics.metricbank import get_metric, load_card, missing_card_sections
from autometrics.metricbank.charcut_metric import charcut_cost

charcut = pytest.importorskip("charcut")
from charcut import charcut as cc  # noqa: E402

SUMMEVAL = Path("/work/shared/datasets/summeval.csv")


def package_score(cand: str, ref: str, **kw) -> float:
    """The package's own public entry point (writes temp files, one segment)."""
    return charcut.calculate_charcut(cand, ref, **kw)[0]


def ours(cand: str, refs, **params) -> float:
    return float(get_metric("CharCut", **params).score([cand], references=[refs])[0])


@pytest.mark.parametrize(
    "cand, ref",
    [
        ("the cat sat on the mat", "the cat sat on the mat"),
        ("the cat sat", "the cat sat on the mat"),
        ("the cat sat", "a cat sat"),
        ("The quick brown fox jumps over the lazy dog.", "A quick brown dog jumps over the lazy fox!"),
        (
            "Paul Merson has restarted his row with Andros Townsend.",
            "Andros Townsend restarted the row with Paul Merson.",
        ),
        ("completely unrelated", "nothing in common here"),
        ("  padded text  ", "padded text"),
    ],
)
def test_parity_with_calculate_charcut(cand, ref):
    assert ours(cand, [ref]) == pytest.approx(package_score(cand, ref), abs=1e-12)
    cost, div = charcut_cost(cand, ref, alt_norm=True)
    assert cost / div == pytest.approx(package_score(cand, ref, alt_norm=True), abs=1e-12)


def test_hand_values():
    assert ours("the cat sat on the mat", ["the cat sat on the mat"]) == 0.0
    # "the cat sat" vs "the cat sat on the mat": 11 chars of the reference unmatched, 11+22 total
    assert ours("the cat sat", ["the cat sat on the mat"]) == pytest.approx(11 / 33)
    assert ours("", ["the cat"]) == 1.0  # nothing produced: every reference character deleted


def _pairs():
    rng = random.Random(0)
    pairs = [("", "abc"), ("abc", ""), ("a", "a"), ("ab, cd", "cd, ab"), ("!!", "!!"), ("é café", "cafés é")]
    for _ in range(150):
        a = "".join(rng.choice("ab c,.") for _ in range(rng.randint(0, 25)))
        b = "".join(rng.choice("ab c,.") for _ in range(rng.randint(0, 25)))
        pairs.append((a, b))
    if SUMMEVAL.exists():
        import pandas as pd

        df = pd.read_csv(SUMMEVAL).sample(25, random_state=11)
        for out, refs in zip(df.output, df.references, strict=True):
            pairs.extend((out, r) for r in json.loads(refs)[:2])
    return pairs


def test_parity_with_package_segment_comparison():
    """Our faster match search and greedy loop give the package's exact costs."""
    for cand, ref in _pairs():
        c, r = cand.strip(), ref.strip()
        for m in (1, 3, 5) if len(c) < 30 else (3,):
            expected = cc.score_pair(c, r, *cc.compare_segments(c, r, m), False)
            assert charcut_cost(cand, ref, match_size=m) == expected, (cand[:40], ref[:40], m)


def test_multi_reference_takes_the_lowest_cost():
    refs = ["a dog barked loudly at night", "the cat sat on a mat", "the cat sat on the mat"]
    per_ref = [package_score("the cat sat on the mat", r) for r in refs]
    assert ours("the cat sat on the mat", refs, max_refs="all") == pytest.approx(min(per_ref))
    # default: only the reference closest by character trigrams is scored (here the same one)
    assert ours("the cat sat on the mat", refs) == pytest.approx(min(per_ref))
    # max_refs=1 can only be >= the exact minimum
    out = "the dog sat on the mat at night"
    assert ours(out, refs) >= ours(out, refs, max_refs="all") - 1e-12


def test_length_cap():
    out, ref = "word " * 300, "a sword " * 200
    capped = get_metric("CharCut", max_chars=50)
    expected = package_score(out[:50].strip(), ref[:50].strip())
    assert capped.score([out], references=[[ref]])[0] == pytest.approx(expected, abs=1e-12)
    assert expected > 0


def test_missing_reference_gives_nan_and_signature():
    m = get_metric("CharCut")
    s = m.score(["a b c", "x"], references=[["a b c"], []])
    assert s[0] == 0.0 and np.isnan(s[1])
    assert m.signature() == "CharCut|altnorm:no|m:3|chars:1000|refs:1|v:1"
    assert get_metric("CharCut", max_refs=None).signature() == get_metric("CharCut", max_refs="all").signature()
    assert not m.higher_is_better
    with pytest.raises(ValueError):
        get_metric("CharCut", max_refs=0)


def test_card_complete():
    assert missing_card_sections(load_card("CharCut")) == []
