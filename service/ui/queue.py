"""The annotation queue: one reader walks a batch's items most worth a label, one at a time.

Order: the unlabelled items the judge was least sure of first (the result's own uncertainty when it has one, else
how far its expected score sits from its score), then the labelled items where judge and label disagree, widest
first; or, started from a filtered table, that table's filter and order. The queue is fixed when it starts (so a
label doesn't reshuffle what comes next) and kept per session in Redis: its items, where the reader is, and what each
step changed, so U (undo) can put the previous label back.

A team labels at once: each queue labels as its reader (the annotator), and an item is served only while its reader
holds its lease (`Store.annotations.take_lease`: at most k readers at once, k = annotators wanted per item, 1 by
default). A held item goes to the end of the queue; an item k others labelled already is dropped; the lease ends on a
label or a skip, or after LEASE_S.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from juiz.agreement.annotations import item_annotations, latest_by_annotator
from juiz.store import Store
from schemas.labels import LabelMapping
from schemas.triple import Label
from service.rows import BatchIndex, Query, default_metric, page_of, view_rows

QUEUE_TTL_S = 8 * 3600
LEASE_S = 600  # how long a reader holds an item they opened and left
MAX_K = 10
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
    annotator: str = ""  # who labels through this queue
    k: int = 1  # annotators wanted per item

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


def start(
    store: Store, session_id: str, batch_id: str, items: list[int], annotator: str = "", k: int = 1
) -> LabelQueue:
    queue = LabelQueue(secrets.token_urlsafe(9), batch_id, items, annotator=annotator, k=min(max(k, 1), MAX_K))
    save(store, session_id, queue)
    return queue


def save(store: Store, session_id: str, queue: LabelQueue) -> None:
    store.pages.save_queue(session_id, queue.id, json.dumps(asdict(queue)), QUEUE_TTL_S)


def load(store: Store, session_id: str, batch_id: str, queue_id: str) -> LabelQueue | None:
    raw = store.pages.load_queue(session_id, queue_id)
    if raw is None:
        return None
    data = json.loads(raw)
    queue = LabelQueue(
        data["id"], data["batch_id"], data["items"], data["at"], [Step(**s) for s in data["steps"]],
        data.get("annotator", ""), int(data.get("k", 1)),
    )  # fmt: skip
    return queue if queue.batch_id == batch_id else None


def serve(store: Store, index: BatchIndex, queue: LabelQueue) -> tuple[int | None, int]:
    """The item the queue's reader labels now, its lease taken (moving `queue.at`'s items as the module says), and
    how many items others hold that are left. Save the queue after."""
    now, moved = time.time(), set[int]()
    me = queue.annotator or "manual"
    while queue.at < len(queue.items):
        item = queue.items[queue.at]
        row = index.by_index.get(item)
        judgement = None if row is None else store.results_at(queue.batch_id, [row.position])[0]
        if judgement is None:
            queue.items.pop(queue.at)
            continue
        latest = latest_by_annotator(item_annotations(judgement), None)
        if me not in latest and len(latest) >= queue.k:  # done by others
            queue.items.pop(queue.at)
            continue
        if store.annotations.take_lease(queue.batch_id, item, me, queue.k, LEASE_S, now):
            return item, len(moved)
        if item in moved:  # round the rest once: everything left is held by others now
            return None, len(queue.items) - queue.at
        moved.add(item)
        queue.items.append(queue.items.pop(queue.at))
    return None, 0


def release(store: Store, queue: LabelQueue, item: int) -> None:
    """The reader is done with the item (labelled or skipped): others may take it."""
    store.annotations.release_lease(queue.batch_id, item, queue.annotator or "manual")


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
