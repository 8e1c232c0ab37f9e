"""Bounded work per request: an item's segments are capped (each is an engine conversation for
context relevance) and so is a batch's total of engine conversations; over either, a 4xx naming the limit and
nothing stored."""

from __future__ import annotations

import json
from collections.abc import Callable

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.runtime.settings import Settings
from tests.integration.helpers import juiz_keys, make_settings, triples

MakeClient = Callable[[Settings], TestClient[Litestar]]


def _stored(redis: Redis) -> list[str]:
    return [k for k in juiz_keys(redis) if k.startswith("juiz:batch:")]


def test_the_10000_segment_item_is_refused_naming_the_limit(client: TestClient[Litestar], redis: Redis) -> None:
    item = {"question": "Q?", "answer": "A.", "context": [{"text": "abc"} for _ in range(10_000)]}
    response = client.post("/v1/batches", json={"items": [item]})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "context" and body["index"] == 0
    assert "max_segments" in body["detail"] and "256" in body["detail"]
    jsonl = client.post("/v1/batches", content=json.dumps(item), headers={"Content-Type": "application/x-ndjson"})
    assert jsonl.status_code == 422 and jsonl.json()["line"] == 1 and "max_segments" in jsonl.json()["detail"]
    one = client.post("/v1/grade", json={"item": item})
    assert one.status_code == 422 and one.json()["field"] == "item.context"
    assert not _stored(redis)


def test_segments_up_to_the_limit_are_accepted(make_client: MakeClient, redis_url: str) -> None:
    client = make_client(make_settings(redis_url, max_segments=3))
    item = {"question": "Q?", "answer": "A.", "context": [{"text": f"s{i}"} for i in range(3)]}
    assert client.post("/v1/batches", json={"items": [item]}).status_code == 202
    item["context"].append({"text": "s3"})
    refused = client.post("/v1/batches", json={"items": [item]})
    assert refused.status_code == 422 and "at most 3" in refused.json()["detail"]


def test_a_batch_over_max_batch_conversations_is_413(make_client: MakeClient, redis_url: str, redis: Redis) -> None:
    client = make_client(make_settings(redis_url, max_batch_conversations=20))
    items = triples(4)
    for item in items:
        item["context"] = [{"text": f"segment {n}"} for n in range(4)]
    options = {"metrics": ["answer_relevance", "context_relevance"]}  # 4 x (1 + 4) = 20 conversations: accepted
    assert client.post("/v1/batches", json={"items": items, "options": options}).status_code == 202
    options["samples"] = 2  # 4 x (2 + 4) = 24
    response = client.post("/v1/batches", json={"items": items, "options": options})
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["limit"] == "max_batch_conversations" and body["maximum"] == 20 and "24" in body["detail"]
    assert len({key.split(":")[2] for key in _stored(redis)}) == 1  # only the first batch
