"""A screenshot of a running dashboard, taken in headless Chromium through Playwright (the
system's Chromium, Debian's ``chromium``: Playwright's own browsers are not needed): it
logs in with a token through the form, opens a request if asked, waits for the fragments
and writes a PNG of the whole page. For ``datasched demo-service`` and the docs; the
end-to-end test uses it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "CHROMIUM_ARGS",
    "capture",
    "chromium_path",
    "launch_chromium",
    "login",
    "take_screenshot",
]

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Chromium's flags: headless, offline (no update, sync or background calls), and no sandbox
(it needs user namespaces, which containers and root often lack)."""


def chromium_path() -> str | None:
    """The system's Chromium, or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def launch_chromium(playwright: Any, executable: str | None = None) -> Any:
    """Headless Chromium through ``playwright`` (a started ``sync_playwright()``)."""
    path = executable or chromium_path()
    if path is None:
        raise FileNotFoundError("no Chromium found (Debian: apt-get install chromium)")
    return playwright.chromium.launch(executable_path=path, args=list(CHROMIUM_ARGS))


def login(page: Any, base_url: str, token: str, *, period_ms: int = 1000) -> None:
    """Open the dashboard (refreshed every ``period_ms``) and log in with ``token``
    through its form."""
    page.goto(f"{base_url.rstrip('/')}/dashboard?period_ms={period_ms}")
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#whoami .user")


def take_screenshot(
    base_url: str,
    token: str,
    path: Path,
    *,
    request_id: str | None = None,
    executable: str | None = None,
    width: int = 1200,
) -> Path:
    """Log in to the dashboard at ``base_url`` with ``token``, open ``request_id`` (if
    given), and write the whole page as a PNG to ``path``; the path."""
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{exc}: screenshots need Playwright: pip install 'datasched[dev]'"
        ) from exc
    with sync_playwright() as pw:
        browser = launch_chromium(pw, executable)
        try:
            return capture(browser, base_url, token, path, request_id=request_id, width=width)
        finally:
            browser.close()


def capture(
    browser: Any,
    base_url: str,
    token: str,
    path: Path,
    *,
    request_id: str | None = None,
    width: int = 1200,
) -> Path:
    """:func:`take_screenshot` in a browser already launched (in a page of its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": width, "height": 800})
    try:
        login(page, base_url, token)
        page.wait_for_selector("#cluster table.nodes")
        page.wait_for_selector("#requests table, #requests p")
        if request_id is not None:
            page.click(f"a[data-open='{request_id}']")
            page.wait_for_selector(f"#request .request-detail[data-request='{request_id}']")
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.close()
    return path
