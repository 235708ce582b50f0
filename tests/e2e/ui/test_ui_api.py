"""The Kafka Events view on a real api-server: who may see and do what, and what the pages hold.

Every route of the view's app (enumerated from the app itself, so a new route cannot escape)
refuses an anonymous caller and a forged token; a viewer sees every page but is refused the
replay (the confirmation page and the POST); an admin replays a dead letter after confirming it,
the original record lands on its source topic with its key and idempotency key, and the replay is
in Airflow's audit log and the api-server's audit line.  No secret of the deployment (a Kafka
connection's password and secret extra, a signing key) appears in any page or API answer, even
though the records shown carry them.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.routing import APIRoute

from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

PREFIX = "/kafka-events"
MICROSECONDS = re.compile(r"\d{2}:\d{2}:\d{2}\.\d{6}")


#: A DAG run id Airflow makes (``manual__2026-12-02T04:25:51.037365+00:00``): a name that holds a time
RUN_ID = re.compile(r"\b[a-z_]+__\d{4}-\d{2}-\d{2}T[0-9:.+-]+")


def _shown_text(html: str, run_id: str) -> str:
    """What a page says itself: without attribute values, record data shown verbatim (``<code>`` /
    ``<pre>``: headers, payload previews) and DAG run ids (this test's ``run_id``, and those of the
    other runs the stack's earlier tests made, which the Streams page lists too)."""
    html = RUN_ID.sub("", html.replace(run_id, ""))
    html = re.sub(r"<(code|pre)\b.*?</\1>", "", html, flags=re.DOTALL)
    return re.sub(r'"[^"]*"', '""', html)


def _routes() -> list[tuple[str, str]]:
    from airflow_kafka_events.ui.app import create_app

    routes = []
    for route in create_app().routes:
        if isinstance(route, APIRoute):
            for method in sorted(route.methods):
                routes.append((method, route.path))
    return routes


def _fill(path: str, values: dict[str, Any]) -> str:
    return re.sub(r"\{(\w+)(?::path)?\}", lambda m: quote(str(values[m.group(1)]), safe="/"), path)


def _sample_values(data) -> dict[str, Any]:
    partition, offset = data.dead_letters[0]
    return {"partition": partition, "offset": offset, "trigger_run_id": data.stream_id}


def _get(stack: AirflowStack, path: str, user: str | None, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.token(user)}"} if user else {}
    return stack.client.get(f"{PREFIX}{path}", headers=headers, timeout=60, **kwargs)


def _post(stack: AirflowStack, path: str, user: str | None, data: dict[str, str]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.token(user)}"} if user else {}
    return stack.client.post(f"{PREFIX}{path}", headers=headers, data=data, timeout=60)


def test_the_plugin_registers_its_app_and_views(ui_stack: AirflowStack):
    plugins = ui_stack.api_json("GET", "plugins")["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "airflow_kafka_events"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == [PREFIX]
    assert plugin["external_views"] == []
    bundles = {a["destination"]: a["bundle_url"] for a in plugin["react_apps"]}
    assert set(bundles) == {"nav", "dag", "dag_run", "task_instance"}
    # the bundle is served by the view's app, to a signed-in user only, as a JavaScript module
    for url in bundles.values():
        assert url.startswith(f"{PREFIX}/static/kafka-events.js?"), url
        served = ui_stack.client.get(url, headers={"Authorization": f"Bearer {ui_stack.token('viewer')}"})
        assert served.status_code == 200 and served.headers["content-type"].startswith("text/javascript")
        assert "globalThis.AirflowPlugin" in served.text
        assert ui_stack.client.get(url).status_code == 401


@pytest.mark.parametrize(("method", "path"), _routes())
def test_every_route_refuses_anonymous_and_forged_callers(ui_stack: AirflowStack, ui_data, method, path):
    url = f"{PREFIX}{_fill(path, _sample_values(ui_data))}"
    data = {"confirm": "x"} if method == "POST" else None
    anonymous = ui_stack.client.request(method, url, data=data, timeout=60)
    assert anonymous.status_code in (401, 403), (method, url, anonymous.status_code, anonymous.text[:300])
    forged = ui_stack.client.request(
        method, url, data=data, cookies={"_token": "not-a-jwt"}, headers={"Accept": "text/html"}, timeout=60
    )
    assert forged.status_code in (401, 403), (method, url, forged.status_code)
    assert "Kafka Events" in forged.text or forged.headers["content-type"].startswith("application/json")


def test_a_page_opened_without_a_session_links_to_the_login(ui_stack: AirflowStack):
    response = ui_stack.client.get(f"{PREFIX}/streams", headers={"Accept": "text/html"}, timeout=30)
    assert response.status_code == 401
    assert 'href="/auth/login' in response.text


def test_streams_show_the_stream_and_its_consumer(ui_stack: AirflowStack, ui_data, ui_topics):
    answer = _get(ui_stack, "/api/streams", "viewer", params={"dag_id": "e2e_ui_streams"}).json()
    (stream,) = [s for s in answer["streams"] if s["trigger_run_id"] == ui_data.stream_id]
    assert stream["state"] == "complete" and stream["pages"] == 12, stream
    assert stream["run_id"] == ui_data.run_id and stream["task_id"] == "produce"
    # the producer's own handler reads its stream back too: both checkpoints are shown
    consumers = {c["task_id"]: c for c in stream["consumers"]}
    assert set(consumers) == {"produce", "consume"}, stream["consumers"]
    consumer = consumers["consume"]
    assert consumer["lag_pages"] == 0, consumer
    assert consumer["pages_handled"] == 12 and consumer["finished"] is True
    assert consumer["lag_over_time"] and consumer["lag_over_time"][-1]["lag"] == 0, consumer
    # listed from the stream index: no scan window
    assert answer["index"]["topic"] == ui_topics.stream_index and answer["index"]["skipped"] == []
    assert answer["window"] is None and "stream index" in answer["window_text"]
    assert stream["status"] == "finished" and stream["pages_over_time"][-1]["pages"] == 12, stream

    detail = _get(ui_stack, f"/api/streams/{quote(ui_data.stream_id, safe='/')}", "viewer").json()
    assert detail["summary"]["pages"] == 12 and len(detail["pages"]) >= 12
    assert sorted(c["task_id"] for c in detail["consumers"]) == ["consume", "produce"]


def test_a_stream_page_reads_its_pages_where_the_index_says_and_else_by_lookup(
    ui_stack: AirflowStack, ui_data, ui_topics, kafka_bootstrap
):
    from datetime import datetime

    from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
    from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
    from airflow_kafka_events.kafka.producer import RecordProducer
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from airflow_kafka_events.streams.descriptor import stream_id

    path = f"/streams/{quote(ui_data.stream_id, safe='/')}"  # a typed URL: no ?partition=&offset=
    detail = _get(ui_stack, f"/api{path}", "viewer").json()
    assert detail["found_by"] == "hint", detail  # the index's location: its pages read around it
    ti = detail["task_instance"]
    assert (ti["state"], ti["tries"]) == ("success", 1), ti
    summary = detail["summary"]
    assert (summary["attempt"], summary["state"], summary["pages"]) == (0, "complete", 12), summary
    assert [p["sequence_index"] for p in detail["pages"]] == list(range(13))
    (part,) = detail["window"]["partitions"]
    assert part["end_offset"] == detail["pages"][-1]["offset"] + 1 and not part["truncated"]
    assert part["end_offset"] == detail["index"]["last_offset"] + 1, detail["index"]
    assert detail["index"]["status"] == "finished" and detail["index"]["pages"] == 12
    page = _get(ui_stack, path, "viewer")
    assert page.status_code == 200 and 'data-found-by="hint"' in page.text
    assert datetime.fromisoformat(detail["index"]["started_at"]) <= datetime.fromisoformat(ti["ended"])

    # a stream whose task instance Airflow does not know (its run deleted): the per-key lookup, said so
    orphan = stream_id("e2e_ui_streams", f"deleted__{uuid.uuid4().hex[:8]}", "produce")
    producer = RecordProducer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    try:
        for seq in range(3):
            envelope = TriggerEventEnvelope(trigger_run_id=orphan, sequence_index=seq, is_last=seq == 2)
            producer.send_and_wait(ui_topics.trigger_events, TRIGGER_EVENT_CODEC.encode(envelope), key=orphan)
    finally:
        producer.close(5.0)
    lost = _get(ui_stack, f"/api/streams/{quote(orphan, safe='/')}", "viewer").json()
    assert (lost["found_by"], lost["task_instance"], lost["summary"]["pages"]) == ("lookup", None, 2), lost
    page = _get(ui_stack, f"/streams/{quote(orphan, safe='/')}", "viewer")
    assert "Airflow knows no task instance of this stream" in page.text


def test_the_task_instance_tab_names_the_stream_it_writes_or_reads_with_its_lag(
    ui_stack: AirflowStack, ui_data, ui_topics
):
    # the UI leaves {MAP_INDEX} as it is for a task that is not mapped
    params = {
        "dag_id": "e2e_ui_streams",
        "run_id": ui_data.run_id,
        "task_id": "produce",
        "map_index": "{MAP_INDEX}",
    }
    page = _get(ui_stack, "/streams", "viewer", params=params)
    assert page.status_code == 200, page.text[:500]
    assert f">{ui_data.stream_id}</a>" in page.text and 'id="own-stream"' in page.text
    assert "This task instance writes the stream" in page.text
    assert f'/streams/{quote(ui_data.stream_id, safe="/")}" id="own-stream"' in page.text  # no location
    produce = _get(ui_stack, "/api/streams", "viewer", params=params).json()
    assert produce["task_instance_stream"] == ui_data.stream_id
    assert produce["index"]["topic"] == ui_topics.stream_index  # found in the index, by its stream id

    # the consumer writes no stream: the tab names the one it reads, with the stream page's lag
    consume = {**params, "task_id": "consume"}
    consumer = _get(ui_stack, "/api/streams", "viewer", params=consume).json()
    assert consumer["task_instance_stream"] is None, consumer["task_instance_stream"]
    (read,) = consumer["read_by_task_instance"]
    detail = _get(ui_stack, f"/api/streams/{quote(ui_data.stream_id, safe='/')}", "viewer").json()
    (shown,) = [c for c in detail["consumers"] if c["task_id"] == "consume"]
    assert read["trigger_run_id"] == ui_data.stream_id and read["lag_pages"] == shown["lag_pages"] == 0
    assert read["consumer_id"].startswith("e2e_ui_streams/consume/-1/"), read  # its own index record
    tab = _get(ui_stack, "/streams", "viewer", params=consume).text
    assert 'id="own-stream"' not in tab and "/consume/-1/" not in tab, tab  # no link to a stream not there
    assert 'id="no-own-stream"' in tab and 'lag <b class="lag">0</b>' in tab, tab


def test_asset_events_show_what_each_envelope_became(ui_stack: AirflowStack, ui_data):
    answer = _get(ui_stack, "/api/asset-events", "viewer", params={"asset": ui_data.asset_uri}).json()
    by_id = {e["event_id"]: e for e in answer["events"]}
    assert set(ui_data.event_ids) <= set(by_id), answer
    first, _second, third = (by_id[i] for i in ui_data.event_ids)
    assert first["dead_letter"] is not None and third["dead_letter"] is None
    assert first["partition_key"] == "2026-12-01" and first["idempotency_key"]
    assert "scanned" in answer["window_text"]


def test_dead_letters_are_listed_by_consumer_and_reason(ui_stack: AirflowStack, ui_data, ui_topics):
    answer = _get(ui_stack, "/api/dead-letters", "viewer", params={"consumer": "e2e-ui-consumer"}).json()
    coords = {(r["partition"], r["offset"]) for r in answer["records"]}
    assert set(ui_data.dead_letters) <= coords
    assert all(r["reason"] == "not-allowed" for r in answer["records"])
    none = _get(ui_stack, "/api/dead-letters", "viewer", params={"reason": "too-large"}).json()
    assert none["records"] == [] and none["window"]["topic"] == ui_topics.dlq


def test_a_viewer_sees_a_dead_letter_but_may_not_replay_it(ui_stack: AirflowStack, ui_data):
    partition, offset = ui_data.dead_letters[0]
    page = _get(ui_stack, f"/dead-letters/{partition}/{offset}", "viewer")
    assert page.status_code == 200 and 'id="replay" disabled' in page.text
    # the action first, above the record's details, headers and payload
    assert (
        page.text.index('id="replay"') < page.text.index('id="dead-letter"') < page.text.index('id="headers"')
    )
    assert _get(ui_stack, f"/dead-letters/{partition}/{offset}/replay", "viewer").status_code == 403
    record = _get(ui_stack, f"/api/dead-letters/{partition}/{offset}", "viewer").json()
    confirm = f"{record['topic']}:{partition}:{offset}"
    for path in (
        f"/dead-letters/{partition}/{offset}/replay",
        f"/api/dead-letters/{partition}/{offset}/replay",
    ):
        assert _post(ui_stack, path, "viewer", {"confirm": confirm}).status_code == 403


def test_an_admin_replays_a_dead_letter_after_confirming(ui_stack: AirflowStack, ui_data, kafka_bootstrap):
    from confluent_kafka import Consumer, TopicPartition

    partition, offset = ui_data.dead_letters[1]
    record = _get(ui_stack, f"/api/dead-letters/{partition}/{offset}", "admin").json()
    confirming = _get(ui_stack, f"/dead-letters/{partition}/{offset}/replay", "admin")
    assert confirming.status_code == 200
    # the confirmation page binds the record it shows: its fingerprint, repeated by the POST
    shown = re.search(r'name="fingerprint" value="([^"]+)"', confirming.text)
    assert shown is not None and shown.group(1) == record["fingerprint"], confirming.text[:500]
    wrong = _post(
        ui_stack,
        f"/api/dead-letters/{partition}/{offset}/replay",
        "admin",
        {"confirm": "other:0:0", "fingerprint": shown.group(1)},
    )
    assert wrong.status_code == 400, wrong.text
    confirm = f"{record['topic']}:{partition}:{offset}"
    replays = "SELECT owner FROM log WHERE event = 'kafka_events.replay'"
    before = len(ui_stack.query(replays))
    stale = {"confirm": confirm, "fingerprint": f"{record['fingerprint']}0"}  # another record there now
    refused = _post(ui_stack, f"/api/dead-letters/{partition}/{offset}/replay", "admin", stale)
    assert refused.status_code == 409 and "nothing replayed" in refused.text, refused.text
    assert len(ui_stack.query(replays)) == before
    confirmed = {"confirm": confirm, "fingerprint": shown.group(1)}
    done = _post(ui_stack, f"/api/dead-letters/{partition}/{offset}/replay", "admin", confirmed)
    assert done.status_code == 200, done.text
    receipt = done.json()["receipt"]
    assert receipt["target_topic"] == record["source_topic"] and receipt["actor"] == "admin"
    assert receipt["event_id"] == ui_data.event_ids[1] and receipt["idempotency_key"]

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"ui-check-{uuid.uuid4().hex}"})
    try:
        consumer.assign(
            [TopicPartition(receipt["target_topic"], receipt["target_partition"], receipt["target_offset"])]
        )
        replayed = consumer.poll(15.0)
        consumer.assign(
            [TopicPartition(record["source_topic"], record["source_partition"], record["source_offset"])]
        )
        original = consumer.poll(15.0)
    finally:
        consumer.close()
    assert replayed is not None and original is not None
    assert (replayed.key(), replayed.value()) == (original.key(), original.value())
    assert dict(replayed.headers())["idempotency_key"] == dict(original.headers())["idempotency_key"]

    rows = ui_stack.query("SELECT owner, extra FROM log WHERE event = 'kafka_events.replay'")
    assert any(r["owner"] == "admin" and confirm in r["extra"] for r in rows), rows
    assert f"actor=admin dlq={record['topic']}[{partition}]@{offset}" in ui_stack.logs("api-server")


def test_no_secret_reaches_any_page_or_answer(ui_stack: AirflowStack, ui_data, ui_secrets):
    values = _sample_values(ui_data)
    seen = 0
    for method, path in _routes():
        if method != "GET":
            continue
        response = _get(ui_stack, _fill(path, values), "admin", follow_redirects=True)
        assert response.status_code == 200, (path, response.status_code, response.text[:500])
        for secret in ui_secrets.all():
            assert secret not in response.text, (path, secret)
        seen += 1
        if not path.startswith("/api/"):  # times for people, the exact value only on hover (an attribute)
            assert not MICROSECONDS.search(_shown_text(response.text, ui_data.run_id)), path
    # the records shown do carry the secrets: they were masked, not absent
    page = _get(ui_stack, f"/api/dead-letters/{values['partition']}/{values['offset']}", "admin").json()
    assert "***" in str(page["headers"]) and "***" in page["payload_preview"]
    # extra is shown as the JSON it is, not JSON text inside JSON
    assert '"rows": 0' in page["payload_preview"] and '\\"' not in page["payload_preview"], page
    assert seen >= 10
