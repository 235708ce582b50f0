"""Kafka's murmur2 partitioner: Java's test vectors, and librdkafka's murmur2_random on a real broker."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kafka_events.kafka.partitioner import murmur2, partition_for_key, to_positive
from airflow_kafka_events.kafka.settings import KafkaSettings

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
# More values computed with kafka-clients 4.4.0's Utils.murmur2 (every tail length, high bytes).
JAVA_COMPUTED = {
    b"": 275646681,
    b"a": -1563381124,
    b"ab": 316155434,
    b"abcd": -1323649548,
    b"\xff\xfe\x80": -160726397,
    b"dag/task/-1/manual__2024-01-01T00:00:00+00:00": -1011078934,
}


@pytest.mark.unit
@pytest.mark.parametrize(("key", "expected"), sorted({**JAVA_TEST_VECTORS, **JAVA_COMPUTED}.items()))
def test_murmur2_matches_java(key, expected):
    assert murmur2(key) == expected
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == expected


@pytest.mark.unit
def test_partition_for_key_is_java_to_positive_modulo():
    # toPositive clears the sign bit; it is not abs()
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF != abs(-973932308)
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert partition_for_key("abc", 3) == partition_for_key(b"abc", 3) == 479470107 % 3
    assert partition_for_key("dag/task/-1/manual__2024-01-01T00:00:00+00:00", 7) == 4  # Java's answer


@pytest.mark.unit
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_in_range_and_hash_is_int32(key, partitions):
    assert 0 <= partition_for_key(key, partitions) < partitions
    assert -(2**31) <= murmur2(key) < 2**31


@pytest.mark.unit
@pytest.mark.parametrize("bad", [0, -1, True, 1.0, None])
def test_partition_for_key_rejects_bad_partition_counts(bad):
    with pytest.raises(ValueError):
        partition_for_key(b"k", bad)


@pytest.mark.unit
def test_murmur2_rejects_non_bytes():
    with pytest.raises(TypeError):
        murmur2("text")  # type: ignore[arg-type]


@pytest.mark.unit
def test_producer_config_defaults_to_murmur2_random_and_keeps_an_explicit_choice():
    boot = {"bootstrap.servers": "127.0.0.1:9092"}
    assert KafkaSettings(boot).producer_config()["partitioner"] == "murmur2_random"
    explicit = KafkaSettings({**boot, "partitioner": "murmur2"}).producer_config()
    assert explicit["partitioner"] == "murmur2"


@pytest.mark.integration
@pytest.mark.parametrize("partitions", [3, 7, 16])
def test_murmur2_random_producer_stores_keys_where_partition_for_key_says(
    kafka_bootstrap, new_topic, partitions
):
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    topic = new_topic(partitions=partitions, prefix="murmur")
    rng = random.Random(partitions)
    keys = [rng.randbytes(rng.randint(1, 40)) for _ in range(200)]
    keys += [b"21", b"foobar", b"abc", b"dag/task/-1/manual__2024-01-01T00:00:00+00:00"]

    config = KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config()
    assert config["partitioner"] == "murmur2_random"
    producer = Producer(config)
    receipts: dict[bytes, int] = {}

    def on_delivery(err, msg):
        assert err is None, err
        receipts[msg.key()] = msg.partition()

    for index, key in enumerate(keys):
        producer.produce(topic, value=str(index).encode(), key=key, on_delivery=on_delivery)
    assert producer.flush(30) == 0

    # read back from the broker: the partition each record was stored in
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"check-{topic}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    stored: dict[bytes, int] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"only partitions {sorted(eof)} reached their end"
            for msg in consumer.consume(500, timeout=1.0):
                err, stored_key, partition = msg.error(), msg.key(), msg.partition()
                assert partition is not None
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF
                    eof.add(partition)
                else:
                    assert stored_key is not None
                    stored[stored_key] = partition
    finally:
        consumer.close()

    expected = {key: partition_for_key(key, partitions) for key in keys}
    assert stored == expected
    assert receipts == expected
