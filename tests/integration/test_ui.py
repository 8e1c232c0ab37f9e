"""The web page (/ui) and PATCH /v1/batches/{id}/items/{item_id} through Litestar's test client, against a real
Redis and a real RQ worker on the FAKE engine. The real-browser tests are in tests/browser."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.runtime.settings import Settings
from service.rows import _BOOTSTRAPS
from tests.integration.helpers import make_settings, triples

MakeClient = Callable[[Settings], TestClient[Litestar]]
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}
XSS = '<script>alert("owned")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def keyed(redis_url: str) -> Settings:
    return make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()))


def csrf_of(html: str) -> str:
    match = re.search(r'name="_csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def sign_in(client: TestClient[Litestar], tenant: str) -> str:
    response = client.post("/ui/signin", data={"api_key": KEYS[tenant]}, follow_redirects=False)
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Path=/ui" in cookie
    assert KEYS[tenant] not in cookie
    page = client.get("/ui/batches")
    assert page.status_code == 200
    return csrf_of(page.text)


def submit(client: TestClient[Litestar], key: str, items: list[dict[str, Any]]) -> str:
    response = client.post("/v1/batches", json={"items": items}, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_pages_need_a_session_and_a_tenant_sees_only_its_batches(
    make_client: MakeClient, keyed: Settings, run_worker: Any
) -> None:
    client = make_client(keyed)
    mine = submit(client, KEYS["alice"], triples(3))
    theirs = submit(client, KEYS["bob"], triples(2, prefix="b"))
    run_worker(keyed)

    response = client.get("/ui/batches", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/ui/signin?next=%2Fui%2Fbatches"
    wrong = client.post("/ui/signin", data={"api_key": "nope"}, follow_redirects=False)
    assert wrong.status_code == 401 and "not known" in wrong.text and "set-cookie" not in wrong.headers

    sign_in(client, "alice")
    listing = client.get("/ui/batches")
    assert mine in listing.text and theirs not in listing.text
    assert client.get(f"/ui/batches/{theirs}").status_code == 404
    assert client.get(f"/ui/batches/{theirs}/results.jsonl").status_code == 404
    assert client.get(f"/ui/batches/{mine}").status_code == 200

    csp = listing.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert listing.headers["cache-control"] == "no-store"

    csrf = csrf_of(listing.text)
    assert client.post("/ui/signout", data={"_csrf_token": "forged"}).status_code == 403
    out = client.post("/ui/signout", data={"_csrf_token": csrf}, follow_redirects=False)
    assert out.status_code == 303
    assert client.get("/ui/batches", follow_redirects=False).status_code == 303


def test_upload_browse_label_and_export(make_client: MakeClient, keyed: Settings, run_worker: Any) -> None:
    client = make_client(keyed)
    csrf = sign_in(client, "alice")
    items = triples(12, label="C")
    items[5]["answer"] = XSS
    body = "\n".join(__import__("json").dumps(i) for i in items).encode()

    refused = client.post(
        "/ui/batches", data={"_csrf_token": "forged"}, files={"file": ("t.jsonl", body, "application/x-ndjson")}
    )
    assert refused.status_code == 403
    bad = client.post(
        "/ui/batches",
        data={"_csrf_token": csrf, "mode": "slow"},
        files={"file": ("t.jsonl", body, "application/x-ndjson")},
    )
    assert bad.status_code == 422 and "options.mode" in bad.text  # redirected (post/redirect/get) to the form

    created = client.post(
        "/ui/batches",
        data={"_csrf_token": csrf, "metrics": "answer_relevance", "mode": "cot"},
        files={"file": ("t.jsonl", body, "application/x-ndjson")},
        follow_redirects=False,
    )
    assert created.status_code == 303, created.text
    batch_url = created.headers["location"]
    batch_id = batch_url.rsplit("/", 1)[1]
    assert client.get(f"{batch_url}/progress").json()["status"] == "queued"
    run_worker(keyed)
    progress = client.get(f"{batch_url}/progress").json()
    assert progress["terminal"] and progress["done"] == 12

    page = client.get(batch_url)
    assert page.status_code == 200
    # The fake engine scores item-N as N % 4: items 0, 4, 8 get 0 (judge I) against a manual C: disagreements first.
    first_rows = re.findall(r'/items/(\d+)">\d+</a>', page.text)
    assert first_rows[:3] == ["0", "4", "8"]
    assert "<svg" in page.text and "confusion heat map" in page.text
    n_before = int(re.search(r'data-testid="agreement-n">(\d+)<', page.text).group(1))  # type: ignore[union-attr]
    assert n_before == 12
    # The intervals come from a background bootstrap; the section alone answers 202 until they are in.
    assert client.get(f"{batch_url}/agreement").status_code in (200, 202)
    _BOOTSTRAPS.submit(lambda: None).result()  # one job at a time: the bootstrap has finished after this one
    section = client.get(f"{batch_url}/agreement")
    assert section.status_code == 200 and "95% CI: percentile bootstrap, 200 resamples" in section.text

    filtered = client.get(batch_url, params={"score": "3", "sort": "index", "dir": "asc"})
    assert re.findall(r'/items/(\d+)">\d+</a>', filtered.text) == ["3", "7", "11"]

    item = client.get(f"{batch_url}/items/5")
    assert item.status_code == 200
    assert XSS not in item.text
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in item.text

    item_csrf = csrf_of(item.text)
    saved = client.post(
        f"{batch_url}/items/0/label", data={"_csrf_token": item_csrf, "manual_label": "I"}, follow_redirects=False
    )
    assert saved.status_code == 303
    item0 = client.get(f"{batch_url}/items/0")
    assert 'data-testid="manual-label">I' in item0.text and "set by alice" in item0.text
    results = client.get(f"{batch_url}/results.jsonl").text.splitlines()
    assert len(results) == 12
    by_id = {r["id"]: r for r in map(__import__("json").loads, results)}
    assert by_id["t0"]["manual_label"] == "I" and by_id["t0"]["manual_label_by"] == "alice"

    api = client.get(
        f"/v1/batches/{batch_id}/agreement",
        params={"resamples": 0},
        headers={"Authorization": f"Bearer {KEYS['alice']}"},
    )
    assert api.json()["confusion_matrix"][0][0] == 1  # manual I, judge I: the new label counts

    exported = client.get(f"{batch_url}/results.csv")
    csv_text = exported.text
    assert csv_text.splitlines()[0].startswith("index,id,status,score")
    assert len(csv_text.splitlines()) == 13
    report = client.get(f"{batch_url}/report.md")
    assert report.status_code == 200 and "**Question 1**" in report.text  # English items: English headings
    # The text downloads name their charset once (Litestar adds it to a text/* type).
    assert exported.headers["content-type"] == "text/csv; charset=utf-8", exported.headers
    assert report.headers["content-type"] == "text/markdown; charset=utf-8", report.headers


def test_patch_a_manual_label(make_client: MakeClient, keyed: Settings, run_worker: Any, redis: Redis) -> None:
    client = make_client(keyed)
    alice = {"Authorization": f"Bearer {KEYS['alice']}"}
    batch_id = submit(client, KEYS["alice"], triples(4, label=None))
    url = f"/v1/batches/{batch_id}/items/t1"

    assert client.patch(url, json={"manual_label": "C"}, headers=alice).status_code == 409  # not graded yet
    run_worker(keyed)
    before = client.get(f"/v1/batches/{batch_id}/agreement", headers=alice).json()
    assert before["n"] == 0

    response = client.patch(url, json={"manual_label": "P"}, headers=alice)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["manual_label"] == "P" and body["manual_label_by"] == "alice" and body["index"] == 1
    after = client.get(f"/v1/batches/{batch_id}/agreement", headers=alice).json()
    assert after["n"] == 1  # the cached report was dropped

    assert client.patch(url, json={"manual_label": "maybe"}, headers=alice).json()["field"] == "manual_label"
    assert client.patch(url, json={"label": "C"}, headers=alice).status_code == 422
    assert client.patch(url, content=b"[1]", headers=alice).status_code == 422
    missing = client.patch(f"/v1/batches/{batch_id}/items/nope", json={"manual_label": "C"}, headers=alice)
    assert missing.status_code == 404 and missing.json()["field"] == "item_id"
    bob = {"Authorization": f"Bearer {KEYS['bob']}"}
    assert client.patch(url, json={"manual_label": "C"}, headers=bob).status_code == 404
    assert client.patch(url, json={"manual_label": "C"}).status_code == 401

    cleared = client.patch(url, json={"manual_label": None}, headers=alice)
    assert cleared.status_code == 200 and cleared.json()["manual_label"] is None
    results = client.get(f"/v1/batches/{batch_id}/results", headers=alice).json()["items"]
    assert {r["id"]: r["manual_label"] for r in results}["t1"] is None


def test_open_api_needs_no_sign_in(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> None:
    batch_id = submit(client, "", triples(2))
    run_worker(settings)
    page = client.get("/ui/batches")
    assert page.status_code == 200 and batch_id in page.text and "Sign out" not in page.text
    assert "HttpOnly" in page.headers["set-cookie"]  # an anonymous session, for the forms' CSRF token
    assert client.get("/ui/signin", follow_redirects=False).status_code in (302, 303, 307)
    csrf = csrf_of(page.text)
    label = client.post(f"/ui/batches/{batch_id}/items/1/label", data={"_csrf_token": csrf, "manual_label": "P"})
    assert label.status_code == 200 and "Manual label saved" in label.text


def test_cross_origin_posts_are_refused(client: TestClient[Litestar]) -> None:
    page = client.get("/ui/batches")
    csrf = csrf_of(page.text)
    response = client.post(
        "/ui/batches", data={"_csrf_token": csrf}, headers={"Origin": "https://evil.example"}, follow_redirects=False
    )
    assert response.status_code == 403


@pytest.mark.usefixtures("one_rate_window")
def test_sign_in_attempts_are_rate_limited(make_client: MakeClient, redis_url: str) -> None:
    client = make_client(make_settings(redis_url, api_keys="alice:alice-key-0123456789", rate_limit_per_minute=3))
    codes = [client.post("/ui/signin", data={"api_key": f"guess-{n}"}).status_code for n in range(4)]
    assert codes == [401, 401, 401, 429]
    assert client.post("/ui/signin", data={"api_key": KEYS["alice"]}).status_code == 429  # even the right key


def test_a_label_the_mapping_does_not_know_leaves_the_page_up(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    # Intake now refuses such labels (422); a batch stored before that still shows, written here past intake.
    from schemas import BatchOptions, Triple

    store = client.app.state.store
    record, _ = store.create_batch("public", BatchOptions(), [Triple(**t) for t in triples(3, label="maybe")])
    batch_id = record.id
    run_worker(settings)
    page = client.get(f"/ui/batches/{batch_id}")
    assert page.status_code == 200 and "No agreement" in page.text and "maybe" in page.text


def test_an_upload_over_max_body_bytes_is_refused(make_client: MakeClient, redis_url: str) -> None:
    client = make_client(make_settings(redis_url, max_body_bytes=4096))
    csrf = csrf_of(client.get("/ui/batches").text)
    big = b'{"question": "q", "answer": "' + b"a" * 8000 + b'"}\n'
    response = client.post(
        "/ui/batches", data={"_csrf_token": csrf}, files={"file": ("t.jsonl", big, "application/x-ndjson")}
    )
    assert response.status_code == 413


@pytest.mark.usefixtures("one_rate_window")
def test_page_uploads_count_against_the_tenants_rate_limit(make_client: MakeClient, redis_url: str) -> None:
    limited = make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()), rate_limit_per_minute=2)
    client = make_client(limited)
    csrf = sign_in(client, "alice")  # the sign-in counts against the client address, not the tenant
    body = b'{"question": "q [item-1]", "answer": "a"}\n'
    submit(client, KEYS["alice"], triples(1))  # 1 of alice's 2 this minute, through the API

    def upload() -> Any:
        return client.post(
            "/ui/batches",
            data={"_csrf_token": csrf, "metrics": "answer_relevance"},
            files={"file": ("t.jsonl", body, "application/x-ndjson")},
            follow_redirects=False,
        )

    assert upload().status_code == 303  # 2 of 2
    refused = upload()
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) > 0
    # The other tenant's count is its own.
    assert client.post("/v1/batches", json={"items": triples(1)}, headers={"Authorization": f"Bearer {KEYS['bob']}"})
