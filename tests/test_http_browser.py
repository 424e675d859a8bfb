"""The web console in a real headless Chromium (Debian's chromium + chromium-driver, via selenium).

A fleet owner runs a loop in the test, gated so that the page is seen showing ``queued`` before
the owner's next boundary makes it ``applied``; then the page's stop button ends the generation.
A screenshot is saved under the test's tmp_path and copied to ``.artifacts/console.png`` (ignored
by git). Without /usr/bin/chromium and /usr/bin/chromedriver the test skips, unless
``LIVE_STEERING_REQUIRE_BROWSER=1`` (set by .ci/run, which installs them): then it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from http_helpers import TOKEN, owned, serving
from live_steering import Input, LiveRuntime
from live_steering.fleet import SQLiteFleet
from live_steering.http import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.browser]

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parent.parent / ".artifacts"


def _need_browser() -> None:
    if os.path.exists(CHROMIUM) and os.path.exists(DRIVER):
        return
    message = f"{CHROMIUM} and {DRIVER} are needed (apt-get install chromium chromium-driver)"
    if os.environ.get("LIVE_STEERING_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{message}, and LIVE_STEERING_REQUIRE_BROWSER=1")
    pytest.skip(message)


def _driver(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1200,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(DRIVER))


async def test_console_steers_and_stops_a_running_session(tmp_path: Path, anyio_backend: str) -> None:
    """The page lists the running session with its owner's steering mode; a steer typed there shows
    queued, then applied without a reload; stop shows the generation ended; the page breaks no CSP
    rule."""
    _need_browser()
    path = str(tmp_path / "fleet.db")
    written: list[str] = []
    release = anyio.Event()

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        written.append(steer.text)

    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        anyio.create_task_group() as tg,
    ):
        ready = anyio.Event()

        async def owner() -> None:
            runtime = LiveRuntime(session_id="chat-42", steering_mode="one-at-a-time")
            async with worker.own(runtime):
                async with runtime.open_generation("gen-1") as gen:
                    await worker.flush("chat-42")
                    ready.set()
                    while await gen.wait_for_input():
                        await release.wait()  # the page must show `queued` first
                        await gen.boundary(write)
                await worker.flush("chat-42")
                await anyio.sleep_forever()

        tg.start_soon(owner)
        await ready.wait()
        app = create_app(fleet=host, token=TOKEN, poll_interval=0.05)
        async with serving(app) as url:

            def drive() -> dict[str, Any]:
                return _drive(url, tmp_path, lambda: anyio.from_thread.run_sync(release.set))

            seen = await anyio.to_thread.run_sync(drive)
        tg.cancel_scope.cancel()
    assert written == ["Use the corrected path"]
    assert seen["states"][:1] == ["queued"]
    assert seen["states"][-1] == "applied"
    assert "ended" in seen["generation"]
    assert seen["csp_errors"] == []


def _drive(url: str, tmp_path: Path, release: Any) -> dict[str, Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _driver(tmp_path / "profile")
    try:
        wait = WebDriverWait(driver, 60, poll_frequency=0.05)
        driver.get(url + "/")
        wait.until(lambda d: "enter the bearer token" in d.find_element(By.ID, "status").text)
        token = driver.find_element(By.ID, "token")
        assert driver.find_element(By.CSS_SELECTOR, "label[for=token]").text == "Bearer token"
        token.send_keys(TOKEN + Keys.ENTER)  # the keyboard, as a person would
        assert driver.execute_script("return window.sessionStorage.getItem('live-steering-token')") == TOKEN
        assert driver.execute_script("return window.localStorage.length") == 0
        row = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-session='chat-42']"))
        assert row.find_element(By.CSS_SELECTOR, ".generation").text == "gen-1"
        assert driver.find_element(By.ID, "status").text == ""  # the list's old problem is gone
        assert row.find_element(By.CSS_SELECTOR, ".owner-live").text == "yes"
        assert row.find_element(By.CSS_SELECTOR, ".mode").text == "one-at-a-time"  # the owner's (C30)
        row.find_element(By.CSS_SELECTOR, "button.open").send_keys(Keys.ENTER)
        wait.until(lambda d: d.find_element(By.ID, "stream-state").text == "(live)")
        assert driver.find_element(By.ID, "mode").text == "one-at-a-time"
        text = driver.find_element(By.ID, "steer-text")
        assert driver.switch_to.active_element == text  # focus moved to the box
        text.send_keys("Use the corrected path")
        driver.find_element(By.ID, "send").send_keys(Keys.ENTER)
        state = "#receipts tbody tr .state"
        states = [wait.until(lambda d: d.find_element(By.CSS_SELECTOR, state).text or False)]
        release()
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, state).text == "applied")
        states.append(driver.find_element(By.CSS_SELECTOR, state).text)
        assert driver.find_element(By.CSS_SELECTOR, "#receipts tbody tr .final-at").text
        driver.find_element(By.ID, "stop").send_keys(Keys.ENTER)
        wait.until(lambda d: "stopped" in d.find_element(By.ID, "action-status").text)
        wait.until(lambda d: "ended" in d.find_element(By.ID, "generation").text)
        generation = driver.find_element(By.ID, "generation").text
        # the stop button is disabled now: the keyboard user's focus stays in the session
        assert driver.switch_to.active_element == driver.find_element(By.ID, "steer-text")
        shot = tmp_path / "console.png"
        driver.save_screenshot(str(shot))
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(shot, ARTIFACTS / "console.png")
        logs = driver.get_log("browser")
        csp = [entry["message"] for entry in logs if "Content Security Policy" in entry["message"]]
        return {"states": states, "generation": generation, "csp_errors": csp}
    finally:
        driver.quit()


async def test_console_keeps_focus_and_says_what_failed(tmp_path: Path, anyio_backend: str) -> None:
    """A keyboard user's place survives another session changing (the list updates its rows in
    place); with a token the server refuses, the page says so and drops the rows it can no longer
    read, a steer sent leaves no row for an input never submitted, and the stop button says it
    did not stop."""
    _need_browser()
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        owned(worker, "chat-1"),
        owned(worker, "chat-2") as other,
    ):
        app = create_app(fleet=host, token=TOKEN, poll_interval=0.05)
        async with serving(app) as url:

            def change_the_other() -> None:
                anyio.from_thread.run(host.stop, "chat-2", "gen-1")

            def drive() -> dict[str, Any]:
                return _drive_failures(url, tmp_path, change_the_other)

            seen = await anyio.to_thread.run_sync(drive)
    assert other.ended == ["generation-stopped"]
    assert seen["focus_kept"] is True
    assert seen["refused"].startswith("the server refused")
    assert seen["token_state"] == "the server refused this token"
    assert seen["rows_after_refusal"] == 0
    assert seen["sent"].startswith("not sent:")
    assert seen["receipt_rows"] == 0
    assert seen["stopped"].startswith("not stopped:")


def _drive_failures(url: str, tmp_path: Path, change_the_other: Any) -> dict[str, Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _driver(tmp_path / "profile")
    try:
        wait = WebDriverWait(driver, 60, poll_frequency=0.05)
        driver.get(url + "/")
        driver.find_element(By.ID, "token").send_keys(TOKEN + Keys.ENTER)
        other = "tr[data-session='chat-2'] .generation"
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, other).text == "gen-1")
        button = driver.find_element(By.CSS_SELECTOR, "tr[data-session='chat-1'] button.open")
        driver.execute_script("arguments[0].focus()", button)
        change_the_other()
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, other).text == "none")  # the list's next poll
        focus_kept = driver.switch_to.active_element == button
        driver.switch_to.active_element.send_keys(Keys.ENTER)  # where the user was: it opens chat-1
        wait.until(lambda d: d.find_element(By.ID, "session-id").text == "chat-1")
        driver.find_element(By.ID, "token").send_keys("not-the-token" + Keys.ENTER)
        status = driver.find_element(By.ID, "status")
        wait.until(lambda d: status.text.startswith("the server refused"))
        refused = status.text
        rows = len(driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"))
        token_state = driver.find_element(By.ID, "token-state").text
        action = driver.find_element(By.ID, "action-status")
        driver.execute_script(  # count the page's list polls: its fetches of v1/sessions
            "window.polls = 0; const f = window.fetch; window.fetch = function (url) {"
            " if (String(url).endsWith('/v1/sessions')) { window.polls += 1; }"
            " return f.apply(this, arguments); };"
        )
        polls = "return window.polls"

        def after_the_next_list_poll() -> str:
            # the list polls on (refused, it says so in its own line): the action's line stays
            seen = driver.execute_script(polls)
            wait.until(lambda d: d.execute_script(polls) > seen)
            return str(action.text)

        driver.find_element(By.ID, "steer-text").send_keys("Use the corrected path")
        driver.find_element(By.ID, "send").send_keys(Keys.ENTER)
        wait.until(lambda d: action.text.startswith("not sent:"))
        sent = after_the_next_list_poll()
        receipt_rows = len(driver.find_elements(By.CSS_SELECTOR, "#receipts tbody tr"))
        driver.find_element(By.ID, "stop").send_keys(Keys.ENTER)
        wait.until(lambda d: action.text.startswith("not stopped:"))
        stopped = after_the_next_list_poll()
        assert status.text.startswith("the server refused")
        return {
            "focus_kept": focus_kept,
            "refused": refused,
            "token_state": token_state,
            "rows_after_refusal": rows,
            "sent": sent,
            "receipt_rows": receipt_rows,
            "stopped": stopped,
        }
    finally:
        driver.quit()
