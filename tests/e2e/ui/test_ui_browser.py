"""The Kafka Events view as a person uses it: a headless Chromium on the real Airflow UI.

The admin signs in, opens "Kafka Events" from the navigation bar, sees the stream of the seeded
DAG run (complete, its consumer's lag) -- still listed after pressing "Scan" with the filter form's
empty fields --, the asset events and the health page, opens a dead letter
(its secrets masked), replays it after confirming, and opens the stream of a task instance from
its tab.  The viewer sees the same dead letter with the replay button disabled, and a POST sent
from the page anyway is refused (403).  Assertions are on the DOM; screenshots are saved in the
artifacts directory (the documentation's images come from the demo's data instead:
``examples/demo.py --screenshots docs``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium.webdriver.support.ui import Select

from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

if not os.environ.get("CI"):  # in CI a missing browser is a failure, never a skip
    pytest.importorskip("selenium", reason="selenium comes with the test extra")
from e2e.ui.browser import Browser, missing_binaries  # noqa: E402

if missing_binaries() and not os.environ.get("CI"):
    pytest.skip(
        f"no {', '.join(missing_binaries())} (scripts/bootstrap.sh installs chromium chromium-driver)",
        allow_module_level=True,
    )


@pytest.fixture
def open_browser(ui_stack: AirflowStack, artifacts_dir: Path) -> Iterator:
    opened: list = []

    def make(name: str):
        browser = Browser(ui_stack.base_url, artifacts_dir, name=name)
        opened.append(browser)
        return browser

    yield make
    for browser in opened:
        browser.close()


def _open_view(browser, tab: str | None = None) -> None:
    """From Airflow's home page: the navigation bar's "Kafka Events", then one of its tabs."""
    browser.open("/")
    browser.element("a[href$='/plugin/kafka-events']").click()  # "Kafka Events" in the nav bar
    browser.wait(lambda d: "/plugin/kafka-events" in d.current_url, "the view's URL")
    browser.into_view_frame()
    if tab:
        browser.element(f"nav.tabs a[data-tab='{tab}']").click()
        browser.wait(lambda d: d.find_elements("css selector", f"nav.tabs a.active[data-tab='{tab}']"), tab)


def test_admin_sees_streams_and_replays_a_dead_letter(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("admin")
    browser.login("admin", ui_stack.passwords["admin"])
    _open_view(browser)
    row = browser.element(f"tr.stream[data-stream='{ui_data.stream_id}']")
    assert row.get_attribute("data-state") == "complete"
    assert row.find_element("css selector", "td.pages").text == "12"
    assert "lag 0" in row.text and "consume" in row.text
    assert "stream index" in browser.element("p.index").text
    assert not browser.driver.find_elements(
        "css selector", "input[name='minutes'], input[name='max_records']"
    )
    browser.screenshot("streams")
    # "Filter" sends the form's empty DAG / run / task fields: no filter; the state filter keeps it
    Select(browser.element("form.filters select[name='state']")).select_by_value("complete")
    browser.element("form.filters button[type='submit']").click()
    browser.wait(lambda d: "state=complete" in d.execute_script("return location.href"), "the filtered page")
    browser.element(f"tr.stream[data-stream='{ui_data.stream_id}']")

    browser.element(f"tr.stream[data-stream='{ui_data.stream_id}'] a").click()
    assert browser.element("#stream-id").text == ui_data.stream_id
    assert len(browser.driver.find_elements("css selector", "#pages tr.page")) >= 12
    browser.screenshot("stream")

    browser.driver.switch_to.default_content()
    _open_view(browser, "asset-events")
    browser.element(f"tr.asset-event[data-event='{ui_data.event_ids[0]}']")
    assert "dead letter" in browser.element(f"tr[data-event='{ui_data.event_ids[0]}'] td.outcome").text
    browser.screenshot("asset-events")

    browser.element("nav.tabs a[data-tab='health']").click()
    browser.element("#watchers")
    browser.element("#bridges")
    browser.screenshot("health")

    partition, offset = ui_data.dead_letters[0]
    browser.element("nav.tabs a[data-tab='dead-letters']").click()
    browser.element(f"a.open[href$='/dead-letters/{partition}/{offset}']").click()
    assert browser.element("#reason").text == "not-allowed"
    headers = browser.element("#headers").text
    assert "authorization" in headers and "***" in headers
    browser.screenshot("dead-letter")
    browser.element("#replay").click()
    browser.element("#confirm-form")
    browser.screenshot("replay-confirm")
    browser.element("#confirm").click()
    done = browser.element("#replayed")
    assert "published again" in done.text and "admin" in done.text
    browser.screenshot("replayed")
    rows = ui_stack.query("SELECT owner FROM log WHERE event = 'kafka_events.replay' AND owner = 'admin'")
    assert rows


def test_the_task_instance_tab_opens_its_stream(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("task-instance")
    browser.login("admin", ui_stack.passwords["admin"])
    browser.open(f"/dags/e2e_ui_streams/runs/{quote(ui_data.run_id, safe='')}/tasks/produce")
    browser.text_in("a[href$='/plugin/kafka-events-task-instance']", "Kafka stream").click()
    browser.into_view_frame()
    assert browser.element("#own-stream").text == ui_data.stream_id
    browser.screenshot("task-instance-tab")


def test_a_viewer_cannot_replay(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("viewer")
    browser.login("viewer", ui_stack.passwords["viewer"])
    # the address the demo prints for the page: the UI opens that tab of the view in its frame
    browser.open("/plugin/kafka-events/kafka-events/dead-letters")
    browser.into_view_frame()
    browser.element("nav.tabs a.active[data-tab='dead-letters']")
    partition, offset = ui_data.dead_letters[0]
    browser.element(f"a.open[href$='/dead-letters/{partition}/{offset}']").click()
    button = browser.element("#replay")
    assert button.get_attribute("disabled") is not None
    assert "may only view" in browser.element("#replay-refused").text
    browser.screenshot("viewer-dead-letter")
    coords = browser.element("#dead-letter").get_attribute("data-coords")
    status = browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', credentials: 'same-origin',"
        " body: new URLSearchParams({confirm: arguments[1]})})"
        ".then(r => done(r.status), e => done(String(e)));",
        f"/kafka-events/dead-letters/{partition}/{offset}/replay",
        coords,
    )
    assert status == 403
