"""Screenshots of the Kafka Events view's pages for the README, from a running Airflow (e.g. the demo's).

    make demo KEEP=1      # in one terminal; it prints the Airflow address
    .venv/bin/python tests/e2e/ui/screenshots.py http://127.0.0.1:PORT docs/

Signs in as ``admin`` (password ``admin-password``, as the demo's users) with the same headless
Chromium as the browser tests, opens each page from the UI's Kafka Events view and saves
``ui-<page>.png`` (the dead-letter page: the newest dead letter) in the directory given.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from e2e.ui.browser import Browser

PAGES = ("streams", "asset-events", "dead-letters", "health")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    base, target = argv[0], Path(argv[1])
    target.mkdir(parents=True, exist_ok=True)
    browser = Browser(base, target, name="ui")
    try:
        browser.login("admin", "admin-password")
        for page in PAGES:
            browser.open(f"/plugin/kafka-events/kafka-events/{page}")
            browser.into_view_frame()
            browser.element(f"nav.tabs a.active[data-tab='{page}']")
            browser.driver.switch_to.default_content()
            browser.screenshot(page)
            if page == "dead-letters":
                browser.driver.switch_to.frame(browser.element("iframe"))
                links = browser.driver.find_elements("css selector", "tr.dead-letter a.open")
                if links:
                    links[0].click()
                    browser.element("#headers")
                    browser.driver.switch_to.default_content()
                    browser.screenshot("dead-letter")
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
