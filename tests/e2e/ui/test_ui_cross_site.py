"""Cross-site requests against the replay of a dead letter, from a real browser signed in as admin.

Attack pages are served by a small HTTP server of the test on another port: at ``localhost`` (another
site than the api-server's ``127.0.0.1``) and at ``127.0.0.1`` (the same site, another origin).  Each
knows everything a viewer can read (the dead letter's coordinates and fingerprint) and posts the
confirmation form's fields: a plain auto-submitting form, a sandboxed iframe posting to ``_top``
(``Origin: null``), a popup, and ``fetch``.  Each is refused and nothing is replayed: no new
``kafka_events.replay`` entry in Airflow's audit log and the same end offsets of the source topic.
A page of another origin cannot read the confirmation's JSON either (the CSRF token the view's
React page posts back).  The same browser then replays the dead letter through the confirmation page:
that works.  The
``_token`` cookie's attributes are read from the browser (docs/security.md states them).  Without a
browser: a cookie-authenticated POST with ``Origin: null``, without Origin, from another scheme,
port or site, without the CSRF token (also in a text/plain or JSON body, or in the query), with
another user's or another sign-in's is refused; a replay to a topic the configuration does not name
is refused (400) and publishes nothing, as is one of a dead letter whose source topic the
configuration does not name (its header forged by whoever wrote it).
"""

from __future__ import annotations

import html
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.airflow_stack import AirflowStack
from harness.kafka_records import record_at

pytestmark = pytest.mark.e2e

if not os.environ.get("CI"):  # in CI a missing browser is a failure, never a skip
    pytest.importorskip("selenium", reason="selenium comes with the test extra")
from e2e.ui.browser import Browser, missing_binaries  # noqa: E402

if missing_binaries() and not os.environ.get("CI"):
    pytest.skip(f"no {', '.join(missing_binaries())}", allow_module_level=True)

PREFIX = "/kafka-events"
REPLAYS = "SELECT id FROM log WHERE event = 'kafka_events.replay'"
REFUSED = ("nothing was done", "Not authenticated")  # 403 of the CSRF check, or 401: no cookie sent


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def attack_site(tmp_path_factory) -> Iterator[tuple[Path, int]]:
    """A directory served on 127.0.0.1 at a free port (reached as ``localhost`` or ``127.0.0.1``)."""
    root = tmp_path_factory.mktemp("attack-site")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _dead_letter(kafka_bootstrap: str, ui_topics, *, source_topic: str | None = None) -> tuple[int, int]:
    """An asset event and its dead letter, written for these tests (no DAG run needed); its
    x-source-topic header says ``source_topic`` if given (a forged one), else the event's topic."""
    from airflow_kafka_events.assets.publish import emit
    from airflow_kafka_events.dead_letters.headers import DeadLetterReason
    from airflow_kafka_events.dead_letters.letter import DeadLetter
    from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
    from airflow_kafka_events.kafka.producer import get_producer
    from airflow_kafka_events.kafka.settings import KafkaSettings

    receipt = emit(
        f"kafka-events://e2e-csrf/{uuid.uuid4().hex[:6]}", extra={"rows": 1}, producer="e2e-csrf",
        topic=ui_topics.asset_events, bootstrap_servers=kafka_bootstrap,
    )  # fmt: skip
    msg = record_at(kafka_bootstrap, receipt)
    letter = DeadLetter(
        reason=DeadLetterReason.NOT_ALLOWED, error_type="SourceNotAllowedError", error_message="not allowed",
        source_topic=source_topic or receipt.topic, source_partition=receipt.partition,
        source_offset=receipt.offset, consumer="e2e-csrf", event_id=receipt.event_id,
    )  # fmt: skip
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    delivered = DeadLetterWriter(producer, ui_topics.dlq).write(
        letter, value=msg.value(), key=msg.key(), headers=list(msg.headers() or [])
    )
    return delivered.partition, delivered.offset


@pytest.fixture(scope="module")
def target(ui_stack: AirflowStack, kafka_bootstrap: str, ui_topics) -> dict[str, Any]:
    """What the attacker knows (a viewer reads it): the form's fields and where to post them."""
    partition, offset = _dead_letter(kafka_bootstrap, ui_topics)
    headers = {"Authorization": f"Bearer {ui_stack.token('viewer')}"}
    record = ui_stack.client.get(
        f"{PREFIX}/api/dead-letters/{partition}/{offset}", headers=headers, timeout=60
    ).json()
    return {
        "url": f"{ui_stack.base_url}{PREFIX}/dead-letters/{partition}/{offset}/replay",
        "path": f"{PREFIX}/dead-letters/{partition}/{offset}/replay",
        "fields": {
            "confirm": f"{record['topic']}:{partition}:{offset}",
            "fingerprint": record["fingerprint"],
            "target_topic": record["source_topic"],
        },
        "source_topic": record["source_topic"],
    }


def _end_offsets(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"end-{uuid.uuid4().hex}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions]
    finally:
        consumer.close()


def _form(target: dict[str, Any], *, where: str = "_self") -> str:
    inputs = "".join(
        f'<input type="hidden" name="{name}" value="{html.escape(value)}">'
        for name, value in target["fields"].items()
    )
    return (
        f'<form method="post" action="{target["url"]}" target="{where}">{inputs}</form>'
        "<script>document.forms[0].submit()</script>"
    )


def _pages(root: Path, target: dict[str, Any]) -> None:
    form = _form(target)
    (root / "form.html").write_text(f"<html><body>{form}</body></html>")
    sandboxed = html.escape(f"<html><body>{_form(target, where='_top')}</body></html>")
    (root / "sandbox.html").write_text(
        '<html><body><iframe sandbox="allow-forms allow-scripts allow-top-navigation" '
        f'srcdoc="{sandboxed}"></iframe></body></html>'
    )
    (root / "popup.html").write_text(
        "<html><body><button id=\"go\" onclick=\"window.open('/form.html', 'attack')\">win</button>"
        "</body></html>"
    )
    body = "&".join(f"{k}={v}" for k, v in target["fields"].items())
    (root / "fetch.html").write_text(
        "<html><body><script>"
        f"fetch({target['url']!r}, {{method: 'POST', credentials: 'include', mode: 'no-cors', "
        f"headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {body!r}}})"
        ".then(() => document.title = 'sent', e => document.title = 'failed ' + e)"
        "</script></body></html>"
    )


def _token_reader(root: Path, target: dict[str, Any]) -> None:
    """A page that asks for the replay confirmation's JSON (it holds the user's CSRF token)."""
    confirmation = target["url"].replace(f"{PREFIX}/dead-letters/", f"{PREFIX}/api/dead-letters/")
    (root / "read-token.html").write_text(
        "<html><body><script>"
        f"fetch({confirmation!r}, {{credentials: 'include'}}).then(r => r.text())"
        ".then(t => document.title = 'read ' + t.slice(0, 200), e => document.title = 'failed ' + e)"
        "</script></body></html>"
    )


def _refused(browser: Browser, what: str) -> str:
    """The text of the answer the browser was shown for the attack (it must be a refusal)."""

    def shown(driver: Any) -> str | bool:
        text = driver.find_element("tag name", "body").text if "/replay" in driver.current_url else ""
        return text if any(word in text for word in REFUSED) else False

    text = browser.wait(shown, f"the refusal of the {what}", timeout=60)
    assert "Replayed" not in text
    return str(text)


@pytest.fixture(scope="module")
def admin_browser(ui_stack: AirflowStack, artifacts_dir: Path) -> Iterator[Browser]:
    """A Chromium signed in as admin, left on a blank page (Airflow's home page polls the api-server)."""
    browser = Browser(ui_stack.base_url, artifacts_dir, name="cross-site")
    try:
        browser.login("admin", ui_stack.passwords["admin"])
        browser.driver.get("about:blank")
        yield browser
    finally:
        browser.close()


def test_the_session_cookie_s_attributes_are_what_the_docs_say(admin_browser: Browser):
    admin_browser.open("/static/pin_32.png")  # a page of the site: WebDriver lists its cookies
    (cookie,) = [c for c in admin_browser.driver.get_cookies() if c["name"] == "_token"]
    measured = {k: cookie.get(k) for k in ("path", "httpOnly", "secure", "sameSite")}
    (raw,) = [
        c
        for c in admin_browser.driver.execute_cdp_cmd("Network.getAllCookies", {})["cookies"]
        if c["name"] == "_token"
    ]
    print(f"_token cookie after the login page: {measured}; DevTools: sameSite={raw.get('sameSite')}")
    # docs/security.md: the login page's JavaScript sets it (so not HttpOnly), Secure only over https,
    # without a SameSite attribute: Chromium applies Lax by default (WebDriver reports "Lax"), which
    # lets a cross-site top-level POST carry it in its first 2 minutes
    assert measured == {"path": "/", "httpOnly": False, "secure": False, "sameSite": "Lax"}, measured
    assert "sameSite" not in raw and raw["httpOnly"] is False, raw


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"], ids=["cross-site", "same-site-other-port"])
def test_pages_of_another_origin_cannot_replay(
    admin_browser: Browser, ui_stack: AirflowStack, kafka_bootstrap, attack_site, target, host
):
    root, port = attack_site
    _pages(root, target)
    site = f"http://{host}:{port}"
    before = (len(ui_stack.query(REPLAYS)), _end_offsets(kafka_bootstrap, target["source_topic"]))
    driver = admin_browser.driver
    main = driver.current_window_handle
    seen = {}

    for page in ("form", "sandbox"):
        driver.get(f"{site}/{page}.html")
        seen[page] = _refused(admin_browser, page)

    driver.get(f"{site}/popup.html")
    driver.find_element("id", "go").click()
    admin_browser.wait(lambda d: len(d.window_handles) > 1, "the popup")
    driver.switch_to.window(next(h for h in driver.window_handles if h != main))
    seen["popup"] = _refused(admin_browser, "popup")
    driver.close()
    driver.switch_to.window(main)

    driver.get(f"{site}/fetch.html")
    admin_browser.wait(lambda d: d.title.startswith(("sent", "failed")), "the fetch to be answered")

    # the React page's CSRF token comes from the confirmation's JSON: another origin cannot read it
    _token_reader(root, target)
    driver.get(f"{site}/read-token.html")
    admin_browser.wait(lambda d: d.title.startswith(("read", "failed")), "the token read to be answered")
    assert driver.title.startswith("failed"), driver.title
    print(f"{host}: { ({k: v.splitlines()[-1] for k, v in seen.items()}) }")

    # the sandboxed frame's origin is opaque (Origin: null, cross-site: the cookie only in its first 2
    # minutes); a same-site page's form and popup carry the cookie: the CSRF check refuses them
    assert "Origin header is null" in seen["sandbox"] or "Not authenticated" in seen["sandbox"]
    if host == "127.0.0.1":
        assert "nothing was done" in seen["form"] and "nothing was done" in seen["popup"], seen
    assert len(ui_stack.query(REPLAYS)) == before[0]
    assert _end_offsets(kafka_bootstrap, target["source_topic"]) == before[1]


def test_the_confirmation_page_still_replays_in_the_browser(
    admin_browser: Browser, ui_stack: AirflowStack, kafka_bootstrap, target
):
    before = (len(ui_stack.query(REPLAYS)), _end_offsets(kafka_bootstrap, target["source_topic"]))
    admin_browser.open(target["path"])
    admin_browser.element("#confirm").click()
    assert "published again" in admin_browser.element("#replayed").text
    assert len(ui_stack.query(REPLAYS)) == before[0] + 1
    assert sum(_end_offsets(kafka_bootstrap, target["source_topic"])) == sum(before[1]) + 1


def _token_of(ui_stack: AirflowStack, user: str, path: str, *, jwt: str | None = None) -> str:
    """The CSRF token the confirmation page gives ``user`` in the sign-in ``jwt`` (default: the stack's)."""
    bearer = {"Authorization": f"Bearer {jwt or ui_stack.token(user)}"}
    page = ui_stack.client.get(path, headers=bearer, timeout=60)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert page.status_code == 200 and found, page.text[:500]
    return found.group(1)


def _sign_in(ui_stack: AirflowStack, user: str) -> str:
    """A new sign-in of ``user`` (another JWT, another jti), as a browser gets at the login page."""
    answer = ui_stack.client.post(
        "/auth/token", json={"username": user, "password": ui_stack.passwords[user]}, timeout=30
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["access_token"])


def test_cookie_posts_need_this_site_s_origin_and_the_user_s_token(ui_stack: AirflowStack, target):
    jwt = ui_stack.token("admin")
    cookie = {"_token": jwt}
    own = {"Origin": ui_stack.base_url}
    token = _token_of(ui_stack, "admin", target["path"])
    others = _token_of(ui_stack, "bridge", target["path"])  # an op: may replay, but it is not admin's
    scheme, _, host_port = ui_stack.base_url.partition("://")
    host, _, port = host_port.partition(":")
    form = "&".join(f"{k}={v}" for k, v in {**target["fields"], "csrf_token": token}.items())
    before = len(ui_stack.query(REPLAYS))
    cases: dict[str, dict[str, Any]] = {
        "Origin null": {"headers": {"Origin": "null"}, "data": token},
        "no Origin": {"headers": {}, "data": token},
        "another site": {"headers": {"Origin": "http://localhost:1"}, "data": token},
        "https for http": {"headers": {"Origin": f"https://{host}:{port}"}, "data": token},
        "another port": {"headers": {"Origin": f"{scheme}://{host}:{int(port) + 1}"}, "data": token},
        "a path in Origin": {"headers": {"Origin": f"{ui_stack.base_url}/x"}, "data": token},
        "no token": {"headers": own, "data": None},
        "another user's token": {"headers": own, "data": others},
        "a forged token": {"headers": own, "data": token.split(".")[0] + "." + "0" * 64},
        # a form a cross-site page may send without a preflight, the token in a text/plain body
        "text/plain body": {"headers": {**own, "Content-Type": "text/plain"}, "content": form},
        "JSON body": {
            "headers": {**own, "Content-Type": "application/json"},
            "content": json.dumps({**target["fields"], "csrf_token": token}),
        },
        "token in the query": {"headers": own, "data": None, "query": {"csrf_token": token}},
    }
    for what, case in cases.items():
        kwargs: dict[str, Any] = {"headers": case["headers"], "params": case.get("query")}
        if "content" in case:
            kwargs["content"] = case["content"]
        else:
            csrf = case["data"]
            kwargs["data"] = {**target["fields"], **({"csrf_token": csrf} if csrf else {})}
        with httpx.Client(base_url=ui_stack.base_url, cookies=cookie, timeout=60) as client:
            answer = client.post(target["path"], **kwargs)
        assert answer.status_code == 403 and "nothing was done" in answer.text, (what, answer.text[:300])
    assert len(ui_stack.query(REPLAYS)) == before


def test_a_csrf_token_dies_with_its_sign_in(ui_stack: AirflowStack, kafka_bootstrap, target):
    """A token read in one sign-in is refused with the cookie of the next (after a sign-out), and the
    next sign-in's own token is accepted (the positive control of the same request)."""
    first, second = _sign_in(ui_stack, "admin"), _sign_in(ui_stack, "admin")
    old = _token_of(ui_stack, "admin", target["path"], jwt=first)
    new = _token_of(ui_stack, "admin", target["path"], jwt=second)
    own = {"Origin": ui_stack.base_url}
    before = (len(ui_stack.query(REPLAYS)), _end_offsets(kafka_bootstrap, target["source_topic"]))
    with httpx.Client(base_url=ui_stack.base_url, cookies={"_token": second}, timeout=60) as client:
        stale = client.post(target["path"], data={**target["fields"], "csrf_token": old}, headers=own)
        assert stale.status_code == 403 and "sign-in" in stale.text, stale.text[:300]
        assert len(ui_stack.query(REPLAYS)) == before[0]
        fresh = client.post(target["path"], data={**target["fields"], "csrf_token": new}, headers=own)
    assert fresh.status_code == 200 and "published again" in fresh.text, fresh.text[:300]
    assert len(ui_stack.query(REPLAYS)) == before[0] + 1
    assert sum(_end_offsets(kafka_bootstrap, target["source_topic"])) == sum(before[1]) + 1


def test_a_replay_to_a_topic_the_configuration_does_not_name_publishes_nothing(
    ui_stack: AirflowStack, kafka_bootstrap, ui_topics, target
):
    before = (len(ui_stack.query(REPLAYS)), _end_offsets(kafka_bootstrap, ui_topics.trigger_events))
    answer = ui_stack.client.post(
        f"{PREFIX}/api{target['path'].removeprefix(PREFIX)}",
        headers={"Authorization": f"Bearer {ui_stack.token('admin')}"},
        data={**target["fields"], "target_topic": ui_topics.trigger_events},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "ReplayTargetRefusedError"
    assert "replay_extra_target_topics" in answer.json()["message"]
    assert len(ui_stack.query(REPLAYS)) == before[0]
    assert _end_offsets(kafka_bootstrap, ui_topics.trigger_events) == before[1]


def test_the_confirmation_s_data_as_json_and_a_forged_source_topic_refused(
    ui_stack: AirflowStack, kafka_bootstrap, ui_topics, target
):
    """The JSON twin of the confirmation gives what a replay posts back; a dead letter whose header
    names a topic the configuration does not (here the trigger events topic) is shown as refused, and
    a POST of it is refused (400) naming the setting: nothing published, no audit entry."""
    admin = {"Authorization": f"Bearer {ui_stack.token('admin')}"}
    api_path = f"{PREFIX}/api{target['path'].removeprefix(PREFIX)}"
    confirmation = ui_stack.client.get(api_path, headers=admin, timeout=60).json()
    assert confirmation["refused"] is None, confirmation
    assert confirmation["targets"] == [target["source_topic"]]  # the asset events topic, nothing else
    assert confirmation["form"]["confirm"] == target["fields"]["confirm"]
    assert confirmation["form"]["fingerprint"] == target["fields"]["fingerprint"]
    assert confirmation["csrf"]["field"] == "csrf_token"
    assert re.fullmatch(r"[0-9]+\.[0-9a-f]{64}", confirmation["csrf"]["value"])
    viewer = {"Authorization": f"Bearer {ui_stack.token('viewer')}"}
    assert ui_stack.client.get(api_path, headers=viewer, timeout=60).status_code == 403

    partition, offset = _dead_letter(kafka_bootstrap, ui_topics, source_topic=ui_topics.trigger_events)
    forged = f"{PREFIX}/api/dead-letters/{partition}/{offset}/replay"
    shown = ui_stack.client.get(forged, headers=admin, timeout=60).json()
    assert shown["targets"] == [] and "replay_extra_target_topics" in shown["refused"], shown
    page = ui_stack.client.get(forged.replace("/api/", "/"), headers=admin, timeout=60)
    assert 'id="replay-refused"' in page.text and 'id="confirm-form"' not in page.text
    record = ui_stack.client.get(forged.removesuffix("/replay"), headers=admin, timeout=60).json()
    before = (len(ui_stack.query(REPLAYS)), _end_offsets(kafka_bootstrap, ui_topics.trigger_events))
    answer = ui_stack.client.post(
        forged,
        headers=admin,
        data={"confirm": f"{ui_topics.dlq}:{partition}:{offset}", "fingerprint": record["fingerprint"]},
        timeout=60,
    )
    assert answer.status_code == 400 and answer.json()["error"] == "ReplayTargetRefusedError", answer.text
    message = answer.json()["message"]
    assert (
        repr(ui_topics.trigger_events) in message and "[kafka_events] replay_extra_target_topics" in message
    )
    assert len(ui_stack.query(REPLAYS)) == before[0]
    assert _end_offsets(kafka_bootstrap, ui_topics.trigger_events) == before[1]
