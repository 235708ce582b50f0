"""Graceful restarts of triggerers running asset watchers, with the default settings: nothing twice.

The production topology of a stack of its own (PostgreSQL, CeleryExecutor on Redis, two triggerers
``triggerer`` and ``triggerer-2`` whose ``[triggerer] capacity`` of 3 keeps the six watchers 3 + 3,
so that a stopped triggerer's watchers wait for it), one 3-partition topic, no
``watcher_airflow_api_conn_id`` (the default: nothing can be rechecked through the REST API).

While events are published, each triggerer in turn is stopped with SIGTERM (what a rolling deploy
does) and started again, three times; the signal reaches its process group (the supervisor and its
trigger runner at once; docs/watcher-restarts.md tells what a signal to the supervisor alone did).
Every event becomes exactly one asset event; every watcher of the stopped triggerer resumes from
its clean-stop mark and learns from the listener's record which of the records it fired in its
last round Airflow persisted ("Airflow persisted N ... dropped M"); no watcher resumes as after an
unclean stop and none asks the REST API.  Then an undecodable record, refused by the watchers of
both triggerers, is dead-lettered once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from datetime import datetime

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher.stream import state_key
from harness.airflow_runs import AirflowStackError
from harness.airflow_stack import AirflowStack
from harness.multi_watched_assets import (
    ASSETS,
    Published,
    account,
    event_ids,
    keep_evidence,
    placement,
    publish_records,
    summary,
    watchers_stack,
)

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

TRIGGERERS = ("triggerer", "triggerer-2")
#: the triggerer of each graceful stop
STOPS = ("triggerer", "triggerer-2", "triggerer")
#: The load around each stop: events of each asset, and the pause after each round of six.
#: ``AIRFLOW_KAFKA_EVENTS_E2E_GRACEFUL_LOAD`` picks another: ``heavy`` (30 per asset, 180 per stop,
#: 6 every 0.05 s) or ``<events per asset>/<pause in seconds>``; CI runs the default.
LOADS = {"default": (10, 0.3), "heavy": (30, 0.05)}


def _load() -> tuple[int, float]:
    value = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_GRACEFUL_LOAD", "default")
    if value in LOADS:
        return LOADS[value]
    per_asset, _, pause = value.partition("/")
    try:
        return int(per_asset), float(pause or 0.0)
    except ValueError:
        raise ValueError(
            f"AIRFLOW_KAFKA_EVENTS_E2E_GRACEFUL_LOAD={value!r}: one of {sorted(LOADS)} or "
            "'<events per asset>/<pause in seconds>', e.g. 30/0.05"
        ) from None


PER_STOP, PAUSE = _load()
SETTLED = re.compile(
    r"resumes after a clean stop \(its mark in [^)]*\): of the (\d+) record\(s\) it fired that awaited "
    r"Airflow's confirmation, Airflow persisted (\d+) \(not fired again\) and dropped (\d+)"
)


@pytest.fixture(scope="module")
def graceful(tmp_path_factory, kafka_bootstrap, kafka_admin):
    assert not os.environ.get("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID")
    with watchers_stack(
        tmp_path_factory,
        kafka_admin,
        kafka_bootstrap,
        name="graceful",
        topology="production",
        dead_letters=True,
    ) as running:
        yield running.stack, running.topic, running.dlq


def _opened(stack: AirflowStack, name: str) -> int:
    """Watchers the current process of ``name`` opened (each logs where it reads from)."""
    return len(re.findall(r"reads \d+ partition\(s\) from", stack.logs(name, current_only=True)))


def _all_opened(stack: AirflowStack, name: str) -> bool:
    """The current process of ``name`` opened the 3 watchers its capacity allows."""
    return _opened(stack, name) >= 3


def _evidence(stack: AirflowStack, published: list[Published], name: str) -> str:
    """Where each published event stopped (per asset: emitted, fired, asset events; the missing and
    repeated ones), kept with a dump of the metadata DB in the stack's home."""
    report = account(stack, published, TRIGGERERS)
    path = keep_evidence(stack, report, name)
    return f"{summary(report)}\n(report and metadata DB dump: {path} and beside it)"


#: Seconds for the restarted triggerer's watchers to resume and start firing (measured: at most 25 s
#: from the SIGTERM to the last asset event of 180 with 2 cores at load 5), and the slowest rate at
#: which Airflow's triggerers are expected to turn the events into asset events (a fifth of the
#: slowest measured: 8 asset events/s while 64-91 events/s were published, load 3-7).
RESUME_ALLOWANCE, SLOWEST_RATE = 200.0, 1.5


def _wait_all(stack: AirflowStack, sent: list[Published], what: str) -> Counter[str]:
    ids = [p.event_id for p in sent]
    timeout = RESUME_ALLOWANCE + len(ids) / SLOWEST_RATE

    def arrived() -> Counter[str] | None:
        found = event_ids(stack)
        return found if all(found[i] for i in ids) else None

    try:
        return stack.wait_for(arrived, timeout, what, components=TRIGGERERS, interval=1.0)
    except AirflowStackError as exc:
        raise AirflowStackError(f"{exc}\n{_evidence(stack, sent, 'missing-events')}") from None


#: Lines of a triggerer's log that mark the steps of its stop (docs/watcher-restarts.md).
STOP_STEPS = {
    "signal": "Exiting gracefully upon receiving signal",
    "mark": "stops cleanly: its position is in",
    "supervisor out of its loop": "Waiting for triggers to clean up",
    "trigger ended": "trigger completed",
    "runner exited": "Process exited",
    "triggerer done": "Exited trigger loop",
}


def _stop_timeline(log: str) -> dict[str, list[float]]:
    """Seconds from the signal to each step of a stopped triggerer's log (every occurrence)."""
    stamps: dict[str, list[float]] = {step: [] for step in STOP_STEPS}
    for line in log.splitlines():
        for step, text in STOP_STEPS.items():
            if text in line:
                with contextlib.suppress(ValueError):
                    stamps[step].append(datetime.fromisoformat(line.split(" ", 1)[0].rstrip("Z")).timestamp())
    if not stamps["signal"]:
        return {}
    start = stamps["signal"][-1]
    return {step: [round(t - start, 2) for t in times if t >= start - 1] for step, times in stamps.items()}


def _runner_escalation(log: str) -> list[str]:
    """The lines of Airflow's supervisor escalating the stop of its trigger runner after the last
    signal ("Process did not terminate in time", then SIGTERM and SIGKILL): the runner did not end on
    the signal, its watchers never closed (docs/watcher-restarts.md, "A stop that does not end")."""
    after_signal = log.rsplit(STOP_STEPS["signal"], 1)[-1]
    return [line for line in after_signal.splitlines() if "Process did not terminate in time" in line]


def _graceful_stop(
    stack: AirflowStack, bootstrap: str, topic: str, name: str
) -> tuple[list[Published], list]:
    """Publish ``PER_STOP`` events of each asset (6 every ``PAUSE`` s) while ``name`` is stopped with
    SIGTERM and started again; the events sent and what each of its watchers settled at its resumption."""
    fired_before = stack.logs(name, current_only=True).count("Trigger fired event")
    sent: list[Published] = []
    publisher = threading.Thread(
        target=lambda: sent.extend(publish_records(bootstrap, topic, PER_STOP, pause=PAUSE))
    )
    publisher.start()
    stack.wait_for(
        lambda: stack.logs(name, current_only=True).count("Trigger fired event") >= fired_before + 6,
        120,
        f"the watchers of {name} firing",
        components=TRIGGERERS,
        interval=0.1,
    )
    started = time.monotonic()
    stack.stop_component(name)  # SIGTERM to its process group
    stopped_log = stack.logs(name, current_only=True)
    print(f"stop of {name}: {_stop_timeline(stopped_log)}")
    escalated = _runner_escalation(stopped_log)
    assert escalated == [], f"the trigger runner of {name} did not end on SIGTERM:\n" + "\n".join(escalated)
    stack.restart_component(name, timeout=180)
    publisher.join(timeout=120)
    assert not publisher.is_alive() and len(sent) == PER_STOP * len(ASSETS)
    _wait_all(stack, sent, f"the events published around the graceful stop of {name}")
    caught_up = account(stack, sent, TRIGGERERS)
    print(f"stop of {name}: persist lag (s) {caught_up['persist_lag_s']}; rates {caught_up.get('rates')}")
    stack.wait_for(lambda: _all_opened(stack, name), 120, f"the watchers of {name} reading again")
    current = stack.logs(name, current_only=True)
    resumed = [tuple(int(n) for n in m) for m in SETTLED.findall(current)]
    print(
        f"graceful stop of {name}: caught up "
        f"{time.monotonic() - started:.1f}s after the SIGTERM; per "
        f"watcher (in doubt, persisted by Airflow, dropped by Airflow): {resumed}"
    )
    assert len(resumed) == 3, f"not every watcher of {name} settled what was in doubt:\n{current[-4000:]}"
    assert "unclean stop" not in current
    assert "Watcher recheck" not in current and "recent events of its asset in Airflow" not in current
    return sent, resumed


def test_graceful_restarts_with_default_settings_fire_nothing_twice(graceful, kafka_bootstrap):
    stack, topic, _dlq = graceful
    for name in TRIGGERERS:
        stack.wait_for(lambda n=name: _all_opened(stack, n), 240, f"the watchers of {name} reading")
    published = publish_records(kafka_bootstrap, topic, 5)
    _wait_all(stack, published, "the events published before the restarts")
    settled: list = []
    for round_, name in enumerate(STOPS):
        sent, resumed = _graceful_stop(stack, kafka_bootstrap, topic, name)
        published += sent
        settled += resumed
        found = event_ids(stack)
        twice = [p.event_id for p in published if found[p.event_id] > 1]
        assert twice == [], (
            f"graceful stop {round_ + 1}: {len(twice)} event(s) became two asset events\n"
            + _evidence(stack, published, "repeated-events")
        )
    found = event_ids(stack)
    assert [p for p in published if found[p.event_id] != 1] == [], (
        "an event became more or less than one asset event\n"
        + _evidence(stack, published, "miscounted-events")
    )
    print(f"{len(published)} events, each one asset event; in doubt at the stops: {settled}")


def _stored_position(stack: AirflowStack, uri: str, topic: str, partition: int) -> int:
    rows = stack.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.uri = ? AND s.key = ?",
        (uri, state_key("kafka_watcher")),
    )
    value = (
        json.loads(rows[0]["value"])
        if rows and isinstance(rows[0]["value"], str)
        else (rows or [{}])[0].get("value")
    )
    return int(((value or {}).get("positions") or {}).get(topic, {}).get(str(partition), -1))


def test_a_record_the_watchers_of_both_triggerers_refuse_is_dead_lettered_once(graceful, kafka_bootstrap):
    """The six watchers, 3 + 3 on the two triggerers, all refuse an undecodable record: it is in the
    dead-letter topic once (the watchers claim it in Kafka first, docs/watcher-dead-letters.md)."""
    stack, topic, dlq = graceful

    def three_each() -> bool:
        placed = placement(stack)
        return None not in placed and sorted(placed.values()) == [3, 3]

    stack.wait_for(three_each, 180, "the six watchers 3 + 3 on the two triggerers", components=TRIGGERERS)
    for name in TRIGGERERS:
        stack.wait_for(lambda n=name: _all_opened(stack, n), 120, f"the watchers of {name} reading")
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    poison = producer.send_and_wait(topic, b"\x7f not an asset event envelope", partition=0)
    stack.wait_for(
        lambda: all(_stored_position(stack, a.uri, topic, 0) > poison.offset for a in ASSETS),
        180,
        "every watcher's stored position past the poison (dead-lettered, or left to another watcher)",
        components=TRIGGERERS,
    )
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"e2e-dlq-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(dlq, 0, 0)])
    letters = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                break  # the end of the dead-letter topic
            letters.append(DeadLetter.from_headers(msg.headers()))
    finally:
        consumer.close()
    mine = [
        d
        for d in letters
        if (d.source_topic, d.source_partition, d.source_offset) == (topic, 0, poison.offset)
    ]
    where = f"{topic}[0]@{poison.offset}"
    met = {name: stack.logs(name, current_only=True).count(where) for name in TRIGGERERS}
    left = {
        name: stack.logs(name, current_only=True).count("whose claim to dead-letter it came first")
        for name in TRIGGERERS
    }
    print(f"log lines naming the poison per triggerer: {met}; claims lost to another watcher: {left}")
    assert len(mine) == 1, f"{len(mine)} dead letters of the poison"
    assert all(met.values()), f"the watchers of both triggerers met the poison: {met}"
