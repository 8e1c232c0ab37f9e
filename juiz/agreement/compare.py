"""Compare two runs over the items they share by id (a new prompt, judge model or retriever against the old one).

The manual labels are the reference for both: batch a's label of an item, else batch b's. Each run's agreement is
computed on the same shared items, so the two figures (and their bootstrap intervals) are comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from juiz.agreement.labels import label_for
from juiz.agreement.statistics import compute_agreement
from schemas.compare import ComparedItem, CompareReport
from schemas.judgement import Judgement
from schemas.labels import LabelMapping

DELTAS = tuple(range(-3, 4))


def first_by_id(judgements: Sequence[tuple[int, Judgement]]) -> dict[str, tuple[int, Judgement]]:
    """(input index, judgement) per id; a repeated id keeps its first item."""
    out: dict[str, tuple[int, Judgement]] = {}
    for index, judgement in judgements:
        out.setdefault(judgement.id, (index, judgement))
    return out


def compare_runs(
    a_id: str,
    a: Sequence[tuple[int, Judgement]],
    b_id: str,
    b: Sequence[tuple[int, Judgement]],
    mapping: LabelMapping,
    *,
    resamples: int,
    judge_label: Callable[[Judgement], str | None] | None = None,
) -> CompareReport:
    """`a` and `b` are (input index, judgement) pairs; `mapping` (batch a's) names the classes of both.
    `judge_label` reads a result's judge class (default: from its grades; the web page passes the one it indexed)."""
    label = judge_label or (lambda j: label_for(j, mapping))
    by_a, by_b = first_by_id(a), first_by_id(b)
    shared = [i for i in by_a if i in by_b]
    items: list[ComparedItem] = []
    left: list[Judgement] = []
    right: list[Judgement] = []
    deltas = {str(d): 0 for d in DELTAS} | {"missing": 0}
    for item_id in shared:
        (index_a, ja), (index_b, jb) = by_a[item_id], by_b[item_id]
        manual = ja.manual_label if ja.manual_label is not None else jb.manual_label
        left.append(ja.model_copy(update={"manual_label": manual}))
        right.append(jb.model_copy(update={"manual_label": manual}))
        delta = None if ja.score is None or jb.score is None else jb.score - ja.score
        deltas["missing" if delta is None else str(delta)] += 1
        items.append(
            ComparedItem(
                id=item_id,
                index_a=index_a,
                index_b=index_b,
                manual_label=manual,
                score_a=ja.score,
                score_b=jb.score,
                delta=delta,
                label_a=label(ja),
                label_b=label(jb),
            )
        )
    return CompareReport(
        a=a_id,
        b=b_id,
        shared=len(shared),
        only_a=len(by_a) - len(shared),
        only_b=len(by_b) - len(shared),
        agreement_a=compute_agreement(left, mapping, resamples=resamples),
        agreement_b=compute_agreement(right, mapping, resamples=resamples),
        score_deltas=deltas,
        changed=[i for i in items if i.label_a != i.label_b],
    )
