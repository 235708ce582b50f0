"""Stream reading without a broker: ordering, epochs, batching, checkpoints, timeouts.

``SequenceTracker`` and ``BatchPolicy`` are pure; ``StreamReader`` runs here against an
in-memory consumer and a fake clock, so timeouts are checked without waiting for them.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import pickle
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    KafkaOperationError,
    StreamFailedError,
    StreamGapError,
    StreamNotStartedError,
    StreamReadError,
    UnknownFramingError,
    ValidationError,
)
from airflow_kafka_events.streams.checkpoint import (
    Checkpoint,
    CheckpointStore,
    load_checkpoint,
    save_checkpoint,
)
from airflow_kafka_events.streams.consuming import reader as sr
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.consuming.sequence import BatchPolicy, Offer, SequenceTracker
from harness.kafka_records import FakeMessage

pytestmark = pytest.mark.unit

RUN = "dag/task/-1/run-1"


def env(
    seq: int, *, attempt: int = 0, last: bool = False, error: str | None = None, run: str = RUN
) -> TriggerEventEnvelope:
    return TriggerEventEnvelope(
        trigger_run_id=run,
        sequence_index=seq,
        attempt=attempt,
        is_last=last or error is not None,
        payload={"page": seq, "attempt": attempt},
        error=None if error is None else StreamFailure(type="HTTPError", message=error),
    )


def stream(n: int, *, attempt: int = 0) -> list[TriggerEventEnvelope]:
    return [env(i, attempt=attempt, last=i == n - 1) for i in range(n)]


def seqs(events: list[TriggerEventEnvelope]) -> list[int]:
    return [e.sequence_index for e in events]


def take_all(tracker: SequenceTracker, max_events: int = 1000) -> list[TriggerEventEnvelope]:
    out: list[TriggerEventEnvelope] = []
    while tracker.ready_count:
        out.extend(tracker.take(max_events).events)
    return out


# ====================================================================== SequenceTracker
def test_in_order_elements_are_ready_at_once_and_taken_in_batches():
    t = SequenceTracker(RUN)
    assert [t.offer(e, pos) for pos, e in enumerate(stream(5))] == [Offer.READY] * 5
    first = t.take(3)
    assert seqs(first.events) == [0, 1, 2]
    assert first.positions == [0, 1, 2]
    assert (first.attempt, first.next_sequence_index, first.finished, first.restarted) == (0, 3, False, False)
    second = t.take(3)
    assert seqs(second.events) == [3, 4]
    assert second.finished and t.finished_taken
    assert t.take(3).events == []


def test_future_elements_are_held_until_the_missing_one_arrives():
    t = SequenceTracker(RUN)
    assert t.offer(env(0)) is Offer.READY
    assert t.offer(env(3)) is Offer.BUFFERED
    assert t.offer(env(2)) is Offer.BUFFERED
    assert (t.missing, t.buffered, t.ready_count) == (1, [2, 3], 1)
    assert t.offer(env(1)) is Offer.READY
    assert t.missing is None and t.buffered == []
    assert seqs(take_all(t)) == [0, 1, 2, 3]
    assert t.expected == 4


def test_duplicates_are_dropped_whether_delivered_ready_or_held():
    t = SequenceTracker(RUN)
    t.offer(env(0))
    t.offer(env(2))
    assert t.offer(env(0)) is Offer.DUPLICATE  # ready, not taken yet
    assert t.offer(env(2)) is Offer.DUPLICATE  # held
    take_all(t)
    assert t.offer(env(0)) is Offer.DUPLICATE  # already handed out
    t.offer(env(1))
    assert seqs(take_all(t)) == [1, 2]
    assert t.dropped == 3


def test_first_copy_wins_among_duplicates_with_different_payloads():
    t = SequenceTracker(RUN)
    first = env(0)
    t.offer(first)
    t.offer(TriggerEventEnvelope(trigger_run_id=RUN, sequence_index=0, is_last=False, payload="other"))
    assert take_all(t) == [first]


def test_other_runs_are_foreign():
    t = SequenceTracker(RUN)
    assert t.offer(env(0, run="another")) is Offer.FOREIGN
    assert not t.started and t.ready_count == 0


def test_a_higher_attempt_restarts_at_sequence_zero_and_drops_what_was_held():
    t = SequenceTracker(RUN)
    for e in (env(0), env(1), env(3)):
        t.offer(e)
    assert seqs(t.take(1).events) == [0]  # handed out: the restart must be reported
    assert t.offer(env(1, attempt=1)) is Offer.RESTARTED  # held: 0 of attempt 1 is missing
    assert (t.attempt, t.expected, t.ready_count, t.buffered) == (1, 0, 0, [1])
    assert t.offer(env(2, attempt=0)) is Offer.STALE
    t.offer(env(0, attempt=1))
    taken = t.take(10)
    assert seqs(taken.events) == [0, 1] and taken.attempt == 1 and taken.restarted
    t.offer(env(2, attempt=1, last=True))
    again = t.take(10)
    assert not again.restarted and again.finished and t.restarts == 1


def test_restart_before_anything_was_handed_out_is_not_reported():
    t = SequenceTracker(RUN)
    t.offer(env(0))
    t.offer(env(1))
    t.offer(env(0, attempt=2))  # attempt 0 never reached the caller
    taken = t.take(10)
    assert seqs(taken.events) == [0] and taken.attempt == 2 and not taken.restarted


def test_restart_is_reported_when_a_checkpoint_covered_the_lower_attempt():
    t = SequenceTracker(RUN, attempt=0, next_sequence_index=4)
    assert t.started and t.position == (0, 4)
    assert t.offer(env(2)) is Offer.DUPLICATE  # below the checkpoint
    t.offer(env(0, attempt=1))
    assert t.take(5).restarted


def test_position_stays_on_the_lower_attempt_until_the_new_one_is_handed_out():
    t = SequenceTracker(RUN)
    t.offer(env(0))
    t.take(5)
    t.offer(env(3, attempt=1))  # new attempt seen, nothing of it ready
    assert t.position == (0, 1)
    t.offer(env(0, attempt=1))
    t.take(5)
    assert t.position == (1, 1)


def test_normal_end_finishes_and_drops_everything_after_it():
    t = SequenceTracker(RUN)
    t.offer(env(5))  # beyond the end that comes later: dropped when the end is seen
    t.offer(env(0))
    assert t.offer(env(1, last=True)) is Offer.READY
    assert t.finished and t.buffered == []
    assert t.offer(env(2)) is Offer.AFTER_END
    assert t.offer(env(0, attempt=3)) is Offer.AFTER_END  # a complete stream is final
    taken = t.take(10)
    assert seqs(taken.events) == [0, 1] and taken.finished and taken.events[-1].is_last


def test_an_element_beyond_a_held_end_is_dropped():
    t = SequenceTracker(RUN)
    t.offer(env(2, last=True))
    assert t.offer(env(3)) is Offer.AFTER_END
    t.offer(env(0))
    t.offer(env(1))
    assert seqs(take_all(t)) == [0, 1, 2]


def test_error_end_is_a_failure_once_every_element_before_it_is_ready():
    t = SequenceTracker(RUN)
    t.offer(env(2, error="503 from upstream"))
    assert t.failure is None  # 0 and 1 are still missing
    t.offer(env(0))
    t.offer(env(1))
    failure = t.failure
    assert failure is not None and failure.error is not None and failure.error.message == "503 from upstream"
    taken = t.take(10)
    assert seqs(taken.events) == [0, 1] and not taken.finished  # the failing element is not handed out
    assert t.ended and t.ready_count == 0
    assert t.offer(env(3)) is Offer.AFTER_END


def test_a_retry_supersedes_a_failure():
    t = SequenceTracker(RUN)
    t.offer(env(0))
    t.offer(env(1, error="boom"))
    assert t.failure is not None
    t.take(10)
    assert t.offer(env(0, attempt=1)) is Offer.RESTARTED
    assert t.failure is None and not t.ended
    t.offer(env(1, attempt=1, last=True))
    taken = t.take(10)
    assert taken.restarted and taken.finished and taken.attempt == 1


def test_lowest_held_position_covers_ready_held_and_failing_elements():
    t = SequenceTracker(RUN)
    assert t.lowest_held_position() is None
    t.offer(env(0), 10)
    t.offer(env(2), 11)
    assert t.lowest_held_position() == 10
    t.take(1)
    assert t.lowest_held_position() == 11
    t.offer(env(1, error="x"), 12)  # failure at the frontier; 2 is dropped
    assert t.lowest_held_position() == 12


def test_take_needs_a_positive_size():
    with pytest.raises(ValueError):
        SequenceTracker(RUN).take(0)


def test_resuming_a_finished_stream_hands_out_nothing():
    t = SequenceTracker(RUN, attempt=1, next_sequence_index=9, finished=True)
    assert t.finished_taken and t.take(5).finished
    assert t.offer(env(9, attempt=1)) is Offer.AFTER_END


@st.composite
def shuffled_with_duplicates(draw, n_max: int = 40):
    n = draw(st.integers(min_value=1, max_value=n_max))
    elements = stream(n)
    extra = draw(st.lists(st.sampled_from(elements), max_size=n))
    items = elements + extra
    return n, draw(st.permutations(items)), draw(st.lists(st.integers(1, 7), min_size=1, max_size=5))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shuffled_with_duplicates())
def test_property_any_permutation_with_duplicates_delivers_each_index_once_in_order(case):
    n, items, sizes = case
    t = SequenceTracker(RUN)
    out: list[TriggerEventEnvelope] = []
    for i, item in enumerate(items):
        t.offer(item, i)
        out.extend(t.take(sizes[i % len(sizes)]).events)  # takes interleaved with offers
    out.extend(take_all(t))
    assert seqs(out) == list(range(n))
    assert t.finished_taken and t.restarts == 0


@st.composite
def two_attempts(draw):
    lower_len = draw(st.integers(min_value=1, max_value=15))
    lower = [env(i, attempt=0) for i in range(lower_len)]
    if draw(st.booleans()):  # the lower attempt failed with an error end, or just stopped
        lower[-1] = env(lower_len - 1, attempt=0, error="boom")
    higher_len = draw(st.integers(min_value=1, max_value=15))
    higher = stream(higher_len, attempt=1)
    duplicates = draw(st.lists(st.sampled_from(lower + higher), max_size=10))
    items = draw(st.permutations(lower + higher + duplicates))
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    return higher_len, items, sizes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_attempts())
def test_property_any_interleaving_of_two_attempts_ends_with_the_higher_attempt_in_full(case):
    higher_len, items, sizes = case
    t = SequenceTracker(RUN)
    batches = []
    for i, item in enumerate(items):
        t.offer(item, i)
        batches.append(t.take(sizes[i % len(sizes)]))
    while t.ready_count:
        batches.append(t.take(100))
    delivered = [(e.attempt, e.sequence_index) for b in batches for e in b.events]
    lower = [s for a, s in delivered if a == 0]
    higher = [s for a, s in delivered if a == 1]
    assert lower == list(range(len(lower)))  # whatever came of attempt 0 came in order
    assert higher == list(range(higher_len))  # attempt 1 in full, in order, once
    first_higher = next(i for i, (a, _) in enumerate(delivered) if a == 1)
    assert all(a == 1 for a, _ in delivered[first_higher:])  # never back to attempt 0
    restarted = [b.restarted for b in batches if b.events and b.events[0].attempt == 1]
    assert restarted[0] == bool(lower) and not any(restarted[1:])
    assert t.finished_taken and t.failure is None


# ====================================================================== BatchPolicy
def test_batch_policy_due_on_count_on_wait_or_at_the_end():
    p = BatchPolicy(max_events=3, max_wait=2.0)
    assert not p.due(0, None, 100.0)
    assert not p.due(2, 10.0, 11.0)
    assert p.due(3, 10.0, 10.0)  # full
    assert p.due(2, 10.0, 12.0)  # waited long enough
    assert p.due(1, 10.0, 10.0, end_known=True)  # nothing more will come
    assert p.due_at(2, 10.0) == 12.0 and p.due_at(0, None) is None
    assert BatchPolicy(max_events=10, max_wait=0).due(1, 5.0, 5.0)


@pytest.mark.parametrize("kwargs", [{"max_events": 0}, {"max_events": True}, {"max_wait": -1}])
def test_batch_policy_refuses_bad_settings(kwargs):
    with pytest.raises(ConfigurationError):
        BatchPolicy(**kwargs)


# ====================================================================== Checkpoint
class DictStore:
    """The shape of Airflow's task_state_store."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        json.dumps(value)  # the real store only keeps JSON values
        self.data[key] = value


@pytest.mark.parametrize(
    "checkpoint",
    [
        Checkpoint(),
        Checkpoint(attempt=2, next_sequence_index=17, offset=345, partition=1),
        Checkpoint(attempt=0, next_sequence_index=3, offset=None, partition=None, finished=True),
        Checkpoint(attempt=2**31 - 1, next_sequence_index=2**63 - 1, offset=2**62, partition=999),
    ],
)
def test_checkpoint_json_round_trip(checkpoint):
    value = checkpoint.to_json()
    text = json.dumps(value, allow_nan=False)
    assert Checkpoint.from_json(json.loads(text)) == checkpoint
    assert Checkpoint.from_json(text) == checkpoint


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ([], "JSON object"),
        ("{not json", "not valid JSON"),
        ({"format": 99, "attempt": 0, "next_sequence_index": 0}, "format 99"),
        ({"format": 1, "attempt": 0}, "next_sequence_index"),
        ({"format": 1, "attempt": -1, "next_sequence_index": 0}, "attempt"),
        ({"format": 1, "attempt": "0", "next_sequence_index": 0}, "attempt"),
        ({"format": 1, "attempt": 0, "next_sequence_index": True}, "next_sequence_index"),
        ({"format": 1, "attempt": 0, "next_sequence_index": 0, "finished": "yes"}, "finished"),
    ],
)
def test_checkpoint_from_json_refuses_what_it_cannot_read(value, match):
    with pytest.raises(ValidationError, match=match):
        Checkpoint.from_json(value)


def test_checkpoint_store_protocol_matches_a_task_state_store_shape():
    assert isinstance(DictStore(), CheckpointStore)


def test_saved_checkpoint_loads_for_the_same_generation_only():
    store = DictStore()
    assert load_checkpoint(store, "stream", generation=0) is None
    cp = Checkpoint(attempt=1, next_sequence_index=5, offset=77, partition=2)
    save_checkpoint(store, "stream", cp, generation=0)
    assert load_checkpoint(store, "stream", generation=0) == cp
    assert load_checkpoint(store, "stream", generation=1) is None  # a cleared task starts over
    save_checkpoint(store, "stream", Checkpoint(next_sequence_index=1), generation=1)
    assert load_checkpoint(store, "stream", generation=1) == Checkpoint(next_sequence_index=1)
    assert load_checkpoint(store, "stream", generation=0) is None


def test_a_stored_value_that_is_not_a_checkpoint_is_an_error_not_a_restart():
    store = DictStore()
    store.set("stream", {"something": "else"})
    with pytest.raises(ValidationError, match="not a stream checkpoint"):
        load_checkpoint(store, "stream", generation=0)
    store.set("stream", {"generation": 0, "checkpoint": {"format": 7}})
    with pytest.raises(ValidationError, match="format 7"):
        load_checkpoint(store, "stream", generation=0)
    with pytest.raises(ValidationError, match="generation"):
        load_checkpoint(store, "stream", generation="0")  # type: ignore[arg-type]


# ====================================================================== errors
def test_stream_errors_keep_their_details_through_pickle():
    gap = StreamGapError("gap", missing_index=3, attempt=1, present=(4, 5), topic="t", trigger_run_id=RUN)
    failed = StreamFailedError("HTTPError", "503", attempt=0, sequence_index=9, topic="t", trigger_run_id=RUN)
    for error in (gap, failed, StreamNotStartedError("late", topic="t", trigger_run_id=RUN)):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert again.__dict__ == error.__dict__
    assert (failed.type, failed.message) == ("HTTPError", "503")
    assert "attempt 0, sequence_index 9" in str(failed) and RUN in str(failed)
    assert isinstance(gap, TimeoutError) and isinstance(gap, StreamReadError)


# ====================================================================== StreamReader on a fake consumer
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)


@dataclass
class TopicMeta:
    partitions: dict[int, Any]
    error: Any = None


@dataclass
class Metadata:
    topics: dict[str, TopicMeta]


@dataclass
class FakeBroker:
    """An in-memory log: records become visible at a (fake) time; consume advances the clock."""

    clock: FakeClock
    topics: dict[str, list[list[tuple[float, FakeMessage]]]] = field(default_factory=dict)
    low: dict[tuple[str, int], int] = field(default_factory=dict)
    commits: dict[tuple[str, str, int], TopicPartition] = field(default_factory=dict)
    per_consume: int = 10_000
    consumers: list[FakeConsumer] = field(default_factory=list)

    def create(self, topic: str, partitions: int = 3) -> str:
        self.topics[topic] = [[] for _ in range(partitions)]
        return topic

    def produce(
        self, topic: str, value: bytes | None, key: str | None, *, at: float | None = None, partition=None
    ) -> int:
        log = self.topics[topic]
        if partition is None:
            partition = sr.partition_for_key(key.encode(), len(log)) if key is not None else 0
        offset = len(log[partition])
        log[partition].append(
            (
                self.clock.now if at is None else at,
                FakeMessage(topic, partition, offset, None if key is None else key.encode(), value),
            )
        )
        return partition

    def send(self, topic: str, envelope: TriggerEventEnvelope, *, at: float | None = None) -> int:
        return self.produce(topic, TRIGGER_EVENT_CODEC.encode(envelope), envelope.trigger_run_id, at=at)


class FakeConsumer:
    def __init__(self, broker: FakeBroker, config: dict[str, Any]) -> None:
        self.broker = broker
        self.config = config
        self.positions: dict[tuple[str, int], int] = {}
        self.assignments: list[list[tuple[int, int]]] = []
        self.closed = False
        self.fail_close = False

    def list_topics(self, topic: str, timeout: float) -> Metadata:
        log = self.broker.topics.get(topic)
        if log is None:
            return Metadata({topic: TopicMeta({}, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))})
        return Metadata({topic: TopicMeta({i: object() for i in range(len(log))})})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        log = self.broker.topics[tp.topic][tp.partition]
        visible = [m for at, m in log if at <= self.broker.clock.now]
        return self.broker.low.get((tp.topic, tp.partition), 0), len(visible)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = {}
        for tp in tps:
            low = self.broker.low.get((tp.topic, tp.partition), 0)
            offset = low if tp.offset in (OFFSET_BEGINNING,) or tp.offset < low else tp.offset
            self.positions[(tp.topic, tp.partition)] = offset
        self.assignments.append(sorted((p, o) for (_, p), o in self.positions.items()))

    def _visible(self) -> list[FakeMessage]:
        out = []
        for (topic, partition), position in sorted(self.positions.items()):
            for at, msg in self.broker.topics[topic][partition][position:]:
                if at > self.broker.clock.now:
                    break
                out.append(msg)
        return out

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        assert not self.closed
        visible = self._visible()
        if not visible:
            pending = [
                at
                for (topic, partition), position in self.positions.items()
                for at, _ in self.broker.topics[topic][partition][position:]
            ]
            wake = self.broker.clock.now + timeout
            if pending and min(pending) < wake:
                wake = min(pending)
            self.broker.clock.now = max(wake, self.broker.clock.now + 0.001)
            visible = self._visible()
        batch = visible[: min(num_messages, self.broker.per_consume)]
        for msg in batch:
            self.positions[(msg.topic(), msg.partition())] = msg.offset() + 1
        return batch

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        group = self.config["group.id"]
        out = []
        for tp in tps:
            stored = self.broker.commits.get((group, tp.topic, tp.partition))
            out.append(stored if stored is not None else TopicPartition(tp.topic, tp.partition, -1001))
        return out

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        for tp in offsets:
            self.broker.commits[(self.config["group.id"], tp.topic, tp.partition)] = tp

    def close(self) -> None:
        self.closed = True
        if self.fail_close:
            raise RuntimeError("close failed")


class FakeReader(StreamReader):
    broker: FakeBroker

    def _make_consumer(self, config: dict[str, Any]) -> Any:
        consumer = FakeConsumer(self.broker, config)
        self.broker.consumers.append(consumer)
        return consumer


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(clock: FakeClock) -> FakeBroker:
    b = FakeBroker(clock)
    b.create("events", 3)
    return b


READ_OPTIONS = {field.name for field in dataclasses.fields(ReadOptions)}


def reader(broker: FakeBroker, run: str = RUN, topic: str = "events", **kwargs: Any) -> FakeReader:
    FakeReader.broker = broker
    kwargs.setdefault("max_wait", 0.5)
    kwargs.setdefault("gap_timeout", 5.0)
    kwargs.setdefault("start_timeout", 10.0)
    read = {name: kwargs.pop(name) for name in READ_OPTIONS if name in kwargs}
    config = {"bootstrap.servers": "fake:9092", "group.id": "g"}
    r = FakeReader(config, topic, run, options=ReadOptions(**read), **kwargs)
    r._clock = broker.clock  # type: ignore[method-assign]
    r._sleep = broker.clock.sleep  # type: ignore[method-assign]
    return r


def read_all(r: StreamReader) -> list:
    return list(r)


def test_reader_delivers_a_stream_in_batches_of_max_events(broker):
    for e in stream(10):
        broker.send("events", e)
    r = reader(broker, max_events=4)
    batches = read_all(r)
    assert [seqs(b.events) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.finished for b in batches] == [False, False, True]
    assert batches[0].first_offset == 0 and batches[0].last_offset == 3
    assert r.next_batch().finished and r.next_batch().events == []  # after the end: empty final batches
    assert r.partition == sr.partition_for_key(RUN.encode(), 3)
    assert len(broker.consumers[0].assignments[0]) == 1  # only the stream's partition was assigned


def test_reader_decodes_a_consumed_chunk_only_as_far_as_each_batch_needs(broker, monkeypatch):
    for e in stream(10):
        broker.send("events", e)
    r = reader(broker, max_events=4)
    decoded: list[bytes] = []
    decode = r._decoder.decode
    monkeypatch.setattr(r._decoder, "decode", lambda data: decoded.append(data) or decode(data))
    consumed: list[int] = []  # messages per consume call

    def counting_consume(**kwargs: Any) -> list[FakeMessage]:
        messages = consume(**kwargs)
        consumed.append(len(messages))
        return messages

    consume = broker.consumers[0].consume
    monkeypatch.setattr(broker.consumers[0], "consume", counting_consume)
    first = r.next_batch()
    assert seqs(first.events) == [0, 1, 2, 3] and sum(consumed) == 10  # one chunk of all ten records
    assert len(decoded) == 4 and r.tracker.ready_count == 0  # the other six wait undecoded
    assert r.ack(first).offset == 4
    calls = len(consumed)
    second = r.next_batch()
    assert seqs(second.events) == [4, 5, 6, 7] and len(decoded) == 8 and len(consumed) == calls
    third = r.next_batch()
    assert seqs(third.events) == [8, 9] and third.finished and len(decoded) == 10


def test_scan_lock_on_reads_again_what_a_chunk_held_past_the_batch(broker):
    for i in range(6):
        broker.produce("events", b"noise", f"k{i}", partition=i % 2)
    for e in stream(12):
        broker.produce("events", TRIGGER_EVENT_CODEC.encode(e), RUN, partition=2)
        if e.sequence_index == 4:
            broker.produce("events", b"not an envelope", RUN, partition=2)  # poison at offset 5
    broker.per_consume = 12  # the first chunk ends inside the stream, past the first batch
    r = reader(broker, scan_partitions=True, max_events=3)
    batches = read_all(r)
    assert [i for b in batches for i in seqs(b.events)] == list(range(12)) and r.partition == 2
    assert batches[-1].finished
    assert [record.offset for b in batches for record in b.rejected] == [5]  # once
    assert [p for p, _ in broker.consumers[0].assignments[-1]] == [2]


def test_reader_waits_max_wait_after_the_first_ready_element(broker, clock):
    start = clock.now
    broker.send("events", env(0), at=start)
    broker.send("events", env(1), at=start + 0.2)
    broker.send("events", env(2, last=True), at=start + 3.0)
    r = reader(broker, max_events=10, max_wait=1.0)
    first = r.next_batch()
    assert seqs(first.events) == [0, 1]
    assert start + 1.0 <= clock.now < start + 1.5  # due max_wait after element 0 became ready
    last = r.next_batch()
    assert seqs(last.events) == [2] and last.finished
    assert clock.now < start + 3.1  # the end is returned at once


def test_reader_with_max_wait_zero_returns_what_is_ready(broker, clock):
    broker.send("events", env(0))
    broker.send("events", env(1), at=clock.now + 2)
    r = reader(broker, max_events=10, max_wait=0)
    assert seqs(r.next_batch().events) == [0]


def test_reader_gap_is_reported_after_gap_timeout_with_the_missing_index(broker, clock):
    for e in (env(0), env(2), env(3)):
        broker.send("events", e)
    r = reader(broker, gap_timeout=3.0)
    assert seqs(r.next_batch().events) == [0]
    entered = clock.now
    with pytest.raises(StreamGapError) as info:
        r.next_batch()
    assert info.value.missing_index == 1 and info.value.present == (2, 3) and info.value.attempt == 0
    assert clock.now - entered >= 3.0
    assert "sequence_index 1" in str(info.value) and "'events'" in str(info.value)


def test_reader_gap_when_nothing_more_arrives(broker, clock):
    broker.send("events", env(0))
    r = reader(broker, gap_timeout=2.0)
    r.next_batch()
    with pytest.raises(StreamGapError) as info:
        r.next_batch()
    assert info.value.missing_index == 1 and info.value.present == ()


def test_time_between_calls_does_not_count_against_the_gap_timeout(broker, clock):
    broker.send("events", env(0))
    r = reader(broker, gap_timeout=2.0)
    r.next_batch()
    clock.now += 100  # the caller took long to handle the batch
    broker.send("events", env(1, last=True), at=clock.now + 1.0)
    assert r.next_batch().finished


def test_a_slow_first_element_does_not_eat_the_gap_timeout(broker, clock):
    broker.send("events", env(1), at=clock.now + 8)  # starts late, and with a gap
    broker.send("events", env(0), at=clock.now + 9.5)
    broker.send("events", env(2, last=True), at=clock.now + 9.5)
    r = reader(broker, start_timeout=10.0, gap_timeout=3.0)
    assert seqs(r.next_batch().events) == [0, 1, 2]


def test_reader_buffer_limit_reports_the_gap_at_once(broker, clock):
    for i in range(1, 6):
        broker.send("events", env(i))
    r = reader(broker, gap_timeout=100.0, max_buffered=3)
    start = clock.now
    with pytest.raises(StreamGapError, match="more than 3"):
        r.next_batch()
    assert clock.now - start < 1


def test_reader_not_started_names_topic_and_run(broker, clock):
    broker.produce("events", b"other", "someone-else")
    r = reader(broker, start_timeout=4.0)
    start = clock.now
    with pytest.raises(StreamNotStartedError) as info:
        r.next_batch()
    assert 4.0 <= clock.now - start < 5.0
    message = str(info.value)
    assert "'events'" in message and RUN in message and "never started" in message
    assert info.value.topic == "events" and info.value.trigger_run_id == RUN


def test_reader_not_started_when_the_topic_does_not_exist(broker, clock):
    r = reader(broker, topic="missing", start_timeout=2.0)
    with pytest.raises(StreamNotStartedError, match="does not exist"):
        r.next_batch()


def test_reader_waits_for_a_topic_that_appears(broker, clock):
    r = reader(broker, topic="later", start_timeout=10.0)
    original = r._sleep

    def sleep(seconds: float) -> None:
        original(seconds)
        if clock.now > 1002 and "later" not in broker.topics:
            broker.create("later", 2)
            broker.send("later", env(0, last=True))

    r._sleep = sleep  # type: ignore[method-assign]
    assert r.next_batch().finished


def test_reader_failed_stream_delivers_pages_then_raises(broker):
    for e in (env(0), env(1), env(2, error="503 from upstream")):
        broker.send("events", e)
    r = reader(broker)
    batch = r.next_batch()
    assert seqs(batch.events) == [0, 1] and not batch.finished
    with pytest.raises(StreamFailedError) as info:
        r.next_batch()
    assert (info.value.type, info.value.message) == ("HTTPError", "503 from upstream")
    assert info.value.sequence_index == 2 and info.value.envelope.is_last
    with pytest.raises(StreamFailedError):
        r.next_batch()  # stays failed
    assert r.ack(batch).next_sequence_index == 2


def test_reader_catches_up_to_a_retry_written_after_the_failure(broker):
    for e in (env(0), env(1, error="boom"), env(0, attempt=1), env(1, attempt=1, last=True)):
        broker.send("events", e)
    # the retry is not in the same fetch as the failure: a fetch is one consume call for the
    # first message plus one for what is already there, each returning at most one message here
    broker.per_consume = 1
    r = reader(broker)
    first = r.next_batch()
    assert seqs(first.events) == [0] and first.attempt == 0
    second = r.next_batch()
    assert second.restarted and second.attempt == 1 and seqs(second.events) == [0, 1] and second.finished


def test_reader_reports_a_restart_after_handing_out_a_lower_attempt(broker, clock):
    for e in stream(3)[:2]:
        broker.send("events", e)
    r = reader(broker, max_events=10)
    assert seqs(r.next_batch().events) == [0, 1]
    for e in (env(0, attempt=1), env(2, attempt=0), env(1, attempt=1, last=True)):
        broker.send("events", e)
    batch = r.next_batch()
    assert batch.restarted and batch.attempt == 1 and seqs(batch.events) == [0, 1] and batch.finished


def test_reader_rejects_poison_of_its_key_and_never_decodes_other_keys(broker):
    decoded: list[bytes] = []

    class SpyCodec:
        def decode(self, data: bytes) -> TriggerEventEnvelope:
            decoded.append(data)
            return TRIGGER_EVENT_CODEC.decode(data)

    partition = broker.send("events", env(0))
    broker.produce("events", b"not an envelope", RUN)
    broker.produce("events", None, RUN)  # tombstone
    other = env(0, run="other-run")
    broker.produce("events", TRIGGER_EVENT_CODEC.encode(other), "other-run", partition=partition)
    broker.produce("events", b"other poison", "other-run", partition=partition)
    broker.produce("events", TRIGGER_EVENT_CODEC.encode(other), RUN)  # our key, another run's body
    broker.send("events", env(1, last=True))
    r = reader(broker, codec=SpyCodec())
    batches = read_all(r)
    events = [e for b in batches for e in b.events]
    rejected = [rec for b in batches for rec in b.rejected]
    assert seqs(events) == [0, 1]
    assert [rec.raw for rec in rejected] == [b"not an envelope", None, TRIGGER_EVENT_CODEC.encode(other)]
    assert isinstance(rejected[0].error, UnknownFramingError)
    assert all(isinstance(rec.error, EnvelopeDecodeError) and rec.key == RUN.encode() for rec in rejected)
    assert "tombstone" in str(rejected[1].error) and "other-run" in str(rejected[2].error)
    assert b"other poison" not in decoded and len(decoded) == 4  # only records with our key


@pytest.mark.parametrize("enabled", [True, False])
def test_reader_decodes_with_the_collector_paused_and_leaves_it_as_found(broker, enabled):
    collector_on: list[bool] = []

    class SpyCodec:
        def decode(self, data: bytes) -> TriggerEventEnvelope:
            collector_on.append(gc.isenabled())
            return TRIGGER_EVENT_CODEC.decode(data)

    for e in stream(5):
        broker.send("events", e)
    was = gc.isenabled()
    if not enabled:
        gc.disable()
    try:
        r = reader(broker, codec=SpyCodec(), max_events=2)
        batches = [r.next_batch() for _ in range(3)]
        after = gc.isenabled()
    finally:
        if was:
            gc.enable()
    assert [seqs(b.events) for b in batches] == [[0, 1], [2, 3], [4]]
    assert collector_on == [False] * 5  # every record decoded with the collector off
    assert after is enabled


def test_a_batch_of_only_rejected_records_is_returned(broker):
    broker.produce("events", b"garbage", RUN)
    r = reader(broker)
    batch = r.next_batch()
    assert batch.events == [] and len(batch.rejected) == 1 and not batch.finished
    assert r.ack(batch).offset == 1  # dead-lettered: not read again on resume


def test_ack_checkpoint_never_passes_unacknowledged_events(broker):
    broker.produce("events", b"x", "noise", partition=sr.partition_for_key(RUN.encode(), 3))
    for e in stream(10):
        broker.send("events", e)
    r = reader(broker, max_events=3)
    assert r.checkpoint() is None
    b1, b2, b3 = r.next_batch(), r.next_batch(), r.next_batch()
    cp = r.ack(b1)
    assert cp == Checkpoint(attempt=0, next_sequence_index=3, offset=4, partition=r.partition)
    assert r.checkpoint() == cp
    assert r.ack(b3).next_sequence_index == 9  # acknowledges b2 too
    assert r.ack(b2) == r.checkpoint()  # an older batch changes nothing
    last = r.next_batch()
    assert r.ack(last) == Checkpoint(0, 10, 11, r.partition, finished=True)
    other = reader(broker)
    with pytest.raises(ValidationError):
        other.ack(b1)


def test_resume_from_a_checkpoint_seeks_and_skips_what_was_handled(broker):
    for e in stream(10):
        broker.send("events", e)
    first = reader(broker, max_events=4)
    handled = first.next_batch()
    first.next_batch()  # read, never acknowledged
    cp = first.ack(handled)
    first.close()
    second = reader(broker, checkpoint=cp, max_events=100)
    batch = second.next_batch()
    assert seqs(batch.events) == list(range(4, 10)) and batch.finished
    assert broker.consumers[-1].assignments[0] == [(cp.partition, cp.offset)]


def test_resume_reads_from_the_beginning_when_the_offset_is_gone(broker):
    partition = sr.partition_for_key(RUN.encode(), 3)
    for e in stream(8):
        broker.send("events", e)
    broker.low[("events", partition)] = 2  # retention removed offsets 0 and 1
    r = reader(broker, checkpoint=Checkpoint(attempt=0, next_sequence_index=5, offset=1, partition=partition))
    batch = r.next_batch()
    assert seqs(batch.events) == [5, 6, 7]
    assert broker.consumers[-1].assignments[0] == [(partition, 2)]


def test_resume_without_offset_scans_the_partition_and_skips_below_the_checkpoint(broker):
    for e in stream(6):
        broker.send("events", e)
    r = reader(broker, checkpoint=Checkpoint(attempt=0, next_sequence_index=4))
    assert seqs(r.next_batch().events) == [4, 5]


def test_resume_of_a_finished_stream_needs_no_consumer(broker):
    r = reader(broker, checkpoint=Checkpoint(attempt=0, next_sequence_index=3, offset=9, finished=True))
    batch = r.next_batch()
    assert batch.finished and batch.events == [] and broker.consumers == []
    r.close()


def test_group_commit_on_ack_and_resume_from_the_group(broker):
    for e in stream(7):
        broker.send("events", e)
    first = reader(broker, max_events=3, group_id="stream-g")
    first.ack(first.next_batch())
    first.next_batch()  # not acknowledged
    first.close()
    assert broker.consumers[0].config["group.id"] == "stream-g"
    (committed,) = broker.commits.values()
    assert committed.offset == 3 and json.loads(committed.metadata)["trigger_run_id"] == RUN
    second = reader(broker, max_events=100, group_id="stream-g")
    assert second.checkpoint() is None
    batch = second.next_batch()
    assert seqs(batch.events) == [3, 4, 5, 6]
    assert second.checkpoint() == Checkpoint(0, 3, 3, second.partition)


def test_group_commit_metadata_of_another_run_is_ignored(broker):
    partition = sr.partition_for_key(RUN.encode(), 3)
    metadata = json.dumps({"trigger_run_id": "other", "checkpoint": Checkpoint(0, 5, 5).to_json()})
    broker.commits[("g2", "events", partition)] = TopicPartition("events", partition, 5, metadata)
    for e in stream(2):
        broker.send("events", e)
    r = reader(broker, group_id="g2")
    assert seqs(r.next_batch().events) == [0, 1]


def test_scan_partitions_reads_every_partition_until_the_key_shows_up(broker):
    rng = random.Random(7)
    for i in range(30):
        broker.produce("events", b"noise", f"k{i}", partition=rng.randrange(3))
    for e in stream(5):
        broker.produce("events", TRIGGER_EVENT_CODEC.encode(e), RUN, partition=2)  # any partitioner
    r = reader(broker, scan_partitions=True)
    batch = r.next_batch()
    assert seqs(batch.events) == [0, 1, 2, 3, 4] and r.partition == 2
    assignments = broker.consumers[0].assignments
    assert [p for p, _ in assignments[0]] == [0, 1, 2] and [p for p, _ in assignments[-1]] == [2]
    assert batch.checkpoint.partition == 2


def test_an_explicit_partition_wins(broker):
    broker.produce("events", TRIGGER_EVENT_CODEC.encode(env(0, last=True)), RUN, partition=0)
    r = reader(broker, partition=0)
    assert r.next_batch().finished
    with pytest.raises(ConfigurationError, match="partition 5 does not exist"):
        reader(broker, partition=5).next_batch()


def test_a_non_transient_consumer_error_is_raised(broker):
    broker.send("events", env(0))
    r = reader(broker)
    log = broker.topics["events"][sr.partition_for_key(RUN.encode(), 3)]
    log.insert(
        0, (0.0, FakeMessage("events", 0, 0, None, None, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    )
    with pytest.raises(KafkaOperationError):
        r.next_batch()


def test_close_is_idempotent_never_raises_and_stops_reading(broker):
    broker.send("events", env(0))
    r = reader(broker)
    broker.consumers[0].fail_close = True
    with r:
        pass
    r.close()
    with pytest.raises(StreamReadError, match="closed"):
        r.next_batch()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topic": ""},
        {"trigger_run_id": ""},
        {"gap_timeout": 0},
        {"start_timeout": -1},
        {"poll_timeout": 0},
        {"max_events": 0},
        {"max_wait": -0.1},
        {"partition": -1},
        {"max_buffered": 0},
        {"checkpoint": {"attempt": 0}},
    ],
)
def test_reader_refuses_bad_settings(broker, kwargs):
    FakeReader.broker = broker
    args = {"topic": "events", "trigger_run_id": RUN}
    args.update({k: kwargs.pop(k) for k in list(kwargs) if k in args})
    read = {k: kwargs.pop(k) for k in list(kwargs) if k in READ_OPTIONS}
    with pytest.raises(ConfigurationError):
        FakeReader(
            {"bootstrap.servers": "x", "group.id": "g"},
            args["topic"],
            args["trigger_run_id"],
            options=ReadOptions(**read),
            **kwargs,
        )


def test_reader_consumer_config_forces_manual_commits_and_earliest(broker):
    FakeReader.broker = broker
    FakeReader(
        {"bootstrap.servers": "x", "enable.auto.commit": True, "auto.offset.reset": "latest"}, "events", RUN
    )
    config = broker.consumers[-1].config
    assert config["enable.auto.commit"] is False and config["enable.auto.offset.store"] is False
    assert config["auto.offset.reset"] == "earliest" and config["group.id"]
