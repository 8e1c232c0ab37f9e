"""Redis Cluster safety of the key layout: every call of every Lua script of juiz.store names keys
of ONE hash slot, except the scripts juiz.store.keys lists in CROSS_SLOT_SCRIPTS, and no RQ key (RQ's keys are RQ's,
read and written through its API). Checked on the keys of real calls against a real Redis (a batch submitted, graded
by a real worker, labelled, a chunk given back, a batch cancelled), not by reading the scripts' source. The keys a
script builds itself are checked in tests/integration/test_fair_share.py."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from redis.commands.core import Script
from redis.crc import key_slot

from juiz.runtime.settings import Settings
from juiz.store import ChunkRef, Store, keys
from juiz.store.keys import CROSS_SLOT_SCRIPTS
from schemas import BatchOptions, Triple
from tests.integration.helpers import make_settings, triples

Calls = dict[str, list[list[str]]]


def script_names(store: Store) -> dict[str, str]:
    """Every script the store registers (its nouns' Script attributes), by its Lua source: name without the `_`."""
    return {
        value.script: name.lstrip("_")
        for noun in vars(store).values()
        if hasattr(noun, "__dict__")  # a noun, not a value (a store without the asyncio client has no reads)
        for name, value in vars(noun).items()
        if isinstance(value, Script)
    }


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[list[str]]]]:
    """The keys of every script call made in the test, by the script's Lua source."""
    seen: dict[str, list[list[str]]] = defaultdict(list)
    call = Script.__call__

    def recording(self: Script, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        seen[str(self.script)].append([k.decode() if isinstance(k, bytes) else str(k) for k in keys or []])
        return call(self, keys=keys, args=args, client=client)

    monkeypatch.setattr(Script, "__call__", recording)
    yield seen


def slots(key_names: list[str]) -> set[int]:
    return {key_slot(k.encode()) for k in key_names}


def test_every_script_but_the_listed_ones_keeps_to_one_slot(
    redis: Redis, redis_url: str, run_worker: Any, calls: dict[str, list[list[str]]]
) -> None:
    settings: Settings = make_settings(redis_url, chunk_size=4, coalesce_max_items=8, gather_s=0)
    store = Store(redis, settings)
    names = script_names(store)
    as_triples = [Triple.model_validate(t) for t in triples(12)]
    graded, _ = store.create_batch("t1", BatchOptions(), as_triples)
    other, _ = store.create_batch("t2", BatchOptions(), as_triples[:8])
    # a job that took a chunk and gave it back (what a failed call or the sweeper does)
    assert store.claim(settings.queue, "a-job", "rq:worker:w", own=ChunkRef(graded.id, 1), budget=0) is not None
    assert store.release(settings.queue, "a-job", [ChunkRef(graded.id, 1)]) == [ChunkRef(graded.id, 1)]
    # a job looking for small batches to grade ahead of its own (none is small enough for a budget of 0)
    assert store.chunks.take_small(settings.queue, "a-job", since=0, until=time.time(), budget=0) == []
    run_worker(settings)  # claims with coalescing across both batches, stores, finishes
    assert (store.get_batch(graded.id) or graded).status.value == "done"
    store.set_manual_label(graded.id, 0, "PC", "reader", 1.0)
    assert store.annotations.take_lease(graded.id, 0, "reader", 1, 60.0, 1.0)  # the label queue's lease on an item
    assert len(store.results_uncertain_first(graded.id, 0, 5)) == 5
    assert store.annotations.create_set("t1", "dev", 1.0)  # a named labelled set, and its triples
    assert store.annotations.add_to_set("t1", "dev", [(t.content_key(), t) for t in as_triples[:2]], 2.0) == 2
    assert store.annotations.update_set("t1", "dev", 3.0, rubric="C: right.")
    cancelled, _ = store.create_batch("t1", BatchOptions(), as_triples[:4])
    store.mark_running(cancelled.id)
    store.cancel_batch(cancelled)

    by_name = {names[source]: made for source, made in calls.items() if source in names}
    assert set(by_name) == set(names.values()), f"scripts never called: {set(names.values()) - set(by_name)}"
    named = [(name, k) for name, made in by_name.items() for keys_of_call in made for k in keys_of_call]
    assert [(name, k) for name, k in named if k.startswith("rq:")] == []  # no script is given an RQ key
    multi_slot = {name for name, made in by_name.items() if any(len(slots(k)) > 1 for k in made)}
    assert multi_slot == CROSS_SLOT_SCRIPTS
    assert any(k[:1] == [keys.batch_key(other.id)] for made in by_name.values() for k in made)  # both batches seen


def test_a_batch_and_a_queue_each_have_one_slot() -> None:
    batch = "0123456789abcdef0123456789abcdef"
    batch_keys = [keys.batch_key(batch), *(keys.batch_key(batch, p) for p in ("items", "results", "owner", "events"))]
    assert len(slots(batch_keys)) == 1
    queue_keys = [
        keys.pending_key("q"),
        keys.pending_tenants_key("q"),
        keys.pending_batches_key("q", "tenant{x}"),
        keys.queue_events_key("q"),
        keys.last_batch_key("q"),
    ]
    assert len(slots(queue_keys)) == 1
    assert slots(batch_keys) != slots([keys.batch_key("another")])  # batches spread over the cluster
