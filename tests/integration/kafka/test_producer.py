"""The process-wide producer against a real broker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from airflow_kafka_events.errors import DeliveryError, KafkaOperationError
from airflow_kafka_events.kafka.delivery import DeliveryFuture
from airflow_kafka_events.kafka.producer import (
    SERVE_BACKLOG,
    RecordProducer,
    close_all_producers,
    get_producer,
)
from airflow_kafka_events.kafka.settings import KafkaSettings
from integration.faults.broker import wait_until

pytestmark = pytest.mark.integration


def _settings(bootstrap: str, **extra) -> KafkaSettings:
    return KafkaSettings({"bootstrap.servers": bootstrap, **extra})


def _read_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list = []
    try:
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=expected, timeout=1.0):
                if msg.error() is None:
                    out.append(msg)
    finally:
        consumer.close()
    return out


def test_send_and_wait_returns_a_receipt_of_the_stored_message(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    producer = RecordProducer(_settings(kafka_bootstrap).producer_config())
    try:
        receipt = producer.send_and_wait(topic, b"hello", key="run-1", headers={"h": b"v"})
    finally:
        producer.close()
    assert receipt.topic == topic
    assert receipt.offset >= 0
    assert receipt.timestamp_ms is not None
    (msg,) = _read_all(kafka_bootstrap, topic, 1)
    assert (msg.partition(), msg.offset(), msg.value(), msg.key()) == (
        receipt.partition,
        receipt.offset,
        b"hello",
        b"run-1",
    )


def test_a_full_local_queue_refuses_a_non_blocking_send_at_once_and_queues_nothing(
    kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=1)
    # two messages fill the queue; a long linger keeps them in it
    config = _settings(
        kafka_bootstrap, **{"queue.buffering.max.messages": 2, "linger.ms": 5000}
    ).producer_config()
    producer = RecordProducer(config)
    try:
        queued = [producer.send(topic, f"m{n}".encode(), key="k") for n in range(2)]
        started = time.monotonic()
        with pytest.raises(BufferError):
            producer.send(topic, b"m2", key="k", timeout=30.0, block=False)
        assert time.monotonic() - started < 1.0  # at once, not after the 30 s a blocking send waits
        assert len(producer) == 2
        producer.flush(30.0)
        assert [f.result(30.0).offset for f in queued] == [0, 1]
        # with room again, the same send goes through
        assert producer.send(topic, b"m2", key="k", block=False).result(30.0).offset == 2
    finally:
        producer.close()
    assert [m.value() for m in _read_all(kafka_bootstrap, topic, 3)] == [b"m0", b"m1", b"m2"]


def test_idempotence_is_in_effect_the_broker_assigned_a_producer_id(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    stats: list[dict] = []
    config = _settings(
        kafka_bootstrap, **{"statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))}
    ).producer_config()
    producer = RecordProducer(config)
    try:
        producer.send_and_wait(topic, b"x", key="k")
        # stats arrive on the poll thread; wait (with a deadline) for one taken after the send
        import time

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(
            s.get("eos", {}).get("idemp_state") == "Assigned" for s in stats
        ):
            time.sleep(0.1)
    finally:
        producer.close()
    eos = next(s["eos"] for s in stats if s.get("eos", {}).get("idemp_state") == "Assigned")
    assert eos["producer_id"] >= 0  # an idempotent producer id was granted by the broker


def test_acks_all_is_in_effect_librdkafka_ties_it_to_idempotence(kafka_bootstrap, new_topic):
    # A single broker cannot show acks=all vs acks=1 from the outside, so prove it through the
    # client: the config we hand librdkafka has acks=all, librdkafka itself refuses an
    # idempotent producer with any other acks, and the idempotence test above shows the broker
    # granted this producer an idempotent producer id.
    config = _settings(kafka_bootstrap).producer_config()
    producer = RecordProducer(config)
    try:
        producer.send_and_wait(new_topic(partitions=1), b"x")
    finally:
        producer.close()
    assert producer.config["acks"] == "all" and producer.config["enable.idempotence"] is True
    with pytest.raises(KafkaException) as info:
        Producer({**config, "acks": "1"})
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    assert "acks" in info.value.args[0].str()


def test_delivery_failure_is_a_typed_error_with_the_kafka_code(kafka_bootstrap):
    # the topic does not exist and auto-creation is off: the broker never acknowledges
    config = _settings(kafka_bootstrap, **{"message.timeout.ms": 2000}).producer_config()
    producer = RecordProducer(config)
    try:
        with pytest.raises(DeliveryError) as info:
            producer.send_and_wait("no-such-topic-" + str(id(config)), b"x", timeout=20)
    finally:
        producer.close(timeout=5)
    assert info.value.code in {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT}
    assert isinstance(info.value.kafka_error, KafkaError)


def test_send_async_does_not_block_the_loop(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    producer = RecordProducer(_settings(kafka_bootstrap).producer_config())

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        receipts = await asyncio.gather(*(producer.send_async(topic, b"%d" % i, key="k") for i in range(20)))
        stop.set()
        await t
        return receipts, ticks

    try:
        receipts, ticks = asyncio.run(main())
    finally:
        producer.close()
    assert [r.offset for r in receipts] == sorted(r.offset for r in receipts)
    assert len({r.partition for r in receipts}) == 1  # one key, one partition
    assert ticks > 0


def _burst(producer: RecordProducer, topic: str, count: int) -> list[DeliveryFuture]:
    """``count`` sends in a row: far more than SERVE_BACKLOG in flight."""
    return [producer.send(topic, b"%d" % i, key=f"k{i % 3}") for i in range(count)]


def _assert_stored_once_each(futures: list[DeliveryFuture]) -> None:
    receipts = [f.result(timeout=0) for f in futures]
    assert len({(r.partition, r.offset) for r in receipts}) == len(futures)
    assert all(r.offset >= 0 for r in receipts)


def test_a_busy_sender_serves_the_reports_its_sends_find_ready(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    producer = RecordProducer(_settings(kafka_bootstrap).producer_config())
    me = threading.current_thread().name
    served_on: list[str] = []

    def serving_thread(registered: list[bool]) -> Callable[[DeliveryFuture], None]:
        def record(_: DeliveryFuture) -> None:
            if registered:  # a future resolved before the callback was added calls it at once: not counted
                served_on.append(threading.current_thread().name)

        return record

    futures: list[DeliveryFuture] = []
    try:
        producer.send_and_wait(topic, b"connect", key="k0")  # connected, with a producer id
        deadline = time.monotonic() + 30
        while me not in served_on and time.monotonic() < deadline:  # a sender past SERVE_BACKLOG
            future = producer.send(topic, b"%d" % len(futures), key=f"k{len(futures) % 3}")
            registered: list[bool] = []
            future.add_done_callback(serving_thread(registered))
            registered.append(True)
            futures.append(future)
        _, not_done = concurrent.futures.wait([f.as_future() for f in futures], timeout=60)
    finally:
        producer.close()
    # the sends themselves served reports, not only the poller thread
    assert me in served_on and len(futures) > SERVE_BACKLOG
    assert not not_done
    _assert_stored_once_each(futures)
    assert len(_read_all(kafka_bootstrap, topic, len(futures) + 1)) == len(futures) + 1


def test_a_send_from_a_delivery_callback_of_a_busy_producer_is_answered(kafka_bootstrap, new_topic):
    # the callback runs inside poll(); a send there must not poll again (confluent-kafka's per-thread
    # call state would break), busy or not
    topic = new_topic(partitions=3)
    producer = RecordProducer(_settings(kafka_bootstrap).producer_config())
    follow_ups: list[DeliveryFuture] = []
    try:
        firsts = _burst(producer, topic, 400)
        for future in firsts:
            future.add_done_callback(lambda _: follow_ups.append(producer.send(topic, b"next", key="n")))
        wait_until(lambda: len(follow_ups) == 400, timeout=60, what="a follow-up per delivery")
        _, not_done = concurrent.futures.wait([f.as_future() for f in follow_ups], timeout=60)
    finally:
        producer.close()
    assert not not_done
    _assert_stored_once_each(firsts + follow_ups)


def test_after_a_burst_waiting_callers_of_every_kind_get_their_reports(kafka_bootstrap, new_topic):
    # the sender stops serving when it stops sending: the poller takes over within CALLERS_SERVE,
    # a blocked result() serves on its own thread, an awaiting coroutine gets its report too
    topic = new_topic(partitions=3)
    producer = RecordProducer(_settings(kafka_bootstrap).producer_config())

    async def awaited(futures):
        return await asyncio.wait_for(asyncio.gather(*futures), 60)

    try:
        by_coroutine = asyncio.run(awaited(_burst(producer, topic, 1000)))
        by_result = [f.result(timeout=60) for f in _burst(producer, topic, 1000)]
        _, not_done = concurrent.futures.wait(
            [f.as_future() for f in _burst(producer, topic, 1000)], timeout=60
        )
        last = producer.send_and_wait(topic, b"last", key="k0", timeout=30)
    finally:
        producer.close()
    assert not not_done and len(by_coroutine) == len(by_result) == 1000
    assert len({(r.partition, r.offset) for r in by_coroutine + by_result + [last]}) == 2001
    assert len(producer) == 0


def test_get_producer_is_one_per_process_and_config_and_thread_safe(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    config = _settings(kafka_bootstrap).producer_config()
    seen: list[RecordProducer] = []
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            p = get_producer(config)
            seen.append(p)
            p.send_and_wait(topic, b"m", key=f"k{i % 3}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors
        assert len({id(p) for p in seen}) == 1
        assert get_producer({**config, "linger.ms": 7}) is not seen[0]  # another config, another producer
    finally:
        close_all_producers()
    assert seen[0].closed
    assert len(_read_all(kafka_bootstrap, topic, 8)) == 8


def _child_produce(config: dict, topic: str, parent_id: int, out) -> None:
    try:
        producer = get_producer(config)
        out.put((id(producer) != parent_id, producer.send_and_wait(topic, b"child", key="c").offset))
    except BaseException as exc:  # the parent shows what went wrong instead of waiting in vain
        out.put(exc)


def test_forked_child_gets_its_own_producer(kafka_bootstrap, new_topic):
    import multiprocessing

    topic = new_topic(partitions=1)
    config = _settings(kafka_bootstrap).producer_config()
    parent = get_producer(config)
    try:
        parent.send_and_wait(topic, b"before", key="p")
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_child_produce, args=(config, topic, id(parent), out))
        child.start()
        answer = out.get(timeout=60)
        assert not isinstance(answer, BaseException), f"the child could not produce: {answer!r}"
        fresh, child_offset = answer
        child.join(60)
        assert child.exitcode == 0
        assert fresh, "the child must not reuse the parent's librdkafka handle"
        after = parent.send_and_wait(topic, b"after", key="p")  # parent unaffected by the fork
    finally:
        close_all_producers()
    assert sorted([child_offset, after.offset]) == [1, 2]


def _child_uses_the_parents(producer: RecordProducer, topic: str, out) -> None:
    try:
        try:
            producer.send(topic, b"child", key="c")
            refused = "sent"
        except KafkaOperationError as exc:
            refused = str(exc)
        producer.close(0)  # never flushes, purges or destroys the parent's handle from the child
        out.put((refused, producer.closed))
    except BaseException as exc:  # the parent shows what went wrong instead of waiting in vain
        out.put(exc)


def test_a_producer_used_across_fork_refuses_in_the_child_and_the_parent_keeps_it(kafka_bootstrap, new_topic):
    import multiprocessing

    topic = new_topic(partitions=1)
    config = _settings(kafka_bootstrap).producer_config()
    parent = get_producer(config)
    try:
        parent.send_and_wait(topic, b"before", key="p")
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_child_uses_the_parents, args=(parent, topic, out))
        child.start()
        answer = out.get(timeout=60)
        assert not isinstance(answer, BaseException), f"the child failed: {answer!r}"
        refused, closed_in_child = answer
        child.join(60)
        assert child.exitcode == 0
        assert "across fork()" in refused and closed_in_child
        after = parent.send_and_wait(topic, b"after", key="p")  # the parent's handle is intact
        assert not parent.closed
    finally:
        close_all_producers()
    assert after.offset == 1
    assert len(_read_all(kafka_bootstrap, topic, 2)) == 2
