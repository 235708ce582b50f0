"""The watcher stream's store policy: prompt for its own records, lazy for skipped ones, capped
and paced per triggerer; its in-flight window follows Airflow's subscriber queue size."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

from airflow_kafka_events.kafka.positions import PositionTracker
from airflow_kafka_events.kafka.shared_feed import FedRecord
from airflow_kafka_events.watcher import stream as asset_stream
from airflow_kafka_events.watcher.records import Ticket
from airflow_kafka_events.watcher.stream import WatcherLoad, WatcherStream

pytestmark = pytest.mark.unit

TP = ("events", 0)


@pytest.fixture(autouse=True)
def process_load(monkeypatch: pytest.MonkeyPatch) -> WatcherLoad:
    """A fresh process load per test: no store slot reserved by another test's streams."""
    load = WatcherLoad()
    monkeypatch.setattr(asset_stream, "PROCESS_LOAD", load)
    return load


class Store:
    def __init__(self) -> None:
        self.writes: list[Any] = []

    async def aget(self, key: str, default: Any = None) -> Any:
        return default

    async def aset(self, key: str, value: Any) -> None:
        self.writes.append(value)


def watcher_stream(store: Store, load: WatcherLoad | None = None) -> WatcherStream:
    """The stream of a watcher of ``events`` reading from offset 0 of ``TP``, storing into ``store``
    (paced by ``load``; default: the process's)."""
    stream = WatcherStream(
        topics=["events"],
        kafka_config_id="kafka_watcher",
        asset_uri="s3://a",
        asset_name=None,
        store=store,
        load=load,
    )
    stream._tracker = PositionTracker({TP: 0})
    return stream


def test_skipped_records_are_stored_lazily_own_records_promptly(monkeypatch):
    store = Store()
    stream = watcher_stream(store)

    async def scenario() -> None:
        await stream.flush(force=True)
        assert len(store.writes) == 1
        stream._tracker.read(TP, 0)  # another asset's record: skipped
        stream._last_flush -= 2.0  # two seconds later
        await stream.flush()
        assert len(store.writes) == 1  # not yet: only skipped records moved it
        stream._last_flush -= asset_stream.SKIP_FLUSH_INTERVAL
        await stream.flush()
        assert len(store.writes) == 2 and store.writes[-1]["positions"] == {"events": {"0": 1}}
        stream._tracker.hand_on(TP, 1, None)
        stream._urgent = bool(stream._tracker.finish(TP, [1]))  # what advance() does
        stream._last_flush -= 1.5
        await stream.flush()
        assert len(store.writes) == 3 and store.writes[-1]["positions"] == {"events": {"0": 2}}

    asyncio.run(scenario())


def test_the_store_interval_stretches_with_the_streams_of_the_process(monkeypatch):
    stream = watcher_stream(Store())
    monkeypatch.setattr(asset_stream.PROCESS_LOAD, "streams_open", 6)
    assert stream.store_interval() == asset_stream.FLUSH_INTERVAL  # up to 10 watchers: 1 s
    monkeypatch.setattr(asset_stream.PROCESS_LOAD, "streams_open", 100)
    assert stream.store_interval() == pytest.approx(10 * asset_stream.FLUSH_INTERVAL)


def test_the_store_interval_of_skipped_records_stretches_with_the_streams_of_the_process(monkeypatch):
    stream = watcher_stream(Store())
    monkeypatch.setattr(asset_stream.PROCESS_LOAD, "streams_open", 60)
    assert stream.skip_store_interval() == asset_stream.SKIP_FLUSH_INTERVAL  # up to 60 watchers: 30 s
    monkeypatch.setattr(asset_stream.PROCESS_LOAD, "streams_open", 1000)
    assert stream.skip_store_interval() == pytest.approx(1000 / asset_stream.SKIP_STORES_PER_SECOND)


def test_skipped_records_of_many_watchers_are_stored_at_the_stretched_interval(monkeypatch):
    monkeypatch.setattr(asset_stream.PROCESS_LOAD, "streams_open", 1000)
    monkeypatch.setattr(asset_stream.PROCESS_LOAD, "backlog", 0)
    store = Store()
    stream = watcher_stream(store)

    async def scenario() -> None:
        await stream.flush(force=True)
        stream._tracker.read(TP, 0)  # another asset's record: skipped
        stream._last_flush -= asset_stream.SKIP_FLUSH_INTERVAL + 1
        await stream.flush()
        assert len(store.writes) == 1  # 30 s are not enough with 1,000 watchers
        stream._last_flush -= stream.skip_store_interval()
        await stream.flush()
        assert len(store.writes) == 2 and store.writes[-1]["positions"] == {"events": {"0": 1}}

    asyncio.run(scenario())


def test_records_awaiting_airflow_make_the_stores_go_at_the_busy_pace():
    clock = Clock()
    load = WatcherLoad(clock=clock)
    quick, slow = 1 / asset_stream.STORES_PER_SECOND, 1 / asset_stream.BUSY_STORES_PER_SECOND
    assert not load.busy() and load.store_spacing() == pytest.approx(quick)
    load.add_backlog(3)  # a burst's records await Airflow's confirmation
    assert load.busy() and load.store_spacing() == pytest.approx(slow)
    load.add_backlog(-3)  # confirmed: Airflow was just busy, a lull is not the end of the burst
    clock.now += asset_stream.BUSY_LINGER - 0.1
    assert load.busy() and load.store_spacing() == pytest.approx(slow)
    clock.now += 0.2
    assert not load.busy() and load.store_spacing() == pytest.approx(quick)


def test_a_watchers_backlog_counts_in_its_process_load_until_it_closes():
    store, other = Store(), Store()
    stream, busy = watcher_stream(store), watcher_stream(other)

    async def scenario() -> None:
        for offset in range(5):  # another watcher's records await Airflow
            busy._tracker.hand_on(TP, offset, None)
        busy._request_flush()  # counts its backlog
        assert asset_stream.PROCESS_LOAD.backlog == 5 and asset_stream.PROCESS_LOAD.busy()
        busy._tracker.finish(TP, range(2))
        busy._request_flush()
        assert asset_stream.PROCESS_LOAD.backlog == 3
        await busy.aclose()
        assert asset_stream.PROCESS_LOAD.backlog == 0  # a closed stream leaves nothing counted
        await stream.aclose()

    asyncio.run(scenario())


def test_the_in_flight_window_follows_airflows_subscriber_queue(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRIGGERER__SHARED_STREAM_SUBSCRIBER_QUEUE_SIZE", "4096")
    assert watcher_stream(Store()).max_pending == int(4096 * asset_stream.PENDING_SHARE)
    monkeypatch.delenv("AIRFLOW__TRIGGERER__SHARED_STREAM_SUBSCRIBER_QUEUE_SIZE")
    assert watcher_stream(Store()).max_pending == int(1024 * asset_stream.PENDING_SHARE)


class SlowStore(Store):
    """A store whose writes wait until released (the triggerer's supervisor busy persisting)."""

    release: asyncio.Event

    async def aset(self, key: str, value: Any) -> None:
        self.writes.append(value)
        await self.release.wait()


def test_a_slow_store_runs_beside_the_stream_one_at_a_time():
    store = SlowStore()
    stream = watcher_stream(store)

    async def scenario() -> None:
        store.release = asyncio.Event()
        stream._tracker.read(TP, 0)
        stream._last_flush -= asset_stream.SKIP_FLUSH_INTERVAL  # due
        stream._request_flush()  # returns at once: reading goes on while the store waits
        await asyncio.sleep(0)
        assert len(store.writes) == 1 and stream._flush_task is not None and not stream._flush_task.done()
        stream._tracker.hand_on(TP, 1, None)
        stream._urgent = bool(stream._tracker.finish(TP, [1]))  # finished while the store is under way
        stream._request_flush()
        await asyncio.sleep(0)
        assert len(store.writes) == 1  # one store at a time
        store.release.set()
        await stream._flush_task
        assert stream._urgent and stream._tracker.changed_since_stored()  # still to be stored, promptly
        stream._last_flush -= stream.store_interval()
        stream._request_flush()
        await stream._flush_task
        assert store.writes[-1]["positions"] == {"events": {"0": 2}}

    asyncio.run(scenario())


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sleeper:
    """``asyncio.sleep`` for a :class:`Clock`: moves the clock instead of waiting."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def __call__(self, seconds: float) -> None:
        self.clock.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def far_slot(monkeypatch: pytest.MonkeyPatch) -> WatcherLoad:
    """A process load, busy with Airflow's work, whose clock stands still and whose next store slot
    is 1,000 s away."""
    monkeypatch.setattr(asset_stream, "BUSY_STORES_PER_SECOND", 0.001)
    load = WatcherLoad(clock=Clock())
    load.add_backlog(1)
    asyncio.run(load.store_slot())  # another watcher's store just went
    return load


def test_the_process_hands_out_store_slots_in_turn_at_the_paced_rate():
    clock = Clock()
    load = WatcherLoad(clock=clock, sleep=Sleeper(clock))
    quick, slow = 1 / asset_stream.STORES_PER_SECOND, 1 / asset_stream.BUSY_STORES_PER_SECOND
    granted: list[tuple[int, float]] = []

    async def store(n: int) -> None:
        await load.store_slot()
        granted.append((n, clock.now))

    async def scenario() -> None:
        start = clock.now
        await asyncio.gather(*(store(n) for n in range(5)))  # five stores due at the same moment
        assert [n for n, _ in granted] == [0, 1, 2, 3, 4]  # first come, first served
        assert [at - start for _, at in granted] == pytest.approx([0, quick, 2 * quick, 3 * quick, 4 * quick])
        granted.clear()
        clock.now += 10 * quick  # a quiet while: the next store goes at once
        await store(5)
        assert granted[-1][1] == clock.now
        load.add_backlog(1)  # Airflow is persisting the watchers' events: the slots are further apart
        before = clock.now
        await store(6)
        assert granted[-1][1] - before == pytest.approx(slow)

    asyncio.run(scenario())


def test_a_store_waiting_at_the_busy_pace_goes_soon_after_airflow_is_idle(monkeypatch):
    monkeypatch.setattr(asset_stream, "BUSY_STORES_PER_SECOND", 0.01)  # busy: slots 100 s apart
    clock = Clock()
    load = WatcherLoad(clock=clock, sleep=Sleeper(clock))
    load.add_backlog(1)

    async def scenario() -> None:
        await load.store_slot()  # another watcher's store just went
        load.add_backlog(-1)  # the last record confirmed: the busy pace lasts the lull after it
        started = clock.now
        await load.store_slot()
        assert clock.now - started <= asset_stream.BUSY_LINGER + asset_stream.SLOT_RECHECK  # not 100 s

    asyncio.run(scenario())


def _confirm(stream: WatcherStream, offset: int) -> None:
    """One of the watcher's own records handed on and confirmed (what advance() does)."""
    stream._tracker.hand_on(TP, offset, None)
    stream._urgent = bool(stream._tracker.finish(TP, [offset])) or stream._urgent


class TimedStore(Store):
    """A store that notes when each write reached it."""

    def __init__(self, times: list[float]) -> None:
        super().__init__()
        self.times = times

    async def aset(self, key: str, value: Any) -> None:
        self.times.append(time.monotonic())
        await super().aset(key, value)


def test_many_watchers_due_at_once_store_at_the_paced_rate(monkeypatch):
    monkeypatch.setattr(asset_stream, "STORES_PER_SECOND", 100.0)  # 10 ms apart: a short test
    spacing = 1 / asset_stream.STORES_PER_SECOND
    times: list[float] = []
    streams = [watcher_stream(TimedStore(times)) for _ in range(20)]

    async def scenario() -> float:
        for stream in streams:
            _confirm(stream, 0)
            stream._last_flush -= stream.store_interval()  # every one due: a burst just confirmed
        started = time.monotonic()
        for stream in streams:
            stream._request_flush()
        await asyncio.gather(*(stream._flush_task for stream in streams if stream._flush_task is not None))
        return started

    started = asyncio.run(scenario())
    assert len(times) == len(streams)  # each stored once
    for k, at in enumerate(sorted(times)):  # the k-th store no earlier than its slot, k spacings on
        assert at - started >= k * spacing - 1e-3, (k, at - started)


def test_a_store_waiting_for_its_slot_takes_the_freshest_state():
    load = WatcherLoad()
    store = Store()
    stream = watcher_stream(store, load)

    async def scenario() -> None:
        await load.store_slot()  # another watcher's store just went: this one's slot is 0.1 s away
        _confirm(stream, 0)
        stream._last_flush -= stream.store_interval()
        stream._request_flush()
        await asyncio.sleep(0)
        assert stream._flush_task is not None and not stream._flush_task.done() and store.writes == []
        _confirm(stream, 1)  # confirmed while the store waits for its slot
        await stream._flush_task
        assert store.writes[-1]["positions"] == {"events": {"0": 2}}

    asyncio.run(scenario())


def test_a_forced_store_is_not_paced(far_slot):
    store = Store()
    stream = watcher_stream(store, far_slot)

    async def scenario() -> None:
        _confirm(stream, 0)
        await asyncio.wait_for(stream.flush(force=True), timeout=5.0)
        assert store.writes[-1]["positions"] == {"events": {"0": 1}}

    asyncio.run(scenario())


@pytest.mark.parametrize("started", [True, False], ids=["waiting-for-its-slot", "not-started-yet"])
def test_closing_a_stream_does_not_wait_for_its_pending_store_slot(far_slot, started):
    store = Store()
    stream = watcher_stream(store, far_slot)

    async def scenario() -> None:
        _confirm(stream, 0)
        stream._last_flush -= stream.store_interval()
        stream._request_flush()
        if started:
            await asyncio.sleep(0)
        assert stream._flush_task is not None and not stream._flush_task.done()
        await asyncio.wait_for(stream._final_flush(), timeout=5.0)  # the last store: at once
        assert stream._flush_task.cancelled()
        assert len(store.writes) == 1 and store.writes[0]["positions"] == {"events": {"0": 1}}
        assert store.writes[0]["stopped"] is True

    asyncio.run(scenario())


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def key(self) -> bytes:
        return b"s3://a"

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


class Feed:
    """One batch of records 0..4 on TP (frontier 5), then nothing; records every rewind."""

    def __init__(self) -> None:
        self.rewinds: list[tuple[Any, int]] = []
        self.batches = [
            ([FedRecord(Message(o), ValueError("poison"), TP, o) for o in range(5)], {TP: 5}),
        ]

    async def take(self, room: int, timeout: float) -> tuple[list[Any], dict[Any, int]]:
        if self.batches:
            return self.batches.pop(0)
        await asyncio.sleep(min(timeout, 0.05))
        return [], {}

    def rewind(self, tp: Any, offset: int) -> None:
        self.rewinds.append((tp, offset))


def _item(offset: int, *, acked: int = 1, failed: int = 0) -> AdvanceItem:
    return AdvanceItem(
        broker_payload=asset_stream.KafkaBrokerPayload(topic=TP[0], partition=TP[1], offset=offset),
        outcome=AdvanceOutcome(acked=acked, failed=failed),
    )


def test_a_rewind_while_a_batch_is_handed_on_drops_the_rest_and_never_stores_past_it():
    store = Store()
    stream = watcher_stream(store)
    feed = Feed()

    async def opened() -> tuple[Feed, PositionTracker]:
        stream._feed = feed  # type: ignore[assignment]
        return feed, stream._tracker

    stream._open = opened  # type: ignore[method-assign]

    async def scenario() -> list[int]:
        handed: list[int] = []
        records = stream.open_stream()
        while True:  # pull until the stream has nothing more to hand on (the feed then only waits)
            try:
                _record, payload = await asyncio.wait_for(records.__anext__(), timeout=1.0)
            except TimeoutError:
                break
            handed.append(payload.offset)
            if payload.offset == 1:
                # Airflow resolves 0 (confirmed) and 1 (failed) while the generator waits at its yield
                await stream.advance([_item(0), _item(1, acked=0, failed=1)])
        await records.aclose()
        return handed

    handed = asyncio.run(scenario())
    assert handed == [0, 1]
    assert feed.rewinds == [(TP, 1)]
    # records 2..4 of the stale batch were not handed on, the frontier 5 not applied: the position is 1
    assert stream._tracker.durable() == {TP: 1}


def test_records_confirmed_after_a_failed_one_are_finished_so_the_reread_drops_them():
    stream = watcher_stream(Store())
    feed = Feed()
    stream._feed = feed  # type: ignore[assignment]
    tickets = {o: Ticket() for o in range(3)}
    for offset, ticket in tickets.items():
        ticket.accepted_key = f"key-{offset}"
        stream._tracker.hand_on(TP, offset, ticket)

    async def scenario() -> None:
        await stream.advance([_item(0), _item(1, acked=0, failed=1), _item(2)])

    asyncio.run(scenario())
    assert feed.rewinds == [(TP, 1)]
    assert "key-0" in stream._keys and "key-2" in stream._keys and "key-1" not in stream._keys
    assert stream._tracker.durable() == {TP: 1}


class FailingStore(Store):
    """A store that stops answering (the supervisor gone) once ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    async def aset(self, key: str, value: Any) -> None:
        if self.fail:
            raise TimeoutError("the supervisor does not answer")
        await super().aset(key, value)


def test_records_confirmed_after_the_last_store_stay_in_doubt_at_a_clean_stop():
    """A confirmation the shared stream reports while the triggerer stops may be of an event Airflow
    dropped (its group evicted, nothing bound it): the mark never passes a fired record confirmed
    after the last store the supervisor answered, nor counts its key among the repeats; records
    confirmed before that store are done."""
    store = FailingStore()
    stream = watcher_stream(store)
    stream._feed = Feed()  # type: ignore[assignment]
    tickets = {o: Ticket(seq=o, partition=TP, offset=o, accepted_key=f"key-{o}") for o in range(4)}
    for offset, ticket in tickets.items():
        stream._tracker.hand_on(TP, offset, ticket)

    async def scenario() -> None:
        await stream.advance([_item(0)])
        await stream.flush(force=True)  # answered: record 0 is done
        store.fail = True
        await stream.advance([_item(1), _item(2)])  # confirmed after the last store
        await stream.flush(force=True)  # not answered

    asyncio.run(scenario())
    state, in_doubt, unstored = stream._stop_state()
    assert state["positions"] == {"events": {"0": 1}}
    assert "key-0" in state["seen"] and "key-1" not in state["seen"] and "key-2" not in state["seen"]
    assert in_doubt == [(1, "key-1"), (2, "key-2"), (3, "key-3")] and unstored == 2
    assert stream._tracker.durable() == {TP: 3}  # the stream itself moves on (stores while it runs)


def test_the_last_store_of_a_stop_without_a_mark_never_passes_a_record_confirmed_after_the_last_store():
    """When no mark can be written the closing watcher stores its state through the supervisor (if it
    still answers): that store keeps the records confirmed after the last store unread too, and does
    not call the stop clean (the next start handles them as after a crash: rechecked, or fired again)."""
    store = FailingStore()
    stream = watcher_stream(store)
    stream._feed = Feed()  # type: ignore[assignment]
    for offset in range(2):
        ticket = Ticket(seq=offset, partition=TP, offset=offset, accepted_key=f"key-{offset}")
        stream._tracker.hand_on(TP, offset, ticket)

    async def scenario() -> None:
        await stream.advance([_item(0)])
        await stream.flush(force=True)
        store.fail = True
        await stream.advance([_item(1)])  # confirmed after the last store
        await stream.flush(force=True)  # not answered
        store.fail = False
        await stream.flush(force=True, stopping=True)

    asyncio.run(scenario())
    last = store.writes[-1]
    assert (
        last["positions"] == {"events": {"0": 1}} and "key-1" not in last["seen"] and "key-0" in last["seen"]
    )
    assert last["stopped"] is False
