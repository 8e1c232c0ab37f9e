"""A batch's name given when it is created: in the JSON body, the JSONL upload's query, the web page's upload form,
`juiz submit --name` and the Python client; a bad name is a 422 (exit 2 on the command line) naming `name`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.cli import main
from juiz.clients import JuizClient
from juiz.clients import http as client_module
from juiz.runtime.settings import Settings
from tests.integration.helpers import cli_against, juiz_keys, make_settings, triples
from tests.integration.test_ui import KEYS, sign_in

MakeClient = Callable[[Settings], TestClient[Litestar]]

BAD_NAMES = [
    pytest.param("x" * 201, "at most 200 characters", id="too-long"),
    pytest.param("week 3\nprompt 2", "no control characters (found U+000A)", id="newline"),
    pytest.param("run \x1b[31mred", "no control characters (found U+001B)", id="escape"),
    pytest.param("evil\u202egnp.exe", "no control characters (found U+202E)", id="bidi-override"),
    pytest.param(7, "valid string", id="not-text"),
]


@pytest.fixture
def keyed(redis_url: str) -> Settings:
    return make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()))


def test_a_name_in_the_json_body_is_the_batchs_name(client: TestClient[Litestar]) -> None:
    created = client.post("/v1/batches", json={"items": triples(2), "name": "  lectures, prompt juiz-2 "})
    assert created.status_code == 202, created.text
    batch = created.json()
    assert batch["name"] == "lectures, prompt juiz-2"  # surrounding spaces dropped
    assert client.get(f"/v1/batches/{batch['id']}").json()["name"] == "lectures, prompt juiz-2"
    unnamed = client.post("/v1/batches", json={"items": triples(1), "name": "   "}).json()
    assert unnamed["name"] is None and client.get(f"/v1/batches/{unnamed['id']}").json()["name"] is None


def test_a_name_in_the_jsonl_query(client: TestClient[Litestar]) -> None:
    body = "\n".join(json.dumps(t) for t in triples(2)) + "\n"
    created = client.post(
        "/v1/batches",
        content=body,
        headers={"Content-Type": "application/x-ndjson"},
        params={"name": "week 3", "lang": "en"},
    )
    assert created.status_code == 202, created.text
    assert created.json()["name"] == "week 3" and created.json()["options"]["lang"] == "en"


@pytest.mark.parametrize(("name", "message"), BAD_NAMES)
def test_a_bad_name_is_a_422_naming_name_and_nothing_is_stored(
    client: TestClient[Litestar], redis: Redis, name: object, message: str
) -> None:
    before = juiz_keys(redis)
    refused = client.post("/v1/batches", json={"items": triples(1), "name": name})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "name" and message in refused.json()["detail"]
    if isinstance(name, str):
        jsonl = client.post(
            "/v1/batches",
            content=json.dumps(triples(1)[0]),
            headers={"Content-Type": "application/x-ndjson"},
            params={"name": name},
        )
        assert jsonl.status_code == 422 and jsonl.json()["field"] == "name", jsonl.text
    assert juiz_keys(redis) == before  # nothing stored
    # The rename checks the same rules.
    batch = client.post("/v1/batches", json={"items": triples(1)}).json()
    renamed = client.patch(f"/v1/batches/{batch['id']}", json={"name": name})
    assert renamed.status_code == 422 and renamed.json()["field"] == "name", renamed.text


def test_the_same_idempotency_key_with_another_name_is_a_conflict(client: TestClient[Litestar]) -> None:
    headers = {"Idempotency-Key": "once"}
    first = client.post("/v1/batches", json={"items": triples(1), "name": "a"}, headers=headers)
    again = client.post("/v1/batches", json={"items": triples(1), "name": "a"}, headers=headers)
    assert first.status_code == again.status_code == 202 and again.json()["id"] == first.json()["id"]
    other = client.post("/v1/batches", json={"items": triples(1), "name": "b"}, headers=headers)
    assert other.status_code == 409, other.text


def test_the_upload_form_names_the_batch_as_sent_or_after_its_file(make_client: MakeClient, keyed: Settings) -> None:
    client = make_client(keyed)
    csrf = sign_in(client, "alice")
    alice = {"Authorization": f"Bearer {KEYS['alice']}"}
    body = json.dumps({"question": "q?", "answer": "a"}).encode()

    def upload(name: str | None) -> Any:
        data = {"_csrf_token": csrf} if name is None else {"_csrf_token": csrf, "name": name}
        files = {"file": ("lectures-week3.jsonl", body, "application/x-ndjson")}
        return client.post("/ui/batches", data=data, files=files, follow_redirects=False)

    named = upload("week 3 as edited")
    batch_id = named.headers["location"].rsplit("/", 1)[1]
    assert client.get(f"/v1/batches/{batch_id}", headers=alice).json()["name"] == "week 3 as edited"
    for blank in (None, "  "):  # no script filled it in, or it was cleared: the file's name
        response = upload(blank)
        batch_id = response.headers["location"].rsplit("/", 1)[1]
        assert client.get(f"/v1/batches/{batch_id}", headers=alice).json()["name"] == "lectures-week3"
    refused = upload("bad\tname")
    assert refused.status_code == 303 and refused.headers["location"].endswith("#new-title")
    page = client.get("/ui/batches")
    assert page.status_code == 422 and "field &#39;name&#39;: a name holds no control characters" in page.text
    assert 'value="bad\tname"' in page.text  # the form comes back as it was sent
    # Renaming on the batch's page follows the same rules.
    renamed = client.post(f"/ui/batches/{batch_id}/name", data={"_csrf_token": csrf, "name": "x" * 201})
    assert renamed.status_code == 422 and "field &#39;name&#39;" in renamed.text and "200 characters" in renamed.text
    assert client.get(f"/v1/batches/{batch_id}", headers=alice).json()["name"] == "lectures-week3"


def test_juiz_submit_names_the_batch_after_its_file_or_name(
    client: TestClient[Litestar],
    settings: Settings,
    run_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_against(client, monkeypatch)
    data = tmp_path / "lectures-week3.jsonl"
    data.write_text("\n".join(json.dumps(t) for t in triples(3)) + "\n", encoding="utf-8")

    assert main(["submit", str(data), "--server", "http://juiz", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    batch_id = out.split()[1]
    assert "(lectures-week3): 3 items queued" in out and f"http://juiz/ui/batches/{batch_id}" in out
    assert client.get(f"/v1/batches/{batch_id}").json()["name"] == "lectures-week3"

    wait = client_module.JuizClient.wait

    def work_then_wait(self: JuizClient, batch_id: str, **kwargs: Any) -> Any:
        run_worker(settings)
        return wait(self, batch_id, **{**kwargs, "poll_s": 0.01})

    monkeypatch.setattr(client_module.JuizClient, "wait", work_then_wait)
    results = tmp_path / "out.jsonl"
    code = main(["submit", str(data), "--server", "http://juiz", "--name", "week 3", "--wait", "-o", str(results)])
    out = capsys.readouterr().out
    assert code == 0, out
    batch_id = out.split()[1]
    assert client.get(f"/v1/batches/{batch_id}").json()["name"] == "week 3"
    assert "3 graded" in out and f"batch {batch_id}: done" in out
    assert len(results.read_text(encoding="utf-8").splitlines()) == 3


def test_juiz_submit_refuses_a_bad_name_with_a_message(
    client: TestClient[Litestar], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_against(client, monkeypatch)
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps(triples(1)[0]) + "\n", encoding="utf-8")
    assert main(["submit", str(data), "--server", "http://juiz", "--name", "x" * 201]) == 2
    err = capsys.readouterr().err
    assert err.startswith("juiz: error: --name") and "at most 200 characters" in err and "Traceback" not in err
    assert main(["submit", str(data), "--server", "http://juiz", "--name", "a\x07b"]) == 2
    assert "no control characters (found U+0007)" in capsys.readouterr().err


def test_the_python_client_sends_the_name(client: TestClient[Litestar]) -> None:
    juiz = JuizClient(http=client)
    batch = juiz.submit(triples(2), {"lang": "en"}, name="from Python")
    assert batch.name == "from Python" and juiz.batch(batch.id).name == "from Python"
    with pytest.raises(client_module.ApiError) as refused:
        juiz.submit(triples(1), name="two\nlines")
    assert refused.value.status_code == 422 and refused.value.body["field"] == "name"
