"""Helpers for the browser tests (tests/browser): Debian's headless Chromium driven by Selenium
through Debian's chromedriver, against a real `treadle serve`. Nothing here reaches the network:
Chromium starts with the flags that stop its own calls home, in a fresh profile."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

CHROMIUM = os.environ.get("CHROMIUM_FOR_TESTS", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_FOR_TESTS", "/usr/bin/chromedriver")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,900",
)
T = TypeVar("T")


def why_no_browser() -> str | None:
    """None when a browser can be driven here, else why not (the tests skip with it)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).is_file() and os.access(path, os.X_OK)):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def ok(resp: httpx.Response) -> Any:
    """The JSON of a successful API answer (else the test fails, saying what was asked and answered)."""
    assert resp.status_code < 300, f"{resp.request.method} {resp.request.url}: {resp.status_code} {resp.text}"
    return resp.json()


def wait_api(what: str, check: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll `check` (API calls, outside the page) until it returns something truthy; bounded, and
    the message names `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Browser:
    """One headless Chromium (a fresh profile, removed on quit) and what the page logged."""

    def __init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = tempfile.mkdtemp(prefix="treadle-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={self.profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        self.driver.set_page_load_timeout(30)

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # -- the page ----------------------------------------------------------------------------------

    def open(self, base_url: str, fragment: str = "", *, token: str | None = None, width: int | None = None) -> None:
        """Load /ui#fragment; `token` is put in the tab's sessionStorage first (as the page keeps
        it), so the page's first calls carry it; `width` emulates a phone's viewport (CSS px)."""
        d = self.driver
        d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        if width is not None:
            d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": width, "height": 800, "deviceScaleFactor": 2, "mobile": True})
        d.get(f"{base_url}/healthz")  # same origin: sessionStorage is set before /ui's script runs
        d.execute_script("sessionStorage.clear();"
                         " if (arguments[0]) sessionStorage.setItem('treadle-token', arguments[0]);", token or "")
        d.get(f"{base_url}/ui" + (f"#{fragment}" if fragment else ""))

    def console(self) -> list[dict[str, Any]]:
        """What the page logged since the last call (errors include CSP violations and failed loads)."""
        # selenium's chromium get_log has no annotations (it returns the GET_LOG command's value list)
        return list(self.driver.get_log("browser"))  # type: ignore[no-untyped-call]

    def errors(self) -> list[str]:
        return [e["message"] for e in self.console() if e["level"] in ("SEVERE", "ERROR")]

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def text(self, selector: str) -> str:
        return str(self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", selector) or "")

    def visible(self, selector: str) -> bool:
        return bool(self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return !!e && e.offsetParent !== null;", selector))

    def wait(self, what: str, check: Callable[[], T | None], timeout: float = 20.0) -> T:
        """Poll `check` until it returns something truthy (bounded; the message names `what`)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = check()
                if value:
                    return value
            except Exception as exc:  # an element replaced while read: look again
                last = exc
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last!r})" if last else ""))

    def wait_text(self, selector: str, text: str, timeout: float = 20.0) -> str:
        def check() -> str | None:
            now = self.text(selector)
            return now if text in now else None

        return self.wait(f"{text!r} in {selector}", check, timeout)

    def click(self, selector: str) -> None:
        """Click the element `selector` names as it is now (the page re-renders lists while it
        polls, so a found element may be replaced before a click lands)."""
        self.wait(f"{selector} to click", lambda: self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); if (!e) return false; e.click(); return true;", selector))

    def attr(self, selector: str, name: str) -> str:
        return str(self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null;",
            selector, name) or "")

    def attrs(self, selector: str, name: str) -> list[str]:
        return list(self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.getAttribute(arguments[1]));",
            selector, name))

    def fill(self, selector: str, value: str) -> None:
        field = self.css(selector)
        field.clear()
        field.send_keys(value)

    def pick(self, selector: str, value: str) -> None:
        from selenium.webdriver.support.select import Select

        self.wait(f"option {value!r} in {selector}",
                  lambda: any(o.get_attribute("value") == value for o in self.all(f"{selector} option")))
        Select(self.css(selector)).select_by_value(value)

    def overflow_x(self) -> int:
        """How many CSS px the page is wider than its viewport (0: no horizontal scroll)."""
        return int(self.driver.execute_script(
            "return Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
            " - document.documentElement.clientWidth;"))
