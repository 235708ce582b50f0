"""Asset watchers through a real Airflow (scheduler, triggerer, dag-processor, api-server) and Kafka.

(a) a DAG-level failure callback emits an operational event for ``ops://investigate``; the
    investigation DAG, scheduled on that asset through a ``KafkaAssetEventTrigger`` watcher,
    runs once and sees the event's payload in its triggering asset events;
(b) the same idempotency key published twice becomes exactly one asset event;
(c) a poison record goes to the dead-letter topic with its reason, and the next good event
    still becomes an asset event; the triggerer reports the dead letter and the watchers' lag to
    the test run's StatsD server;
(d) a feedback loop (a DAG whose failure callback emits to the asset that triggers it) is cut
    at the watcher's ``max_causation_depth``: the number of runs is bounded;
(e) two assets on one topic across a triggerer crash and restart: no event lost, none twice
    (each watcher resumes at the position it stored in its asset's state store).

(g) an asset whose watcher is Airflow's own ``MessageQueueTrigger(scheme="kafka-events", ...)``
    (common.messaging): emitted events become its asset events and its consumer DAG runs on them.

Every watched asset of ``dags/e2e_assets_watcher.py`` uses one connection with one ``group.id``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from airflow_kafka_events.assets import publish as external
from airflow_kafka_events.assets.publish import Receipt
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher.stream import state_key
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

INVESTIGATE_URI = "ops://investigate/"
DEDUPE_URI = "e2e://watcher/dedupe"
POISON_URI = "e2e://watcher/poison"
LOOP_URI = "e2e://watcher/loop"
RESTART_A_URI = "e2e://watcher/restart-a"
RESTART_B_URI = "e2e://watcher/restart-b"
MESSAGE_QUEUE_URI = "e2e://watcher/message-queue"
#: the assets watched on the session's events topic (every one of them refuses a poison record)
TOPIC_URIS = (
    INVESTIGATE_URI,
    DEDUPE_URI,
    POISON_URI,
    LOOP_URI,
    RESTART_A_URI,
    RESTART_B_URI,
    MESSAGE_QUEUE_URI,
)
LOOP_MAX_DEPTH = 2  # as in the DAG file
DAG_IDS = (
    "e2e_watcher_failing_job",
    "e2e_watcher_investigate",
    "e2e_watcher_dedupe",
    "e2e_watcher_poison",
    "e2e_watcher_loop",
    "e2e_watcher_restart_a",
    "e2e_watcher_restart_b",
    "e2e_watcher_message_queue",
)
EVENT_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def topics(kafka_admin, airflow_extra_env: dict[str, str]) -> dict[str, str]:
    """The watched topic (3 partitions) and the dead-letter topic of this session exist, and so does
    the watchers' compacted topic (``topics ensure`` makes it: clean-stop marks, dead-letter claims)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from airflow_kafka_events.kafka.topic_plan import WATCHER_STOPS_TOPIC
    from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics

    ensure_topics(kafka_admin, [TopicSpec(WATCHER_STOPS_TOPIC, cleanup_policy="compact")])

    run = airflow_extra_env.get("AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN")
    assert run, "tests/e2e/conftest.py airflow_extra_env must set AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN"
    names = {"events": f"e2e.watcher.events.{run}", "dlq": f"e2e.watcher.dlq.{run}"}
    specs = [NewTopic(names["events"], num_partitions=3), NewTopic(names["dlq"], num_partitions=1)]
    for future in kafka_admin.create_topics(specs).values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline = time.monotonic() + 30
    for name in names.values():
        while True:
            meta = kafka_admin.list_topics(topic=name, timeout=5).topics.get(name)
            if meta is not None and meta.error is None and meta.partitions:
                if all(p.leader >= 0 for p in meta.partitions.values()):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} not ready: {meta}")
            time.sleep(0.2)
    return names


@pytest.fixture(scope="module")
def stack(airflow_stack: AirflowStack, topics: dict[str, str]) -> Iterator[AirflowStack]:
    for dag_id in DAG_IDS:
        airflow_stack.wait_dag_parsed(dag_id, timeout=180)
    # the watchers run on both triggerers of the production topology (a record every watcher refuses
    # is still dead-lettered once: the watchers claim it in Kafka, triggers/dead_letter_claims.py)
    yield airflow_stack


def _emit(bootstrap: str, topic: str, uri: str, **kwargs: Any) -> Receipt:
    return external.emit(uri, topic=topic, bootstrap_servers=bootstrap, producer="e2e-test", **kwargs)


def _asset_events(stack: AirflowStack, uri: str) -> list[dict[str, Any]]:
    rows = stack.query(
        "SELECT ae.id, ae.extra, ae.partition_key FROM asset_event ae "
        "JOIN asset a ON a.id = ae.asset_id WHERE a.uri = ? ORDER BY ae.id",
        (uri,),
    )
    for row in rows:
        row["extra"] = json_column(row["extra"])
        row["payload"] = (row["extra"] or {}).get("payload") or {}
    return rows


def _describe(row: dict[str, Any]) -> str:
    """One asset event row in a line: what tells a repeat of one record from two emissions."""
    payload = row["payload"]
    return (
        f"asset_event {row['id']}: event_id={payload.get('event_id')} "
        f"idempotency_key={payload.get('idempotency_key')} kafka={payload.get('kafka')} "
        f"source={payload.get('source')} extra={payload.get('extra')}"
    )


def _events_with(stack: AirflowStack, uri: str, event_id: str) -> list[dict[str, Any]]:
    return [row for row in _asset_events(stack, uri) if row["payload"].get("event_id") == event_id]


def _wait_for_events(
    stack: AirflowStack, uri: str, event_ids: list[str], timeout: float = EVENT_TIMEOUT
) -> None:
    def arrived() -> bool:
        seen = {row["payload"].get("event_id") for row in _asset_events(stack, uri)}
        return all(event_id in seen for event_id in event_ids)

    stack.wait_for(arrived, timeout, f"asset events {event_ids} of {uri}", components=("triggerer",))


def _dead_letters(bootstrap: str, topic: str) -> list[tuple[DeadLetter, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-dlq-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    found: list[tuple[DeadLetter, Any]] = []
    quiet_until = time.monotonic() + 5.0
    try:
        while time.monotonic() < quiet_until:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            found.append((DeadLetter.from_headers(msg.headers()), msg))
            quiet_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return found


def _wait_for_dead_letter(
    stack: AirflowStack, bootstrap: str, topic: str, match: Callable[[DeadLetter], bool], what: str
) -> list[tuple[DeadLetter, Any]]:
    def matching() -> list[tuple[DeadLetter, Any]]:
        return [(letter, msg) for letter, msg in _dead_letters(bootstrap, topic) if match(letter)]

    return stack.wait_for(
        matching, EVENT_TIMEOUT, what, components=("triggerer", "dag-processor"), interval=2.0
    )


def _stored_position(stack: AirflowStack, uri: str, topic: str, partition: int) -> int:
    """Where the watcher of ``uri`` resumes on ``topic[partition]``, from the asset state store."""
    rows = stack.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.uri = ? AND s.key = ?",
        (uri, state_key("kafka_watcher")),
    )
    if not rows:
        return -1
    value = json.loads(rows[0]["value"]) if isinstance(rows[0]["value"], str) else rows[0]["value"]
    return int(value["positions"].get(topic, {}).get(str(partition), -1))


def _high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-hw-{uuid.uuid4().hex[:8]}"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1])
    finally:
        consumer.close()


def _wait_drained(stack: AirflowStack, bootstrap: str, uri: str, topic: str, partitions: set[int]) -> None:
    """Wait until the watcher of ``uri`` stored a position at the end of each of ``partitions``: it
    has read, and Airflow confirmed, everything written there so far -- then nothing more can come."""
    ends = {p: _high_watermark(bootstrap, topic, p) for p in partitions}
    stack.wait_for(
        lambda: all(_stored_position(stack, uri, topic, p) >= end for p, end in ends.items()),
        90,
        f"the watcher of {uri} to store its position at the end of {topic} {sorted(partitions)}",
        ("triggerer",),
    )


def _dag_runs(stack: AirflowStack, dag_id: str) -> list[dict[str, Any]]:
    return stack.query(
        "SELECT id, run_id, state, run_type FROM dag_run WHERE dag_id = ? ORDER BY id", (dag_id,)
    )


# --------------------------------------------------------------------------- (a)
@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_failure_callback_event_runs_the_investigation_dag_once(stack, kafka_bootstrap, topics):
    run_id = stack.trigger_dag("e2e_watcher_failing_job")
    assert stack.wait_for_dag_run("e2e_watcher_failing_job", run_id, timeout=240) == "failed"

    def from_this_run() -> list[dict[str, Any]]:
        return [
            row
            for row in _asset_events(stack, INVESTIGATE_URI)
            if row["payload"].get("extra", {}).get("failed_run_id") == run_id
        ]

    stack.wait_for(
        from_this_run, EVENT_TIMEOUT, "the investigation asset event", ("triggerer", "dag-processor")
    )
    where = from_this_run()[0]["payload"]["kafka"]
    _wait_drained(stack, kafka_bootstrap, INVESTIGATE_URI, where["topic"], {where["partition"]})
    events = from_this_run()
    assert len(events) == 1, "not exactly one asset event for the failed run:\n" + "\n".join(
        _describe(row) for row in events
    )
    (event,) = events
    assert event["extra"]["from_trigger"] is True
    assert event["partition_key"] is None  # watcher events carry no partition
    payload = event["payload"]
    assert payload["asset"] == {"name": "ops://investigate", "uri": INVESTIGATE_URI}
    assert payload["source"]["kind"] == "dag_callback"
    assert payload["source"]["dag_id"] == "e2e_watcher_failing_job"
    assert payload["source"]["run_id"] == run_id
    assert payload["source"]["task_id"] is None  # a DAG-level event: no task is invented
    assert payload["extra"]["failed_dag_id"] == "e2e_watcher_failing_job"
    assert payload["causation"] == []
    assert payload["airflow_kafka_events"]["event_id"] == payload["event_id"]
    assert payload["kafka"]["topic"] == topics["events"]

    def investigation_run() -> str | None:
        rows = stack.query(
            "SELECT dr.run_id FROM dag_run dr JOIN dagrun_asset_event dae ON dae.dag_run_id = dr.id "
            "WHERE dr.dag_id = 'e2e_watcher_investigate' AND dae.event_id = ?",
            (event["id"],),
        )
        return rows[0]["run_id"] if rows else None

    inv_run_id = stack.wait_for(investigation_run, EVENT_TIMEOUT, "the investigation DAG run", ("scheduler",))
    assert stack.wait_for_dag_run("e2e_watcher_investigate", inv_run_id, timeout=240) == "success"
    seen = stack.xcom("e2e_watcher_investigate", inv_run_id, "investigate")
    mine = [p for p in seen if p["event_id"] == payload["event_id"]]
    assert mine == [payload]
    runs_for_event = stack.query(
        "SELECT COUNT(*) AS n FROM dagrun_asset_event dae JOIN dag_run dr ON dr.id = dae.dag_run_id "
        "WHERE dr.dag_id = 'e2e_watcher_investigate' AND dae.event_id = ?",
        (event["id"],),
    )
    assert runs_for_event[0]["n"] == 1


# --------------------------------------------------------------------------- (b)
def test_duplicate_publish_becomes_one_asset_event(stack, kafka_bootstrap, topics):
    key = f"dedupe-{uuid.uuid4().hex[:8]}"
    first = _emit(kafka_bootstrap, topics["events"], DEDUPE_URI, extra={"batch": 1}, idempotency_key=key)
    again = _emit(kafka_bootstrap, topics["events"], DEDUPE_URI, extra={"batch": 1}, idempotency_key=key)
    # same asset -> same record key -> same partition: once the marker is in, the repeat was handled
    marker = _emit(
        kafka_bootstrap, topics["events"], DEDUPE_URI, extra={"batch": 2}, idempotency_key=f"{key}-m"
    )
    assert first.event_id != again.event_id
    assert first.partition == again.partition == marker.partition
    assert first.offset < again.offset < marker.offset
    _wait_for_events(stack, DEDUPE_URI, [marker.event_id])
    _wait_drained(stack, kafka_bootstrap, DEDUPE_URI, marker.topic, {marker.partition})
    keyed = [row for row in _asset_events(stack, DEDUPE_URI) if row["payload"].get("idempotency_key") == key]
    assert [row["payload"]["event_id"] for row in keyed] == [first.event_id]
    assert _events_with(stack, DEDUPE_URI, again.event_id) == []


# --------------------------------------------------------------------------- (c)
def test_poison_is_dead_lettered_and_the_next_event_still_arrives(stack, kafka_bootstrap, topics, statsd):
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    poison = b"\x7f{not an asset event envelope}"
    stored = producer.send_and_wait(topics["events"], poison, key=POISON_URI.encode(), timeout=30)
    good = _emit(kafka_bootstrap, topics["events"], POISON_URI, extra={"after": "poison"})
    assert (good.partition, good.topic) == (stored.partition, stored.topic) and good.offset > stored.offset
    _wait_for_events(stack, POISON_URI, [good.event_id])
    (event,) = _events_with(stack, POISON_URI, good.event_id)
    assert event["payload"]["extra"] == {"after": "poison"}
    letters = _wait_for_dead_letter(
        stack,
        kafka_bootstrap,
        topics["dlq"],
        lambda letter: (
            (letter.source_topic, letter.source_partition, letter.source_offset)
            == (stored.topic, stored.partition, stored.offset)
        ),
        "the poison record's dead letter",
    )
    # every watcher of the topic (on both triggerers) refuses the poison: once each has moved past it
    # (dead-lettered it, or left it to the watcher whose claim came first), it is in the topic once
    stack.wait_for(
        lambda: all(
            _stored_position(stack, uri, stored.topic, stored.partition) > stored.offset for uri in TOPIC_URIS
        ),
        120,
        "every watcher of the topic past the poison",
        ("triggerer", "triggerer-2"),
    )
    letters = [
        (letter, msg)
        for letter, msg in _dead_letters(kafka_bootstrap, topics["dlq"])
        if (letter.source_topic, letter.source_partition, letter.source_offset)
        == (stored.topic, stored.partition, stored.offset)
    ]
    (letter, msg), *repeats = letters
    where = {
        name: stack.logs(name).count(f"{stored.topic}[{stored.partition}]@{stored.offset}")
        for name in ("triggerer", "triggerer-2")
    }
    left = {name: stack.logs(name).count("whose claim to dead-letter it came first") for name in where}
    print(f"log lines naming the poison per triggerer: {where}; claims lost to another watcher: {left}")
    assert repeats == []
    assert letter.reason == "undecodable"
    assert letter.error_type.startswith("airflow_kafka_events.errors.")
    assert msg.value() == poison and msg.key() == POISON_URI.encode()
    assert letter.consumer and "KafkaAssetEventTrigger" in letter.consumer

    # the triggerer running the watchers reported the dead letter by its reason, and the watchers' lag
    topic = topics["events"].replace(".", "[.]")
    dead_lettered = rf"airflow\.kafka_events\.dlq\.records\.undecodable,.*source_topic={topic}\b.*:1\|c"
    lag = rf"airflow\.kafka_events\.watcher\.lag,topic={topic},partition=\d+:\d+\|g"
    statsd.wait_for(dead_lettered, timeout=30)
    statsd.wait_for(lag, timeout=30)
    triggerers = {"triggerer", "triggerer-2"}
    assert statsd.reporters(dead_lettered, stack.component_of) & triggerers
    assert statsd.reporters(lag, stack.component_of) & triggerers


# --------------------------------------------------------------------------- (d)
def test_feedback_loop_is_cut_at_the_causation_depth(stack, kafka_bootstrap, topics):
    assert _dag_runs(stack, "e2e_watcher_loop") == []
    seed = _emit(kafka_bootstrap, topics["events"], LOOP_URI, extra={"hop": "seed"})
    letters = _wait_for_dead_letter(
        stack,
        kafka_bootstrap,
        topics["dlq"],
        lambda letter: letter.asset_uri == LOOP_URI and letter.reason == "causation-too-deep",
        "the loop's refused event",
    )
    (letter, _), *more = letters
    assert more == []
    assert f"max_causation_depth={LOOP_MAX_DEPTH}" in letter.error_message

    def settled() -> list[dict[str, Any]] | None:
        runs = _dag_runs(stack, "e2e_watcher_loop")
        return runs if runs and all(run["state"] in ("success", "failed") for run in runs) else None

    stack.wait_for(settled, 240, "the loop's runs to finish", ("scheduler",))
    # drained: every record of the loop's partition is read and confirmed, and every asset event has
    # its run -- so no further event, hence no further run, can appear
    _wait_drained(stack, kafka_bootstrap, LOOP_URI, seed.topic, {seed.partition})
    runs = stack.wait_for(
        lambda: (r := settled()) is not None and len(r) == len(_asset_events(stack, LOOP_URI)) and r,
        240,
        "a finished run for every loop event",
        ("scheduler",),
    )
    events = _asset_events(stack, LOOP_URI)
    chains = [row["payload"]["causation"] for row in events]
    assert chains == [[], [seed.event_id], [seed.event_id, events[1]["payload"]["event_id"]]]
    assert len(events) == LOOP_MAX_DEPTH + 1
    assert len(runs) == LOOP_MAX_DEPTH + 1, runs
    assert {run["run_type"] for run in runs} == {"asset_triggered"}
    assert all(run["state"] == "failed" for run in runs)
    # the refused event is the one the last run emitted
    assert letter.event_id not in {row["payload"]["event_id"] for row in events}


# --------------------------------------------------------------------------- (e)
def test_two_assets_on_one_topic_lose_nothing_across_a_triggerer_restart(
    stack, kafka_bootstrap, topics, airflow_extra_env
):
    # the crash must hit these watchers: the topology's other triggerer stops (gracefully) meanwhile
    with stack.sole_triggerer("triggerer"):
        _lose_nothing_across_a_crash(stack, kafka_bootstrap, topics)


def _lose_nothing_across_a_crash(stack: AirflowStack, kafka_bootstrap: str, topics: dict[str, str]) -> None:
    topic = topics["events"]
    warm = [
        _emit(kafka_bootstrap, topic, uri, extra={"phase": "before"})
        for uri in (RESTART_A_URI, RESTART_B_URI)
    ]
    _wait_for_events(stack, RESTART_A_URI, [warm[0].event_id])
    _wait_for_events(stack, RESTART_B_URI, [warm[1].event_id])
    # A watcher stores its position shortly after Airflow confirmed its asset event; a crash
    # inside that window reads the record again (a bounded duplicate, as documented). Crash
    # outside it, so that any duplicate below is a real bug.
    stack.wait_for(
        lambda: all(
            _stored_position(stack, uri, r.topic, r.partition) > r.offset
            for uri, r in zip((RESTART_A_URI, RESTART_B_URI), warm, strict=True)
        ),
        60,
        "the warm-up records to be past the watchers' stored positions",
        ("triggerer",),
    )

    stack.kill_component("triggerer")  # a crash: nothing is shut down cleanly
    while_down = [
        _emit(kafka_bootstrap, topic, uri, extra={"phase": "down"}) for uri in (RESTART_A_URI, RESTART_B_URI)
    ]
    started = time.monotonic()
    stack.restart_component("triggerer", timeout=180)
    after = [
        _emit(kafka_bootstrap, topic, uri, extra={"phase": "after"}) for uri in (RESTART_A_URI, RESTART_B_URI)
    ]

    _wait_for_events(stack, RESTART_A_URI, [while_down[0].event_id, after[0].event_id])
    _wait_for_events(stack, RESTART_B_URI, [while_down[1].event_id, after[1].event_id])
    recovered_in = time.monotonic() - started
    for uri, receipt in ((RESTART_A_URI, after[0]), (RESTART_B_URI, after[1])):
        _wait_drained(stack, kafka_bootstrap, uri, receipt.topic, {receipt.partition})
    for uri, receipts in (
        (RESTART_A_URI, (warm[0], while_down[0], after[0])),
        (RESTART_B_URI, (warm[1], while_down[1], after[1])),
    ):
        for receipt in receipts:
            assert len(_events_with(stack, uri, receipt.event_id)) == 1, (uri, receipt)
    print(f"both watchers caught up {recovered_in:.1f}s after the triggerer restart began")


# --------------------------------------------------------------------------- (f)
def test_the_health_page_shows_each_watcher_its_triggerer_and_lag(stack, kafka_bootstrap, topics):
    """The Kafka Events view's health answer (as the op user ``bridge``) with real watchers."""
    topic = topics["events"]
    receipt = _emit(kafka_bootstrap, topic, RESTART_A_URI, extra={"phase": "health"})
    _wait_for_events(stack, RESTART_A_URI, [receipt.event_id])
    _wait_drained(stack, kafka_bootstrap, RESTART_A_URI, topic, {receipt.partition})

    def restart_a_row() -> dict[str, Any] | None:
        auth = {"Authorization": f"Bearer {stack.token('bridge')}"}
        answer = stack.client.get("/kafka-events/api/health", headers=auth, timeout=60)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        # a streams topic this deployment never created does not hide the watchers: it is named instead
        assert body["streams_error"] is None or "topics ensure" in body["streams_error"], body
        rows = [w for w in body["watchers"] if w["asset_uri"] == RESTART_A_URI]
        return rows[0] if rows and rows[0]["triggerer_host"] else None

    row = stack.wait_for(restart_a_row, 60, "the watcher of restart-a on the health page", ("api-server",))
    assert row["kafka_config_id"] == "kafka_watcher" and row["problem"] is None, row
    lags = {entry["partition"]: entry for entry in row["topics"][topic]}
    assert set(lags) == {0, 1, 2}
    drained = lags[receipt.partition]
    assert drained["position"] == _stored_position(stack, RESTART_A_URI, topic, receipt.partition)
    assert drained["lag"] == 0 and drained["end"] == drained["position"], drained
    anonymous = stack.client.get("/kafka-events/api/health", timeout=60)
    assert anonymous.status_code in (401, 403)


# --------------------------------------------------------------------------- (g)
def test_message_queue_trigger_watcher_runs_its_consumer_dag(stack, kafka_bootstrap, topics):
    """``MessageQueueTrigger(scheme="kafka-events")`` from the DAG file became this package's watcher."""

    def watcher_rows() -> list[dict[str, Any]]:
        return stack.query(
            "SELECT w.name, t.classpath FROM asset_watcher w JOIN trigger t ON t.id = w.trigger_id "
            "JOIN asset a ON a.id = w.asset_id WHERE a.uri = ?",
            (MESSAGE_QUEUE_URI,),
        )

    rows = stack.wait_for(watcher_rows, 120, "the MessageQueueTrigger watcher's row", ("dag-processor",))
    assert rows == [
        {
            "name": "e2e_message_queue_watcher",
            "classpath": "airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger",
        }
    ]
    sent = _emit(kafka_bootstrap, topics["events"], MESSAGE_QUEUE_URI, extra={"via": "MessageQueueTrigger"})
    _wait_for_events(stack, MESSAGE_QUEUE_URI, [sent.event_id])
    (event,) = _events_with(stack, MESSAGE_QUEUE_URI, sent.event_id)
    assert event["extra"]["from_trigger"] is True
    assert event["payload"]["asset"] == {"name": MESSAGE_QUEUE_URI, "uri": MESSAGE_QUEUE_URI}
    assert event["payload"]["extra"] == {"via": "MessageQueueTrigger"}
    assert event["payload"]["kafka"]["topic"] == topics["events"]

    def consumer_run() -> str | None:
        rows = stack.query(
            "SELECT dr.run_id FROM dag_run dr JOIN dagrun_asset_event dae ON dae.dag_run_id = dr.id "
            "WHERE dr.dag_id = 'e2e_watcher_message_queue' AND dae.event_id = ?",
            (event["id"],),
        )
        return rows[0]["run_id"] if rows else None

    run_id = stack.wait_for(consumer_run, EVENT_TIMEOUT, "the consumer run on the event", ("scheduler",))
    assert stack.wait_for_dag_run("e2e_watcher_message_queue", run_id, timeout=240) == "success"
    assert sent.event_id in stack.xcom("e2e_watcher_message_queue", run_id, "consume")
