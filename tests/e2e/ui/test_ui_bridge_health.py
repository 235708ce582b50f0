"""The Health page with a real partition bridge: its group, its lag per partition, its last post.

A real bridge process (``airflow-kafka-events bridge``, as the ``op`` user ``bridge``) consumes the
UI stack's asset events topic in the group the page is configured with
(``[kafka_events] ui_bridge_group_ids``) and posts the events of ``e2e_ui_bridged_orders`` to the
api-server.  While it runs, the page (and its JSON twin) shows the group with a running member,
the lag of every partition falling to 0 once the bridge has committed what it read, and a last
post made after the events were emitted; once the bridge is stopped, the group has no member and
the page says the bridge is not running, while new events show as lag.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_events.assets.publish import emit
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack
from harness.bridge_process import BridgeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

BRIDGED_DAG = "e2e_ui_bridged"
ASSET_NAME = "e2e_ui_bridged_orders"
ASSET_URI = "kafka-events://e2e-ui-bridge/orders"
PRODUCER = "e2e-ui-bridge"


def _health(stack: AirflowStack) -> dict[str, Any]:
    response = stack.client.get(
        "/kafka-events/api/health", headers={"Authorization": f"Bearer {stack.token('viewer')}"}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()


def _bridge_row(answer: dict[str, Any], group: str) -> dict[str, Any]:
    rows = [b for b in answer["bridges"] if b["group_id"] == group]
    assert len(rows) == 1, answer["bridges"]
    return rows[0]


def _emit(kafka_bootstrap: str, topic: str, keys: list[str]) -> list[str]:
    return [
        emit(
            ASSET_URI,
            name=ASSET_NAME,
            partition_key=key,
            extra={"rows": n},
            producer=PRODUCER,
            topic=topic,
            bootstrap_servers=kafka_bootstrap,
        ).event_id
        for n, key in enumerate(keys)
    ]


@pytest.fixture
def bridge(
    ui_stack: AirflowStack,
    ui_data,
    ui_topics,
    ui_bridge_group: str,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> Iterator[BridgeProcess]:
    ui_stack.wait_dag_parsed(BRIDGED_DAG, timeout=180)  # the asset is known to Airflow once parsed
    process = BridgeProcess(
        ui_stack,
        kafka_bootstrap,
        topic=ui_topics.asset_events,
        dlq=new_topic(partitions=1, prefix="e2e-ui-bridge-dlq"),
        group=ui_bridge_group,
        log_path=tmp_path / "bridge.log",
        # the other tests' envelopes on this topic are skipped (and committed), not dead-lettered
        assets=[ASSET_URI],
        allow=[json.dumps({"source_kinds": ["external"], "producers": [PRODUCER]})],
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_health_shows_a_running_bridge_its_lag_and_last_post_then_that_it_stopped(
    ui_stack: AirflowStack, ui_topics, ui_bridge_group: str, kafka_bootstrap: str, bridge: BridgeProcess
):
    stack, group = ui_stack, ui_bridge_group
    suffix = uuid.uuid4().hex[:6]
    emitted_at = datetime.now(timezone.utc)
    event_ids = _emit(kafka_bootstrap, ui_topics.asset_events, [f"h-{suffix}-{n}" for n in range(3)])

    def posted() -> dict[str, int]:
        rows = stack.query(
            "SELECT ae.id, ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id WHERE a.name = ?",
            (ASSET_NAME,),
        )
        return {json_column(r["extra"])["airflow_kafka_events"]["event_id"]: r["id"] for r in rows}

    def drained() -> dict[str, Any] | None:
        assert bridge.proc.poll() is None, f"the bridge exited:\n{bridge.log()[-3000:]}"
        answer, by_event = _health(stack), posted()
        row = _bridge_row(answer, group)
        lags, post = row["partitions"], answer["last_bridge_post"]
        done = (
            isinstance(lags, list)
            and all(p["lag"] == 0 for p in lags)
            and row["members"] == 1
            and set(event_ids) <= set(by_event)
            and post is not None
            and post["id"] == max(by_event[e] for e in event_ids)
        )
        return answer if done else None

    answer = stack.wait_for(
        drained, 180, f"the Health page to show bridge group {group} drained", ("api-server",)
    )
    row = _bridge_row(answer, group)
    assert row["topic"] == ui_topics.asset_events and row["state"] == "running", row
    ends = {p["partition"]: p["end"] for p in row["partitions"]}
    assert sorted(ends) == [0, 1] and sum(ends.values()) >= len(event_ids), row
    for p in row["partitions"]:  # committed up to the end (an empty partition: nothing to commit)
        assert p["lag"] == 0 and p["position"] == (ends[p["partition"]] or None), row
    post = answer["last_bridge_post"]
    assert post["asset"] == ASSET_NAME and post["event_id"] in event_ids, post
    assert datetime.fromisoformat(post["timestamp"]) >= emitted_at, (post, emitted_at)

    html = stack.client.get(
        "/kafka-events/health", headers={"Authorization": f"Bearer {stack.token('viewer')}"}, timeout=60
    ).text
    assert group in html and f"asset event #{post['id']} of {ASSET_NAME}" in html
    assert '<td class="bridge-state">running <span class="muted">(1 member)</span>' in html, html

    # stopped: the group has no member any more, and what is emitted now stays as lag
    assert bridge.stop() == 0, bridge.log()[-3000:]
    late = _emit(kafka_bootstrap, ui_topics.asset_events, [f"h-{suffix}-late"])

    def stopped() -> dict[str, Any] | None:
        row = _bridge_row(_health(stack), group)
        lags = row["partitions"]
        behind = isinstance(lags, list) and sum(p["lag"] or 0 for p in lags) >= len(late)
        return row if behind and row["members"] == 0 else None

    row = stack.wait_for(
        stopped, 60, f"the Health page to show bridge group {group} stopped", ("api-server",)
    )
    assert row["state"] == "not running", row
    html = stack.client.get(
        "/kafka-events/health", headers={"Authorization": f"Bearer {stack.token('viewer')}"}, timeout=60
    ).text
    assert "not running" in html
