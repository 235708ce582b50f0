"""Screenshots of the Kafka Events view's pages for the docs, from a running Airflow (e.g. the demo's).

    .venv/bin/python examples/demo.py --screenshots docs   # the demo, then the screenshots
    # or, with a demo left running (make demo KEEP=1; it prints the Airflow address):
    .venv/bin/python tests/e2e/ui/screenshots.py http://127.0.0.1:PORT docs/ [MINUTES]

Signs in as ``admin`` (password ``admin-password``, as the demo's users) with the same headless
Chromium as the browser tests, opens each page from the UI's Kafka Events view (with MINUTES, it
narrows the page's window to the last MINUTES minutes through its form, as a person would: the
demo's broker keeps the records of earlier demos) and saves ``ui-<page>.png`` (the dead-letter
page: the newest dead letter) in the directory given.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from e2e.ui.browser import Browser

PAGES = ("streams", "asset-events", "dead-letters", "health")


def _narrow(browser: Browser, page: str, minutes: int) -> None:
    """Scan the last ``minutes`` minutes through the page's window form (inside the view's frame)."""
    browser.into_view_frame()
    field = browser.element("form.filters input[name='minutes']")
    field.clear()
    field.send_keys(str(minutes))
    browser.element("form.filters button[type='submit']").click()
    browser.wait(
        lambda d: f"minutes={minutes}" in d.execute_script("return location.href"),
        f"the {page} page scanning {minutes} minutes",
    )
    browser.element(f"nav.tabs a.active[data-tab='{page}']")
    browser.driver.switch_to.default_content()


def _dead_letter(browser: Browser) -> Path | None:
    """The newest dead letter's page (opened from the listing), if the listing has one."""
    browser.driver.switch_to.frame(browser.element("iframe"))
    links = browser.driver.find_elements("css selector", "tr.dead-letter a.open")
    if not links:
        return None
    links[0].click()
    browser.element("#headers")
    browser.driver.switch_to.default_content()
    return browser.screenshot("dead-letter")


def take_screenshots(
    base_url: str,
    target: Path,
    *,
    minutes: int | None = None,
    user: str = "admin",
    password: str = "admin-password",
) -> list[Path]:
    """``ui-<page>.png`` of every page (and ``ui-dead-letter.png``) in ``target``; their paths."""
    target.mkdir(parents=True, exist_ok=True)
    browser = Browser(base_url, target, name="ui")
    saved: list[Path] = []
    try:
        browser.login(user, password)
        for page in PAGES:
            browser.open(f"/plugin/kafka-events/kafka-events/{page}")
            browser.into_view_frame()
            browser.element(f"nav.tabs a.active[data-tab='{page}']")
            browser.driver.switch_to.default_content()
            if minutes is not None:
                _narrow(browser, page, minutes)
            saved.append(browser.screenshot(page))
            if page == "dead-letters":
                letter = _dead_letter(browser)
                saved += [letter] if letter is not None else []
    finally:
        browser.close()
    return saved


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__)
        return 2
    take_screenshots(argv[0], Path(argv[1]), minutes=int(argv[2]) if len(argv) == 3 else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
