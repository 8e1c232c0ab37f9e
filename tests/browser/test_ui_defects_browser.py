"""The web page's defects that only a browser shows, each in headless Chromium against the real stack (see conftest):
the back/forward cache after a label is saved, the batches list at phone width, a lost session made visible with a
sign-in that comes back, and the confirmation before a cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import Stack
from tests.browser.test_ui_browser import save

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


def back_to_a_fresh_page(driver: WebDriver) -> None:
    """Go back and wait for the document ui.js fetches afresh. A page restored from the back/forward cache reloads
    itself on `pageshow`; a click on it before that reload is lost with the document, so wait until the current
    document is not the one first loaded by a plain navigation (its navigation entry is then `reload` or
    `back_forward`) and has finished loading."""
    driver.back()
    WebDriverWait(driver, DEADLINE_S, ignored_exceptions=[WebDriverException]).until(
        lambda d: d.execute_script(
            "const nav = performance.getEntriesByType('navigation')[0];"
            "return document.readyState === 'complete' && nav !== undefined && nav.type !== 'navigate';"
        )
    )


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


def agreement_n(driver: WebDriver) -> int:
    return int(driver.find_element(By.CSS_SELECTOR, '[data-testid="agreement-n"]').text)


def test_label_ten_items_through_the_queue_with_the_keyboard_only(
    browser: WebDriver, stack: Stack, screenshots: Path
) -> None:
    """Start the queue, then only keys: C/P/I label and advance, S skips, U undoes; the batch page's agreement
    then counts 10 more labelled items. The end offers the calibration fit; saving it takes one more click."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver, wait = browser, WebDriverWait(browser, DEADLINE_S)
    batch = items(30, label=None)
    for item in batch[:12]:
        item["manual_label"] = "C"
    batch_id = submit(stack, batch)
    wait.until(lambda _: status(stack, batch_id) == "done")
    sign_in(driver, stack)
    batch_url = f"{stack.url}/ui/batches/{batch_id}"
    driver.get(batch_url)
    before = agreement_n(driver)
    assert before == 12

    # Keyboard only: tab to the queue's size, choose 10, Enter submits its form.
    size = driver.find_element(By.ID, "q-size")
    driver.execute_script("arguments[0].focus()", driver.find_element(By.ID, "q-order"))
    ActionChains(driver).send_keys(Keys.TAB).perform()
    assert driver.switch_to.active_element == size
    ActionChains(driver).send_keys(Keys.HOME).perform()  # the focused select's first option: 10
    assert Select(size).first_selected_option.text == "10"
    ActionChains(driver).send_keys(Keys.TAB).perform()  # annotators per item: keep 1
    assert driver.switch_to.active_element == driver.find_element(By.ID, "q-k")
    ActionChains(driver).send_keys(Keys.TAB).send_keys(Keys.ENTER).perform()
    progress = (By.CSS_SELECTOR, '[data-testid="queue-progress"]')
    wait.until(ec.text_to_be_present_in_element(progress, "0 of 10 labelled"))

    def press(key: str, then: str) -> None:
        old = driver.find_element(By.TAG_NAME, "html")
        ActionChains(driver).send_keys(key).perform()

        def gone(_: WebDriver) -> bool:
            # The key posted a form: the old document is replaced. Chromium reports a node of a document being
            # replaced either as stale or as "does not belong to the document".
            try:
                old.is_enabled()
            except WebDriverException:  # StaleElementReferenceException is one
                return True
            return False

        wait.until(gone)
        WebDriverWait(driver, DEADLINE_S, ignored_exceptions=[WebDriverException]).until(
            ec.text_to_be_present_in_element(progress, then)
        )

    save(driver, screenshots, "queue")
    press("s", "0 of 10 labelled")  # skip the first…
    press("u", "0 of 10 labelled")  # …and come back to it
    keys = "cpicpicpic"
    for n, key in enumerate(keys[:9], start=1):
        press(key, f"{n} of 10 labelled")
    press("i", "10 of 10 labelled")  # a mistake on the last item…
    press("u", "9 of 10 labelled")  # …undone: the label is gone again
    assert driver.find_element(By.CSS_SELECTOR, '[data-testid="manual-label"]').text == "none"
    press("c", "10 of 10 labelled")
    assert "End of the queue" in driver.find_element(By.ID, "item").text
    assert int(driver.find_element(By.CSS_SELECTOR, '[data-testid="agreement-n"]').text) == before + 10

    driver.get(batch_url)
    assert agreement_n(driver) == before + 10

    # From the queue's end: fit, then save (two clicks); the upload form then offers it.
    back_to_a_fresh_page(driver)
    driver.find_element(By.XPATH, "//button[normalize-space()='Fit a calibration on these labels']").click()
    keep = wait.until(
        ec.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Save it for the next batches']"))
    )
    keep.click()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "[role=status]"), "Calibration saved"))
    assert driver.find_element(By.CSS_SELECTOR, "input[name=use_saved_calibration]").is_selected()


def test_a_running_batch_page_grows_its_table_without_a_reload(browser: WebDriver, stack: Stack) -> None:
    driver, wait = browser, WebDriverWait(browser, DEADLINE_S)
    batch_id = submit(stack, items(400))
    sign_in(driver, stack)
    driver.get(f"{stack.url}/ui/batches/{batch_id}?sort=index&dir=asc")
    driver.execute_script("window.juizTestMarker = 1; document.getElementById('items').scrollIntoView();")
    # What the reader sees stays put: the table's heading keeps its place in the viewport (the charts above it
    # grow, and the browser's scroll anchoring moves scrollY to match).
    where = "return document.getElementById('items-title').getBoundingClientRect().top"
    seen_at = driver.execute_script(where)

    def rows() -> int:
        """The table's rows: the count line's 'N of M graded items match' (the table shows 50 a page)."""
        line = driver.find_element(By.CSS_SELECTOR, "#items-body p.muted").text
        return int(line.split(" of ", 1)[1].split(" ", 1)[0])

    first = rows()
    assert first < 400, "the batch was over before the page was seen"
    wait.until(lambda _: rows() > first)
    wait.until(lambda _: rows() > first + 4)  # and again: it keeps following
    assert driver.find_elements(By.CSS_SELECTOR, "table.items tbody tr a")
    assert driver.execute_script("return window.juizTestMarker") == 1  # the same document: no reload
    assert driver.find_elements(By.CSS_SELECTOR, "#scores-body svg.chart")
    assert abs(driver.execute_script(where) - seen_at) <= 2
    httpx.delete(f"{stack.url}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {stack.key}"}, timeout=30)


def test_compare_two_runs_shows_a_changed_item(browser: WebDriver, stack: Stack, screenshots: Path) -> None:
    driver, wait = browser, WebDriverWait(browser, DEADLINE_S)
    first = items(6, label="C")  # the fake engine: score = N % 4 of [item-N]
    second = items(6, label=None)
    second[0]["question"] = second[0]["question"].replace("[item-0]", "[item-3]")  # d0: 0 → 3
    a, b = submit(stack, first), submit(stack, second)
    wait.until(lambda _: status(stack, a) == "done" and status(stack, b) == "done")
    sign_in(driver, stack)
    driver.find_element(By.LINK_TEXT, "Compare").click()
    Select(wait.until(ec.presence_of_element_located((By.ID, "c-a")))).select_by_value(a)
    Select(driver.find_element(By.ID, "c-b")).select_by_value(b)
    driver.find_element(By.XPATH, "//button[normalize-space()='Compare']").click()
    changed = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, '[data-testid="changed"] tbody tr')))
    cells = [td.text for td in changed.find_elements(By.TAG_NAME, "td")]
    assert cells[0].startswith("d0") and cells[2:] == ["I", "C", "0 → 3", "3"], cells
    assert driver.find_element(By.CSS_SELECTOR, '[data-testid="shared"]').text == "6"
    # The intervals arrive from the background and are swapped in.
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-agreement-url]"))
    assert "percentile bootstrap" in driver.find_element(By.ID, "compare-stats").text
    save(driver, screenshots, "compare")
