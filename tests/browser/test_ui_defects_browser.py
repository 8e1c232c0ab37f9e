"""Issue 18's defects that only a browser shows, each in headless Chromium against the real stack (see conftest):
the back/forward cache after a label is saved, the batches list at phone width, a lost session made visible with a
sign-in that comes back, and the confirmation before a cancel."""

from __future__ import annotations

from typing import Any

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import Stack

DEADLINE_S = 60


def items(n: int, label: str | None = "C") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        item: dict[str, Any] = {"id": f"d{i}", "question": f"What about topic {i}? [item-{i}]", "answer": f"Topic {i}."}
        if label is not None:
            item["manual_label"] = label
        out.append(item)
    return out


def submit(stack: Stack, batch: list[dict[str, Any]], **body: Any) -> str:
    response = httpx.post(
        f"{stack.url}/v1/batches",
        json={"items": batch, **body},
        headers={"Authorization": f"Bearer {stack.key}"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def status(stack: Stack, batch_id: str) -> str:
    response = httpx.get(
        f"{stack.url}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {stack.key}"}, timeout=30
    )
    return str(response.json()["status"])


def sign_in(driver: WebDriver, stack: Stack) -> None:
    driver.get(f"{stack.url}/ui/signin")
    driver.find_element(By.ID, "api_key").send_keys(stack.key)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, DEADLINE_S).until(ec.presence_of_element_located((By.ID, "file")))


def test_back_after_saving_a_label_shows_the_saved_label(browser: WebDriver, stack: Stack) -> None:
    driver, wait = browser, WebDriverWait(browser, DEADLINE_S)
    batch_id = submit(stack, items(4, label="C"))
    wait.until(lambda _: status(stack, batch_id) == "done")
    sign_in(driver, stack)
    batch_url = f"{stack.url}/ui/batches/{batch_id}"
    driver.get(f"{batch_url}?sort=index&dir=asc")
    driver.find_element(By.CSS_SELECTOR, "table.items tbody tr a").click()
    wait.until(ec.presence_of_element_located((By.ID, "manual_label")))
    Select(driver.find_element(By.ID, "manual_label")).select_by_visible_text("I")
    driver.find_element(By.XPATH, "//button[normalize-space()='Save label']").click()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "[role=status]"), "Manual label saved"))

    driver.back()  # the item page as it was before the save
    wait.until(lambda d: "?saved" not in d.current_url)
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, '[data-testid="manual-label"]'), "I"))
    assert driver.find_element(By.CSS_SELECTOR, '[data-testid="manual-label"]').text.startswith("I")
    driver.back()  # the batch page: its table shows the new label too
    wait.until(lambda d: "/items/" not in d.current_url)
    first = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "table.items tbody tr")))
    wait.until(lambda _: first.find_elements(By.TAG_NAME, "td")[6].text == "I")


def test_the_batches_list_fits_a_phone(browser: WebDriver, stack: Stack) -> None:
    driver = browser
    submit(stack, items(2))
    sign_in(driver, stack)
    driver.set_window_size(390, 844)
    driver.get(f"{stack.url}/ui/batches")
    driver.find_element(By.CSS_SELECTOR, "table.list tbody tr")
    overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the batches list scrolls sideways by {overflow}px at 390 px"


def test_a_lost_session_is_shown_and_signing_in_again_comes_back(browser: WebDriver, stack: Stack) -> None:
    driver, wait = browser, WebDriverWait(browser, DEADLINE_S)
    batch_id = submit(stack, items(120))  # runs for a while: the page polls its progress
    sign_in(driver, stack)
    deep = f"{stack.url}/ui/batches/{batch_id}?sort=index&dir=asc"
    driver.get(deep)
    driver.delete_cookie("juiz_session")  # as if it expired or was signed out elsewhere
    banner = wait.until(ec.visibility_of_element_located((By.ID, "signed-out")))
    assert "session has ended" in banner.text
    banner.find_element(By.TAG_NAME, "a").click()
    wait.until(ec.presence_of_element_located((By.ID, "api_key"))).send_keys(stack.key)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == deep)
    httpx.delete(f"{stack.url}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {stack.key}"}, timeout=30)


def test_cancel_asks_first(browser: WebDriver, stack: Stack) -> None:
    driver, wait = browser, WebDriverWait(browser, DEADLINE_S)
    batch_id = submit(stack, items(160))
    sign_in(driver, stack)
    driver.get(f"{stack.url}/ui/batches/{batch_id}")
    button = driver.find_element(By.XPATH, "//button[normalize-space()='Cancel batch']")
    button.click()
    wait.until(ec.alert_is_present()).dismiss()
    assert status(stack, batch_id) in ("queued", "running")
    button.click()
    wait.until(ec.alert_is_present()).accept()
    wait.until(lambda _: status(stack, batch_id) == "cancelled")
