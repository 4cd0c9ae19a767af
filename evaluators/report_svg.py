"""The report's figures as inline SVG (the page stays one offline file): the score-versus-label
scatter, and a shape model's per-metric shapes (also drawn on the dashboard)."""

from __future__ import annotations

import numpy as np

__all__ = ["svg_scatter", "svg_shape"]


def svg_scatter(result, width: int = 520, height: int = 380) -> str:
    """Score vs label scatter (test points solid, train points faint) as inline SVG; a cross-fitted
    evaluator shows each row's out-of-fold score only."""
    tr, te = result.train, result.test
    cross = result.evaluator.statistics["test"].get("method") == "cross-fit"
    if cross:
        tr = tr.iloc[:0]
    xs = np.concatenate([tr["label"].to_numpy(), te["label"].to_numpy()])
    ys = np.concatenate([tr["score"].to_numpy(), te["score"].to_numpy()])
    lo = float(min(xs.min(), ys.min()))
    hi = float(max(xs.max(), ys.max()))
    if hi - lo < 1e-9:
        hi = lo + 1
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad
    ml, mr, mt, mb = 52, 16, 16, 44

    def sx(v):
        return ml + (v - lo) / (hi - lo) * (width - ml - mr)

    def sy(v):
        return height - mb - (v - lo) / (hi - lo) * (height - mt - mb)

    parts = [f'<svg role="img" aria-label="evaluator scores versus human labels" width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    parts.append(f'<rect x="{ml}" y="{mt}" width="{width - ml - mr}" height="{height - mt - mb}" fill="#fff" stroke="#c9ced4"/>')
    for t in np.linspace(lo + pad, hi - pad, 5):
        parts.append(f'<line x1="{sx(t):.1f}" y1="{height - mb}" x2="{sx(t):.1f}" y2="{height - mb + 4}" stroke="#888"/>')
        parts.append(f'<text x="{sx(t):.1f}" y="{height - mb + 16}" text-anchor="middle">{t:.3g}</text>')
        parts.append(f'<line x1="{ml - 4}" y1="{sy(t):.1f}" x2="{ml}" y2="{sy(t):.1f}" stroke="#888"/>')
        parts.append(f'<text x="{ml - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:.3g}</text>')
    parts.append(f'<line x1="{sx(lo):.1f}" y1="{sy(lo):.1f}" x2="{sx(hi):.1f}" y2="{sy(hi):.1f}" stroke="#bbb" stroke-dasharray="4 4"/>')
    for x, y in zip(tr["label"], tr["score"], strict=False):
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.6" fill="#9aa5b1" fill-opacity="0.45"/>')
    for x, y in zip(te["label"], te["score"], strict=False):
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.2" fill="#3b7dd8" fill-opacity="0.8"/>')
    parts.append(f'<text x="{(ml + width - mr) / 2:.0f}" y="{height - 8}" text-anchor="middle">human label</text>')
    parts.append(f'<text x="14" y="{(mt + height - mb) / 2:.0f}" text-anchor="middle" transform="rotate(-90 14 {(mt + height - mb) / 2:.0f})">evaluator score</text>')
    parts.append(f'<circle cx="{ml + 12}" cy="{mt + 12}" r="3.2" fill="#3b7dd8"/><text x="{ml + 20}" y="{mt + 16}">'
                 f'{"out-of-fold" if cross else "test"}</text>')
    if not cross:
        parts.append(f'<circle cx="{ml + 56}" cy="{mt + 12}" r="2.6" fill="#9aa5b1"/><text x="{ml + 64}" y="{mt + 16}">train</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_shape(feature: str, shape: dict, width: int = 300, height: int = 150) -> str:
    """One metric's shape as a step curve: its contribution to the score (y) over the metric's
    value (x, bins placed by rank so crowded cuts stay visible; the axis labels give the values)."""
    from html import escape

    cuts = np.asarray(shape["cuts"], dtype=float)
    scores = np.asarray(shape["scores"], dtype=float)[1:len(cuts) + 2]  # the bins between the cuts
    if len(scores) == 0:
        return ""
    lo, hi = float(min(scores.min(), 0.0)), float(max(scores.max(), 0.0))
    if hi - lo < 1e-12:
        hi = lo + 1.0
    ml, mr, mt, mb = 44, 22, 18, 30
    n = len(scores)

    def sx(i):
        return ml + i / n * (width - ml - mr)

    def sy(v):
        return height - mb - (v - lo) / (hi - lo) * (height - mt - mb)

    name = escape(feature)
    parts = [f'<svg role="img" aria-label="shape of {name}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             'xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{ml}" y="12">{name}</text>',
             f'<rect x="{ml}" y="{mt}" width="{width - ml - mr}" height="{height - mt - mb}" fill="#fff" stroke="#c9ced4"/>',
             f'<line x1="{ml}" y1="{sy(0):.1f}" x2="{width - mr}" y2="{sy(0):.1f}" stroke="#bbb" stroke-dasharray="3 3"/>']
    path = []
    for i, v in enumerate(scores):
        path.append(f"{'M' if i == 0 else 'L'}{sx(i):.1f},{sy(v):.1f} L{sx(i + 1):.1f},{sy(v):.1f}")
    parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="#3b7dd8" stroke-width="2"/>')
    for v in (lo, hi):
        parts.append(f'<text x="{ml - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:+.2g}</text>')
    if len(cuts):
        for k in sorted({0, len(cuts) // 2, len(cuts) - 1}):
            parts.append(f'<text x="{sx(k + 1):.1f}" y="{height - mb + 14}" text-anchor="middle">{cuts[k]:.3g}</text>')
    parts.append("</svg>")
    return "".join(parts)
