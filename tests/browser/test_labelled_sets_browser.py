"""A labelled set in headless Chromium (the session's stack: the API, a FAKE worker, a private Redis): a batch's
labelled items kept as a named set from the batch page, listed, graded again from the sets page with other options
(the labels come with the run), and one metric of an item labelled alone on its page, which the agreement section
then shows in its own row."""

from __future__ import annotations

import re
import secrets
import time

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import Stack
from tests.browser.test_ui_defects_browser import DEADLINE_S, sign_in, status, submit


def graded(stack: Stack, batch_id: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while status(stack, batch_id) != "done":
        assert time.monotonic() < deadline, "the batch was not graded in time"
        time.sleep(0.3)


def test_keep_a_labelled_set_grade_it_again_and_label_a_metric(browser: WebDriver, stack: Stack) -> None:
    driver = browser
    wait = WebDriverWait(driver, DEADLINE_S)
    headers = {"Authorization": f"Bearer {stack.key}"}
    tag = secrets.token_hex(4)  # the stack's labels are kept per triple for the whole session: triples of our own
    items = [{"id": f"s{i}", "question": f"Set {tag} topic {i}? [item-{i}]", "answer": f"Topic {i}."} for i in range(3)]
    batch_id = submit(stack, items)
    graded(stack, batch_id)
    labelled = httpx.patch(
        f"{stack.url}/v1/batches/{batch_id}/items/s2", json={"manual_label": "C"}, headers=headers, timeout=30
    )
    assert labelled.status_code == 200, labelled.text

    sign_in(driver, stack)
    driver.get(f"{stack.url}/ui/batches/{batch_id}")
    driver.find_element(By.CSS_SELECTOR, "details.team summary").click()
    name = f"set-{tag}"
    driver.find_element(By.ID, "labelset-name").send_keys(name)
    driver.find_element(By.CSS_SELECTOR, '[data-testid="save-labelset"] button[type=submit]').click()
    row = wait.until(ec.presence_of_element_located((By.ID, f"set-{name}")))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[2:4] == ["1", "1"]  # one triple, labelled

    Select(driver.find_element(By.ID, "run-set")).select_by_value(name)
    Select(driver.find_element(By.ID, "run-mode")).select_by_value("fast")
    driver.find_element(By.CSS_SELECTOR, '[data-testid="run-labelset"] button[type=submit]').click()
    wait.until(ec.url_matches(r"/ui/batches/[0-9a-f]{32}$"))
    match = re.search(r"/ui/batches/([0-9a-f]{32})$", driver.current_url)
    assert match is not None
    run_id = match.group(1)
    graded(stack, run_id)
    results = httpx.get(f"{stack.url}/v1/batches/{run_id}/results", headers=headers, timeout=30).json()["items"]
    assert [(r["id"], r["manual_label"]) for r in results] == [("s2", "C")]

    # One metric of the run's item labelled alone; the agreement section gets its row.
    driver.get(f"{stack.url}/ui/batches/{run_id}/items/0")
    driver.find_element(By.CSS_SELECTOR, "details.metric-labels summary").click()
    Select(driver.find_element(By.ID, "ml-answer_relevance")).select_by_value("P")
    driver.find_element(By.CSS_SELECTOR, '[data-testid="metric-label-answer_relevance"] button[type=submit]').click()
    wait.until(ec.url_contains("saved=1"))
    shown = driver.find_element(By.CSS_SELECTOR, '[data-testid="annotations"]').text
    assert "(on answer_relevance)" in shown
    driver.get(f"{stack.url}/ui/batches/{run_id}")
    metric_row = wait.until(
        ec.presence_of_element_located((By.CSS_SELECTOR, '[data-testid="metric-labels"] tr[data-metric]'))
    )
    assert metric_row.get_attribute("data-metric") == "answer_relevance"
