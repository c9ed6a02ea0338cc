"""The dashboard end to end in headless Chromium (Debian's ``chromium``, driven by
Playwright): the daemon on a loopback port, a wrong token refused, log in, submit a request
through the form and watch its progress reach ``completed``, log in as another user, submit
and cancel (``aborted``), and a screenshot of the whole page.

Without Chromium or Playwright the test skips, unless ``DATASCHED_REQUIRE_BROWSER=1`` (CI),
which makes it fail. Set ``DATASCHED_SCREENSHOT_DIR`` to keep the screenshot."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from datasched.service.app import create_app
from datasched.service.dashboard.shot import capture, chromium_path, launch_chromium, login
from datasched.service.store.db import Store
from service.dash_support import REQUEST, GatedRunner, dashboard_service

TIMEOUT_MS = 15_000
PERIOD_MS = 200
"""The page's refresh period here (1 s by default)."""


@pytest.fixture
def chromium() -> str:
    """The system's Chromium (with Playwright installed), or the test skips (fails in CI)."""
    reason = None
    path = chromium_path()
    try:
        import playwright.sync_api  # noqa: F401
    except ModuleNotFoundError:
        reason = "Playwright is not installed (pip install 'datasched[dev]')"
    if path is None:
        reason = "Chromium is not installed (Debian: apt-get install chromium)"
    if reason is not None:
        if os.environ.get("DATASCHED_REQUIRE_BROWSER") == "1":
            pytest.fail(f"a browser is required (DATASCHED_REQUIRE_BROWSER=1): {reason}")
        pytest.skip(reason)
    assert path is not None
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(sqlite_store: Store) -> Iterator[tuple[str, dict[str, str], GatedRunner]]:
    """The service (the stand-in runner: a packet of 5 events every 20 ms) served by uvicorn
    on loopback in a thread; its base URL, the users' tokens and the runner."""
    import uvicorn

    svc, tokens = dashboard_service(sqlite_store, delay_s=0.02)
    port = _free_port()
    config = uvicorn.Config(
        create_app(svc), host="127.0.0.1", port=port, log_level="warning", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        assert isinstance(svc.runner, GatedRunner)
        yield f"http://127.0.0.1:{port}", tokens, svc.runner
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        assert isinstance(svc.runner, GatedRunner)
        svc.runner.gate.set()
        svc.runner.stop()


def _submit(page: Any, body: str) -> str:
    # By the controls' accessible names: the labels and buttons a screen reader announces.
    page.get_by_role("textbox", name="Request").fill(body)
    page.get_by_role("button", name="Submit").click()
    link = page.wait_for_selector("#submit-result p.ok a")
    rid: str = link.inner_text()
    page.wait_for_selector(f"#request .request-detail[data-request='{rid}']")
    return rid


def _row_state(page: Any, rid: str) -> str | None:
    state: str | None = page.get_attribute(f"#requests tr[data-request='{rid}']", "data-state")
    return state


def test_log_in_submit_watch_it_complete_and_cancel_another(
    chromium: str, served: tuple[str, dict[str, str], GatedRunner], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    base, tokens, runner = served
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = launch_chromium(pw, chromium)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console: {m.text} {m.location}")
                    if m.type == "error"
                    else None
                ),
            )

            # A wrong token is refused and says so.
            page.goto(f"{base}/dashboard?period_ms={PERIOD_MS}")
            page.get_by_label("Token").fill("ds_0000_nothing")
            page.get_by_role("button", name="Log in").click()
            page.wait_for_selector("#login-error:has-text('That token is not valid.')")
            # The browser logs the refused call itself; nothing else may be there.
            assert len(problems) == 1, problems
            assert "status of 401" in problems[0], problems
            problems.clear()
            assert page.is_hidden("#app")

            # Ann logs in, submits and watches the progress reach completed.
            login(page, base, tokens["ann"], period_ms=PERIOD_MS)
            assert page.inner_text("#whoami .user") == "ann"
            page.wait_for_selector("#cluster tr[data-node='node-0']")
            runner.gate.clear()  # the jobs stop half way until the page has shown it
            rid = _submit(page, REQUEST)
            progress = f"#requests tr[data-request='{rid}'] .progress-text"
            page.wait_for_selector(f"{progress}:text-is('40 / 80 events (50%)')")
            assert _row_state(page, rid) == "running"
            page.wait_for_selector("#request td[data-stat='count']:text-is('8')")
            page.wait_for_selector("#cluster td[data-state='running']:text-is('2')")
            runner.gate.set()
            page.wait_for_selector(f"#requests tr[data-request='{rid}'][data-state='completed']")
            assert page.inner_text(progress) == "80 / 80 events (100%)"
            page.wait_for_selector("#request .request-detail[data-state='completed']")
            page.wait_for_selector("#request td[data-stat='count']:text-is('16')")
            assert page.is_visible("#request svg polyline.done")
            assert page.query_selector(f"#requests button[data-cancel='{rid}']") is None

            # Bob (whose jobs the runner holds) submits and cancels from the request's page.
            page.get_by_role("button", name="Log out").click()
            page.wait_for_selector("#login-section:visible")
            login(page, base, tokens["bob"], period_ms=PERIOD_MS)
            # A request without input is refused, with the field and the reason.
            page.get_by_role("textbox", name="Request").fill("title: empty\nprocessor: p\n")
            page.get_by_role("button", name="Submit").click()
            page.wait_for_selector("#submit-result p.error:has-text('Refused: request')")
            assert page.inner_text("#submit-result li") == "input: missing"
            # The browser logs the refused submission's 422 itself; nothing else.
            assert len(problems) == 1, problems
            assert "status of 422" in problems[0], problems
            problems.clear()
            other = _submit(page, REQUEST)
            assert page.query_selector(f"#requests tr[data-request='{rid}']") is None
            page.wait_for_selector("#request .request-detail[data-state='running']")
            page.click(f"#request button[data-cancel='{other}']")
            page.wait_for_selector(f"#requests tr[data-request='{other}'][data-state='aborted']")
            page.wait_for_selector("#request .request-detail[data-state='aborted']")
            assert page.query_selector(f"#request button[data-cancel='{other}']") is None
            page.reload()  # the token stays for the tab
            page.wait_for_selector(f"#requests tr[data-request='{other}'][data-state='aborted']")
            assert problems == []

            # The administrator's view, with Ann's request open, as a picture.
            shot = capture(
                browser, base, tokens["root"], tmp_path / "dashboard.png", request_id=rid
            )
        finally:
            browser.close()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
    keep = os.environ.get("DATASCHED_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "dashboard.png")
