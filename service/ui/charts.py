"""Server-side SVG charts: drawn from the data, no script, no external asset (the page's CSP forbids both).

Every text that reaches the SVG goes through `escape`; colours are presentation attributes (not `style=`), so the
strict style-src of the page holds. Each chart has role="img", an aria-label and a <title> per mark for screen
readers and hover.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

BAR_W, GAP, PLOT_H, PAD_L, PAD_B, PAD_T = 44, 14, 120, 34, 36, 14
CELL = 52


def _svg(width: int, height: int, label: str, body: list[str]) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def bar_chart(bars: Sequence[tuple[str, int]], label: str, highlight: Sequence[str] = ()) -> Markup:
    """Vertical bars with their counts above them and their names below; `highlight` bars drawn in the muted class."""
    top = max((count for _, count in bars), default=0) or 1
    width = PAD_L + len(bars) * (BAR_W + GAP) + GAP
    height = PAD_T + PLOT_H + PAD_B
    body = [
        f'<line class="axis" x1="{PAD_L}" y1="{PAD_T + PLOT_H}" x2="{width - 4}" y2="{PAD_T + PLOT_H}"/>',
        f'<text class="tick" x="{PAD_L - 6}" y="{PAD_T + 4}" text-anchor="end">{top}</text>',
        f'<text class="tick" x="{PAD_L - 6}" y="{PAD_T + PLOT_H}" text-anchor="end">0</text>',
    ]
    for n, (name, count) in enumerate(bars):
        x = PAD_L + GAP + n * (BAR_W + GAP)
        h = round(PLOT_H * count / top)
        y = PAD_T + PLOT_H - h
        kind = "bar muted" if name in highlight else "bar"
        body += [
            f'<rect class="{kind}" x="{x}" y="{y}" width="{BAR_W}" height="{max(h, 0)}">'
            f"<title>{escape(name)}: {count}</title></rect>",
            f'<text class="count" x="{x + BAR_W / 2}" y="{y - 3}" text-anchor="middle">{count}</text>',
            f'<text class="tick" x="{x + BAR_W / 2}" y="{PAD_T + PLOT_H + 16}" text-anchor="middle">'
            f"{escape(name)}</text>",
        ]
    return _svg(width, height, label, body)


def score_histogram(counts: dict[str, int], metric: str) -> Markup:
    """Items per 0–3 score for one metric, then items without a score (parse_error, failed, skipped) if any."""
    bars = [(name, counts[name]) for name in ("0", "1", "2", "3")]
    others = [(name, count) for name, count in counts.items() if name not in {"0", "1", "2", "3"} and count]
    total = sum(counts.values())
    label = f"{metric}: items per score, {total} items: " + ", ".join(f"{n}: {c}" for n, c in bars + others)
    return bar_chart(bars + others, label, highlight=[name for name, _ in others])


def expected_histogram(bins: Sequence[int], metric: str) -> Markup:
    """Items per expected-score bin, for seeing how sure the judge was. Drawn on the scores' own 0–3 scale (the
    result stores it on 0–1), so it reads beside the score histogram."""
    step = 3 / len(bins)
    bars = [(f"{n * step:.1f}", count) for n, count in enumerate(bins)]
    label = f"{metric}: items per expected score (bins of {step:.1f} from 0 to 3)"
    return bar_chart(bars, label)


def heat_map(matrix: Sequence[Sequence[int]], classes: Sequence[str]) -> Markup:
    """Confusion heat map: rows manual class, columns judge class; shade by the share of the row, count in the cell."""
    n = len(classes)
    left, top = 70, 44
    width, height = left + n * CELL + 10, top + n * CELL + 10
    body = [
        f'<text class="axis-title" x="{left + n * CELL / 2}" y="14" text-anchor="middle">judge</text>',
        f'<text class="axis-title" x="12" y="{top + n * CELL / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + n * CELL / 2})">manual</text>',
    ]
    for j, name in enumerate(classes):
        body.append(
            f'<text class="tick" x="{left + j * CELL + CELL / 2}" y="{top - 8}" text-anchor="middle">'
            f"{escape(name)}</text>"
        )
    for i, row in enumerate(matrix):
        body.append(
            f'<text class="tick" x="{left - 8}" y="{top + i * CELL + CELL / 2 + 4}" text-anchor="end">'
            f"{escape(classes[i])}</text>"
        )
        row_total = sum(row) or 1
        for j, count in enumerate(row):
            share = count / row_total
            kind = "cell agree" if i == j else "cell"
            shade = "dark" if share > 0.55 else "light"
            x, y = left + j * CELL, top + i * CELL
            body += [
                f'<rect class="{kind}" x="{x}" y="{y}" width="{CELL - 2}" height="{CELL - 2}" '
                f'fill-opacity="{0.08 + 0.92 * share:.2f}"><title>manual {escape(classes[i])}, judge '
                f"{escape(classes[j])}: {count} ({share:.0%} of the row)</title></rect>",
                f'<text class="cell-count {shade}" x="{x + CELL / 2 - 1}" y="{y + CELL / 2 + 4}" '
                f'text-anchor="middle">{count}</text>',
            ]
    total = sum(sum(r) for r in matrix)
    return _svg(width, height, f"confusion heat map, manual rows by judge columns, {total} items", body)
