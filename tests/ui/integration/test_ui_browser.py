"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Selenium through Debian's
``chromium-driver``): the offline review workflow runs, then a person's clicks.

The runs page lists the review run; its page shows each step and each agent step's transcript
as turns, and its sub-workflow's run is one click away; a queued run is cancelled and then
retried through the buttons, and the store changes each time. Screenshots of the runs page and
the run page go to the test's temp dir, or to ``$IRONFLOW_UI_SCREENSHOTS`` (docs/images/ was made so).

Why Selenium: ``selenium`` is pure Python and drives the chromium-driver Debian ships for the very
chromium it installs (versions always match); Playwright would bring its own Node driver, a
~40 MB wheel, and is tied to its own browser builds. ``--no-sandbox`` only when the test runs as
root (as in CI's containers): Chromium refuses to start its sandbox as root.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from tests.fakes.local_sandbox import LOCAL_SANDBOX
from tests.ui.integration.ui_process import IRONFLOW, running_ui

from ironflow.engine import model
from ironflow.engine.store import open_store

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "workflows" / "review.py"
AGENT_STEPS = ("plan", "review correctness", "review security", "review tests")
OFFLINE_ANSWER = "Looks good to me. (offline fake model)"
SCREENSHOTS_ENV = "IRONFLOW_UI_SCREENSHOTS"

pytestmark = [*LOCAL_SANDBOX, pytest.mark.timeout(300)]


def _needs() -> None:
    """Skip, with the reason, when the browser is missing (CI installs it); the local sandbox's
    parts are the module's marks."""
    for binary, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} is not installed (apt-get install {package})")


@pytest.fixture
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    _needs()
    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for argument in ("--headless=new", "--window-size=1400,900", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(argument)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium will not start its sandbox as root
    # Its temp dirs (the singleton socket's dir, left in /tmp at every run) go with the test's.
    scratch = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    service = Service(executable_path=str(shutil.which("chromedriver")), env=scratch)
    driver = webdriver.Chrome(options=options, service=service)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def ironflow(*args: str) -> str:
    done = subprocess.run([*IRONFLOW, *args], capture_output=True, text=True, timeout=180, check=False,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def stored_status(store_url: str, run_id: str) -> model.RunStatus:
    async def read() -> model.RunStatus:
        store = open_store(store_url, create=False)
        await store.open()
        try:
            run = await store.get_run(run_id)
        finally:
            await store.close()
        assert run is not None
        return run.status

    return asyncio.run(read())


def screenshot(driver: WebDriver, path: Path) -> None:
    """The whole page, not only the window: the viewport is stretched to the page's height first."""
    height = int(driver.execute_script("return Math.ceil(document.body.getBoundingClientRect().height)"))
    metrics = {"width": 1400, "height": max(height, 300), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        assert driver.save_screenshot(str(path)), path
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def settled(driver: WebDriver) -> WebDriverWait:  # type: ignore[type-arg]
    """A wait that looks again when the page it looked at was replaced meanwhile (a click's
    navigation, a running run's reload): the element found on the old page is stale then."""
    return WebDriverWait(driver, 15, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))


def shown_text(driver: WebDriver, css: str) -> str | None:
    """The text of the first element matching ``css``, read in one script in the page: a find and a
    later read are two calls, and a navigation between them leaves the found node in no document
    (Chromium then answers with an inspector error, not a stale element)."""
    text = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e === null ? null : e.innerText.trim();", css
    )
    return None if text is None else str(text)


def press(driver: WebDriver, css: str) -> None:
    """Click the first element matching ``css`` in one script in the page: a pending run's page
    reloads itself, and a node found before a reload cannot be clicked after it."""
    assert driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (e === null) return false; e.click(); return true;", css
    ), f"nothing matches {css}"


def wait_for_status(driver: WebDriver, status: str) -> None:
    settled(driver).until(lambda d: shown_text(d, ".facts .status") == status)


def open_run(driver: WebDriver, link: WebElement) -> str:
    """Follow a link to a run's page and wait until that page is shown (not the one it was on)."""
    run_id = str(link.get_attribute("href")).rsplit("/runs/", 1)[1]
    link.click()
    settled(driver).until(lambda d: shown_text(d, "h1") == f"Run {run_id}")
    return run_id


def test_the_review_run_its_steps_and_transcripts_and_cancel_then_retry_in_a_browser(
    browser: WebDriver, tmp_path: Path
) -> None:
    shots = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    output = json.loads(ironflow("run", f"{EXAMPLE}:review", "--input", '{"change": "add retries"}', "--wait",
                                 "--fake-model", "--store", store))  # fmt: skip
    review_id = output["run"]
    queued_id = ironflow("run", f"{EXAMPLE}:review", "--input", '{"change": "drop retries"}', "--store", store).strip()

    with running_ui("--store", store, cwd=ROOT) as url:
        browser.get(f"{url}/")
        rows = {r.get_attribute("data-run-id"): r for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")}
        assert list(rows) == [queued_id, review_id]  # newest first
        cells = [c.text for c in rows[review_id].find_elements(By.TAG_NAME, "td")]
        assert cells[1:3] == ["review.py:review", "succeeded"]
        assert cells[6] != "-"  # its tokens, summed over its tree
        assert cells[7].startswith("$")

        assert open_run(browser, rows[review_id].find_element(By.CSS_SELECTOR, "a[href^='/runs/']")) == review_id
        assert "examples/workflows/review.py:review" in browser.find_element(By.CSS_SELECTOR, ".facts").text
        steps = browser.find_elements(By.CSS_SELECTOR, "tr.step")
        names = [s.find_elements(By.TAG_NAME, "td")[1].text.splitlines()[0] for s in steps]
        assert names == [*AGENT_STEPS, "summarise"]
        assert all("succeeded" in s.text for s in steps)
        for position, name in enumerate(AGENT_STEPS):
            transcript = browser.find_element(By.ID, f"transcript-{position}")
            assert transcript.find_element(By.TAG_NAME, "summary").text == f"Step {position} {name}"
            said = [t.text for t in transcript.find_elements(By.CSS_SELECTOR, "li.turn-assistant")]
            assert said == [f"assistant: {OFFLINE_ANSWER}"]
            assert transcript.find_elements(By.CSS_SELECTOR, "li.turn-result")
        assert not browser.find_elements(By.CSS_SELECTOR, ".actions button")  # a succeeded run: neither button
        screenshot(browser, shots / "ui-run.png")

        child_id = open_run(browser, steps[-1].find_element(By.CSS_SELECTOR, "a[href^='/runs/']"))  # the sub-workflow
        assert child_id != review_id
        assert "summary" in browser.find_element(By.CSS_SELECTOR, "tr.step").text
        assert OFFLINE_ANSWER in browser.find_element(By.ID, "transcript-0").text

        browser.get(f"{url}/runs/{queued_id}")
        wait_for_status(browser, "pending")
        press(browser, "button[value='cancel']")
        wait_for_status(browser, "cancelled")
        assert stored_status(store, queued_id) is model.RunStatus.CANCELLED
        press(browser, "button[value='retry']")
        wait_for_status(browser, "pending")
        assert stored_status(store, queued_id) is model.RunStatus.PENDING

        browser.get(f"{url}/")
        settled(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.run")) == 2)
        screenshot(browser, shots / "ui-runs.png")
    for name in ("ui-runs.png", "ui-run.png"):
        assert (shots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
