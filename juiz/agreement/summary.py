"""The short summary printed after a scoring run: one line per item, counts, speed and agreement."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from juiz.agreement.statistics import compute_agreement, format_agreement
from schemas import Judgement, LabelMapping


def summarize(judgements: Sequence[Judgement], mapping: LabelMapping, elapsed_s: float, max_rows: int = 50) -> str:
    lines = [f"{'id':20} {'status':11} {'score':>5} {'norm':>5} {'E[s]':>5} {'auto':>4} {'manual':>6}"]
    for j in judgements[:max_rows]:
        lines.append(
            f"{j.id[:20]:20} {j.status.value:11} {_fmt(j.score, 'd'):>5} {_fmt(j.normalized_score, '.2f'):>5} "
            f"{_fmt(j.expected_score, '.2f'):>5} {j.automated_label or '-':>4} {_fmt(j.manual_label, ''):>6}"
        )
    if len(judgements) > max_rows:
        lines.append(f"… {len(judgements) - max_rows} more in the results file")
    counts = Counter(j.status.value for j in judgements)
    rate = len(judgements) / elapsed_s if elapsed_s > 0 else 0.0
    lines.append("")
    lines.append(
        f"{len(judgements)} graded in {elapsed_s:.1f}s ({rate:.2f} judgements/s): "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "parse_error", "failed"))
    )
    if any(j.manual_label is not None for j in judgements):
        lines.append("")
        lines.append(format_agreement(compute_agreement(judgements, mapping)))
    return "\n".join(lines)


def _fmt(value: object, spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)
