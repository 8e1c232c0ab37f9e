"""A team labelling together (Litestar's test client, a real Redis, the FAKE worker): each key's holder is an
annotator; the queue leases items so two annotators at once get different ones (or each item twice, with k = 2);
every label is kept with its author and nobody's replaces another's; the annotators' alpha and kappa are on the page
and in the API; labels belong to the triple, so a second run of the same triples sees them all."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from tests.integration.helpers import make_settings, triples
from tests.integration.test_ui import KEYS, csrf_of, sign_in, submit

MakeClient = Callable[[Settings], TestClient[Litestar]]
ALICE = {"Authorization": f"Bearer {KEYS['alice']}"}
BOB = {"Authorization": f"Bearer {KEYS['bob']}"}


@pytest.fixture
def team(redis_url: str) -> Settings:
    """Two keys of one tenant, each naming its holder."""
    return make_settings(redis_url, api_keys=f"team/alice:{KEYS['alice']},team/bob:{KEYS['bob']}")


def start_queue(client: TestClient[Litestar], batch_id: str, size: int, k: int = 1) -> str:
    csrf = csrf_of(client.get(f"/ui/batches/{batch_id}").text)
    started = client.post(
        f"/ui/batches/{batch_id}/queue", data={"_csrf_token": csrf, "size": size, "k": k}, follow_redirects=False
    )
    assert started.status_code == 303, started.text
    return str(started.headers["location"])


def served(page: str) -> int | None:
    match = re.search(r'name="item" value="(\d+)"', page)
    return None if match is None else int(match.group(1))


def label(client: TestClient[Litestar], queue_url: str, page: str, item: int, value: str) -> None:
    response = client.post(
        queue_url,
        data={"_csrf_token": csrf_of(page), "item": item, "action": "label", "label": value, "comment": "why"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def test_two_annotators_label_one_batch_at_once_through_the_queue(
    make_client: MakeClient, team: Settings, run_worker: Any
) -> None:
    alice, bob = make_client(team), make_client(team)
    batch_id = submit(alice, KEYS["alice"], triples(20, label=None))
    run_worker(team)
    sign_in(alice, "alice")
    sign_in(bob, "bob")
    alice_queue, bob_queue = start_queue(alice, batch_id, 20), start_queue(bob, batch_id, 20)
    seen: dict[str, list[int]] = {"alice": [], "bob": []}
    # Both open their queue at once: each page holds its item until labelled or skipped.
    while True:
        alice_page, bob_page = alice.get(alice_queue).text, bob.get(bob_queue).text
        a, b = served(alice_page), served(bob_page)
        if a is None and b is None:
            break
        assert a != b, f"item {a} served to both at once"
        assert 'data-testid="annotator">alice' in alice_page and 'data-testid="annotator">bob' in bob_page
        if a is not None:
            seen["alice"].append(a)
            label(alice, alice_queue, alice_page, a, "C")
        if b is not None:
            seen["bob"].append(b)
            label(bob, bob_queue, bob_page, b, "I" if b % 2 else "C")
    assert not set(seen["alice"]) & set(seen["bob"]), "with k = 1 no item is labelled by both"
    assert sorted(seen["alice"] + seen["bob"]) == list(range(20))
    results = alice.get(f"/v1/batches/{batch_id}/results", headers=ALICE).json()["items"]
    authors = {r["id"]: [(a["annotator"], a["comment"]) for a in r["annotations"]] for r in results}
    assert all(len(names) == 1 for names in authors.values())
    assert {name for names in authors.values() for name, _ in names} == {"alice", "bob"}
    assert all(comment == "why" for names in authors.values() for _, comment in names)


def test_with_k_two_both_label_every_item_and_alpha_is_shown(
    make_client: MakeClient, team: Settings, run_worker: Any
) -> None:
    alice, bob = make_client(team), make_client(team)
    batch_id = submit(alice, KEYS["alice"], triples(20, label=None))
    run_worker(team)
    sign_in(alice, "alice")
    sign_in(bob, "bob")
    alice_queue, bob_queue = start_queue(alice, batch_id, 20, k=2), start_queue(bob, batch_id, 20, k=2)
    for client, queue_url, flip in ((alice, alice_queue, 5), (bob, bob_queue, 7)):
        while (page := client.get(queue_url).text) and (item := served(page)) is not None:
            label(client, queue_url, page, item, "I" if item % flip == 0 else "C")
    results = alice.get(f"/v1/batches/{batch_id}/results", headers=ALICE).json()["items"]
    assert all(sorted(a["annotator"] for a in r["annotations"]) == ["alice", "bob"] for r in results)

    # Neither can overwrite the other's label: bob's PATCH sets bob's own, alice's stays.
    changed = alice.patch(f"/v1/batches/{batch_id}/items/t1", json={"manual_label": "P"}, headers=BOB)
    assert changed.status_code == 200 and changed.json()["manual_label_by"] == "bob"
    item = next(
        r for r in alice.get(f"/v1/batches/{batch_id}/results", headers=ALICE).json()["items"] if r["id"] == "t1"
    )
    assert {a["annotator"]: a["label"] for a in item["annotations"]} == {"alice": "C", "bob": "P"}

    report = alice.get(f"/v1/batches/{batch_id}/agreement", headers=ALICE).json()
    annotators = report["annotators"]
    assert annotators["annotators"] == ["alice", "bob"] and annotators["items_shared"] == 20
    assert annotators["krippendorff_alpha_nominal"]["value"] is not None
    assert annotators["pairs"][0]["n"] == 20 and report["reference"].startswith("majority")
    page = alice.get(f"/ui/batches/{batch_id}").text
    assert 'data-testid="annotator-alpha"' in page and "alice / bob" in page
    assert "majority of the annotators" in page

    # The reference label by another rule: one annotator's, named on the page and in the API.
    chosen = alice.post(
        f"/ui/batches/{batch_id}/consensus", data={"_csrf_token": csrf_of(page), "consensus": "annotator:bob"}
    )
    assert chosen.status_code == 200 and "Compared with: annotator bob&#39;s label" in chosen.text
    by_bob = alice.get(f"/v1/batches/{batch_id}/agreement", headers=ALICE).json()
    assert by_bob["reference"] == "annotator bob's label" and by_bob["n"] == 20
    refused = alice.post(f"/ui/batches/{batch_id}/consensus", data={"_csrf_token": csrf_of(page), "consensus": "x"})
    assert refused.status_code == 422 and "majority or annotator:NAME" in refused.text


def test_the_same_triples_submitted_again_carry_every_label(
    make_client: MakeClient, team: Settings, run_worker: Any
) -> None:
    client = make_client(team)
    first = submit(client, KEYS["alice"], triples(6, label=None))
    run_worker(team)
    for n in range(4):
        response = client.patch(f"/v1/batches/{first}/items/t{n}", json={"manual_label": "C"}, headers=ALICE)
        assert response.status_code == 200, response.text
    second = submit(client, KEYS["bob"], triples(6, label=None))
    run_worker(team)
    n_first = client.get(f"/v1/batches/{first}/agreement", headers=ALICE).json()["n"]
    n_second = client.get(f"/v1/batches/{second}/agreement", headers=ALICE).json()["n"]
    assert n_first == n_second == 4
    # A label set in the second run reaches the first too.
    client.patch(f"/v1/batches/{second}/items/t5", json={"manual_label": "I"}, headers=BOB)
    assert client.get(f"/v1/batches/{first}/agreement", headers=ALICE).json()["n"] == 5
    sign_in(client, "alice")
    assert 'data-testid="agreement-n">5<' in client.get(f"/ui/batches/{first}").text
    # Another tenant's labels never reach these.
    other = make_settings(team.redis_url, api_keys=f"team/alice:{KEYS['alice']},other:other-key-0123456789")
    outsider = make_client(other)
    theirs = submit(outsider, "other-key-0123456789", triples(6, label=None))
    run_worker(other)
    agreement = outsider.get(
        f"/v1/batches/{theirs}/agreement", headers={"Authorization": "Bearer other-key-0123456789"}
    )
    assert agreement.json()["n"] == 0


def test_an_open_api_page_user_names_themself(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch_id = submit(client, "", triples(3, label=None))
    run_worker(settings)
    csrf = csrf_of(client.get(f"/ui/batches/{batch_id}").text)
    started = client.post(
        f"/ui/batches/{batch_id}/queue",
        data={"_csrf_token": csrf, "size": 3, "annotator": "Carol  K."},
        follow_redirects=False,
    )
    page = client.get(started.headers["location"]).text
    assert 'data-testid="annotator">Carol K.<' in page
    label(client, started.headers["location"], page, served(page) or 0, "P")
    results = client.get(f"/v1/batches/{batch_id}/results").json()["items"]
    assert [a["annotator"] for r in results for a in r["annotations"] or []] == ["Carol K."]


def test_the_rubric_is_shown_in_the_queue(make_client: MakeClient, team: Settings, run_worker: Any) -> None:
    client = make_client(team)
    batch_id = submit(client, KEYS["alice"], triples(2, label=None))
    run_worker(team)
    csrf = sign_in(client, "alice")
    saved = client.post(
        f"/ui/batches/{batch_id}/rubric", data={"_csrf_token": csrf, "rubric": "C: every claim is in the context."}
    )
    assert saved.status_code == 200
    queue_url = start_queue(client, batch_id, 2)
    assert 'data-testid="rubric">C: every claim is in the context.<' in client.get(queue_url).text


def test_the_labelled_set_is_exported_and_imported_and_juiz_agreement_reads_it(
    make_client: MakeClient, redis_url: str, run_worker: Any, tmp_path: Any, capsys: Any
) -> None:
    keys = {"team": "team-key-0123456789", "other": "other-key-0123456789"}
    settings = make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in keys.items()))
    client = make_client(settings)
    team, other = ({"Authorization": f"Bearer {k}"} for k in keys.values())
    first = submit(client, keys["team"], triples(5, label=None))
    run_worker(settings)
    for n, value in enumerate("CCPI"):
        client.patch(f"/v1/batches/{first}/items/t{n}", json={"manual_label": value}, headers=team)
    exported = client.get("/v1/labels", headers=team)
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [__import__("json").loads(line) for line in exported.text.splitlines()]
    assert len(lines) == 4 and all(line["triple"].startswith("t1:") and line["annotator"] == "team" for line in lines)

    # Another tenant's run of the same triples: nothing, until it imports the set.
    theirs = submit(client, keys["other"], triples(5, label=None))
    run_worker(settings)
    assert client.get(f"/v1/batches/{theirs}/agreement", headers=other).json()["n"] == 0
    imported = client.post("/v1/labels", json={"labels": lines}, headers=other)
    assert imported.status_code == 201 and imported.json() == {"imported": 4}
    assert client.get(f"/v1/batches/{theirs}/agreement", headers=other).json()["n"] == 4
    no_key = client.post("/v1/labels", json={"labels": [{"annotator": "x", "label": "C", "id": "t1"}]}, headers=other)
    assert no_key.status_code == 422 and "triple" in no_key.text

    # The CLI: a results file without labels, with the exported set beside it.
    from juiz.cli import main

    results = client.get(f"/v1/batches/{first}/results", headers=team).json()["items"]
    plain = tmp_path / "run.jsonl"
    plain.write_text(
        "".join(
            __import__("json").dumps({k: v for k, v in r.items() if k not in ("annotations", "manual_label")}) + "\n"
            for r in results
        )
    )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(exported.text)
    capsys.readouterr()
    assert main(["agreement", str(plain), "--labels", str(labels), "--resamples", "0", "--json"]) == 0
    assert __import__("json").loads(capsys.readouterr().out)["n"] == 4
