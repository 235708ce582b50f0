"""No secret carried by a record reaches a page, a JSON answer or the CLI's output.

Records written to the real broker carry six kinds of secret: a ``password`` nested in an asset
event's ``extra``, a password in an error message as JSON text, a Python repr ``{'password': ...}``,
a ``cookie: session=...`` header, URL credentials ``postgresql://u:pw@host/db`` and a ``passphrase``
key.  They are an asset event, its dead letter (the envelope as payload, the error message, the
cookie header) and a failed stream.  Every page and ``/api`` answer of the view showing them (as
admin and as viewer) and the CLI's ``dlq ls``, ``dlq show``, ``streams ls`` and ``streams show``
(text and ``--json``) show ``***`` where they were, and none of them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import pytest

from harness.airflow_stack import AirflowStack
from harness.kafka_records import record_at
from integration.cli.test_inspection_cli import cli

pytestmark = pytest.mark.e2e

PREFIX = "/kafka-events"


@dataclass
class Leaks:
    secrets: dict[str, str]
    asset_uri: str
    dead_letter: tuple[int, int]
    stream_id: str


@pytest.fixture(scope="module")
def leaks(ui_stack: AirflowStack, kafka_bootstrap: str, ui_topics) -> Leaks:

    from airflow_kafka_events.assets.publish import emit
    from airflow_kafka_events.dead_letters.headers import DeadLetterReason
    from airflow_kafka_events.dead_letters.letter import DeadLetter
    from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
    from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
    from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
    from airflow_kafka_events.kafka.producer import RecordProducer, get_producer
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from airflow_kafka_events.streams.descriptor import stream_id
    from airflow_kafka_events.streams.index.record import StreamRecord, encode_record, stream_key

    kinds = ("extra-password", "error-json", "error-repr", "cookie", "url-password", "passphrase")
    secrets = {kind: f"{kind}-{uuid.uuid4().hex}" for kind in kinds}
    asset_uri = f"kafka-events://e2e-leaks/{uuid.uuid4().hex[:6]}"
    extra = {
        "db": {"hosts": ["db1"], "password": secrets["extra-password"]},
        "passphrase": secrets["passphrase"],
        "note": f"{{'password': '{secrets['error-repr']}'}}",
        "target": f"postgresql://u:{secrets['url-password']}@db.example/db",
    }
    receipt = emit(
        asset_uri, extra=extra, producer="e2e-leaks", topic=ui_topics.asset_events,
        bootstrap_servers=kafka_bootstrap,
    )  # fmt: skip
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    msg = record_at(kafka_bootstrap, receipt)
    letter = DeadLetter(
        reason=DeadLetterReason.NOT_ALLOWED,
        error_type="ValueError",
        error_message=(
            f'refused {{"password": "{secrets["error-json"]}"}} from {{\'password\': '
            f"'{secrets['error-repr']}'}} at postgresql://u:{secrets['url-password']}@db/x; "
            f"cookie: session={secrets['cookie']}"
        ),
        source_topic=receipt.topic,
        source_partition=receipt.partition,
        source_offset=receipt.offset,
        consumer="e2e-leaks",
        event_id=receipt.event_id,
    )
    headers = [*(msg.headers() or []), ("cookie", f"session={secrets['cookie']}".encode())]
    delivered = DeadLetterWriter(get_producer(settings.producer_config()), ui_topics.dlq).write(
        letter, value=msg.value(), key=msg.key(), headers=headers
    )

    run = stream_id("e2e_ui_leaks", f"manual__{uuid.uuid4().hex[:8]}", "produce")
    producer = RecordProducer(settings.producer_config())
    try:
        for envelope in (
            TriggerEventEnvelope(trigger_run_id=run, sequence_index=0, is_last=False, payload=extra),
            TriggerEventEnvelope(
                trigger_run_id=run,
                sequence_index=1,
                is_last=True,
                error=StreamFailure(type="RuntimeError", message=letter.error_message),
            ),
        ):
            producer.send_and_wait(ui_topics.trigger_events, TRIGGER_EVENT_CODEC.encode(envelope), key=run)
        indexed = StreamRecord(
            stream_id=run,
            topic=ui_topics.trigger_events,
            partition=0,
            attempt=0,
            status="failed",
            pages=1,
            updated_at=time.time(),
            error=f"RuntimeError: {letter.error_message}",
        )  # what its trigger writes to the stream index (the error's text as the page shows it)
        producer.send_and_wait(ui_topics.stream_index, encode_record(indexed), key=stream_key(run))
    finally:
        producer.close(5.0)
    return Leaks(secrets, asset_uri, (delivered.partition, delivered.offset), run)


def _assert_clean(where: str, text: str, leaks: Leaks) -> None:
    found = [kind for kind, secret in leaks.secrets.items() if secret in text]
    assert not found, (where, found, text[:2000])


@pytest.mark.parametrize("user", ["admin", "viewer"])
def test_no_record_secret_reaches_a_page_or_an_answer(ui_stack: AirflowStack, leaks: Leaks, user):
    partition, offset = leaks.dead_letter
    stream = quote(leaks.stream_id, safe="/")
    paths = [
        "/dead-letters?consumer=e2e-leaks",
        f"/dead-letters/{partition}/{offset}",
        f"/asset-events?asset={quote(leaks.asset_uri)}",
        "/streams?dag_id=e2e_ui_leaks",
        f"/streams/{stream}",
    ]
    if user == "admin":
        paths.append(f"/dead-letters/{partition}/{offset}/replay")
    headers = {"Authorization": f"Bearer {ui_stack.token(user)}"}
    for path in paths:
        for url in (f"{PREFIX}{path}", f"{PREFIX}/api{path}"):
            answer = ui_stack.client.get(url, headers=headers, timeout=120)
            assert answer.status_code == 200, (url, answer.status_code, answer.text[:500])
            _assert_clean(url, answer.text, leaks)
    # they were there, and masked
    record = ui_stack.client.get(
        f"{PREFIX}/api/dead-letters/{partition}/{offset}", headers=headers, timeout=120
    ).json()
    assert dict(map(tuple, record["headers"]))["cookie"] == "***"
    assert record["payload_preview"].count("***") >= 4 and "***" in record["error_message"]
    assert "postgresql://u:***@db/x" in record["error_message"]


def test_no_record_secret_reaches_the_cli(kafka_bootstrap: str, ui_topics, leaks: Leaks):
    partition, offset = leaks.dead_letter
    dlq = ("--bootstrap-servers", kafka_bootstrap, "--topic", ui_topics.dlq, "--since", "2h")
    streams = ("--bootstrap-servers", kafka_bootstrap, "--topic", ui_topics.trigger_events)
    commands = [
        ("dlq", "ls", *dlq, "--consumer", "e2e-leaks"),
        ("dlq", "show", str(partition), str(offset), *dlq[:4]),
        ("streams", "ls", *streams[:2], "--index-topic", ui_topics.stream_index, "--dag-id", "e2e_ui_leaks"),
        ("streams", "show", leaks.stream_id, *streams),
    ]
    for command in commands:
        for output in ((), ("--json",)):
            result = cli(*command, *output)
            assert result.returncode == 0, (command, result.stderr)
            _assert_clean(" ".join(command), result.stdout + result.stderr, leaks)
            assert "***" in result.stdout, (command, result.stdout)
