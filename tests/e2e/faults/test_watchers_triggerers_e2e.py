"""Asset watchers on several triggerers of a real Airflow: nothing lost, nothing twice.

A stack of its own on the e2e topology (``e2e_topology``: PostgreSQL and two Celery workers in CI)
with 2, then 3 triggerers whose ``[triggerer] capacity`` forces Airflow to spread the six watchers
over all of them (the production topology's ``triggerer-2`` is the second one), one
3-partition topic, one Kafka connection with one ``group.id`` -- before the watchers read with
assigned partitions, this setup lost 60 of 120 events silently.

1. two triggerers, 3 + 3 watchers, 20 events per asset on every partition: 120 asset events,
   each exactly once;
2. ``kill -9`` of one triggerer while events are published, then a restart: none lost, none twice
   (the watchers may ask the api-server which events exist, ``[kafka_events]
   watcher_airflow_api_conn_id``: after the unclean stop they do, and drop what their previous run
   fired after its last store);
3. three triggerers, 2 + 2 + 2 watchers: again each event exactly once.

Graceful stops (SIGTERM) with the default settings: test_watcher_graceful_restarts_e2e.py.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import pytest

from harness.airflow_stack import AirflowStack
from harness.multi_watched_assets import event_ids, publish, spread, watchers_stack

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


@pytest.fixture(scope="module")
def multi(tmp_path_factory, kafka_bootstrap, kafka_admin, e2e_topology):
    # one consumer group for all the watchers: what used to lose events; after an unclean stop the
    # watchers ask the api-server what exists
    with watchers_stack(
        tmp_path_factory, kafka_admin, kafka_bootstrap, name="multi", topology=e2e_topology, recheck=True
    ) as running:
        yield running.stack, running.topic


def _wait_spread(stack: AirflowStack, triggerers: int, per: int) -> None:
    stack.wait_for(
        lambda: spread(stack) == [per] * triggerers,
        180,
        f"the six watchers spread {per} per triggerer over {triggerers} triggerers",
        components=("triggerer",),
        interval=1.0,
    )


def _wait_all(stack: AirflowStack, ids: list[str], what: str) -> Counter[str]:
    def arrived() -> Counter[str] | None:
        found = event_ids(stack)
        return found if all(found[i] for i in ids) else None

    return stack.wait_for(
        arrived,
        240,
        what,
        components=("triggerer", "scheduler"),
        interval=1.0,
    )


def test_watchers_on_several_triggerers_lose_nothing(multi, kafka_bootstrap):
    stack, topic = multi
    _wait_spread(stack, 2, 3)

    # 1. two triggerers
    first = publish(kafka_bootstrap, topic, 20)
    found = _wait_all(stack, first, "120 asset events from two triggerers")
    assert [i for i in first if found[i] != 1] == [], "an event became more or less than one asset event"
    assert len(first) == 120

    # 2. kill -9 one triggerer mid-stream, then restart it
    sent: list[str] = []
    publisher = threading.Thread(target=lambda: sent.extend(publish(kafka_bootstrap, topic, 10, pause=0.5)))
    publisher.start()
    stack.wait_for(lambda: len(event_ids(stack)) >= 130, 120, "the stream under way", interval=0.2)
    stack.kill_component("triggerer-2")
    started = time.monotonic()
    stack.restart_component("triggerer-2", timeout=180)
    publisher.join(timeout=120)
    assert not publisher.is_alive() and len(sent) == 60
    found = _wait_all(stack, sent, "the events published around the kill")
    recovered = time.monotonic() - started
    lost = [i for i in first + sent if not found[i]]
    duplicated = sum(found[i] - 1 for i in first + sent if found[i] > 1)
    print(
        f"kill -9 + restart: {len(lost)} of {len(first) + len(sent)} lost, {duplicated} duplicated, "
        f"caught up in {recovered:.1f}s"
    )
    assert lost == []
    assert duplicated == 0, "an event the killed triggerer's watchers had fired fired again"
    logs = stack.logs("triggerer") + stack.logs("triggerer-2", current_only=True)
    resumed = re.findall(r"resumes after an unclean stop: (\d+) recent events", logs)
    found_in_airflow = [int(n) for n in resumed]
    # each of the killed triggerer's 3 watchers asked once and got its asset's events (20+ each by then)
    assert len(found_in_airflow) == 3 and min(found_in_airflow) > 0, found_in_airflow
    drops = logs.count("drops a repeat")
    print(f"the watchers resumed knowing {found_in_airflow} events of their assets; {drops} repeats dropped")

    # 3. three triggerers, two watchers each
    for name in ("triggerer", "triggerer-2"):
        stack.components[name].env["AIRFLOW__TRIGGERER__CAPACITY"] = "2"
    stack.add_triggerer("triggerer-3", {"AIRFLOW__TRIGGERER__CAPACITY": "2"})
    for name in ("triggerer", "triggerer-2", "triggerer-3"):
        stack.restart_component(name, timeout=180)
    _wait_spread(stack, 3, 2)
    before = event_ids(stack)
    third = publish(kafka_bootstrap, topic, 10)
    found = _wait_all(stack, third, "60 asset events from three triggerers")
    assert [i for i in third if found[i] != 1] == []
    # and the restarts themselves re-fired nothing
    assert {i: c for i, c in found.items() if i not in third and c != before.get(i)} == {}
