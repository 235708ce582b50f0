"""HttpPaginationTrigger through a real Airflow and Kafka.

(a) The triggerer is killed in the middle of the pages.

The local API (:mod:`integration.triggers.http_server`) holds page ``K`` at a gate.  The test
waits until the triggerer's request of page ``K`` waits there and envelopes ``0..K-1`` are in
Kafka, kills the triggerer (SIGKILL to its process tree), waits until the server saw that
request's connection close (so it is *abandoned*: never answered), starts a new triggerer and
opens the gate.  "Served" is a complete 2xx answer: every page must be served exactly once,
page ``K`` having been requested twice (the abandoned request and the new triggerer's).

(b) The pattern of ``examples/dags/paginated_api_streaming.py``: a ``start_from_trigger``
fetch-only task streams the API while a consumer task handles the pages; page ``K`` is held
until the consumer has handled every page before it, so pages are handled while the API is
still being paged, by construction.

The HTTP connections are created through the REST API (``POST /api/v2/connections``): the
components of the session's stack run already, so they cannot get them through their
environment.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.streams.descriptor import stream_id
from harness.airflow_stack import AirflowStack
from integration.triggers.http_server import PagedApi, page_items
from integration.triggers.sample_triggers import read_topic

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_http_pagination"
TASK_ID = "fetch_pages"
PAGES = 10
PER_PAGE = 3
HELD_PAGE = 4
PASSWORD = "e2e-http-secret-5821"


def _sequence(bootstrap: str, topic: str, key: str) -> list[tuple[int, int, bool]]:
    return [
        (s.envelope.attempt, s.envelope.sequence_index, s.envelope.is_last)
        for s in read_topic(bootstrap, topic, key)
    ]


def _task_over(stack: AirflowStack, run_id: str, dag_id: str = DAG_ID, task_id: str = TASK_ID) -> bool:
    ti = stack.task_instance(dag_id, run_id, task_id)
    return ti is not None and ti["state"] in ("success", "failed", "up_for_retry", "upstream_failed")


def _create_connection(stack: AirflowStack, conn_id: str, server: PagedApi) -> None:
    stack.api("DELETE", f"connections/{conn_id}", expect=(204, 404))
    stack.api_json(
        "POST",
        "connections",
        json={
            "connection_id": conn_id,
            "conn_type": "http",
            "host": "127.0.0.1",
            "port": server.port,
            "schema": "http",
            "login": "e2e",
            "password": PASSWORD,
        },
        expect=201,
    )


def _page_lines(pages: int) -> list[str]:
    return [f"{i} {' '.join(str(item['id']) for item in page_items(i, PER_PAGE))}" for i in range(pages)]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _ensure_topic(kafka_admin, topic: str) -> None:
    """Create ``topic`` (3 partitions) unless it exists; wait until it has leaders."""
    ensure_topics(kafka_admin, [TopicSpec(topic, partitions=3)])


def test_killed_triggerer_mid_pagination_resumes_and_each_page_is_served_once(
    airflow_stack: AirflowStack, kafka_bootstrap: str, new_topic, tmp_path: Path
):
    stack = airflow_stack
    topic = new_topic(partitions=3)
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    conn_id = f"e2e_paged_api_{uuid.uuid4().hex[:10]}"
    k = HELD_PAGE
    started = time.monotonic()
    # the production topology's second triggerer stops: the killed one runs the trigger
    with stack.sole_triggerer("triggerer"), PagedApi(pages=PAGES, per_page=PER_PAGE) as server:
        gate = server.hold(k)
        _create_connection(stack, conn_id, server)
        try:
            run_id = stack.trigger_dag(
                DAG_ID, conf={"conn_id": conn_id, "topic": topic, "dir": str(directory)}
            )
            key = stream_id(DAG_ID, run_id, TASK_ID)

            # the triggerer waits for page K, pages 0..K-1 are in Kafka
            stack.wait_for(
                lambda: server.held(k) == 1 or _task_over(stack, run_id),
                timeout=180,
                description=f"the triggerer to request page {k}",
                components=("scheduler", "triggerer"),
            )
            assert server.held(k) == 1, (
                f"{TASK_ID} ended before page {k} was requested: "
                f"{stack.task_instance(DAG_ID, run_id, TASK_ID)}\n"
                f"{stack.task_log(DAG_ID, run_id, TASK_ID)[-3000:]}"
            )
            stack.wait_for(
                lambda: _sequence(kafka_bootstrap, topic, key) == [(0, i, False) for i in range(k)],
                timeout=60,
                description=f"envelopes 0..{k - 1} in Kafka",
                components=("triggerer",),
            )
            assert server.served_counts() == {i: 1 for i in range(k)}

            stack.kill_component("triggerer")
            server.wait_for(
                lambda s: s.abandoned(k) == 1, 30, "the killed triggerer's request of the held page to close"
            )
            ti = stack.task_instance(DAG_ID, run_id, TASK_ID)
            assert ti is not None and ti["state"] == "deferred", ti
            assert _sequence(kafka_bootstrap, topic, key) == [(0, i, False) for i in range(k)]

            stack.restart_component("triggerer", timeout=120)
            gate.release()
            state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=240)
        finally:
            gate.release()
            stack.api("DELETE", f"connections/{conn_id}")
        served = server.served_counts()
        arrived, abandoned = server.arrived(k), server.abandoned(k)
    elapsed = time.monotonic() - started
    files = {p.name: p.read_text()[:500] for p in directory.iterdir()}
    assert state == "success", f"files: {files}\n{stack.diagnostics()}"

    # every page served exactly once; page K requested twice, the killed triggerer's request unanswered
    assert served == {i: 1 for i in range(PAGES)}, served
    assert (arrived, abandoned) == (2, 1)

    # Kafka: one attempt, pages 0..PAGES-1 in order, then the terminal marker
    stored = read_topic(kafka_bootstrap, topic, key)
    assert _sequence(kafka_bootstrap, topic, key) == [(0, i, i == PAGES) for i in range(PAGES + 1)]
    assert [s.envelope.payload for s in stored[:-1]] == [page_items(i, PER_PAGE) for i in range(PAGES)]
    assert stored[-1].envelope.error is None and len({s.partition for s in stored}) == 1

    # one deferral, one try; the task read the stream back in order, each page once
    events = [row["event"] for row in stack.state_change_log(DAG_ID, run_id=run_id, task_id=TASK_ID)]
    assert events.count("deferred") == 1 and events[-1] == "success", events
    tries = stack.task_instance_tries(DAG_ID, run_id, TASK_ID)
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "success")], tries
    assert _lines(directory / "pages.txt") == _page_lines(PAGES)
    summary = stack.xcom(DAG_ID, run_id, TASK_ID)
    assert summary["pages"] == PAGES and summary["finished"] is True, summary

    # two triggerer jobs ran the trigger; the second continued at page K
    trigger_logs = stack.trigger_log_files(DAG_ID, run_id, TASK_ID)
    assert len(trigger_logs) == 2, trigger_logs
    second = trigger_logs[-1].read_text(errors="replace")
    assert f"resuming at page {k}" in second, second[-3000:]
    assert PASSWORD not in stack.trigger_log(DAG_ID, run_id, TASK_ID)
    print(f"\nHTTP pagination with a killed triggerer took {elapsed:.1f}s")


FETCH_ONLY_DAG_ID = "e2e_http_fetch_only"
FETCH_ONLY_CONN_ID = "e2e_paged_api_fetch_only"


def test_fetch_only_http_stream_is_handled_by_a_consumer_while_the_api_is_paged(
    airflow_stack: AirflowStack, kafka_admin, kafka_bootstrap: str, tmp_path: Path
):
    from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

    stack = airflow_stack
    _ensure_topic(kafka_admin, DEFAULT_TOPIC)
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    consumer_file = directory / "consumer.txt"
    pages, k = 8, 5
    with PagedApi(pages=pages, per_page=PER_PAGE) as server:
        gate = server.hold(k)
        _create_connection(stack, FETCH_ONLY_CONN_ID, server)
        try:
            run_id = stack.trigger_dag(FETCH_ONLY_DAG_ID, conf={"dir": str(directory)})
            # the consumer handles pages 0..K-1 while the trigger waits for page K
            stack.wait_for(
                lambda: (
                    len(_lines(consumer_file)) >= k
                    or _task_over(stack, run_id, FETCH_ONLY_DAG_ID, "handle_pages")
                ),
                timeout=180,
                description=f"the consumer to handle pages 0..{k - 1}",
                components=("scheduler", "triggerer"),
            )
            assert _lines(consumer_file) == _page_lines(k)
            assert server.held(k) == 1 and server.served(k) == 0
            gate.release()
            state = stack.wait_for_dag_run(FETCH_ONLY_DAG_ID, run_id, timeout=240)
        finally:
            gate.release()
            stack.api("DELETE", f"connections/{FETCH_ONLY_CONN_ID}")
        served = server.served_counts()
    assert state == "success", stack.diagnostics()
    assert served == {i: 1 for i in range(pages)}, served
    assert _lines(consumer_file) == _page_lines(pages)  # in order, each once

    descriptor = stack.xcom(FETCH_ONLY_DAG_ID, run_id, "fetch_pages")
    key = stream_id(FETCH_ONLY_DAG_ID, run_id, "fetch_pages")
    assert descriptor["trigger_run_id"] == key and descriptor["topic"] == DEFAULT_TOPIC, descriptor
    assert (descriptor["count"], descriptor["error"]) == (pages, None), descriptor
    assert _sequence(kafka_bootstrap, DEFAULT_TOPIC, key) == [(0, i, i == pages) for i in range(pages + 1)]
    consumed = stack.xcom(FETCH_ONLY_DAG_ID, run_id, "handle_pages")
    assert consumed["pages"] == pages and consumed["finished"] is True, consumed
