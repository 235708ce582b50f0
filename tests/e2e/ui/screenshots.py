"""Screenshots of the Kafka Events view's pages for the docs, from a running Airflow (e.g. the demo's).

    .venv/bin/python examples/demo.py --screenshots docs   # the demo, then the screenshots
    # or, with a demo left running (make demo KEEP=1; it prints the Airflow address):
    .venv/bin/python tests/e2e/ui/screenshots.py http://127.0.0.1:PORT docs/ [MINUTES]

Signs in as ``admin`` (password ``admin-password``, as the demo's users) with the same headless
Chromium as the browser tests, opens each page of the view in Airflow's UI (with MINUTES, the
page's Kafka scans read the last MINUTES minutes only, ``?minutes=``: the demo's broker keeps the
records of earlier demos) and saves ``ui-<page>.png`` in light mode -- the streams, the newest
stream, asset events, dead letters, the newest dead letter, health -- and ``ui-<page>-dark.png`` of
the streams, the stream, dead letters and the dead letter in Airflow's dark mode, in the directory
given.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from e2e.ui.browser import Browser

#: (page, what shows it is loaded)
PAGES = (
    ("streams", "#streams-page table, #streams-page .empty"),
    ("asset-events", "#asset-events-page table, #asset-events-page .empty"),
    ("dead-letters", "#dead-letters-page table, #dead-letters-page .empty"),
    ("health", "#watchers"),
)
#: The pages also shown in dark mode (with the stream and the dead letter they open).
DARK = ("streams", "dead-letters")


def _open(browser: Browser, page: str, loaded: str, minutes: int | None) -> None:
    browser.open(f"/plugin/kafka-events/{page}{'' if minutes is None else f'?minutes={minutes}'}")
    browser.element(loaded, timeout=60)


def _first(browser: Browser, css: str, loaded: str) -> bool:
    """Open the first link ``css`` of the page (the newest row), if it has one."""
    links = browser.driver.find_elements("css selector", css)
    if not links:
        return False
    links[0].click()
    browser.element(loaded, timeout=60)
    return True


def _shots(browser: Browser, minutes: int | None, mode: str) -> list[Path]:
    suffix = "" if mode == "light" else f"-{mode}"
    saved: list[Path] = []
    for page, loaded in PAGES:
        if mode != "light" and page not in DARK:
            continue
        _open(browser, page, loaded, minutes)
        saved.append(browser.screenshot(f"{page}{suffix}"))
        if page == "streams" and _first(
            browser, "tr.stream a[data-link='stream']", "#pages, #stream-page .problem"
        ):
            saved.append(browser.screenshot(f"stream{suffix}"))
        if page == "dead-letters" and _first(
            browser, "tr.dead-letter a.open", "#headers, #dead-letter-page .problem"
        ):
            saved.append(browser.screenshot(f"dead-letter{suffix}"))
    return saved


def take_screenshots(
    base_url: str,
    target: Path,
    *,
    minutes: int | None = None,
    user: str = "admin",
    password: str = "admin-password",
) -> list[Path]:
    """``ui-<page>.png`` (light) and ``ui-<page>-dark.png`` of the view's pages in ``target``; their paths."""
    target.mkdir(parents=True, exist_ok=True)
    browser = Browser(base_url, target, name="ui")
    saved: list[Path] = []
    try:
        browser.login(user, password)
        for mode in ("light", "dark"):
            browser.color_mode(mode)
            saved += _shots(browser, minutes, mode)
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
