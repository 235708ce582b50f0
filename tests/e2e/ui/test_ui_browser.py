"""The Kafka Events view as a person uses it: a headless Chromium on the real Airflow UI.

The view is a ``react_apps`` page: Airflow imports its bundle into its own page (no frame).  The
admin opens "Kafka Events" from the navigation bar and sees the stream of the seeded DAG run
(complete, 12 pages, its consumer's lag), opens the stream (its pages, their chart), and follows
each kind of link into Airflow -- the DAG, the DAG run, the task instance, an asset -- landing on
that page of Airflow's UI without a page load (its router).  The admin opens a dead letter (its
secrets masked), confirms a replay and sees it published (Airflow's audit log has it); the viewer
sees the button disabled, and a POST sent from the page anyway is refused (403).  The task
instance's tab shows its stream; the view renders in Airflow's dark mode.  No page logs a console
error.  Assertions are on the DOM; screenshots go to the artifacts directory (the docs' images
come from the demo's data instead: ``examples/demo.py --screenshots docs``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

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

DAG_ID = "e2e_ui_streams"
BRIDGED_ASSET = "e2e_ui_bridged_orders"
BRIDGED_DAG = "e2e_ui_bridged"


@pytest.fixture
def open_browser(ui_stack: AirflowStack, artifacts_dir: Path) -> Iterator:
    opened: list[Browser] = []

    def make(name: str) -> Browser:
        browser = Browser(ui_stack.base_url, artifacts_dir, name=name)
        opened.append(browser)
        return browser

    yield make
    for browser in opened:
        errors = [e for e in browser.console_errors() if not _airflow_dependencies_bug(e)]
        browser.close()
        assert not errors, f"[{browser.name}] console errors: {errors}"


def _airflow_dependencies_bug(message: str) -> bool:
    """Airflow 3.3.2's own asset page asks ``/ui/dependencies?node_id=asset:N``, which answers 500 on
    PostgreSQL through psycopg 3 (its query casts a JSON path to VARCHAR: ``data #> %s::VARCHAR``);
    the error is Airflow's, on a page of Airflow's, and says nothing of this view."""
    return "/ui/dependencies?node_id=asset" in message and "status of 500" in message


def _path(browser: Browser) -> str:
    return str(unquote(browser.driver.execute_script("return location.pathname")))


def _open_view(browser: Browser, tab: str | None = None) -> None:
    """From Airflow's home page: the navigation bar's "Kafka Events", then one of its tabs."""
    browser.open("/")
    browser.element("a[href$='/plugin/kafka-events']").click()  # "Kafka Events" in the nav bar
    browser.element("nav.tabs a[data-tab='streams'] .active")
    if tab:
        browser.element(f"nav.tabs a[data-tab='{tab}']").click()
        browser.element(f"nav.tabs a[data-tab='{tab}'] .active")


def _follow(browser: Browser, css: str, path: str, shown: str) -> None:
    """Click the link ``css``: Airflow's page ``path`` shows ``shown``, in the same page (its router)."""
    browser.mark_page()
    browser.element(css).click()
    label = css.split("data-link=")[-1].strip("']")
    browser.wait(lambda d: _path(browser) == path, f"the {label} page")
    # the view's own text names the DAG, the run and the task too: the page is Airflow's once the
    # view has given way (React Router unmounts it a moment after the path changed)
    browser.wait(
        lambda d: not d.find_elements("css selector", ".kafka-events"),
        f"the view to give way to the {label} page",
    )
    browser.wait(lambda d: shown in d.find_element("tag name", "body").text, f"the {label} page's text")
    assert browser.navigated_in_page(), f"following {css} reloaded the page"


def test_streams_a_stream_and_links_that_land_on_airflow_pages(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("admin-links")
    browser.login("admin", ui_stack.passwords["admin"])
    _open_view(browser)
    row = browser.element(f"tr.stream[data-stream='{ui_data.stream_id}']")
    assert row.get_attribute("data-state") == "complete"
    assert row.find_element("css selector", "td.pages").text == "12"
    assert "lag 0" in row.text and "consume" in row.text
    time = row.find_element("css selector", "td.last time")
    assert re.fullmatch(r"\d+ (s|min|h|d) ago", time.text), time.text
    assert time.get_attribute("title").endswith("Z") and "T" in time.get_attribute("title")
    browser.screenshot("streams")

    row.find_element("css selector", "a[data-link='stream']").click()
    assert browser.element("#stream-id").text == ui_data.stream_id
    browser.wait(lambda d: len(d.find_elements("css selector", "#pages tr.page")) >= 12, "the stream's pages")
    chart = browser.element("[data-chart='pages-over-time']")
    assert chart.get_attribute("data-points") == "12"
    assert browser.element("#stream-state").text == "complete"
    browser.screenshot("stream")
    stream_path = _path(browser)

    run = ui_data.run_id
    _follow(browser, "#stream-facts a[data-link='dag']", f"/dags/{DAG_ID}", DAG_ID)
    browser.driver.back()
    browser.element("#stream-id")
    assert _path(browser) == stream_path
    _follow(browser, "#stream-facts a[data-link='dag-run']", f"/dags/{DAG_ID}/runs/{run}", run)
    browser.driver.back()
    browser.element("#stream-id")
    _follow(
        browser,
        "#stream-facts a[data-link='task-instance']",
        f"/dags/{DAG_ID}/runs/{run}/tasks/produce",
        "produce",
    )


def test_an_asset_link_lands_on_the_asset_page(
    open_browser, ui_stack: AirflowStack, ui_data, kafka_bootstrap, ui_topics
):
    """An envelope Airflow made an asset event of (as a bridge does): its row links the asset."""
    from airflow_kafka_events.assets.publish import emit

    ui_stack.wait_dag_parsed(BRIDGED_DAG, timeout=180)  # the asset is known once its DAG is parsed
    receipt = emit(
        "kafka-events://e2e-ui-bridge/orders", name=BRIDGED_ASSET, extra={"rows": 1}, producer="e2e-ui-link",
        topic=ui_topics.asset_events, bootstrap_servers=kafka_bootstrap,
    )  # fmt: skip
    (asset,) = ui_stack.query("SELECT id FROM asset WHERE name = ?", (BRIDGED_ASSET,))
    made = ui_stack.api_json(
        "POST",
        "assets/events",
        json={"asset_id": asset["id"], "extra": {"airflow_kafka_events": {"event_id": receipt.event_id}}},
    )
    browser = open_browser("admin-asset")
    browser.login("admin", ui_stack.passwords["admin"])
    _open_view(browser, "asset-events")
    row = browser.element(f"tr.asset-event[data-event='{receipt.event_id}']")
    assert f"asset event {made['id']} of" in row.text
    assert row.find_element("css selector", "a[data-link='asset']").text == BRIDGED_ASSET
    browser.screenshot("asset-events")
    _follow(
        browser,
        f"tr.asset-event[data-event='{receipt.event_id}'] a[data-link='asset']",
        f"/assets/{asset['id']}",
        BRIDGED_ASSET,
    )


def test_admin_replays_a_dead_letter_after_confirming(
    open_browser, ui_stack: AirflowStack, ui_data, ui_bridge_group
):
    browser = open_browser("admin-replay")
    browser.login("admin", ui_stack.passwords["admin"])
    _open_view(browser, "health")
    browser.element("#watchers")
    bridge = browser.element(f"tr.bridge[data-group='{ui_bridge_group}']")
    # the bridge's lag per partition as a chart: one bar per partition of the asset events topic
    chart = bridge.find_element("css selector", "[data-chart='bridge-lag']")
    assert chart.get_attribute("data-bars") == "2"
    browser.screenshot("health")
    browser.element("nav.tabs a[data-tab='dead-letters']").click()
    browser.element("nav.tabs a[data-tab='dead-letters'] .active")
    partition, offset = ui_data.dead_letters[0]
    browser.element(f"a.open[href$='/dead-letters/{partition}/{offset}']").click()
    assert browser.element("#reason").text == "not-allowed"
    headers = browser.element("#headers").text
    assert "authorization" in headers and "***" in headers
    # the Replay action comes first: above the record's facts, headers and payload
    replay_y = browser.element("#replay").location["y"]
    assert replay_y < browser.element("#reason").location["y"] < browser.element("#payload").location["y"]
    browser.screenshot("dead-letter")
    before = len(ui_stack.query("SELECT id FROM log WHERE event = 'kafka_events.replay'"))
    browser.element("#replay").click()
    form = browser.element("#confirm-form")
    assert f":{partition}:{offset}" in browser.element("#confirm-coords").text
    assert len(ui_stack.query("SELECT id FROM log WHERE event = 'kafka_events.replay'")) == before, (
        "opening the confirmation replayed"
    )
    browser.screenshot("replay-confirm")
    form.find_element("css selector", "#confirm").click()
    done = browser.element("#replayed")
    assert "published again" in done.text and "admin" in done.text
    browser.screenshot("replayed")
    rows = ui_stack.query("SELECT owner FROM log WHERE event = 'kafka_events.replay'")
    assert len(rows) == before + 1 and rows[-1]["owner"] == "admin"


def test_a_viewer_cannot_replay(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("viewer")
    browser.login("viewer", ui_stack.passwords["viewer"])
    partition, offset = ui_data.dead_letters[0]
    browser.open(f"/plugin/kafka-events/dead-letters/{partition}/{offset}")  # a typed address works too
    browser.element("nav.tabs a[data-tab='dead-letters']")
    button = browser.element("#replay")
    assert button.get_attribute("disabled") is not None
    assert "may only view" in browser.element("#replay-refused").text
    browser.screenshot("viewer-dead-letter")
    coords = browser.element("#dead-letter").get_attribute("data-coords")
    before = len(ui_stack.query("SELECT id FROM log WHERE event = 'kafka_events.replay'"))
    # what the page would send, sent anyway: refused (403) for the viewer, whether or not it carries
    # a CSRF token (the viewer cannot get one: the confirmation needs an asset write too)
    statuses = browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const post = (path) => fetch(path, {method: 'POST', credentials: 'same-origin',"
        " body: new URLSearchParams({confirm: arguments[1], fingerprint: 'x'})}).then(r => r.status);"
        "Promise.all([post(arguments[0]), fetch(arguments[2]).then(r => r.status)])"
        ".then(done, e => done(String(e)));",
        f"/kafka-events/api/dead-letters/{partition}/{offset}/replay",
        coords,
        f"/kafka-events/api/dead-letters/{partition}/{offset}/replay",
    )
    assert statuses == [403, 403], statuses
    browser.console_errors()  # the two refusals just provoked are logged by Chromium: expected here
    assert len(ui_stack.query("SELECT id FROM log WHERE event = 'kafka_events.replay'")) == before


def test_the_task_instance_tab_shows_its_stream(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("task-instance")
    browser.login("admin", ui_stack.passwords["admin"])
    browser.open(f"/dags/{DAG_ID}/runs/{quote(ui_data.run_id, safe='')}/tasks/produce")
    browser.text_in("a[href$='/plugin/kafka-events-task-instance']", "Kafka stream").click()
    own = browser.element("#own-stream")
    assert own.text == ui_data.stream_id
    browser.screenshot("task-instance-tab")
    own.click()
    assert browser.element("#stream-id").text == ui_data.stream_id


def _lightness(css_color: str) -> float:
    """0 (black) .. 100 (white): OKLCH's L, or an sRGB colour's mean channel."""
    values = [float(v) for v in re.findall(r"[\d.]+", css_color)]
    if css_color.startswith("oklch"):
        return values[0] * 100 if values[0] <= 1 else values[0]
    return sum(values[:3]) / 3 / 2.55


#: The colours the view is shown in: its text's, and the background of the nearest box that has one.
COLOURS = """
const view = document.querySelector('.kafka-events');
let box = view;
while (box && ['rgba(0, 0, 0, 0)', 'transparent'].includes(getComputedStyle(box).backgroundColor)) {
  box = box.parentElement;
}
return [getComputedStyle(view).color, box ? getComputedStyle(box).backgroundColor : 'none'];
"""


def test_the_view_follows_airflow_s_dark_mode(open_browser, ui_stack: AirflowStack, ui_data):
    browser = open_browser("dark")
    browser.login("admin", ui_stack.passwords["admin"])
    colors = {}
    for mode in ("light", "dark"):
        browser.color_mode(mode)
        _open_view(browser)
        browser.element(f"tr.stream[data-stream='{ui_data.stream_id}']")
        root = browser.driver.execute_script("return document.documentElement.className")
        assert mode in root.split(), root
        colors[mode] = browser.driver.execute_script(COLOURS)
        browser.screenshot(f"streams-{mode}")
    print(f"colours (text, background): {json.dumps(colors)}")
    (light_text, light_bg), (dark_text, dark_bg) = colors["light"], colors["dark"]
    assert _lightness(light_text) < 40 < 60 < _lightness(light_bg), colors  # dark text on light
    assert _lightness(dark_bg) < 40 < 60 < _lightness(dark_text), colors  # light text on dark
