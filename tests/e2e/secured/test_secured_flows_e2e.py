"""The demo's flows on a SASL_SSL + TLS Kafka, reached only through Airflow connections.

One single-node broker started with ``kafka start --security sasl_ssl`` (SCRAM-SHA-512 over TLS,
a CA of its own) and one Airflow stack of its own (``secured_dags/``) on the e2e topology
(``e2e_topology``: PostgreSQL, two Celery workers and two triggerers in CI) whose ``kafka_default`` and
``kafka_watcher`` connections are the ``AIRFLOW_CONN_KAFKA_DEFAULT`` that ``kafka status
--show-password`` prints.  Every path of the provider goes through them:

1. a streaming trigger (triggerer) writes pages and a stream consumer (worker) handles them in
   order while the producer task deferred once;
2. ``airflow-kafka-events emit --properties client.properties`` (the CLI, outside Airflow)
   publishes an event that the asset watcher (triggerer) turns into an AssetEvent running a DAG;
3. the partition bridge (``--properties``) posts partitioned events from the SDK
   (``external.emit(settings=KafkaSettings(extras))``) and from a task (``emit_asset_event``);
4. ``@task.iterable`` writes its results stream and a second iterable reads it.

Finally, the SCRAM password appears in no log of Airflow, the bridge or the CLI.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.assets import publish as external
from airflow_kafka_events.assets.watcher_payload import watcher_payload
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack
from harness.bridge_process import BridgeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(600)]

CLI = [sys.executable, "-m", "airflow_kafka_events.cli.main"]
DAGS = Path(__file__).parent / "secured_dags"
PAGES = 40  # as in secured_dags/e2e_secured.py
ITEMS = 60
STREAMING = "e2e_secured_streaming"
WATCHED = "e2e_secured_watched"
PARTITIONED = "e2e_secured_partitioned"
PUBLISH = "e2e_secured_publish"
ITERATION = "e2e_secured_iteration"
DAG_IDS = (STREAMING, WATCHED, PARTITIONED, PUBLISH, ITERATION)
WATCHED_URI = "e2e-secured://watched"
BATCHES_NAME = "e2e_secured_batches"
BATCHES_URI = "x-e2e-secured://batches"
WAIT = 180.0


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class Secured:
    """The running broker and stack (and the bridge, once started)."""

    state_dir: Path
    extras: dict[str, Any]
    properties: Path
    stack: AirflowStack
    run: str
    out: Path
    outputs: list[str] = field(default_factory=list)  # every CLI output of the module
    bridge: BridgeProcess | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def password(self) -> str:
        return str(self.extras["sasl.password"])

    def topic(self, kind: str) -> str:
        return f"e2e.secured.{kind}.{self.run}"


def _start_broker(state_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "kafka", "start", "--security", "sasl_ssl", "--state-dir", str(state_dir), "--timeout", "240"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _printed_connection(stdout: str) -> dict[str, Any]:
    match = re.search(r"^AIRFLOW_CONN_KAFKA_DEFAULT='(.+)'$", stdout, re.M)
    assert match, stdout
    conn = json.loads(match.group(1))
    assert conn["conn_type"] == "kafka"
    return dict(conn["extra"])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, e2e_topology: str) -> Iterator[Secured]:
    began = time.monotonic()
    state_dir = tmp_path_factory.mktemp("secured-kafka")
    home = tmp_path_factory.mktemp("secured-home")
    dags = tmp_path_factory.mktemp("secured-dags")
    out = tmp_path_factory.mktemp("secured-out")
    for path in DAGS.glob("*.py"):
        shutil.copy2(path, dags / path.name)
    broker = _start_broker(state_dir)  # the broker starts while Airflow migrates its DB
    stack = AirflowStack(home=home, dags_folder=dags, topology=e2e_topology)
    env: Secured | None = None
    try:
        stack.migrate()
        stdout, stderr = broker.communicate(timeout=300)
        assert broker.returncode == 0, stderr
        shown = _cli("kafka", "status", "--state-dir", str(state_dir), "--show-password")
        assert shown.returncode == 0, shown.stderr
        extras = _printed_connection(shown.stdout)
        assert extras["security.protocol"] == "SASL_SSL" and extras["sasl.mechanisms"] == "SCRAM-SHA-512"
        assert Path(extras["ssl.ca.location"]).is_file()
        assert extras["sasl.password"] != "********"
        listed = re.search(r"^properties=(\S+)", shown.stdout, re.M)
        assert listed, shown.stdout
        env = Secured(state_dir, extras, Path(listed.group(1)), stack, uuid.uuid4().hex[:8], out)
        env.outputs += [stdout, stderr, shown.stderr]  # not shown.stdout: it was asked to show it
        env.timings["broker and DB ready"] = round(time.monotonic() - began, 1)

        ensure_topics(
            AdminClient(extras),
            [
                TopicSpec(env.topic("trigger-events"), partitions=3),
                TopicSpec(env.topic("watched"), partitions=1),
                TopicSpec(env.topic("bridged"), partitions=3),
                TopicSpec(env.topic("dlq"), partitions=1),
            ],
        )
        watcher = {
            **extras,
            "group.id": f"e2e-secured-watchers-{env.run}",
            "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": "10000",
        }
        stack.extra_env.update(
            {
                "AIRFLOW_KAFKA_EVENTS_E2E_SECURED_RUN": env.run,
                "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": extras}),
                "AIRFLOW_CONN_KAFKA_WATCHER": json.dumps({"conn_type": "kafka", "extra": watcher}),
            }
        )
        stack.start(timeout=300.0, dag_ids=DAG_IDS)
        for dag_id in (WATCHED, PARTITIONED):  # asset-scheduled: their watcher / timetable must be live
            stack.unpause(dag_id)
        env.timings["stack ready"] = round(time.monotonic() - began, 1)
        yield env
    finally:
        try:
            if env is not None and env.bridge is not None:
                env.bridge.stop()
            stack.stop()
        finally:
            from airflow_kafka_events.kafka.producer import close_all_producers

            close_all_producers(timeout=5)
            if broker.poll() is None:
                broker.kill()
                broker.wait(timeout=30)
            LocalKafkaCluster(state_dir=state_dir).stop(timeout=20.0)
        print(f"\nsecured e2e timings (s): {env.timings if env is not None else {}}")


def _finished(env: Secured, flow: str, began: float) -> None:
    env.timings[flow] = round(time.monotonic() - began, 1)


# --------------------------------------------------------------------------- (1) streaming
def test_a_streaming_trigger_and_a_stream_consumer_on_sasl_ssl(secured: Secured) -> None:
    stack, began = secured.stack, time.monotonic()

    run_id = stack.trigger_dag(STREAMING, conf={"dir": str(secured.out)})
    state = stack.wait_for_dag_run(STREAMING, run_id, timeout=WAIT)
    _finished(secured, "streaming", began)

    assert state == "success", stack.diagnostics()
    states = [r["event"] for r in stack.state_change_log(STREAMING, run_id=run_id, task_id="fetch_pages")]
    assert states.count("deferred") == 1, states
    handled = [json.loads(line) for line in (secured.out / "handled.jsonl").read_text().splitlines()]
    assert [h["seq"] for h in handled] == list(range(PAGES))
    assert [h["page"] for h in handled] == list(range(PAGES))
    summary = stack.xcom(STREAMING, run_id, "handle_pages")
    assert summary["pages"] == PAGES and summary["finished"] is True, summary
    assert summary["topic"] == secured.topic("trigger-events"), summary


# --------------------------------------------------------------------------- (2) asset watcher
def _watched_events(stack: AirflowStack) -> list[dict[str, Any]]:
    rows = stack.query(
        "SELECT ae.id, ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id WHERE a.name = ?",
        (WATCHED_URI,),
    )
    return [{"id": r["id"], "payload": watcher_payload(json_column(r["extra"])) or {}} for r in rows]


def test_the_cli_event_becomes_an_asset_event_through_the_watcher(secured: Secured) -> None:
    stack, began = secured.stack, time.monotonic()

    emitted = _cli(
        "emit",
        "--asset",
        WATCHED_URI,
        "--topic",
        secured.topic("watched"),
        "--properties",
        str(secured.properties),
        "--producer",
        "e2e-secured-cli",
        "--extra",
        json.dumps({"via": "cli"}),
    )
    secured.outputs += [emitted.stdout, emitted.stderr]
    assert emitted.returncode == 0, emitted.stderr
    event_id = json.loads(emitted.stdout)["event_id"]

    def event() -> list[dict[str, Any]]:
        return [e for e in _watched_events(stack) if e["payload"].get("event_id") == event_id]

    (found,) = stack.wait_for(event, WAIT, "the watcher's asset event", ("triggerer",))
    payload = found["payload"]
    assert payload["source"]["kind"] == "external" and payload["source"]["producer"] == "e2e-secured-cli"
    assert payload["extra"] == {"via": "cli"}
    assert payload["kafka"]["topic"] == secured.topic("watched")

    def run() -> dict[str, Any] | None:
        rows = stack.query(
            "SELECT dr.run_id, dr.state FROM dag_run dr "
            "JOIN dagrun_asset_event dae ON dae.dag_run_id = dr.id WHERE dr.dag_id = ? AND dae.event_id = ?",
            (WATCHED, found["id"]),
        )
        done = [r for r in rows if r["state"] in ("success", "failed")]
        return done[0] if done else None

    dag_run = stack.wait_for(run, WAIT, f"the {WATCHED} run of the event", ("scheduler", "triggerer"))
    _finished(secured, "watcher", began)
    assert dag_run["state"] == "success"
    assert event_id in stack.xcom(WATCHED, dag_run["run_id"], "seen")
    assert len(event()) == 1  # exactly one asset event


# --------------------------------------------------------------------------- (3) partition bridge
def test_the_bridge_posts_partitioned_events_from_the_sdk_and_a_task(secured: Secured) -> None:
    stack, began = secured.stack, time.monotonic()
    bridge = secured.bridge = BridgeProcess(
        stack,
        secured.extras["bootstrap.servers"],
        topic=secured.topic("bridged"),
        dlq=secured.topic("dlq"),
        group=f"e2e-secured-bridge-{secured.run}",
        log_path=stack.log_dir / "bridge.log",
        assets=["x-e2e-secured://*"],
        allow=[
            json.dumps({"source_kinds": ["external"], "producers": ["e2e-secured-sdk"]}),
            json.dumps({"source_kinds": ["task"], "dag_ids": [PUBLISH]}),
        ],
        extra_args=["--properties", str(secured.properties)],
    )
    sdk_event_id = external.emit(
        BATCHES_URI,
        name=BATCHES_NAME,
        partition_key="batch-sdk",
        extra={"via": "sdk"},
        topic=secured.topic("bridged"),
        producer="e2e-secured-sdk",
        settings=KafkaSettings(secured.extras),
    ).event_id
    publish_run = stack.trigger_dag(PUBLISH)
    assert stack.wait_for_dag_run(PUBLISH, publish_run, timeout=WAIT) == "success"
    task_event_id = stack.xcom(PUBLISH, publish_run, "publish")
    keys = {"batch-sdk", "batch-task"}

    def runs() -> dict[str, dict[str, Any]] | None:
        if bridge.proc.poll() is not None:
            raise AssertionError(f"the bridge exited with {bridge.proc.returncode}:\n{bridge.log()[-4000:]}")
        rows = stack.query(
            "SELECT run_id, state, partition_key FROM dag_run WHERE dag_id = ? AND partition_key IS NOT NULL",
            (PARTITIONED,),
        )
        done = {r["partition_key"]: r for r in rows if r["state"] in ("success", "failed")}
        return done if set(done) == keys else None

    done = stack.wait_for(runs, WAIT, f"a finished {PARTITIONED} run per key {sorted(keys)}", ("scheduler",))
    _finished(secured, "bridge", began)
    assert {k: r["state"] for k, r in done.items()} == dict.fromkeys(keys, "success")
    events = stack.query(
        "SELECT ae.partition_key, ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id "
        "WHERE a.name = ?",
        (BATCHES_NAME,),
    )
    posted = {e["partition_key"]: json_column(e["extra"])["airflow_kafka_events"]["event_id"] for e in events}
    assert posted == {"batch-sdk": sdk_event_id, "batch-task": task_event_id}
    seen = stack.xcom(PARTITIONED, done["batch-sdk"]["run_id"], "process")
    assert seen["partition_key"] == "batch-sdk" and seen["extras"][0]["via"] == "sdk"
    assert bridge.stop() == 0 and "bridge stopped" in bridge.log()


# --------------------------------------------------------------------------- (4) iteration
def test_task_iterable_writes_its_results_stream_and_another_iterable_reads_it(secured: Secured) -> None:
    stack, began = secured.stack, time.monotonic()

    run_id = stack.trigger_dag(ITERATION)
    state = stack.wait_for_dag_run(ITERATION, run_id, timeout=WAIT)
    _finished(secured, "iteration", began)

    assert state == "success", stack.diagnostics()
    tis = stack.task_instances(ITERATION, run_id)
    assert sorted(ti["task_id"] for ti in tis) == ["check", "numbers", "square"]
    square = stack.xcom(ITERATION, run_id, "square")
    assert square["succeeded"] == ITEMS and square["failed"] == 0, square
    results = square["results"]
    assert results["topic"] == secured.topic("trigger-events"), results
    assert results["results"] == ITEMS and results["complete"] is True, results
    check = stack.xcom(ITERATION, run_id, "check")
    assert check["succeeded"] == ITEMS and check["failed"] == 0, check


# --------------------------------------------------------------------------- no password in any log
def test_the_password_is_in_no_log(secured: Secured) -> None:
    password = secured.password
    logs = [p for p in secured.stack.log_dir.rglob("*") if p.is_file()]
    assert any(p.name == "triggerer.log" for p in logs) and any(p.name == "bridge.log" for p in logs)
    assert any("dag_id=" in str(p) for p in logs), "no task log was written"
    # the broker's own output, logs and configuration (not its data, nor the client files)
    for node in secured.state_dir.glob("node-*"):
        logs += [p for p in node.rglob("*") if p.is_file() and "data" not in p.relative_to(node).parts]
    assert any(p.name == "server.properties" for p in logs)
    leaked = [str(p) for p in logs if password in p.read_text(errors="replace")]
    assert leaked == []
    assert [o for o in secured.outputs if password in o] == []
