"""Dead-letter records: headers, round trip, writer (with a fake producer)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_events.dlq import (
    DEAD_LETTER_HEADERS,
    MAX_ERROR_MESSAGE_CHARS,
    DeadLetter,
    DeadLetterReason,
    DeadLetterWriter,
    dead_letter_headers,
    error_type_name,
)
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError
from airflow_kafka_events.kafka.producer import DeliveryReceipt

pytestmark = pytest.mark.unit


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def _record(self, topic, value, key, headers, timeout):
        self.sent.append(
            {"topic": topic, "value": value, "key": key, "headers": list(headers), "timeout": timeout}
        )
        return DeliveryReceipt(topic=topic, partition=0, offset=len(self.sent) - 1, timestamp_ms=1, key=key)

    def send_and_wait(self, topic, value, *, key=None, headers=None, partition=None, timeout=30.0):
        return self._record(topic, value, key, headers, timeout)

    async def send_async(self, topic, value, *, key=None, headers=None, partition=None, timeout=30.0):
        await asyncio.sleep(0)
        return self._record(topic, value, key, headers, timeout)


def letter(**overrides) -> DeadLetter:
    fields = {
        "reason": DeadLetterReason.SIGNATURE_INVALID,
        "error_type": "airflow_kafka_events.assets.authz.SignatureInvalidError",
        "error_message": "bad signature",
        "source_topic": "events",
        "source_partition": 2,
        "source_offset": 41,
        "source_timestamp_ms": 1_700_000_000_123,
        "consumer": "KafkaAssetEventTrigger(asset=ops://investigate/, group=g)",
        "event_id": "E1",
        "asset_uri": "ops://investigate/",
        "dead_lettered_at": datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc),
    }
    fields.update(overrides)
    return DeadLetter(**fields)


def test_headers_carry_reason_error_and_source_coordinates():
    headers = dict(letter().headers())
    assert headers == {
        "x-reason": b"signature-invalid",
        "x-error-type": b"airflow_kafka_events.assets.authz.SignatureInvalidError",
        "x-error-message": b"bad signature",
        "x-source-topic": b"events",
        "x-source-partition": b"2",
        "x-source-offset": b"41",
        "x-source-timestamp": b"1700000000123",
        "x-consumer": b"KafkaAssetEventTrigger(asset=ops://investigate/, group=g)",
        "x-event-id": b"E1",
        "x-asset-uri": b"ops://investigate/",
        "x-dead-lettered-at": b"2026-03-01T12:00:00.000000+00:00",
    }
    assert set(headers) == DEAD_LETTER_HEADERS


def test_optional_headers_are_left_out_and_round_trip():
    bare = letter(source_timestamp_ms=None, consumer=None, event_id=None, asset_uri=None)
    names = [name for name, _ in bare.headers()]
    assert names == [
        "x-reason",
        "x-error-type",
        "x-error-message",
        "x-source-topic",
        "x-source-partition",
        "x-source-offset",
        "x-dead-lettered-at",
    ]
    assert DeadLetter.from_headers(bare.headers()) == bare
    assert DeadLetter.from_headers(letter().headers()) == letter()
    assert DeadLetter.from_headers(dict(letter().headers())) == letter()


def test_from_exception_and_long_messages_are_cut():
    exc = EnvelopeDecodeError("x" * 5000)
    made = DeadLetter.from_exception(DeadLetterReason.UNDECODABLE, exc, topic="t", partition=0, offset=7)
    assert made.reason == "undecodable"
    assert made.error_type == "airflow_kafka_events.errors.EnvelopeDecodeError"
    assert len(made.error_message) == MAX_ERROR_MESSAGE_CHARS and made.error_message.endswith("...")
    assert made.dead_lettered_at.tzinfo is not None
    assert error_type_name(ValueError("v")) == "ValueError"
    assert error_type_name(KeyError) == "KeyError"


def test_original_headers_are_kept_but_old_reasons_replaced():
    original = [("event_id", b"E1"), ("x-reason", b"undecodable"), ("trace", None)]
    headers = dead_letter_headers(original, letter())
    assert headers[:2] == [("event_id", b"E1"), ("trace", None)]
    assert [value for name, value in headers if name == "x-reason"] == [b"signature-invalid"]
    assert dead_letter_headers(None, letter()) == letter().headers()


def test_dead_lettered_at_is_utc():
    local = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert letter(dead_lettered_at=local).dead_lettered_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "overrides",
    [
        {"reason": ""},
        {"error_type": None},
        {"source_topic": ""},
        {"source_partition": "2"},
        {"source_offset": True},
        {"error_message": None},
        {"dead_lettered_at": datetime(2026, 1, 1)},
    ],
)
def test_invalid_letters_are_refused(overrides):
    with pytest.raises(ValidationError):
        letter(**overrides)


def test_from_headers_refuses_records_without_dead_letter_headers():
    with pytest.raises(ValidationError, match="not a dead-letter record"):
        DeadLetter.from_headers([("event_id", b"E1")])
    bad = [*letter().headers(), ("x-source-offset", b"forty")]
    with pytest.raises(ValidationError, match="not an int"):
        DeadLetter.from_headers(bad)


def test_writer_sends_original_value_and_key_with_reason_headers():
    producer = FakeProducer()
    writer = DeadLetterWriter(producer, "events.dlq", timeout=5.0)
    receipt = writer.write(letter(), value=b"\x00poison", key=b"ops://investigate/", headers=[("h", b"v")])
    assert receipt.topic == "events.dlq"
    receipt = asyncio.run(writer.awrite(letter(), value=None))
    assert receipt.offset == 1
    first, second = producer.sent
    assert first["topic"] == "events.dlq" and first["value"] == b"\x00poison"
    assert first["key"] == b"ops://investigate/" and first["timeout"] == 5.0
    assert first["headers"][0] == ("h", b"v")
    assert DeadLetter.from_headers(first["headers"]) == letter()
    assert second["value"] is None and second["key"] is None


def test_writer_needs_a_topic():
    with pytest.raises(ValidationError):
        DeadLetterWriter(FakeProducer(), "")


def test_dlq_imports_no_airflow():
    code = (
        "import sys, airflow_kafka_events.dlq\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
