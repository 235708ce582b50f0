"""Terminal escape sequences in Kafka data never reach the operator's terminal through the CLI.

Records written to a real broker carry ``ESC ]0;title BEL`` (set the title), ``ESC [2K ESC [1G``
(erase the line, cursor to column 1: overwrite what was printed), ``ESC [2J`` and ``ESC c`` (clear the
screen) in a dead letter's reason, consumer, error message, key, headers and payload, and in a
stream's payload and error.  The installed ``airflow-kafka-events`` runs in a subprocess (``dlq ls``,
``dlq show``, the ``dlq replay`` confirmation on a pseudo-terminal, ``streams ls|show``): no ESC byte
in its stdout or stderr, and the sequences are shown as text.
"""

from __future__ import annotations

import os
import pty
import subprocess
import time

import pytest

from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.index.record import StreamRecord, encode_record, stream_key
from integration.cli.test_inspection_cli import ENTRY_POINT, cli

pytestmark = pytest.mark.integration

TITLE = "\x1b]0;owned\x07"
ERASE = "\x1b[2K\x1b[1G"
CLEAR = "\x1b[2J"
RESET = "\x1bc"
FORGED = f"{ERASE}Replay to topic 'safe-topic'? [y/N] {TITLE}{CLEAR}{RESET}"


def _no_escape(result: subprocess.CompletedProcess, *, shown: str = "\\x1b") -> None:
    for name in ("stdout", "stderr"):
        text = getattr(result, name)
        text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        assert "\x1b" not in text and "\x07" not in text, (name, text)
    assert shown in f"{result.stdout}{result.stderr}", result


@pytest.fixture
def producer(kafka_bootstrap):
    from airflow_kafka_events.kafka.producer import RecordProducer
    from airflow_kafka_events.kafka.settings import KafkaSettings

    made = RecordProducer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    yield made
    made.close(5.0)


def test_dead_letters_with_escape_sequences_print_as_text(kafka_bootstrap, producer, new_topic):
    dlq, source = new_topic(partitions=1), new_topic(partitions=1)
    letter = DeadLetter(
        reason=f"not-allowed{TITLE}",
        error_type=f"ValueError{RESET}",
        error_message=f"refused{FORGED}",
        source_topic=source,
        source_partition=0,
        source_offset=0,
        consumer=f"watcher{CLEAR}",
    )
    written = DeadLetterWriter(producer, dlq, timeout=30.0).write(
        letter,
        value=f"payload{ERASE}{TITLE}".encode(),
        key=f"key{CLEAR}".encode(),
        headers=[("trace-id", f"t{RESET}".encode())],
    )
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", dlq)
    _no_escape(cli("dlq", "ls", *kafka))
    _no_escape(cli("dlq", "show", "0", str(written.offset), *kafka))

    # the confirmation is asked on a terminal: stdin a pseudo-terminal, the answer "n"
    leader, follower = pty.openpty()
    try:
        os.write(leader, b"n\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KAFKA_BOOTSTRAP"))}
        env["AIRFLOW_HOME"] = "/nonexistent-airflow-home"
        env["AIRFLOW__KAFKA_EVENTS__REPLAY_EXTRA_TARGET_TOPICS"] = source
        confirm = subprocess.run(
            [str(ENTRY_POINT), "dlq", "replay", "0", str(written.offset), *kafka],
            stdin=follower,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert confirm.returncode == 1 and "not replayed" in confirm.stderr, confirm.stderr
    assert f"Replay {dlq}[0]@{written.offset} to topic {source!r}? [y/N]" in confirm.stderr
    _no_escape(confirm)
    assert "\\x1b[2K\\x1b[1GReplay to topic 'safe-topic'" in confirm.stderr


def test_streams_with_escape_sequences_print_as_text(kafka_bootstrap, producer, new_topic):
    topic = new_topic(partitions=1)
    run = stream_id("escape_dag", f"manual__{RESET}", "produce")
    for envelope in (
        TriggerEventEnvelope(
            trigger_run_id=run, sequence_index=0, is_last=False, payload={"note": f"{TITLE}{CLEAR}"}
        ),
        TriggerEventEnvelope(
            trigger_run_id=run,
            sequence_index=1,
            is_last=True,
            error=StreamFailure(type=f"RuntimeError{ERASE}", message=f"boom{FORGED}"),
        ),
    ):
        producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(envelope), key=run)
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    index = new_topic(partitions=1, prefix="stream-index", config={"cleanup.policy": "compact"})
    record = StreamRecord(
        stream_id=run,
        topic=topic,
        partition=0,
        attempt=0,
        status="failed",
        pages=1,
        updated_at=time.time(),
        last_offset=1,
        error=f"RuntimeError{ERASE}: boom{FORGED}",
    )
    producer.send_and_wait(index, encode_record(record), key=stream_key(run))
    listed = cli("streams", "ls", "--bootstrap-servers", kafka_bootstrap, "--index-topic", index)
    assert listed.returncode == 0 and "boom" in listed.stdout, listed.stderr
    _no_escape(listed)
    _no_escape(cli("streams", "show", run, *kafka))


def test_replay_assets_prints_escape_sequences_and_url_credentials_of_events_as_text(
    kafka_bootstrap, new_topic, tmp_path
):
    """An asset event's URI may hold credentials and its partition key control sequences; an
    undecodable record's bytes are quoted in its refusal: ``replay-assets`` shows neither raw."""
    from airflow_kafka_events.assets.publish import build_envelope
    from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
    from integration.bridge.fake_airflow import FakeAirflow
    from integration.bridge.test_bridge_kafka import PASSWORD, send, send_raw

    topic = new_topic(partitions=1)
    secret = "uri-pw-S3CRET"
    event = build_envelope(
        asset=AssetRef(name=f"escapes{CLEAR}", uri=f"postgresql://u:{secret}@db/x"),
        source=EventSource(SourceKind.EXTERNAL, producer=f"p{TITLE}"),
        partition_key=f"day{ERASE}",
    )
    send(kafka_bootstrap, topic, event)
    send_raw(kafka_bootstrap, topic, f"{{not json {RESET} password={secret}".encode())
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = "/nonexistent-airflow-home"
    with FakeAirflow(users={"bridge": PASSWORD}) as fake:
        result = subprocess.run(
            [str(ENTRY_POINT), "replay-assets", "--from", "1h", "--topic", topic,
             "--bootstrap-servers", kafka_bootstrap, "--airflow-url", fake.base_url, "--username", "bridge",
             "--password-file", str(password_file), "--allow-any-source", "--dry-run"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    _no_escape(result)
    assert secret not in result.stdout + result.stderr, result.stdout + result.stderr
    assert "postgresql://u:***@db/x" in result.stdout, result.stdout
