"""``airflow-kafka-events streams|dlq`` through the installed entry point, against the session broker.

Each test runs the real ``airflow-kafka-events`` script in a subprocess (``--json`` parsed), with an
environment that names no Airflow configuration: the commands import no Airflow module (checked
with ``-X importtime``), errors exit non-zero with a message naming the topic and the fix, and
brokers that do not answer end a command by its ``--timeout``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.ui.inspection.reader import TopicReader, message_headers
from integration.inspection.records import asset_event, write_dead_letter, write_index, write_stream

pytestmark = pytest.mark.integration

ENTRY_POINT = Path(sys.executable).with_name("airflow-kafka-events")
RUN = "scheduled__2026-12-01T00:00:00+00:00"


def cli(
    *argv: str,
    timeout: float = 120,
    stdin: str | None = None,
    importtime: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """The CLI run with no Airflow settings in its environment but ``env``'s."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KAFKA_BOOTSTRAP"))},
        "AIRFLOW_HOME": "/nonexistent-airflow-home",  # no airflow.cfg: defaults, flags and env only
        **(env or {}),
    }
    command = [sys.executable, "-X", "importtime", str(ENTRY_POINT)] if importtime else [str(ENTRY_POINT)]
    return subprocess.run(
        [*command, *argv], env=env, capture_output=True, text=True, timeout=timeout, input=stdin
    )


def ok_json(result: subprocess.CompletedProcess) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def producer_config(kafka_bootstrap):
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def producer(producer_config):
    from airflow_kafka_events.kafka.producer import RecordProducer
    from airflow_kafka_events.kafka.settings import KafkaSettings

    made = RecordProducer(KafkaSettings(producer_config).producer_config())
    yield made
    made.close(5.0)


def test_streams_ls_show_tail_print_json_and_import_no_airflow(kafka_bootstrap, producer, new_topic):
    topic = new_topic(partitions=3)
    index = new_topic(partitions=3, prefix="stream-index", config={"cleanup.policy": "compact"})
    done, failed = stream_id("cli_dag", RUN, "done"), stream_id("cli_dag", RUN, "failed")
    write_index(producer, index, done, write_stream(producer, topic, done, 4))
    write_index(
        producer,
        index,
        failed,
        write_stream(producer, topic, failed, 2, end="failed"),
        status="failed",
        error="RuntimeError: the API answered 500",
    )
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    listed = ("--bootstrap-servers", kafka_bootstrap, "--index-topic", index)

    result = cli("streams", "ls", *listed, "--json", importtime=True)
    listing = ok_json(result)
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line]
    assert "airflow_kafka_events.ui.inspection" in imported
    assert not [m for m in imported if m == "airflow" or m.startswith("airflow.")]
    assert {s["trigger_run_id"]: s["state"] for s in listing["streams"]} == {
        done: "complete",
        failed: "failed",
    }
    assert listing["index"] == {"topic": index, "streams": 2, "skipped": []}
    assert listing["matched"] == 2

    only = ok_json(cli("streams", "ls", *listed, "--json", "--task-id", "done"))
    assert [s["trigger_run_id"] for s in only["streams"]] == [done]
    assert ok_json(cli("streams", "ls", *listed, "--json", "--state", "failed"))["streams"][0]["pages"] == 2

    text = cli("streams", "ls", *listed)
    assert (
        text.returncode == 0 and done in text.stdout and "RuntimeError: the API answered 500" in text.stdout
    )
    assert "2 stream(s) match" in text.stdout

    shown = ok_json(cli("streams", "show", done, *kafka, "--json"))
    assert shown["summary"]["pages"] == 4 and [p["sequence_index"] for p in shown["pages"]] == [0, 1, 2, 3, 4]

    # read in the time it was written (as the view does with its task instance's run): the same stream
    spanned = ok_json(cli("streams", "show", done, *kafka, "--json", "--written-since", "1h"))
    assert spanned["found_by"] == "span" and spanned["summary"]["pages"] == 4, spanned
    refused = cli("streams", "show", done, *kafka, "--json", "--written-until", "1h")
    assert refused.returncode != 0 and "--written-since" in refused.stdout + refused.stderr, refused

    tailed = cli("streams", "tail", failed, *kafka, "--from-start", "--json")
    assert tailed.returncode == 0, tailed.stderr
    lines = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert [p["sequence_index"] for p in lines] == [0, 1, 2] and lines[-1]["error"].startswith("RuntimeError")


def test_streams_tail_follow_prints_each_new_envelope_and_exits_at_the_terminal_marker(
    kafka_bootstrap, producer, new_topic
):
    topic = new_topic(partitions=3)
    run = stream_id("cli_dag", RUN, "followed")
    write_stream(producer, topic, run, 1, end=None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KAFKA_BOOTSTRAP"))}
    argv = [str(ENTRY_POINT), "streams", "tail", run, "--follow", "--json"]
    tail = subprocess.Popen(
        [*argv, "--bootstrap-servers", kafka_bootstrap, "--topic", topic],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert tail.stdout is not None
        first = json.loads(tail.stdout.readline())  # the latest envelope: the tail is reading
        assert first["sequence_index"] == 0
        for seq in (1, 2):
            envelope = TriggerEventEnvelope(trigger_run_id=run, sequence_index=seq, is_last=seq == 2)
            producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(envelope), key=run)
        out, err = tail.communicate(timeout=60)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert [json.loads(line)["sequence_index"] for line in out.splitlines()] == [1, 2]


def test_dlq_ls_show_and_replay_with_confirmation_and_receipt(
    kafka_bootstrap, producer, producer_config, new_topic
):
    dlq, source = new_topic(partitions=1), new_topic(partitions=3)
    event = asset_event(idempotency_key="cli-key-1", extra={"password": "hunter2"})
    value = ASSET_EVENT_CODEC.encode(event)
    written = write_dead_letter(
        producer, dlq, value=value, key=b"k", headers=[("trace-id", b"t1")], source=(source, 1, 3)
    )
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", dlq)

    listing = ok_json(cli("dlq", "ls", *kafka, "--json", "--reason", "not-allowed"))
    (record,) = listing["records"]
    assert (record["partition"], record["offset"], record["source_topic"]) == (0, written.offset, source)
    assert "hunter2" not in json.dumps(listing)
    assert ok_json(cli("dlq", "ls", *kafka, "--json", "--reason", "undecodable"))["records"] == []

    shown = ok_json(cli("dlq", "show", "0", str(written.offset), *kafka, "--json"))
    assert shown["reason"] == "not-allowed" and ["trace-id", "t1"] in shown["headers"]

    # the source topic is one the configuration names (the asset events topic of this dead-letter topic)
    configured = {
        "AIRFLOW__KAFKA_EVENTS__DLQ_TOPIC": dlq,
        "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC": source,
    }
    refused = cli("dlq", "replay", "0", str(written.offset), *kafka, stdin="", env=configured)
    assert refused.returncode == 1 and "--yes" in refused.stderr  # no terminal to confirm on

    receipt = ok_json(
        cli(
            "dlq",
            "replay",
            "0",
            str(written.offset),
            *kafka,
            "--yes",
            "--json",
            "--actor",
            "ops-1",
            env=configured,
        )
    )
    assert receipt["target_topic"] == source and receipt["idempotency_key"] == "cli-key-1"
    assert receipt["actor"] == "ops-1" and receipt["event_id"] == event.event_id
    with TopicReader(producer_config, source, timeout=30) as reader:
        replayed = reader.read_one(receipt["target_partition"], receipt["target_offset"])
    assert (
        replayed.value() == value
        and replayed.key() == b"k"
        and message_headers(replayed) == [("trace-id", b"t1")]
    )

    text = cli("dlq", "replay", "0", str(written.offset), *kafka, "--yes", env=configured)
    assert text.returncode == 0 and text.stdout.startswith(f"replayed {dlq}[0]@{written.offset}")


def test_errors_exit_non_zero_with_the_cause_and_fix(kafka_bootstrap):
    missing = cli(
        "dlq", "ls", "--bootstrap-servers", kafka_bootstrap, "--topic", "no-such-dlq-topic", "--json"
    )
    assert missing.returncode == 1
    assert "no-such-dlq-topic" in missing.stderr and "topics ensure" in missing.stderr
    assert json.loads(missing.stdout)["error"]["type"] == "TopicNotFoundError"

    usage = cli(
        "streams", "show", "d/t/-1/r", "--bootstrap-servers", kafka_bootstrap, "--since", "yesterday-ish"
    )
    assert usage.returncode == 2 and "ISO-8601" in usage.stderr
    no_index = cli(
        "streams", "ls", "--bootstrap-servers", kafka_bootstrap, "--index-topic", "no-such-index", "--json"
    )
    assert no_index.returncode == 1 and "topics ensure" in no_index.stderr
    assert json.loads(no_index.stdout)["error"]["type"] == "StreamIndexNotFoundError"

    started = time.monotonic()
    unreachable = cli("streams", "ls", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "3", timeout=30)
    took = time.monotonic() - started
    assert unreachable.returncode == 1 and took < 3 + 2, (took, unreachable.stderr)
    assert "127.0.0.1:1" in unreachable.stderr and "fix:" in unreachable.stderr
