"""Progress within an engine call: a real RQ worker on the FAKE engine writes each chunk's conversations done /
planned while it grades, and the API shows them (the batch's view, its Server-Sent Events) before the first item is
done. Real Redis; the engine holds its call on an event, never on a sleep."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from bench.fake_worker import fake_reply
from juiz.engines.base import CallControl, Conversation
from juiz.engines.fake import FakeEngine
from juiz.runtime.settings import Settings
from juiz.store import ChunkProgress, Store
from schemas import BatchOptions, Triple
from service.progress import START
from tests.integration.helpers import make_settings, triples

HELD_AFTER = 5  # conversations the engine finishes before it waits for the test


def events_of(body: str) -> list[dict[str, Any]]:
    """The data of each `event: progress` in a Server-Sent Events body."""
    out = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = block.splitlines()
        if "event: progress" in lines:
            out.append(json.loads("".join(line.removeprefix("data: ") for line in lines if line.startswith("data: "))))
    return out


def watch_until(
    client: TestClient[Litestar],
    redis: Redis,
    batch_id: str,
    release: threading.Event,
    seen: list[dict[str, Any]],
    shows: Callable[[dict[str, Any]], bool],
) -> threading.Thread:
    """A thread that blocks on the batch's events stream and, at each event, reads the API's view into `seen` until
    one `shows` what the test waits for; then (or when the stream goes quiet) it sets `release` for the engine."""

    def watch() -> None:
        cursor = START
        try:
            while not release.is_set():
                reply: Any = redis.xread({Store.batch_key(batch_id, "events"): cursor}, block=60_000)
                if not reply:
                    return
                cursor = reply[0][1][-1][0]
                view = client.get(f"/v1/batches/{batch_id}").json()
                seen.append(view)
                if shows(view):
                    return
        finally:
            release.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    return watcher


def test_the_api_shows_conversations_moving_before_the_first_item_is_done(
    client: TestClient[Litestar], redis: Redis, redis_url: str, run_worker: Any
) -> None:
    settings = make_settings(redis_url, progress_interval_s=0.05)
    created = client.post("/v1/batches", json={"items": triples(2)}).json()  # the default, check-based prompts
    batch_id = created["id"]
    release = threading.Event()
    finished = 0
    seen: list[dict[str, Any]] = []

    def reply(conversation: Conversation) -> str:
        nonlocal finished
        finished += 1
        if finished == HELD_AFTER + 1:
            assert release.wait(60), "the API never showed the call's progress"
        return fake_reply(conversation)

    watcher = watch_until(client, redis, batch_id, release, seen, lambda view: view["conversations_done"] == HELD_AFTER)
    assert run_worker(settings, worker_engine=FakeEngine(reply))
    watcher.join()
    held = seen[-1]
    assert held["conversations_done"] == HELD_AFTER
    assert held["conversations_planned"] > HELD_AFTER
    assert (held["items_done"], held["counts"]["done"]) == (0, 0)  # no item done yet: the conversations moved
    assert held["status"] == "running" and held["eta_s"] is not None
    assert held["tokens_written"] >= HELD_AFTER and held["tokens_read"] > 0  # every reply is a token or more
    final = client.get(f"/v1/batches/{batch_id}").json()
    assert final["status"] == "done" and final["items_done"] == 2 and final["planning_complete"]
    assert final["conversations_done"] == final["conversations_planned"] == finished
    # The batch is over: its event stream sends its view once and ends.
    (event,) = events_of(client.get(f"/v1/batches/{batch_id}/events").text)
    assert event["batch"]["conversations_done"] == finished and event["batch"]["status"] == "done"


def test_progress_fields_sum_the_chunks_in_flight_and_those_stored(
    client: TestClient[Litestar], redis: Redis, settings: Settings
) -> None:
    store = Store(redis, settings)
    items = [Triple.model_validate(t) for t in triples(10)]  # chunks of 4: three chunks
    batch, _ = store.create_batch("public", BatchOptions(), items)
    store.mark_running(batch.id)
    in_flight = {0: ChunkProgress(56, 56, 4, 4, False, 900, 20_000), 1: ChunkProgress(30, 7, 1, 4, True, 100, 5_000)}
    store.write_progress({batch.id: in_flight})
    store.fold_progress({batch.id: [0]})
    store.fold_progress({batch.id: [0]})  # a fold retried after a lost reply adds nothing twice
    view = client.get(f"/v1/batches/{batch.id}").json()
    assert (view["conversations_done"], view["conversations_planned"], view["planning_complete"]) == (63, 86, False)
    assert (view["tokens_written"], view["tokens_read"]) == (1_000, 25_000)
    # A chunk's figures as a worker without token counts wrote them: its tokens are 0, the rest as before.
    redis.hset(Store.batch_key(batch.id), "p:2", "4 2 0 2 0")
    older = client.get(f"/v1/batches/{batch.id}").json()
    assert (older["conversations_done"], older["tokens_written"], older["tokens_read"]) == (65, 1_000, 25_000)
    store.fold_progress({batch.id: [2]})  # and folded: its tokens add nothing
    folded = client.get(f"/v1/batches/{batch.id}").json()
    assert (folded["conversations_done"], folded["tokens_written"], folded["tokens_read"]) == (65, 1_000, 25_000)
    assert view["items_done"] == 1  # chunk 0's four are stored (counts.done) in a real run; here only folded
    fields = {k.decode() for k in redis.hkeys(Store.batch_key(batch.id))}
    assert "p:1" in fields and "p:0" not in fields  # one field per chunk in flight, not per chunk of the batch
    store.cancel_batch(batch)
    store.write_progress({batch.id: {1: ChunkProgress(30, 9, 1, 4, True)}})  # refused: the batch is over
    (event,) = events_of(client.get(f"/v1/batches/{batch.id}/events").text)
    assert event["batch"]["conversations_done"] == 65 and event["batch"]["status"] == "cancelled"
    store.purge_batch(store.get_batch(batch.id) or batch)
    store.write_progress({batch.id: {1: ChunkProgress(30, 9, 1, 4, True)}})  # no stray hash for a purged batch
    assert not redis.exists(Store.batch_key(batch.id))


def test_the_eta_follows_the_workers_estimated_work_in_flight_and_folded(redis: Redis, settings: Settings) -> None:
    """One conversation of 31 done, but it was the item's reference, three quarters of the work: the ETA is a third
    of the time so far, not thirty times it."""
    from service.views import batch_view

    store = Store(redis, settings)
    batch, _ = store.create_batch("public", BatchOptions(), [Triple.model_validate(t) for t in triples(4)])
    store.mark_running(batch.id)
    store.write_progress({batch.id: {0: ChunkProgress(31, 1, 0, 4, False, 110, 1_500, 12_000, 9_000)}})
    record = store.get_batch(batch.id)
    assert record is not None and record.started_at is not None
    assert batch_view(record, now=record.started_at + 300).eta_s == 100.0
    store.fold_progress({batch.id: [0]})
    folded = store.get_batch(batch.id)
    assert folded is not None
    assert (folded.progress.work_planned, folded.progress.work_done) == (12_000, 9_000)
    assert batch_view(folded, now=record.started_at + 300).eta_s == 100.0
    # A chunk's figures as a worker that weighs nothing wrote them: no work, and the ETA counts conversations.
    assert ChunkProgress.decode("4 2 0 2 0 0 0").work_planned == 0


def test_an_eta_comes_while_the_first_conversation_is_still_read(redis: Redis, settings: Settings) -> None:
    """No conversation done yet, but a sixth of the work read (the first reference's prompt, step by step): an ETA
    of five times the time so far, not none until the reference is written."""
    from service.views import batch_view

    store = Store(redis, settings)
    batch, _ = store.create_batch("public", BatchOptions(), [Triple.model_validate(t) for t in triples(3)])
    store.mark_running(batch.id)
    store.write_progress({batch.id: {0: ChunkProgress(23, 0, 0, 3, True, 0, 256, 6_000, 1_000)}})
    record = store.get_batch(batch.id)
    assert record is not None and record.started_at is not None and record.progress.done == 0
    assert batch_view(record, now=record.started_at + 10).eta_s == 50.0


def test_the_batch_page_shows_conversations_done_and_planned(make_client: Any, redis: Redis, redis_url: str) -> None:
    from tests.integration.test_ui import KEYS, sign_in, submit

    settings = make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()))
    client = make_client(settings)
    batch_id = submit(client, KEYS["alice"], triples(3))
    store = Store(redis, settings)
    store.mark_running(batch_id)
    store.write_progress({batch_id: {0: ChunkProgress(31, 12, 0, 3, True, 42, 4_710)}})
    sign_in(client, "alice")
    polled = client.get(f"/ui/batches/{batch_id}/progress").json()
    shown = "12/31 conversations (planned so far), 4,710 prompt tokens read, 42 tokens written"
    assert polled["conversations"] == shown
    assert (polled["tokens_written"], polled["tokens_read"]) == (42, 4_710)
    assert polled["eta"].startswith("ETA ~") and polled["items_done"] == 0
    page = client.get(f"/ui/batches/{batch_id}").text
    assert f'<span data-field="conversations">{shown}</span>' in page


class HeldMidConversation(FakeEngine):
    """The FAKE engine, holding its first conversation after its tokens are reported and before it is finished: a
    long reference, as the API sees it while it is written."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__(fake_reply)
        self.release = release
        self.held = False

    def _report_tokens(self, control: CallControl, index: int, conversation: Conversation, completion: Any) -> None:
        super()._report_tokens(control, index, conversation, completion)
        if not self.held:
            self.held = True
            assert self.release.wait(60), "the API never showed the conversation's tokens"


def test_the_api_shows_tokens_moving_before_any_conversation_is_done(
    client: TestClient[Litestar], redis: Redis, redis_url: str, run_worker: Any
) -> None:
    settings = make_settings(redis_url, progress_interval_s=0.05)
    batch_id = client.post("/v1/batches", json={"items": triples(2)}).json()["id"]
    release = threading.Event()
    seen: list[dict[str, Any]] = []

    watcher = watch_until(client, redis, batch_id, release, seen, lambda view: bool(view["tokens_written"]))
    assert run_worker(settings, worker_engine=HeldMidConversation(release))
    watcher.join()
    held = seen[-1]
    assert held["conversations_done"] == 0 and held["items_done"] == 0
    assert held["tokens_written"] > 0 and held["tokens_read"] > 0
    final = client.get(f"/v1/batches/{batch_id}").json()
    assert final["status"] == "done" and final["tokens_written"] >= final["conversations_done"] > 0
