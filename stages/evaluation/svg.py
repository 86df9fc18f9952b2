"""A small line chart written as SVG text (no plotting dependency), for the Markdown report. DVC plots
(``dvc plots show`` / ``diff``) remain the interactive view; these are the figures a report reader sees."""

from __future__ import annotations

import math
from html import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf",
           "#bcbd22", "#000000"]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def line_chart(series: dict[str, list[tuple[float, float]]], *, title: str, xlabel: str, ylabel: str,
               logx: bool = False, bands: dict[str, list[tuple[float, float, float]]] | None = None,
               width: int = 640, height: int = 360) -> str:
    """``series``: name -> [(x, y)]; ``bands``: name -> [(x, low, high)] drawn as error bars."""
    bands = bands or {}
    pts = [p for s in series.values() for p in s] + [(x, v) for b in bands.values() for x, lo, hi in b for v in (lo, hi)]
    if not pts:
        raise ValueError(f"{title}: nothing to plot")
    fx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    xs, ys = [fx(x) for x, _ in pts], [y for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.05 or 1.0
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    left, right, top, bottom = 60, 150, 30, 45
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (fx(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">{escape(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>']
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left - 4}" y1="{py(t):.1f}" x2="{left + pw}" y2="{py(t):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    xticks = sorted({x for x, _ in pts}) if logx else _ticks(x0, x1)
    if not logx and len(xticks) > 8:
        xticks = xticks[:: math.ceil(len(xticks) / 8)]
    for t in xticks:
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 15}" text-anchor="middle">{t:g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">{escape(ylabel)}</text>')
    for i, (name, points) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        points = sorted(points)
        if points:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
            out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in points]
        for x, lo, hi in bands.get(name, []):
            out.append(f'<line x1="{px(x):.1f}" y1="{py(lo):.1f}" x2="{px(x):.1f}" y2="{py(hi):.1f}" '
                       f'stroke="{colour}" stroke-width="1.5"/>')
        ly = top + 12 + 16 * i
        out.append(f'<line x1="{left + pw + 12}" y1="{ly - 4}" x2="{left + pw + 30}" y2="{ly - 4}" stroke="{colour}" '
                   f'stroke-width="2"/><text x="{left + pw + 34}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
