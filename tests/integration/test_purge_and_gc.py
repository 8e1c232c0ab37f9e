"""`DELETE /v1/batches/{id}?purge=true` erases a batch and its cache entries; `juiz admin gc`
reports, then removes, what gone batches left behind and gives a TTL to batches over that have none."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.cli import main
from juiz.runtime.settings import Settings
from juiz.store import Store
from juiz.store.orphans import collect
from schemas import BatchOptions, Triple
from tests.integration.helpers import juiz_keys, queued_jobs, triples


def _submit(client: TestClient[Litestar], items: list[dict[str, Any]]) -> str:
    response = client.post("/v1/batches", json={"items": items})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_purge_erases_a_batch_its_keys_and_its_cache_entries(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, redis: Redis
) -> None:
    erased = _submit(client, triples(4))
    kept = _submit(client, triples(4, start=10))
    run_worker(settings)
    cached = set(juiz_keys(redis))
    assert redis.scard(Store.batch_key(erased, "cache")) == 4 and sum(":cache:" in k for k in cached) == 8

    response = client.delete(f"/v1/batches/{erased}", params={"purge": "true"})

    assert response.status_code == 200 and response.json()["status"] == "done"  # its last view
    assert client.get(f"/v1/batches/{erased}").status_code == 404
    left = juiz_keys(redis)
    assert not [k for k in left if erased in k]
    assert sum(k.startswith("juiz:cache:") for k in left) == 4  # the other batch's entries stay
    listed = {m.decode() for k in left if k.startswith("juiz:tenant:") for m in redis.zrange(k, 0, -1)}
    assert listed == {kept}  # gone from the web page's list
    assert redis.zscore("juiz:active", erased) is None


def test_purging_a_queued_batch_cancels_it_first(
    client: TestClient[Litestar], settings: Settings, redis: Redis
) -> None:
    batch_id = _submit(client, triples(8))
    assert queued_jobs(redis, settings) == 2

    response = client.delete(f"/v1/batches/{batch_id}", params={"purge": "true"})

    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert queued_jobs(redis, settings) == 0
    assert not [k for k in juiz_keys(redis) if batch_id in k]


def test_gc_reports_then_removes_what_gone_batches_left(
    redis: Redis,
    redis_url: str,
    settings: Settings,
    run_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = Store(redis, settings)
    items = [Triple.model_validate(t) for t in triples(8)]
    expired, _ = store.create_batch("t", BatchOptions(), items)
    unexpiring, _ = store.create_batch("t", BatchOptions(), items[:4])
    run_worker(settings)
    redis.delete(store.batch_key(expired.id))  # its record expired, its other keys (written later) did not
    redis.persist(store.batch_key(unexpiring.id))  # over, yet kept for ever
    orphans = [k for k in juiz_keys(redis) if expired.id in k]
    assert orphans

    report = collect(redis, settings, remove=False)

    assert report.orphan_keys == len(orphans) and report.index_entries >= 1 and report.unexpiring == 1
    assert [k for k in juiz_keys(redis) if expired.id in k] == orphans  # a dry run changes nothing
    monkeypatch.setenv("JUIZ_REDIS_URL", redis_url)
    assert main(["admin", "gc"]) == 0
    out = capsys.readouterr().out
    assert f"keys of gone batches: {len(orphans)} removed" in out and "batches over without a TTL: 1 given one" in out
    assert not [k for k in juiz_keys(redis) if expired.id in k]
    assert 0 < redis.ttl(store.batch_key(unexpiring.id)) <= settings.retention_s
    again = collect(redis, settings, remove=False)
    assert (again.orphan_keys, again.index_entries, again.unexpiring) == (0, 0, 0)
    assert store.list_batches("t", 0, 10)[0] == [store.get_batch(unexpiring.id)]


def test_the_indexes_of_batches_expire_with_the_retention(redis: Redis, settings: Settings) -> None:
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(4)])
    indexes = [k for k in juiz_keys(redis) if batch.id not in k and not k.startswith("juiz:metrics")]
    assert "juiz:active" in indexes and "juiz:tenant:t:batches" in indexes
    for key in ("juiz:active", "juiz:tenant:t:batches"):
        assert 0 < redis.ttl(key) <= 2 * settings.retention_s, key
    # A queue's scheduling keys never expire: a chunk still pending must not lose its place however long it waits
    # (they drain as chunks are claimed; the sweeper is their backstop).
    scheduling = [k for k in indexes if k.endswith(f"{{{settings.queue}}}") or f"{{{settings.queue}}}:" in k]
    assert scheduling and all(redis.ttl(k) == -1 for k in scheduling), {k: redis.ttl(k) for k in scheduling}


def test_cancelling_survives_a_job_that_a_worker_finished_and_rq_deleted_meanwhile(
    client: TestClient[Litestar], settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race behind a 500 from the page's Cancel (seen in CI): the store reads the batch's jobs, a worker finishes
    one and RQ deletes its hash, then the store deletes it and RQ cannot read its status."""
    from rq.job import Job

    batch_id = _submit(client, triples(8))
    fetch_many = Job.fetch_many

    def fetched_then_finished(job_ids: Any, **kwargs: Any) -> Any:
        jobs = fetch_many(job_ids, **kwargs)
        redis.delete(jobs[0].key)  # what RQ's cleanup does once the worker is done with it
        return jobs

    monkeypatch.setattr(Job, "fetch_many", staticmethod(fetched_then_finished))

    response = client.delete(f"/v1/batches/{batch_id}")

    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert queued_jobs(redis, settings) == 0


def test_cancelling_survives_a_job_whose_execution_a_worker_ended_meanwhile(
    client: TestClient[Litestar], settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race one step later (seen by bench.fairness cancelling a backlog under a busy worker): the store
    fetches a job a worker is running; the worker ends the run and RQ deletes the execution's hash while its id is
    still in the job's execution registry; deleting the job then fails in RQ (ValueError: Execution ... not found)."""
    from rq.job import Job

    batch_id = _submit(client, triples(8))
    fetch_many = Job.fetch_many

    def fetched_while_running(job_ids: Any, **kwargs: Any) -> Any:
        jobs = fetch_many(job_ids, **kwargs)
        # The execution registry names a run whose hash is gone: what RQ leaves for an instant as a run ends.
        redis.zadd(jobs[0].execution_registry.key, {"ended-run": 9e9})
        return jobs

    monkeypatch.setattr(Job, "fetch_many", staticmethod(fetched_while_running))

    response = client.delete(f"/v1/batches/{batch_id}")

    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert queued_jobs(redis, settings) == 0
