"""The edge: security headers on every response (API, docs, 404s, the web page's errors),
Retry-After on every 503 and 429, /metrics and /ready closed to strangers, X-Forwarded-For believed only from
configured proxies, and unknown query parameters refused naming them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from tests.integration.helpers import METRICS_HEADERS, free_port, make_settings, triples

MakeClient = Callable[[Settings], TestClient[Litestar]]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path", ["/health", "/schema", "/schema/swagger", "/schema/openapi.json", "/nope", "/ui/nope", "/v1/batches/x"]
)
def test_security_headers_on_every_response(client: TestClient[Litestar], path: str) -> None:
    response = client.get(path)
    assert response.headers["x-content-type-options"] == "nosniff", (path, response.status_code)
    assert response.headers["x-frame-options"] == "DENY"
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp


def test_the_web_page_keeps_its_own_stricter_policy(client: TestClient[Litestar]) -> None:
    csp = client.get("/ui/signin").headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp


@pytest.mark.usefixtures("one_rate_window")
def test_503_and_429_carry_retry_after(make_client: MakeClient, redis_url: str) -> None:
    dead = make_client(make_settings(f"redis://127.0.0.1:{free_port()}/0", retry_after_s=7))
    for response in (dead.get("/v1/batches/" + "0" * 32), dead.get("/ready", headers=METRICS_HEADERS)):
        assert response.status_code == 503 and response.headers["retry-after"] == "7", response.text
    limited = make_client(make_settings(redis_url, rate_limit_per_minute=1))
    limited.get("/v1/batches/" + "0" * 32)
    over = limited.get("/v1/batches/" + "0" * 32)
    assert over.status_code == 429 and int(over.headers["retry-after"]) >= 1


def test_ready_and_metrics_need_the_metrics_key_off_loopback(make_client: MakeClient, redis_url: str) -> None:
    keyless = make_client(make_settings(redis_url, metrics_key=""))
    assert keyless.get("/metrics").status_code == 403  # the test client is not a loopback address
    assert keyless.get("/ready").status_code == 403
    keyed = make_client(make_settings(redis_url))
    assert keyed.get("/metrics").status_code == 401
    assert keyed.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert keyed.get("/metrics", headers=METRICS_HEADERS).status_code == 200
    assert keyed.get("/health").status_code == 200  # liveness stays open


def test_unknown_query_parameters_are_422(client: TestClient[Litestar]) -> None:
    created = client.post("/v1/batches", json={"items": triples(1)}).json()
    response = client.get(f"/v1/batches/{created['id']}/results", params={"limt": "5"})
    assert response.status_code == 422 and response.json()["field"] == "limt"
    assert "limit" in response.json()["detail"]
    assert client.get(f"/v1/batches/{created['id']}/results", params={"limit": "5"}).status_code == 200
    assert client.get(f"/v1/batches/{created['id']}", params={"x": "1"}).status_code == 422


@pytest.fixture
def serve(redis_url: str) -> Iterator[Callable[[dict[str, str]], str]]:
    """`juiz serve` (uvicorn) in a child process on a free loopback port; returns its URL once it answers."""
    children: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str]) -> str:
        port = free_port()
        child_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "JUIZ_REDIS_URL": redis_url,
            "JUIZ_PORT": str(port),
            "JUIZ_LOG_LEVEL": "WARNING",
            **env,
        }
        child = subprocess.Popen(
            [sys.executable, "-c", "from service.server import serve; serve()"],
            env=child_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        children.append(child)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:  # until the server accepts connections: no event to wait on across processes
            try:
                httpx.get(f"{url}/health", timeout=1)
                return url
            except httpx.TransportError:
                assert child.poll() is None, "juiz serve exited"
                assert time.monotonic() < deadline, "juiz serve did not start"
                time.sleep(0.05)

    yield start
    for child in children:
        child.terminate()
        child.wait(timeout=10)


def test_x_forwarded_for_is_believed_only_from_trusted_proxies(serve: Callable[[dict[str, str]], str]) -> None:
    """A loopback client may read /metrics. Claiming another address in X-Forwarded-For changes nothing unless the
    peer is a trusted proxy; then the forwarded address is the client's (and is not loopback)."""
    forwarded = {"X-Forwarded-For": "203.0.113.9"}
    untrusted = serve({})
    assert httpx.get(f"{untrusted}/metrics", headers=forwarded, timeout=10).status_code == 200
    trusted = serve({"JUIZ_TRUSTED_PROXIES": "127.0.0.1"})
    assert httpx.get(f"{trusted}/metrics", timeout=10).status_code == 200
    assert httpx.get(f"{trusted}/metrics", headers=forwarded, timeout=10).status_code == 403
