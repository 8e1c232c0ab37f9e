"""Browser tests: headless Chromium (Debian's `chromium` + `chromium-driver`, driven by Selenium) against a real
stack — a private redis-server, the API under uvicorn on a free port (`juiz serve`) and the FAKE worker
(bench/fake_worker.py) — each started as a child process and stopped at the end of the session.

They skip, saying why, only when Chromium or its driver is not installed (`make system-deps` installs both).
Screenshots go to $JUIZ_SCREENSHOTS_DIR when set (docs/screenshots is what README shows), else to a temp folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from juiz.runtime.processes import private_redis
from tests.fake_stack import fake_stack

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
FAKE_DELAY_S = "0.4"  # per engine call, so a batch of several calls is seen running before it is done
FAKE_CONVERSATION_S = "0.05"  # per conversation, so a batch's page sees its conversations move within a call


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@dataclass(frozen=True)
class Stack:
    url: str
    key: str
    tenant: str


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make system-deps)")
    workdir = tmp_path_factory.mktemp("ui-stack")
    key = secrets.token_urlsafe(16)
    with private_redis(workdir, dict(os.environ)) as (redis_url, _):
        extra = {
            "JUIZ_CHUNK_SIZE": "4",
            "JUIZ_COALESCE_MAX_ITEMS": "4",
            "JUIZ_FAKE_CALL_S": FAKE_DELAY_S,
            "JUIZ_FAKE_CONVERSATION_S": FAKE_CONVERSATION_S,
        }
        with fake_stack(workdir, "ui", redis_url, f"demo:{key}", extra) as url:
            yield Stack(url=url, key=key, tenant="demo")


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("JUIZ_SCREENSHOTS_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def chromium(profile: Path) -> WebDriver:
    """A headless Chromium with its own profile folder; skips the test when Chromium or its driver is missing."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromium-driver are not installed (make system-deps installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    driver = chromium(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()
