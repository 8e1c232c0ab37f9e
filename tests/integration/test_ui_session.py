"""The web page's session and CSRF as a reader and an attacker see them: what Redis holds, when the id changes, when a
session ends, and that every API replica accepts the others' forms. (Litestar's session and CSRF middleware with
juiz's rules on top: service/ui/session.py.)"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.runtime.settings import Settings
from service.ui import session as ui_session
from tests.integration.helpers import make_settings
from tests.integration.test_ui import KEYS, csrf_of

MakeClient = Callable[[Settings], TestClient[Litestar]]


@pytest.fixture
def keyed(redis_url: str) -> Settings:
    return make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()))


def _sign_in(client: TestClient[Litestar], tenant: str = "alice") -> str:
    response = client.post("/ui/signin", data={"api_key": KEYS[tenant]}, follow_redirects=False)
    assert response.status_code == 303, response.text
    session_id = response.cookies.get(ui_session.COOKIE)
    assert session_id
    return str(session_id)


def _session_keys(redis: Redis) -> list[str]:
    return [k.decode() for k in redis.scan_iter(f"{ui_session.SESSION_NAMESPACE}:*")]


def test_redis_holds_a_digest_of_the_id_and_sign_out_deletes_it(
    make_client: MakeClient, keyed: Settings, redis: Redis
) -> None:
    client = make_client(keyed)
    session_id = _sign_in(client)
    digest = hashlib.sha256(session_id.encode()).hexdigest()
    assert _session_keys(redis) == [f"{ui_session.SESSION_NAMESPACE}:{digest}"]
    assert not [k for k in redis.scan_iter("*") if session_id in k.decode()]
    assert 0 < int(redis.ttl(_session_keys(redis)[0])) <= ui_session.SESSION_TTL_S

    csrf = csrf_of(client.get("/ui/batches").text)
    out = client.post("/ui/signout", data={"_csrf_token": csrf}, follow_redirects=False)
    assert out.status_code == 303 and _session_keys(redis) == []
    # The old id opens nothing, even if the browser kept it.
    replay = client.get("/ui/batches", headers={"Cookie": f"{ui_session.COOKIE}={session_id}"}, follow_redirects=False)
    assert replay.status_code == 303


def test_sign_in_gives_a_new_id_and_an_unknown_id_is_never_adopted(
    make_client: MakeClient, keyed: Settings, redis: Redis
) -> None:
    client = make_client(keyed)
    planted = "attacker-chose-this-id"
    client.cookies.set(ui_session.COOKIE, planted, domain="testserver.local", path="/ui")
    session_id = _sign_in(client)
    assert session_id != planted
    again = _sign_in(client, "bob")  # signing in over a live session: a new id, the old one gone
    assert again != session_id and len(_session_keys(redis)) == 1


def test_a_session_ends_when_its_key_is_removed_or_after_its_hours(
    make_client: MakeClient, keyed: Settings, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = _sign_in(make_client(keyed))
    cookie = {"Cookie": f"{ui_session.COOKIE}={session_id}"}
    assert make_client(keyed).get("/ui/batches", headers=cookie, follow_redirects=False).status_code == 200

    later = ui_session.time.time() + ui_session.SESSION_TTL_S + 1
    with monkeypatch.context() as patched:
        patched.setattr(ui_session, "time", SimpleNamespace(time=lambda: later))
        expired = make_client(keyed).get("/ui/batches", headers=cookie, follow_redirects=False)
    assert expired.status_code == 303

    session_id = _sign_in(make_client(keyed))
    cookie = {"Cookie": f"{ui_session.COOKIE}={session_id}"}
    without_alice = make_client(make_settings(redis_url, api_keys=f"bob:{KEYS['bob']}"))
    assert without_alice.get("/ui/batches", headers=cookie, follow_redirects=False).status_code == 303


def test_a_cross_origin_sign_in_is_refused(make_client: MakeClient, keyed: Settings) -> None:
    client = make_client(keyed)
    evil = {"Origin": "https://evil.example"}
    refused = client.post("/ui/signin", data={"api_key": KEYS["alice"]}, headers=evil, follow_redirects=False)
    assert refused.status_code == 403 and "set-cookie" not in refused.headers


def test_reading_pages_writes_no_session(make_client: MakeClient, keyed: Settings) -> None:
    client = make_client(keyed)
    refused = client.get("/ui/batches", follow_redirects=False)  # no session: none is made
    assert refused.status_code == 303 and ui_session.COOKIE not in refused.headers.get("set-cookie", "")
    _sign_in(client)
    for _ in range(2):
        page = client.get("/ui/batches")
        assert page.status_code == 200 and ui_session.COOKIE not in page.headers.get("set-cookie", "")


def test_every_replica_accepts_the_others_forms(make_client: MakeClient, keyed: Settings, redis_url: str) -> None:
    one, two = make_client(keyed), make_client(keyed)  # no JUIZ_CSRF_SECRET: the one shared in Redis
    session_id = _sign_in(one)
    page = one.get("/ui/batches")
    csrf = csrf_of(page.text)
    cookies = f"{ui_session.COOKIE}={session_id}; {ui_session.CSRF_COOKIE}={page.cookies[ui_session.CSRF_COOKIE]}"
    other = two.post("/ui/signout", data={"_csrf_token": csrf}, headers={"Cookie": cookies}, follow_redirects=False)
    assert other.status_code == 303 and other.headers["location"] == "/ui/signin"

    # A replica with another secret refuses tokens it did not sign.
    session_id = _sign_in(one)
    cookies = f"{ui_session.COOKIE}={session_id}; {ui_session.CSRF_COOKIE}={page.cookies[ui_session.CSRF_COOKIE]}"
    foreign = make_client(make_settings(redis_url, api_keys=keyed.api_keys.get_secret_value(), csrf_secret="x" * 32))
    refused = foreign.post("/ui/signout", data={"_csrf_token": csrf}, headers={"Cookie": cookies})
    assert refused.status_code == 403 and "Refused" in refused.text
