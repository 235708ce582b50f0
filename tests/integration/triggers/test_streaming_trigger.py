"""StreamingTrigger.run() and the progress lookup against a real Kafka broker.

The triggers are driven the way the triggerer drives them: ``run()`` iterated in an asyncio
loop, ``cleanup()`` afterwards, ``asyncio.Task.cancel()`` to stop them.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import uuid
from contextlib import suppress
from types import SimpleNamespace

import pytest
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent, TriggerEvent
from confluent_kafka import KafkaError, Producer

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity, TriggerEventEnvelope
from airflow_kafka_events.errors import NotSentError, StreamProgressError
from airflow_kafka_events.kafka.delivery import DeliveryFuture
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.consuming.sequence import SequenceTracker
from airflow_kafka_events.streams.descriptor import StreamDescriptor
from airflow_kafka_events.streams.producing.outage import STREAM_LINGER_MS
from airflow_kafka_events.streams.progress import find_stream_progress, lookup_stream
from integration.triggers import sample_triggers as samples
from integration.triggers.sample_triggers import PagedTrigger, collect, read_topic, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    """The default Airflow Kafka connection, from the environment (no metadata DB)."""
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


def _key(prefix: str = "dag") -> str:
    return f"{prefix}/task/-1/run-{uuid.uuid4().hex}"


def _run(trigger) -> list[TriggerEvent]:
    return asyncio.run(collect(trigger))


def _descriptor(events: list[TriggerEvent]) -> StreamDescriptor:
    (event,) = events
    assert type(event) is TriggerEvent
    return StreamDescriptor.from_dict(event.payload)


def _assert_complete_stream(stored, *, pages: int, attempt: int = 0, first_page: int = 0) -> None:
    """Envelopes 0..pages of one attempt, in order, in one partition; only the last is_last."""
    mine = [s for s in stored if s.envelope.attempt == attempt]
    assert [s.envelope.sequence_index for s in mine] == list(range(pages + 1))
    assert len({s.partition for s in mine}) == 1
    assert [s.offset for s in mine] == sorted(s.offset for s in mine)
    assert [s.envelope.is_last for s in mine] == [False] * pages + [True]
    terminal = mine[-1].envelope
    assert terminal.payload is None and terminal.error is None
    for index, s in enumerate(mine[:-1]):
        assert s.envelope.payload == samples.page_payload(first_page + index)
        assert s.envelope.resume_cursor == str(first_page + index + 1)


# --------------------------------------------------------------------------- streams
@pytest.mark.parametrize("pages", [0, 1, 250])
def test_every_page_is_an_envelope_and_one_event_describes_the_stream(kafka_bootstrap, new_topic, pages):
    topic = new_topic(partitions=3)
    key = _key()
    events = _run(PagedTrigger(total=pages, trigger_run_id=key, topic=topic))
    descriptor = _descriptor(events)

    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_complete_stream(stored, pages=pages)
    assert descriptor == StreamDescriptor(
        topic=topic,
        trigger_run_id=key,
        attempt=0,
        count=pages,
        first_offset=stored[0].offset,
        last_offset=stored[-1].offset,
        partition=partition_for_key(key.encode(), 3),
        error=None,
    )
    assert stored[0].partition == descriptor.partition
    if pages == 0:  # an empty stream is one terminal marker
        assert len(stored) == 1 and stored[0].envelope.sequence_index == 0
    assert dict(samples.FETCHES[key]) == {i: 1 for i in range(pages)}


def test_pages_are_sent_with_the_stream_batching_delay_unless_the_connection_sets_one(
    kafka_bootstrap, new_topic, monkeypatch
):
    topic = new_topic(partitions=1)
    trigger = PagedTrigger(total=2, trigger_run_id=_key(), topic=topic)
    assert _descriptor(_run(trigger)).count == 2
    _settings, producer, _index, _window = trigger._open_kafka()  # this process's producers: the run's
    assert (producer.role, producer.config["linger.ms"]) == ("stream", STREAM_LINGER_MS) == ("stream", 1)
    extra = {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    _settings, producer, _index, _window = trigger._open_kafka()
    assert producer.config["linger.ms"] == 5


def test_bytes_payloads_and_producer_identity_from_the_task_instance(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    trigger = samples.BytesTrigger(chunks=["naïve", "second"], topic=topic)
    trigger.task_instance = SimpleNamespace(
        dag_id="dag", run_id="manual__1", task_id="task", map_index=2, try_number=4
    )
    descriptor = _descriptor(_run(trigger))
    key = "dag/task/2/manual__1"
    assert descriptor.trigger_run_id == key
    stored = read_topic(kafka_bootstrap, topic, key)
    assert [s.envelope.payload for s in stored] == ["naïve".encode(), b"second", None]
    identity = ProducerIdentity(dag_id="dag", run_id="manual__1", task_id="task", map_index=2, try_number=4)
    assert {s.envelope.producer for s in stored} == {identity}


def test_concurrent_streams_on_one_topic_keep_per_key_order(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    first = _key("a")
    # a second key in the same partition, so that the two streams really interleave
    second = next(
        k for k in (_key("b") for _ in range(1000)) if partition_for_key(k, 3) == partition_for_key(first, 3)
    )

    async def both():
        # each stream writes its first pages, then waits until the other has written its first pages
        held = {first: (60, asyncio.Event()), second: (40, asyncio.Event())}
        samples.HOLD_BEFORE.update(held)

        async def release() -> None:
            async with asyncio.timeout(30):
                while len(samples.FETCHES[first]) < 60 or len(samples.FETCHES[second]) < 40:
                    await asyncio.sleep(0.01)
            for _, event in held.values():
                event.set()

        try:
            results = await asyncio.gather(
                collect(PagedTrigger(total=120, trigger_run_id=first, topic=topic)),
                collect(PagedTrigger(total=80, trigger_run_id=second, topic=topic)),
                release(),
            )
        finally:
            samples.HOLD_BEFORE.pop(first, None)
            samples.HOLD_BEFORE.pop(second, None)
        return results[0], results[1]

    events_a, events_b = asyncio.run(both())
    stored = read_topic(kafka_bootstrap, topic)
    a = [s for s in stored if s.envelope.trigger_run_id == first]
    b = [s for s in stored if s.envelope.trigger_run_id == second]
    _assert_complete_stream(a, pages=120)
    _assert_complete_stream(b, pages=80)
    # interleaved: each stream's offsets start before the other's end
    assert a[0].offset < b[-1].offset and b[0].offset < a[-1].offset
    assert _descriptor(events_a).count == 120 and _descriptor(events_b).count == 80


def test_streams_sharing_a_full_producer_queue_write_every_page_once_in_order(
    monkeypatch, kafka_bootstrap, new_topic
):
    """The process's stream producer queues at most 16 messages (``queue.buffering.max.messages``)
    while three streams keep up to 256 pages each in flight: their pages meet a full local queue
    again and again, wait for room with the event loop free, and every page reaches Kafka once."""
    extra = {"bootstrap.servers": kafka_bootstrap, "queue.buffering.max.messages": 16}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    topic = new_topic(partitions=3)
    keys = [_key(name) for name in ("a", "b", "c")]
    triggers = [PagedTrigger(total=300, trigger_run_id=key, topic=topic) for key in keys]
    for trigger in triggers:
        trigger.write_window = 256
    refused = 0
    real_send = RecordProducer.send

    def counting_send(self, *args, **kwargs):  # the real send, counting the full queue's refusals
        nonlocal refused
        try:
            return real_send(self, *args, **kwargs)
        except BufferError:
            refused += 1
            raise

    monkeypatch.setattr(RecordProducer, "send", counting_send)

    async def together():
        return await asyncio.gather(*(collect(trigger) for trigger in triggers))

    results = asyncio.run(together())
    stored = read_topic(kafka_bootstrap, topic)
    for key, events in zip(keys, results, strict=True):
        _assert_complete_stream([s for s in stored if s.envelope.trigger_run_id == key], pages=300)
        assert _descriptor(events).count == 300
    assert refused > 0, "the local queue never filled: the test did not exercise the wait"


def test_resumed_stream_continues_after_the_last_written_page(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    k = 7
    samples.PAUSE_BEFORE[key] = k + 1  # the first run blocks before fetching page k+1

    def visible(seq: int) -> bool:
        return any(s.envelope.sequence_index >= seq for s in read_topic(kafka_bootstrap, topic, key))

    async def scenario():
        first = PagedTrigger(total=20, trigger_run_id=key, topic=topic)
        task = asyncio.create_task(collect(first))
        await wait_for(lambda: visible(k), what=f"envelope {k}")
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        samples.PAUSE_BEFORE.pop(key)
        again = PagedTrigger(**first.serialize()[1])
        return await collect(again)

    descriptor = _descriptor(asyncio.run(scenario()))
    assert dict(samples.FETCHES[key]) == {i: 1 for i in range(20)}  # no page fetched twice
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_complete_stream(stored, pages=20)
    assert {s.envelope.attempt for s in stored} == {0}
    # the second run knew where the attempt began although it did not write it
    assert (descriptor.attempt, descriptor.count) == (0, 20)
    assert (descriptor.first_offset, descriptor.last_offset) == (stored[0].offset, stored[-1].offset)


class _FailsOnePage:
    """The trigger's producer, except that the first ``times`` sends of page ``page`` fail at once as
    librdkafka reports a message it gave up on, while the pages after it are produced (and reach Kafka)."""

    def __init__(self, producer, page: int, times: int = 1) -> None:
        self.producer, self.page, self.failures_left = producer, page, times

    def send(self, topic, value, **options):
        if self.failures_left and TRIGGER_EVENT_CODEC.decode(value).sequence_index == self.page:
            self.failures_left -= 1
            future = DeliveryFuture()
            future.settle(exception=NotSentError("not sent — nothing will be published: injected"))
            return future
        return self.producer.send(topic, value, **options)

    def __getattr__(self, name):
        return getattr(self.producer, name)


class _FailingPageTrigger(PagedTrigger):
    """A PagedTrigger whose page ``failing_page`` fails once at the producer, with ``window`` in flight."""

    def __init__(self, *, failing_page: int, failures: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.failing_page, self.failures = failing_page, failures

    def trigger_kwargs(self):
        return {**super().trigger_kwargs(), "failing_page": self.failing_page, "failures": self.failures}

    def _open_kafka(self):
        settings, producer, index_producer, window = super()._open_kafka()
        return settings, _FailsOnePage(producer, self.failing_page, self.failures), index_producer, window


def _consumed(stored, key: str, total: int) -> None:
    """What a consumer of the stream is handed: pages 0..total-1 and the end, once, in order."""
    tracker = SequenceTracker(key)
    for s in stored:
        tracker.offer(s.envelope, s.offset)
    taken = tracker.take(10 * total)
    assert [e.sequence_index for e in taken.events] == list(range(total + 1))
    assert [e.payload for e in taken.events[:-1]] == [samples.page_payload(i) for i in range(total)]
    assert taken.finished and tracker.buffered == []


def test_a_page_failing_mid_window_leaves_consumers_no_gap_and_the_rerun_resumes(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    total, failing = 60, 5
    first = _FailingPageTrigger(failing_page=failing, total=total, trigger_run_id=key, topic=topic)
    first.write_window = 16  # pages 1..16 are in flight when page 5's receipt is taken
    with pytest.raises(NotSentError, match="injected"):
        _run(first)
    stored = read_topic(kafka_bootstrap, topic, key)
    sequences = [s.envelope.sequence_index for s in stored]
    hole = sequences.index(failing + 1)  # the pages after the failed one reached Kafka before it
    assert sequences[:hole] == list(range(failing))
    strays = sequences[hole : sequences.index(failing)]
    assert strays == list(range(failing + 1, strays[-1] + 1)) and len(strays) >= 5
    assert sequences[sequences.index(failing) :] == list(range(failing, strays[-1] + 1))  # sent again
    copies: dict[int, TriggerEventEnvelope] = {}
    for s in stored:  # every copy of a page is that page (the very bytes sent again)
        assert copies.setdefault(s.envelope.sequence_index, s.envelope) == s.envelope

    again = PagedTrigger(total=total, trigger_run_id=key, topic=topic)
    descriptor = _descriptor(_run(again))
    assert (descriptor.attempt, descriptor.count) == (0, total)
    fetches = samples.FETCHES[key]
    assert all(fetches[i] == 1 for i in range(total))  # the rerun fetched only what Kafka did not hold

    _consumed(read_topic(kafka_bootstrap, topic, key), key, total)


def test_a_page_failing_twice_leaves_a_hole_the_rerun_fills(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    total, failing = 60, 5
    first = _FailingPageTrigger(
        failing_page=failing, failures=2, total=total, trigger_run_id=key, topic=topic
    )
    first.write_window = 16
    with pytest.raises(NotSentError, match="injected"):
        _run(first)
    stored = read_topic(kafka_bootstrap, topic, key)
    sequences = {s.envelope.sequence_index for s in stored}
    assert failing not in sequences and max(sequences) > failing  # a hole: later pages, not page 5

    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    progress = find_stream_progress(settings, topic, key, gap_window=16)
    assert progress is not None and (progress.sequence_index, progress.first_missing) == (failing - 1, None)
    assert progress.resume_cursor == str(failing)

    again = PagedTrigger(total=total, trigger_run_id=key, topic=topic)
    again.write_window = 16
    descriptor = _descriptor(_run(again))
    assert (descriptor.attempt, descriptor.count) == (0, total)
    fetches = samples.FETCHES[key]
    assert all(fetches[i] == 1 for i in range(failing))  # what was before the hole is not fetched again
    assert all(fetches[i] >= 1 for i in range(total))
    _consumed(read_topic(kafka_bootstrap, topic, key), key, total)


def test_a_hole_at_page_0_starts_a_new_attempt(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    _produce(
        kafka_bootstrap, topic, [(key, _envelope(key, seq, resume_cursor=str(seq + 1))) for seq in (1, 2, 3)]
    )
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    latest = find_stream_progress(settings, topic, key)
    assert latest is not None and (latest.sequence_index, latest.first_missing) == (3, None)
    progress = find_stream_progress(settings, topic, key, gap_window=16)
    assert progress is not None and (progress.sequence_index, progress.first_missing) == (3, 0)

    descriptor = _descriptor(_run(PagedTrigger(total=4, trigger_run_id=key, topic=topic)))
    assert (descriptor.attempt, descriptor.count) == (1, 4)
    _consumed(read_topic(kafka_bootstrap, topic, key), key, 4)


def _stream_missing_page_3(bootstrap: str, topic: str) -> str:
    """A stream's key whose pages 0..39 are in ``topic`` but page 3 (36 pages after the hole)."""
    key = _key()
    seqs = [0, 1, 2, *range(4, 40)]
    _produce(bootstrap, topic, [(key, _envelope(key, s, resume_cursor=str(s + 1))) for s in seqs])
    return key


def test_a_hole_is_looked_for_only_within_the_window(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _stream_missing_page_3(kafka_bootstrap, topic)
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    within = find_stream_progress(settings, topic, key, gap_window=64, chunk_size=5)
    assert within is not None and (within.sequence_index, within.offset, within.first_missing) == (2, 2, None)
    beyond = find_stream_progress(settings, topic, key, gap_window=16, chunk_size=5)
    assert beyond is not None and (beyond.sequence_index, beyond.first_missing) == (39, None)


def test_a_hole_is_looked_for_only_within_the_writers_bytes_in_flight(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _stream_missing_page_3(kafka_bootstrap, topic)
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    size = len(_envelope(key, 20, resume_cursor="21"))  # every page's size, within a few bytes
    # within the pages' count and their bytes: the hole is found
    found = find_stream_progress(settings, topic, key, gap_window=64, gap_bytes=40 * size, chunk_size=5)
    assert found is not None and (found.sequence_index, found.first_missing) == (2, None)
    # the 16 pages below the latest already hold the writer's bytes bound: none below them was in flight
    beyond = find_stream_progress(settings, topic, key, gap_window=64, gap_bytes=16 * size, chunk_size=5)
    assert beyond is not None and (beyond.sequence_index, beyond.first_missing) == (39, None)


def test_interrupted_stream_without_cursors_restarts_as_a_new_attempt(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    samples.PAUSE_BEFORE[key] = 3

    async def scenario():
        first = PagedTrigger(total=5, cursors=False, trigger_run_id=key, topic=topic)
        task = asyncio.create_task(collect(first))
        await wait_for(lambda: len(read_topic(kafka_bootstrap, topic, key)) == 3, what="three envelopes")
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        samples.PAUSE_BEFORE.pop(key)
        return await collect(PagedTrigger(**first.serialize()[1]))

    descriptor = _descriptor(asyncio.run(scenario()))
    stored = read_topic(kafka_bootstrap, topic, key)
    assert [(s.envelope.attempt, s.envelope.sequence_index) for s in stored] == [
        (0, 0),
        (0, 1),
        (0, 2),
        *[(1, i) for i in range(6)],
    ]
    assert (descriptor.attempt, descriptor.count, descriptor.first_offset) == (1, 5, stored[3].offset)


def test_failure_mid_stream_ends_the_attempt_with_the_error_and_a_rerun_starts_attempt_1(
    kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=3)
    key = _key()
    kwargs = {"total": 6, "fail_at": 3, "trigger_run_id": key, "topic": topic}

    failed = _descriptor(_run(PagedTrigger(**kwargs)))
    error = {"type": f"{samples.MODULE}.PageFetchError", "message": "page 3 is unavailable"}
    assert failed.error == error and failed.failed
    assert (failed.attempt, failed.count) == (0, 3)
    stored = read_topic(kafka_bootstrap, topic, key)
    assert [(s.envelope.sequence_index, s.envelope.is_last) for s in stored] == [
        (0, False),
        (1, False),
        (2, False),
        (3, True),
    ]
    terminal = stored[-1].envelope
    assert terminal.payload is None and terminal.error is not None
    assert (terminal.error.type, terminal.error.message) == (error["type"], error["message"])
    assert failed.last_offset == stored[-1].offset

    retried = _descriptor(_run(PagedTrigger(**kwargs)))  # the source works now
    assert (retried.attempt, retried.count, retried.error) == (1, 6, None)
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_complete_stream(stored, pages=6, attempt=1)
    assert retried.first_offset == next(s.offset for s in stored if s.envelope.attempt == 1)


def test_a_payload_that_is_not_json_fails_the_stream(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    descriptor = _descriptor(_run(PagedTrigger(total=4, bad_payload_at=2, trigger_run_id=key, topic=topic)))
    assert descriptor.count == 2
    assert descriptor.error is not None
    assert descriptor.error["type"] == "airflow_kafka_events.errors.EnvelopeEncodeError"
    stored = read_topic(kafka_bootstrap, topic, key)
    assert [s.envelope.is_last for s in stored] == [False, False, True]


def test_a_complete_stream_is_reported_again_without_writing(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    kwargs = {"total": 4, "trigger_run_id": key, "topic": topic}
    first = _descriptor(_run(PagedTrigger(**kwargs)))
    before = read_topic(kafka_bootstrap, topic)
    again = _descriptor(_run(PagedTrigger(**kwargs)))
    assert again == first
    assert read_topic(kafka_bootstrap, topic) == before
    assert dict(samples.FETCHES[key]) == {i: 1 for i in range(4)}


def _generations(stored, attempt: int) -> set[str | None]:
    return {s.envelope.metadata.get("generation") for s in stored if s.envelope.attempt == attempt}


def test_a_new_generation_writes_a_new_attempt_and_the_same_one_reports_it_again(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    _run(PagedTrigger(total=2, trigger_run_id=key, topic=topic, generation=0))
    cleared = _descriptor(_run(PagedTrigger(total=3, trigger_run_id=key, topic=topic, generation=1)))
    assert (cleared.attempt, cleared.count) == (1, 3)
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_complete_stream(stored, pages=2, attempt=0)
    _assert_complete_stream(stored, pages=3, attempt=1)
    # every envelope of an attempt, terminal marker included, records its generation
    assert (_generations(stored, 0), _generations(stored, 1)) == ({"0"}, {"1"})

    again = _descriptor(_run(PagedTrigger(total=3, trigger_run_id=key, topic=topic, generation=1)))
    assert again == cleared  # a retry of generation 1: complete, reported again
    assert read_topic(kafka_bootstrap, topic, key) == stored


def test_a_triggerer_restart_during_the_first_deferral_after_a_clear_resumes_the_new_attempt(
    kafka_bootstrap, new_topic
):
    """The trigger kwargs of a cleared task, run twice: the second run resumes, it does not restart."""
    topic = new_topic(partitions=3)
    key = _key()
    total, k = 12, 5
    first = _descriptor(_run(PagedTrigger(total=total, trigger_run_id=key, topic=topic, generation=0)))
    assert (first.attempt, first.count) == (0, total)

    def visible(attempt: int, seq: int) -> bool:
        return any(
            (s.envelope.attempt, s.envelope.sequence_index) == (attempt, seq)
            for s in read_topic(kafka_bootstrap, topic, key)
        )

    samples.PAUSE_BEFORE[key] = k + 1  # the run of generation 1 blocks before fetching page k+1

    async def scenario():
        cleared = PagedTrigger(total=total, trigger_run_id=key, topic=topic, generation=1)
        task = asyncio.create_task(collect(cleared))
        await wait_for(lambda: visible(1, k), what=f"envelope {k} of attempt 1")
        task.cancel()  # the triggerer stops ...
        with suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        samples.PAUSE_BEFORE.pop(key)
        # ... and runs the trigger again from its stored kwargs
        return await collect(PagedTrigger(**cleared.serialize()[1]))

    descriptor = _descriptor(asyncio.run(scenario()))
    # attempt 0 fetched every page once, attempt 1 too: the rerun did not fetch pages 0..k again
    assert dict(samples.FETCHES[key]) == {i: 2 for i in range(total)}
    stored = read_topic(kafka_bootstrap, topic, key)
    assert {s.envelope.attempt for s in stored} == {0, 1}  # no attempt 2
    _assert_complete_stream(stored, pages=total, attempt=0)
    _assert_complete_stream(stored, pages=total, attempt=1)
    assert _generations(stored, 1) == {"1"}
    attempt_1 = [s for s in stored if s.envelope.attempt == 1]
    assert (descriptor.attempt, descriptor.count) == (1, total)
    assert (descriptor.first_offset, descriptor.last_offset) == (attempt_1[0].offset, attempt_1[-1].offset)


def test_a_trigger_without_a_generation_resumes_an_attempt_and_keeps_its_generation(
    kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=3)
    key = _key()
    samples.PAUSE_BEFORE[key] = 3

    async def scenario():
        task = asyncio.create_task(
            collect(PagedTrigger(total=6, trigger_run_id=key, topic=topic, generation=4))
        )
        await wait_for(lambda: len(read_topic(kafka_bootstrap, topic, key)) == 3, what="three envelopes")
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        samples.PAUSE_BEFORE.pop(key)
        return await collect(PagedTrigger(total=6, trigger_run_id=key, topic=topic))

    descriptor = _descriptor(asyncio.run(scenario()))
    assert (descriptor.attempt, descriptor.count) == (0, 6)
    assert dict(samples.FETCHES[key]) == {i: 1 for i in range(6)}
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_complete_stream(stored, pages=6)
    assert _generations(stored, 0) == {"4"}


def test_finish_task_yields_a_task_end_event_with_the_descriptor_as_xcom(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    (event,) = _run(PagedTrigger(total=3, trigger_run_id=key, topic=topic, finish_task=True))
    assert type(event) is TaskSuccessEvent
    descriptor = StreamDescriptor.from_dict((event.xcoms or {})["return_value"])
    assert (descriptor.trigger_run_id, descriptor.count, descriptor.error) == (key, 3, None)

    failing = _key()
    (event,) = _run(PagedTrigger(total=3, fail_at=1, trigger_run_id=failing, topic=topic, finish_task=True))
    assert type(event) is TaskFailedEvent
    assert StreamDescriptor.from_dict((event.xcoms or {})["return_value"]).failed


# --------------------------------------------------------------------------- progress lookup
def _envelope(key: str, seq: int, *, attempt: int = 0, is_last: bool = False, **kw) -> bytes:
    return TRIGGER_EVENT_CODEC.encode(
        TriggerEventEnvelope(
            trigger_run_id=key, sequence_index=seq, is_last=is_last, attempt=attempt, payload=seq, **kw
        )
    )


def _produce(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = Producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(30) == 0


def _noise(n: int) -> list[tuple[str, bytes]]:
    return [(f"other-{i % 5}", _envelope(f"other-{i % 5}", i)) for i in range(n)]


def test_progress_of_an_unknown_stream_is_none(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    assert find_stream_progress(settings, topic, "nobody", timeout=30) is None
    _produce(kafka_bootstrap, topic, _noise(1200))
    location, progress = lookup_stream(settings, topic, "nobody", timeout=30, chunk_size=500)
    assert progress is None
    assert (location.partition, location.num_partitions, location.low, location.high) == (0, 1, 0, 1200)


def test_progress_is_found_behind_many_records_of_other_keys(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    # seq 0 (no hint) far behind, then seq 1..3 without the first-offset hint, then noise
    records = [(key, _envelope(key, 0, resume_cursor="1"))]
    records += _noise(700)
    records += [(key, _envelope(key, seq, resume_cursor=str(seq + 1))) for seq in (1, 2, 3)]
    records += _noise(1300)
    _produce(kafka_bootstrap, topic, records)

    progress = find_stream_progress(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5}, topic, key, timeout=30, chunk_size=500
    )
    assert progress is not None
    assert (progress.attempt, progress.sequence_index, progress.is_last) == (0, 3, False)
    assert progress.resume_cursor == "4"
    assert progress.offset == 703
    assert progress.first_offset == 0  # found by scanning back across chunks


def test_progress_takes_the_highest_attempt_and_sequence_of_the_last_chunk(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    records = [(key, _envelope(key, seq, attempt=1)) for seq in range(3)]
    records.append((key, _envelope(key, 5, attempt=0)))  # a late write of an older attempt
    records += [("x", _envelope("x", 0))]
    _produce(kafka_bootstrap, topic, records)
    progress = find_stream_progress(KafkaSettings({"bootstrap.servers": kafka_bootstrap}), topic, key)
    assert progress is not None
    assert (progress.attempt, progress.sequence_index, progress.offset, progress.first_offset) == (1, 2, 2, 0)


def test_progress_uses_the_first_offset_hint(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    hint = {"first_offset": "0"}
    records = [(key, _envelope(key, 0))] + [(key, _envelope(key, s, metadata=hint)) for s in (1, 2)]
    records.append((key, _envelope(key, 3, is_last=True, metadata=hint)))
    _produce(kafka_bootstrap, topic, records)
    progress = find_stream_progress(
        KafkaSettings({"bootstrap.servers": kafka_bootstrap}), topic, key, chunk_size=1
    )
    assert progress is not None
    assert (progress.sequence_index, progress.is_last, progress.first_offset) == (3, True, 0)


def test_progress_skips_undecodable_records_of_the_key(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    _produce(kafka_bootstrap, topic, [(key, _envelope(key, 0)), (key, b"not an envelope")])
    progress = find_stream_progress(KafkaSettings({"bootstrap.servers": kafka_bootstrap}), topic, key)
    assert progress is not None and (progress.sequence_index, progress.offset) == (0, 0)


def test_progress_of_a_missing_topic_is_a_typed_error(kafka_bootstrap):
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    with pytest.raises(StreamProgressError) as caught:
        find_stream_progress(settings, f"missing-{uuid.uuid4().hex}", "k", timeout=20)
    unknown = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
    assert caught.value.code in unknown  # given up after a short grace, not at the deadline


# --------------------------------------------------------------------------- bounded lookup
NOISE_RECORDS = 20_000


def _produce_noise(bootstrap: str, topic: str, n: int) -> None:
    """``n`` small records of other keys (not envelopes: the lookup decodes only its own key)."""
    producer = Producer(KafkaSettings({"bootstrap.servers": bootstrap, "linger.ms": 20}).producer_config())
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=b"x" * 16, key=f"other-{i % 7}")
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def _now_ms_after_everything_produced() -> int:
    time.sleep(0.02)  # the next millisecond is later than every record produced so far
    return int(time.time() * 1000)


@pytest.fixture
def reads(monkeypatch) -> list[tuple[int, int]]:
    """The offset ranges ``[start, end)`` the progress lookups read, in order."""
    from airflow_kafka_events.streams import progress as progress_module

    ranges: list[tuple[int, int]] = []
    original = progress_module._PartitionScanner.read_range

    def read_range(self, partition: int, start: int, end: int):
        ranges.append((start, end))
        return original(self, partition, start, end)

    monkeypatch.setattr(progress_module._PartitionScanner, "read_range", read_range)
    return ranges


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat()


def test_a_new_stream_with_a_bound_reads_nothing_older_and_finds_what_it_wrote_after_it(
    kafka_bootstrap, new_topic, reads
):
    """20k records of other keys before the bound: the lookups read none of them."""
    topic = new_topic(partitions=1)
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    _produce_noise(kafka_bootstrap, topic, NOISE_RECORDS)
    bound = _now_ms_after_everything_produced()

    # without the bound a new stream's lookup reads the whole partition (in one chunk here)
    location, progress = lookup_stream(settings, topic, "nobody", timeout=60, chunk_size=NOISE_RECORDS)
    assert progress is None and location.scan_start == 0
    assert sum(end - start for start, end in reads) == NOISE_RECORDS
    reads.clear()

    # with it: nothing at or after the bound yet, so nothing is read at all
    location, progress = lookup_stream(settings, topic, "nobody", timeout=60, not_before_ms=bound)
    assert progress is None and reads == []
    assert (location.low, location.high, location.scan_start) == (0, NOISE_RECORDS, NOISE_RECORDS)
    assert location.not_before_ms == bound

    # a trigger with the bound, interrupted after envelope k, then run again with the same kwargs
    key = _key()
    k = 4
    samples.PAUSE_BEFORE[key] = k + 1

    async def scenario():
        first = PagedTrigger(total=10, trigger_run_id=key, topic=topic, generation=0, not_before=_iso(bound))
        task = asyncio.create_task(collect(first))
        await wait_for(
            lambda: any(s.envelope.sequence_index == k for s in read_topic(kafka_bootstrap, topic, key)),
            what=f"envelope {k}",
        )
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        samples.PAUSE_BEFORE.pop(key)
        return await collect(PagedTrigger(**first.serialize()[1]))

    descriptor = _descriptor(asyncio.run(scenario()))
    assert dict(samples.FETCHES[key]) == {i: 1 for i in range(10)}  # resumed: progress was found
    assert (descriptor.attempt, descriptor.count, descriptor.first_offset) == (0, 10, NOISE_RECORDS)
    assert reads and min(start for start, _ in reads) >= NOISE_RECORDS  # never below the bound

    # more records of other keys after the stream: the lookup still starts at the bound
    _produce_noise(kafka_bootstrap, topic, 3_000)
    reads.clear()
    location, progress = lookup_stream(settings, topic, key, timeout=60, not_before_ms=bound)
    assert progress is not None and (progress.sequence_index, progress.is_last) == (10, True)
    assert progress.first_offset == NOISE_RECORDS and progress.generation == 0
    assert location.scan_start == NOISE_RECORDS and min(start for start, _ in reads) >= NOISE_RECORDS


def test_envelopes_older_than_the_bound_are_ignored_by_design(kafka_bootstrap, new_topic, reads):
    """The bound promises that nothing of the stream is older: what is older is not looked at."""
    topic = new_topic(partitions=1)
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    key = _key()
    _produce(kafka_bootstrap, topic, [(key, _envelope(key, 0, resume_cursor="1"))])  # offset 0, no hint
    _produce_noise(kafka_bootstrap, topic, 999)
    between = _now_ms_after_everything_produced()
    _produce(
        kafka_bootstrap, topic, [(key, _envelope(key, seq, resume_cursor=str(seq + 1))) for seq in (1, 2)]
    )
    _produce_noise(kafka_bootstrap, topic, 1000)
    after = _now_ms_after_everything_produced()

    # unbounded: seq 0 is found as the attempt's first offset, far behind
    progress = find_stream_progress(settings, topic, key, chunk_size=500)
    assert progress is not None and (progress.sequence_index, progress.first_offset) == (2, 0)

    # bounded between seq 0 and seq 1: the progress is found, the search for seq 0 stops at the bound
    reads.clear()
    location, progress = lookup_stream(settings, topic, key, chunk_size=500, not_before_ms=between)
    assert location.scan_start == 1000
    assert progress is not None and (progress.sequence_index, progress.offset) == (2, 1001)
    assert progress.first_offset == 1000  # the lowest envelope of the attempt at or after the bound
    assert min(start for start, _ in reads) == 1000

    # a bound later than the stream's progress: nothing of it is found (the bound was wrong)
    reads.clear()
    location, progress = lookup_stream(settings, topic, key, not_before_ms=after)
    assert progress is None and reads == [] and location.scan_start == location.high == 2002

    # a bound before everything: the same as no bound
    location, progress = lookup_stream(settings, topic, key, chunk_size=500, not_before_ms=0)
    assert location.scan_start == 0 and progress is not None and progress.first_offset == 0
