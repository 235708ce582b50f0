"""Dead-letter records: headers, round trip, writer (with a fake producer)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_events.dead_letters.headers import DEAD_LETTER_HEADERS, REFERENCE_HEADERS, DeadLetterReason
from airflow_kafka_events.dead_letters.letter import (
    MAX_ERROR_MESSAGE_CHARS,
    REFERENCE_PREFIX_BYTES,
    DeadLetter,
    dead_letter_headers,
    error_type_name,
)
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.errors import (
    DeliveryError,
    EnvelopeDecodeError,
    KafkaOperationError,
    ValidationError,
)
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.record_size import is_size_error, record_size
from harness.airflow_free import run_without_airflow

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
        "error_type": "airflow_kafka_events.assets.errors.SignatureInvalidError",
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
        "x-error-type": b"airflow_kafka_events.assets.errors.SignatureInvalidError",
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
    run_without_airflow("import airflow_kafka_events.dead_letters.letter")


# --------------------------------------------------------------------------- records too large for the DLQ
class SizeLimitedProducer(FakeProducer):
    """Refuses, like a broker with a small max.message.bytes, records whose value is over ``limit``."""

    def __init__(self, limit: int, *, error: Exception | None = None, config: dict | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.error = error
        self.tried: list[int] = []
        if config is not None:
            self.config = config

    def _record(self, topic, value, key, headers, timeout):
        self.tried.append(len(value or b""))
        if self.error is not None:
            raise self.error
        if len(value or b"") > self.limit:
            raise DeliveryError(
                f"message to topic {topic!r} was not delivered",
                kafka_error=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE),
            )
        return super()._record(topic, value, key, headers, timeout)


def test_reference_headers_exact_bytes():
    reference = letter(reason="too-large").as_reference(
        "the record is 2000123 bytes, over message.max.bytes=1000000",
        original_value_bytes=2_000_000,
        headers_dropped=3,
    )
    assert reference.headers() == [
        ("x-reason", b"too-large"),
        ("x-error-type", b"airflow_kafka_events.assets.errors.SignatureInvalidError"),
        ("x-error-message", b"bad signature"),
        ("x-source-topic", b"events"),
        ("x-source-partition", b"2"),
        ("x-source-offset", b"41"),
        ("x-source-timestamp", b"1700000000123"),
        ("x-consumer", b"KafkaAssetEventTrigger(asset=ops://investigate/, group=g)"),
        ("x-event-id", b"E1"),
        ("x-asset-uri", b"ops://investigate/"),
        ("x-dead-lettered-at", b"2026-03-01T12:00:00.000000+00:00"),
        ("x-truncated", b"true"),
        ("x-truncated-cause", b"the record is 2000123 bytes, over message.max.bytes=1000000"),
        ("x-original-value-bytes", b"2000000"),
        ("x-original-headers-dropped", b"3"),
    ]
    assert {name for name, _ in reference.headers()} == DEAD_LETTER_HEADERS | REFERENCE_HEADERS
    assert DeadLetter.from_headers(reference.headers()) == reference
    whole = DeadLetter.from_headers(letter().headers())
    assert not whole.truncated and whole.original_value_bytes is None and whole.original_headers_dropped == 0
    plain = letter().as_reference("c", original_value_bytes=0)
    assert [name for name, _ in plain.headers()][-3:] == [
        "x-truncated",
        "x-truncated-cause",
        "x-original-value-bytes",
    ]


def test_a_record_over_message_max_bytes_is_written_as_a_reference_without_trying_it_whole():
    producer = SizeLimitedProducer(limit=10**9, config={"message.max.bytes": "100000"})
    writer = DeadLetterWriter(producer, "events.dlq")
    assert writer.max_message_bytes == 100_000
    value = bytes(range(256)) * 1000  # 256,000 bytes
    writer.write(letter(), value=value, key=b"ops://investigate/", headers=[("event_id", b"E1")])
    assert producer.tried == [REFERENCE_PREFIX_BYTES]  # never the whole record
    (sent,) = producer.sent
    assert sent["value"] == value[:REFERENCE_PREFIX_BYTES] and sent["key"] == b"ops://investigate/"
    assert sent["headers"][0] == ("event_id", b"E1")  # original headers first, as in a whole letter
    headers = dict(sent["headers"])
    assert headers["x-truncated"] == b"true" and headers["x-original-value-bytes"] == b"256000"
    assert b"over message.max.bytes=100000" in headers["x-truncated-cause"]
    assert b"raise max.message.bytes on the dead-letter topic" in headers["x-truncated-cause"]
    read = DeadLetter.from_headers(sent["headers"])
    assert read.truncated and read.original_value_bytes == 256_000 and read.reason == "signature-invalid"
    assert "x-original-headers-dropped" not in headers


def test_a_size_error_of_the_broker_falls_back_to_a_reference_at_once():
    producer = SizeLimitedProducer(limit=REFERENCE_PREFIX_BYTES)
    writer = DeadLetterWriter(producer, "events.dlq")
    value = b"v" * 150_000
    receipt = writer.write(letter(), value=value)
    assert receipt.offset == 0
    assert producer.tried == [150_000, REFERENCE_PREFIX_BYTES]  # one whole try, no retry loop
    headers = dict(producer.sent[0]["headers"])
    assert headers["x-truncated"] == b"true"
    assert b"writing the whole record failed" in headers["x-truncated-cause"]
    assert b"MSG_SIZE_TOO_LARGE" in headers["x-truncated-cause"]


def test_a_bare_reference_when_even_the_prefix_does_not_fit():
    producer = SizeLimitedProducer(limit=0)
    many = [(f"h{i}", b"x" * 1000) for i in range(20)]  # 20 KB of original headers
    asyncio.run(DeadLetterWriter(producer, "events.dlq").awrite(letter(), value=b"v" * 5000, headers=many))
    assert producer.tried == [5000, REFERENCE_PREFIX_BYTES, 0]
    (sent,) = producer.sent
    assert sent["value"] == b""
    read = DeadLetter.from_headers(sent["headers"])
    assert read.truncated and read.original_value_bytes == 5000 and read.original_headers_dropped == 20
    assert "did not fit either" in (read.truncated_cause or "")
    assert not [name for name, _ in sent["headers"] if name.startswith("h")]


def test_a_reference_keeps_original_headers_up_to_a_bound():
    producer = SizeLimitedProducer(limit=REFERENCE_PREFIX_BYTES)
    many = [(f"h{i:02d}", b"x" * 1000) for i in range(20)]
    DeadLetterWriter(producer, "events.dlq").write(letter(), value=b"v" * 10_000, headers=many)
    headers = producer.sent[0]["headers"]
    kept = [name for name, _ in headers if name.startswith("h")]
    assert kept == [f"h{i:02d}" for i in range(16)]  # 16 x 1,003 bytes <= 16 KiB < 17 x 1,003
    assert DeadLetter.from_headers(headers).original_headers_dropped == 4


@pytest.mark.parametrize("asynchronous", [False, True])
def test_other_errors_are_raised_for_the_caller_to_retry(asynchronous):
    error = DeliveryError("broker down", kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT))
    producer = SizeLimitedProducer(limit=10**9, error=error)
    writer = DeadLetterWriter(producer, "events.dlq")
    with pytest.raises(DeliveryError, match="broker down"):
        if asynchronous:
            asyncio.run(writer.awrite(letter(), value=b"v"))
        else:
            writer.write(letter(), value=b"v")
    assert producer.tried == [1]


def test_the_last_size_error_is_raised_when_no_form_fits():
    error = KafkaOperationError("cannot produce", kafka_error=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    producer = SizeLimitedProducer(limit=10**9, error=error)
    with pytest.raises(KafkaOperationError, match="cannot produce"):
        DeadLetterWriter(producer, "events.dlq").write(letter(), value=b"v" * 10)
    assert producer.tried == [10, 10, 0]


def test_size_errors_are_recognised_in_every_form():
    assert is_size_error(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    assert is_size_error(DeliveryError("x", kafka_error=KafkaError(KafkaError.RECORD_LIST_TOO_LARGE)))
    assert not is_size_error(DeliveryError("x", kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT)))
    assert not is_size_error(ValueError("no code"))
    assert record_size(b"abc", "k", [("h", b"12"), ("n", None)]) == 3 + 1 + 3 + 1
    with pytest.raises(ValidationError):
        DeadLetterWriter(FakeProducer(), "dlq", max_message_bytes=-1)


def test_the_dead_lettered_lines_keep_the_watchers_and_the_bridges_wordings(caplog):
    import logging

    from airflow_kafka_events.dead_letters import letter as dlq
    from airflow_kafka_events.dead_letters.log import BRIDGE_LINE, log_dead_lettered
    from airflow_kafka_events.kafka.delivery import DeliveryReceipt

    class Source:
        topic, partition, offset, timestamp_ms = "events", 2, 7, None

    letter = dlq.DeadLetter.from_exception(
        "not-allowed", ValueError("x" * 600), topic="events", partition=2, offset=7
    )
    receipt = DeliveryReceipt(topic="events.dlq", partition=0, offset=41, timestamp_ms=None, key=None)
    logger = logging.getLogger("test.dead_lettered")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        log_dead_lettered(logger, Source(), receipt, letter)
        log_dead_lettered(logger, Source(), receipt, letter, line=BRIDGE_LINE)
    watcher, bridge = (r.getMessage() for r in caplog.records)
    assert watcher.startswith("Dead-lettered events[2]@7 to events.dlq[0]@41: not-allowed: xxx")
    assert bridge.startswith("events[2]@7 dead-lettered to events.dlq[0]@41: not-allowed: xxx")
    assert watcher.endswith("x...") and len(watcher.split(": ", 2)[2]) == 500
