"""The annotation queue: one reader walks a batch's items most worth a label, one at a time.

Order: the unlabelled items the judge was least sure of first (the result's own uncertainty when it has one, else
how far its expected score sits from its score), then the labelled items where judge and label disagree, widest
first; or, started from a filtered table, that table's filter and order. The queue is fixed when it starts (so a
label doesn't reshuffle what comes next) and kept per session in Redis: its items, where the reader is, and what each
step changed, so U (undo) can put the previous label back.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

from juiz.store import Store
from schemas.labels import LabelMapping
from schemas.triple import Label
from service.rows import BatchIndex, Query, default_metric, page_of, view_rows

QUEUE_TTL_S = 8 * 3600
DEFAULT_SIZE = 40
RESERVED_KEYS = {"u", "s"}  # undo, skip


@dataclass
class Step:
    index: int  # the item's input index
    kind: str  # "label" or "skip"
    previous: Label | None = None  # the label before this step (undo puts it back)


@dataclass
class LabelQueue:
    id: str
    batch_id: str
    items: list[int]
    at: int = 0
    steps: list[Step] = field(default_factory=list)

    @property
    def current(self) -> int | None:
        return self.items[self.at] if self.at < len(self.items) else None


def worth_a_label(index: BatchIndex, size: int) -> list[int]:
    """Unlabelled items, most uncertain first; then labelled disagreements, widest (then most uncertain) first."""
    views = view_rows(index, default_metric(index.mapping))

    def uncertainty(v: Any) -> float:
        return -1.0 if v.uncertainty is None else v.uncertainty

    unlabelled = sorted((v for v in views if v.row.manual_label is None), key=lambda v: (-uncertainty(v), v.row.index))
    disagreeing = sorted(
        (v for v in views if v.disagreement), key=lambda v: (-(v.disagreement or 0), -uncertainty(v), v.row.index)
    )
    return [v.row.index for v in [*unlabelled, *disagreeing][:size]]


def in_table_order(index: BatchIndex, query: Query, size: int) -> list[int]:
    """The filtered table's rows, in its order."""
    return [v.row.index for v in page_of(index, query, 1, max(size, 1)).rows]


def start(store: Store, session_id: str, batch_id: str, items: list[int]) -> LabelQueue:
    queue = LabelQueue(secrets.token_urlsafe(9), batch_id, items)
    save(store, session_id, queue)
    return queue


def save(store: Store, session_id: str, queue: LabelQueue) -> None:
    store.pages.save_queue(session_id, queue.id, json.dumps(asdict(queue)), QUEUE_TTL_S)


def load(store: Store, session_id: str, batch_id: str, queue_id: str) -> LabelQueue | None:
    raw = store.pages.load_queue(session_id, queue_id)
    if raw is None:
        return None
    data = json.loads(raw)
    queue = LabelQueue(data["id"], data["batch_id"], data["items"], data["at"], [Step(**s) for s in data["steps"]])
    return queue if queue.batch_id == batch_id else None


def keys_for(mapping: LabelMapping) -> list[tuple[str, str]]:
    """(key, class) for the queue's shortcuts: a class's first letter when no other class starts with it (C, P, I
    for the default mapping), else its number 1…n; U and S are undo and skip."""
    names = [c.name for c in mapping.classes]
    firsts = [n[:1].lower() for n in names]
    out = []
    for number, (name, first) in enumerate(zip(names, firsts, strict=True), start=1):
        unique = first.isalnum() and firsts.count(first) == 1 and first not in RESERVED_KEYS
        out.append((first if unique else str(number), name))
    return out


def labelled(index: BatchIndex, queue: LabelQueue) -> int:
    """How many of the queue's items have a manual label now (whoever set it)."""
    return sum(1 for i in queue.items if (row := index.by_index.get(i)) is not None and row.manual_label is not None)
