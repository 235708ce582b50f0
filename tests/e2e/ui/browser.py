"""A headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by selenium for the UI tests.

:class:`Browser` starts one Chromium with a fresh profile, signs in through Airflow's login page,
waits on DOM conditions with deadlines (never a fixed sleep), reads the console's errors, switches
Airflow's colour mode, and saves screenshots (and the page source, when a wait fails) in the
artifacts directory.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)


def missing_binaries() -> list[str]:
    return [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]


class Browser:
    def __init__(self, base_url: str, artifacts: Path, *, name: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.artifacts = artifacts
        self.name = name
        self._profile = tempfile.mkdtemp(prefix=f"chromium-{name}-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={self._profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(60)

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)

    # ------------------------------------------------------------------ waiting
    def wait(self, condition: Callable[[Any], T], what: str, timeout: float = 30.0) -> T:
        try:
            # an element of the page being left, found just before the next one loads, is looked for again
            waiting = WebDriverWait(
                self.driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
            )
            return waiting.until(condition)
        except TimeoutException:
            self.screenshot(f"timeout-{what}", source=True)
            raise AssertionError(f"[{self.name}] timed out after {timeout:.0f}s waiting for {what}") from None

    def element(self, css: str, timeout: float = 30.0) -> WebElement:
        def found(driver: Any) -> WebElement | bool:
            elements = driver.find_elements(By.CSS_SELECTOR, css)
            return elements[0] if elements and elements[0].is_displayed() else False

        return self.wait(found, css, timeout)

    def text_in(self, css: str, text: str, timeout: float = 30.0) -> WebElement:
        def found(driver: Any) -> WebElement | bool:
            for element in driver.find_elements(By.CSS_SELECTOR, css):
                if text in element.text:
                    return element
            return False

        return self.wait(found, f"{css} containing {text!r}", timeout)

    # ------------------------------------------------------------------ actions
    def open(self, path: str) -> None:
        self.driver.switch_to.default_content()
        self.driver.get(f"{self.base_url}{path}")

    def login(self, username: str, password: str) -> None:
        self.open("/auth/login?next=/")
        self.element("input[name='username']").send_keys(username)
        self.element("input[type='password']").send_keys(password)
        self.element("button[type='submit']").click()
        self.wait(lambda d: "/auth/login" not in d.current_url, "the login to finish")
        self.element("a[href$='/dags']")  # the navigation bar

    def console_errors(self) -> list[str]:
        """The console's errors since the last call (each read once)."""
        return [e["message"] for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def color_mode(self, mode: str) -> None:
        """Airflow's colour mode (``light`` / ``dark``: what its user menu stores), for the next load."""
        self.driver.execute_script("localStorage.setItem('theme', arguments[0])", mode)

    def navigated_in_page(self) -> bool:
        """Whether the page is the one :meth:`mark_page` marked (a router link does not reload it)."""
        return bool(self.driver.execute_script("return window.__kafkaEventsTestMark === true"))

    def mark_page(self) -> None:
        self.driver.execute_script("window.__kafkaEventsTestMark = true")

    def screenshot(self, label: str, *, source: bool = False) -> Path:
        path = self.artifacts / f"{self.name}-{label}.png"
        try:
            self.driver.save_screenshot(str(path))
            if source:
                path.with_suffix(".html").write_text(self.driver.page_source, encoding="utf-8")
        except WebDriverException:
            pass
        print(f"screenshot: {path}")
        return path
