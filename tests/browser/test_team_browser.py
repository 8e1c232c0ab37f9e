"""A team in two headless Chromiums against a real stack of its own (two named keys of one tenant; a redis-server
with its append-only file on, so it can be stopped and started again): two annotators label one 20-item batch at
once through the queue and are never served the same item; with k = 2 both label every item and the annotators'
alpha is on the batch page; a label saved while Redis is stopped for 10 s is kept in the page and stored once Redis
is back."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import chromium
from tests.fake_stack import fake_stack
from tests.integration.helpers import AofRedis

DEADLINE_S = 60
OUTAGE_S = 10.0
KEYS = {"alice": secrets.token_urlsafe(16), "bob": secrets.token_urlsafe(16)}


@dataclass(frozen=True)
class TeamStack:
    url: str
    redis: AofRedis


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamStack]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make system-deps)")
    workdir = tmp_path_factory.mktemp("team-stack")
    redis = AofRedis(workdir / "redis")
    redis.workdir.mkdir()
    redis.start()
    keys = ",".join(f"team/{name}:{key}" for name, key in KEYS.items())
    try:
        with fake_stack(workdir, "team", redis.url, keys, {"JUIZ_CHUNK_SIZE": "10"}) as url:
            yield TeamStack(url, redis)
    finally:
        redis.stop()


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[WebDriver, WebDriver]]:
    alice, bob = chromium(tmp_path / "alice"), chromium(tmp_path / "bob")
    try:
        yield alice, bob
    finally:
        alice.quit()
        bob.quit()


def graded_batch(team: TeamStack, n: int) -> str:
    items: list[dict[str, Any]] = [
        {"id": f"t{i}", "question": f"What about topic {i}? [item-{i}] {secrets.token_hex(4)}", "answer": f"Topic {i}."}
        for i in range(n)
    ]
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    response = httpx.post(f"{team.url}/v1/batches", json={"items": items}, headers=headers, timeout=30)
    assert response.status_code == 202, response.text
    batch_id = str(response.json()["id"])
    deadline = time.monotonic() + DEADLINE_S
    while httpx.get(f"{team.url}/v1/batches/{batch_id}", headers=headers, timeout=30).json()["status"] != "done":
        assert time.monotonic() < deadline, "the batch was not graded in time"
        time.sleep(0.3)
    return batch_id


def sign_in(driver: WebDriver, team: TeamStack, name: str) -> None:
    driver.get(f"{team.url}/ui/signin")
    driver.find_element(By.ID, "api_key").send_keys(KEYS[name])
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, DEADLINE_S).until(ec.presence_of_element_located((By.ID, "file")))


def start_queue(driver: WebDriver, team: TeamStack, batch_id: str, size: int, k: int) -> None:
    driver.get(f"{team.url}/ui/batches/{batch_id}")
    Select(driver.find_element(By.ID, "q-size")).select_by_value(str(size))
    Select(driver.find_element(By.ID, "q-k")).select_by_value(str(k))
    driver.find_element(By.CSS_SELECTOR, "form.queue-start button[type=submit]").click()
    WebDriverWait(driver, DEADLINE_S).until(ec.presence_of_element_located((By.ID, "item")))


def current_item(driver: WebDriver) -> int | None:
    found = driver.find_elements(By.CSS_SELECTOR, "form.queue-form input[name=item]")
    return int(found[0].get_attribute("value") or -1) if found else None


def press(driver: WebDriver, key: str) -> None:
    """A label key, then the next item's page."""
    before = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.TAG_NAME, "body").send_keys(key)
    WebDriverWait(driver, DEADLINE_S).until(ec.staleness_of(before))


def test_two_annotators_at_once_through_the_queue(two: tuple[WebDriver, WebDriver], team: TeamStack) -> None:
    alice, bob = two
    sign_in(alice, team, "alice")
    sign_in(bob, team, "bob")
    batch_id = graded_batch(team, 20)
    start_queue(alice, team, batch_id, 20, 1)
    start_queue(bob, team, batch_id, 20, 1)
    served: dict[str, list[int]] = {"alice": [], "bob": []}
    for _ in range(40):
        a, b = current_item(alice), current_item(bob)
        if a is None and b is None:
            break
        assert a != b, f"item {a} was served to both at once"
        if a is not None:
            served["alice"].append(a)
            press(alice, "c")
        if b is not None:
            served["bob"].append(b)
            press(bob, "i")
    assert not set(served["alice"]) & set(served["bob"])
    assert sorted(served["alice"] + served["bob"]) == list(range(20))

    # k = 2: both label every item; neither's label replaces the other's; alpha between them on the batch page.
    batch_id = graded_batch(team, 10)
    start_queue(alice, team, batch_id, 10, 2)
    start_queue(bob, team, batch_id, 10, 2)
    for driver, keys in ((alice, "ccccciiiii"), (bob, "cccccccccc")):
        for key in keys:
            assert current_item(driver) is not None
            press(driver, key)
        assert current_item(driver) is None
    alice.get(f"{team.url}/ui/batches/{batch_id}")
    table = WebDriverWait(alice, DEADLINE_S).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, '[data-testid="annotator-alpha"]'))
    )
    assert "alice / bob" in table.text and "Krippendorff" in table.text
    alice.get(f"{team.url}/ui/batches/{batch_id}/items/7")
    shown = alice.find_element(By.CSS_SELECTOR, '[data-testid="annotations"]').text
    assert "alice: " in shown and "bob: C" in shown


def test_a_label_saved_while_redis_is_stopped_is_stored_once_it_is_back(
    two: tuple[WebDriver, WebDriver], team: TeamStack
) -> None:
    alice, _ = two
    sign_in(alice, team, "alice")
    batch_id = graded_batch(team, 2)
    alice.get(f"{team.url}/ui/batches/{batch_id}/items/1")
    Select(alice.find_element(By.ID, "manual_label")).select_by_value("P")
    team.redis.shutdown()
    stopped = time.monotonic()
    try:
        alice.find_element(By.CSS_SELECTOR, "form.label-form button[type=submit]").click()
        notice = WebDriverWait(alice, DEADLINE_S).until(ec.visibility_of_element_located((By.ID, "label-kept")))
        assert "label P is kept in this page" in notice.text
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
    finally:
        team.redis.start()
    WebDriverWait(alice, DEADLINE_S).until(
        ec.text_to_be_present_in_element((By.CSS_SELECTOR, '[data-testid="manual-label"]'), "P")
    )
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    results = httpx.get(f"{team.url}/v1/batches/{batch_id}/results", headers=headers, timeout=30).json()["items"]
    assert {r["id"]: r["manual_label"] for r in results}["t1"] == "P"
