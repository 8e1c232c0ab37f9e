"""AsyncJuizClient against the real API (private Redis, real RQ worker on the FAKE engine), and both clients'
retries of 429/503 honouring Retry-After."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient
from redis import Redis

from juiz.clients import ApiError, AsyncJuizClient, JuizClient
from schemas import BatchView
from service.app import create_app
from tests.integration.helpers import METRICS_KEY, make_settings, triples

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_async_client_round_trip(redis: Redis, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url, api_keys="team:secret")
    async with AsyncTestClient(create_app(settings, redis)) as http:
        juiz = AsyncJuizClient(api_key="secret", http=http)
        batch = await juiz.submit(triples(3), {"lang": "en"}, idempotency_key="same")
        assert (await juiz.submit(triples(3), {"lang": "en"}, idempotency_key="same")).id == batch.id
        run_worker(settings)
        seen: list[BatchView] = []
        done = await juiz.wait(batch.id, poll_s=0.01, on_progress=seen.append)
        assert done.status == "done" and seen[-1].counts.ok == 3
        results = [r async for r in juiz.results(batch.id, page_size=2)]
        assert sorted(r.id for r in results) == ["t0", "t1", "t2"]
        assert [r.id async for r in juiz.stream_results(batch.id)] == [r.id for r in results]
        assert (await juiz.agreement(batch.id, resamples=10)).n == 3
        assert "**Question" in await juiz.report(batch.id)  # lang en: English headings
        # /ready answers loopback clients or the metrics key (not a tenant's key); the test client is not loopback.
        assert (await AsyncJuizClient(api_key=METRICS_KEY, http=http).ready()).redis is not None
        assert (await juiz.rename(batch.id, "first run")).name == "first run"
        compared = await juiz.compare(batch.id, batch.id, resamples=0)
        assert compared.shared == 3 and compared.changed == [] and compared.score_deltas["0"] == 3
        with pytest.raises(ApiError) as error:
            await AsyncJuizClient(api_key="wrong", http=http).batch(batch.id)
        assert error.value.status_code == 401 and error.value.body["field"] == "Authorization"
        with pytest.raises(ApiError) as error:
            await juiz.submit([{"question": "q?"}])
        assert error.value.status_code == 422 and "answer" in str(error.value)


class Flaky:
    """A FAKE API: the first `failures` requests get `status` with Retry-After: 0, then a report."""

    def __init__(self, status: int, failures: int) -> None:
        self.status, self.failures, self.calls = status, failures, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.failures:
            return httpx.Response(self.status, headers={"Retry-After": "0"}, json={"detail": "busy"})
        return httpx.Response(200, text="# report")


@pytest.mark.parametrize("status", [429, 503])
async def test_both_clients_retry_429_and_503_honouring_retry_after(status: int) -> None:
    sync_server, async_server = Flaky(status, 2), Flaky(status, 2)
    sync = JuizClient(http=httpx.Client(base_url="http://api", transport=httpx.MockTransport(sync_server)))
    assert sync.report("b1") == "# report" and sync_server.calls == 3
    aclient = AsyncJuizClient(
        http=httpx.AsyncClient(base_url="http://api", transport=httpx.MockTransport(async_server))
    )
    assert await aclient.report("b1") == "# report" and async_server.calls == 3


async def test_retries_run_out_with_the_servers_error() -> None:
    server = Flaky(429, 10)
    client = AsyncJuizClient(
        retries=1, http=httpx.AsyncClient(base_url="http://a", transport=httpx.MockTransport(server))
    )
    with pytest.raises(ApiError) as error:
        await client.report("b1")
    assert error.value.status_code == 429 and error.value.retry_after_s == 0.0 and server.calls == 2


async def test_a_400_is_not_retried() -> None:
    server = Flaky(400, 1)
    client = JuizClient(http=httpx.Client(base_url="http://a", transport=httpx.MockTransport(server)))
    with pytest.raises(ApiError):
        client.report("b1")
    assert server.calls == 1
