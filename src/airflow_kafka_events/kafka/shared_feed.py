"""One owner's feed of a :class:`~airflow_kafka_events.kafka.shared_reader.SharedReader`.

A :class:`Feed` is what one owner (an asset watcher) reads through the process's shared reader:
the records routed to it and matched by it, and its *frontier* per partition (every record
below it was handed over or is not the owner's).  It buffers at most ``capacity`` untaken
records; on overflow, or when the owner rewinds, it falls back to a private catch-up reader
from what the owner took and merges into the shared reader again once it reaches the shared
frontier (see :mod:`~airflow_kafka_events.kafka.shared_reader`, *Joining behind, catching up*
and *Backpressure*).

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import Message

from airflow_kafka_events.kafka.assigned_reader import heals_by_retrying
from airflow_kafka_events.kafka.positions import Partition, positions_to_json

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.shared_reader import SharedReader

log = logging.getLogger(__name__)

__all__ = [
    "FEED_CAPACITY",
    "READ_BATCH",
    "FedRecord",
    "Feed",
    "Rebuilds",
]

#: Records a reader takes from its client in one call.
READ_BATCH = 500
#: Records a feed buffers for its owner before it falls back to reading on its own.
FEED_CAPACITY = 2000
#: Seconds before a failed reader (the shared one, or a feed's catch-up reader) reads on with a new
#: client, doubled after each failure in a row up to :data:`REBUILD_BACKOFF_MAX`.
REBUILD_BACKOFF = 1.0
REBUILD_BACKOFF_MAX = 30.0
#: Seconds a catch-up reader whose buffer is full keeps its slot (and its client) waiting for its
#: owner to take: longer, and it gives both up until there is room, so that owners that stopped
#: taking do not hold every slot while other feeds wait for one.
SLOT_HOLD = 1.0


def rebuild_delay(failures: int) -> float:
    """Seconds before a new client after ``failures`` failures in a row (1 s, doubling, at most 30 s)."""
    return float(min(REBUILD_BACKOFF * 2 ** (failures - 1), REBUILD_BACKOFF_MAX))


class Rebuilds:
    """The failures in a row of one reader (the shared one, or a feed's catch-up reader), and what
    follows each: a new client after :func:`rebuild_delay`, or the end of the reader."""

    def __init__(self) -> None:
        self.failures = 0

    def delay_after(self, exc: Exception) -> float | None:
        """Seconds before the reader reads on with a new client after ``exc``; ``None`` when ``exc``
        does not heal by retrying (see :func:`~airflow_kafka_events.kafka.assigned_reader.heals_by_retrying`)
        and the reader's feed(s) must fail with it."""
        if not heals_by_retrying(exc):
            return None
        self.failures += 1
        return rebuild_delay(self.failures)

    def reset(self) -> None:
        """The reader read: the next failure is the first in a row again."""
        self.failures = 0


class FedRecord(NamedTuple):
    """One record handed to a feed: the client's message and its decoding."""

    message: Message
    decoded: Any
    tp: Partition
    offset: int


async def _wait_until(event: asyncio.Event, deadline: float | None) -> bool:
    """Wait for ``event`` until ``deadline`` (``time.monotonic()``; ``None``: no limit); whether it
    was set in time.  Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that comes
    in the loop iteration its wait ends in, and an owner's stop would then never end."""
    if deadline is None:
        await event.wait()
        return True
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    try:
        async with asyncio.timeout(remaining):
            await event.wait()
    except TimeoutError:
        return False
    return True


def _coordinates(message: Message) -> tuple[Partition, int]:
    return (str(message.topic()), int(message.partition() or 0)), int(message.offset() or 0)


class Feed:
    """What one owner reads through a :class:`SharedReader`: its records and its frontier.

    Created by :meth:`SharedReader.subscribe`.  ``match(decoded)`` decides which records are the
    owner's (records the router does not send here are not even looked at).
    """

    def __init__(
        self,
        shared: SharedReader,
        starts: Mapping[Partition, int],
        *,
        keys: Sequence[Hashable],
        match: Callable[[Any], bool],
        capacity: int,
        name: str,
    ) -> None:
        self._shared = shared
        self.keys = tuple(keys)
        self.match = match
        self.capacity = max(1, capacity)
        self.name = name
        #: per partition, the next offset to look at for this feed (buffered or taken before it)
        self.next: dict[Partition, int] = {tp: int(o) for tp, o in starts.items()}
        #: per partition, the offset after what the owner took (where a fallback resumes)
        self.taken: dict[Partition, int] = dict(self.next)
        self.shared: set[Partition] = set()  # partitions fed by the shared reader
        self.behind: set[Partition] = set()  # partitions read by this feed's catch-up reader
        #: how often the feed fell back to reading on its own (overflow or rewind)
        self.fallbacks = 0
        self._records: list[FedRecord] = []
        self._frontier: dict[Partition, int] = {}
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._failure: BaseException | None = None
        self._catch_up: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ the owner's side
    async def take(
        self, max_records: int, timeout: float | None = None
    ) -> tuple[list[FedRecord], dict[Partition, int]]:
        """Wait for records, at most ``timeout`` seconds (no ``timeout``: at once if there is
        progress to return); return up to ``max_records`` records (offset order per partition) and
        the partitions whose frontier moved: every record below it was either returned (now or
        before) or is not this feed's.  A frontier is only returned for a partition with no
        buffered record left.

        Progress past other owners' records alone does not end a wait with a ``timeout``: the
        shared reader's frontier moves with every batch, and waking each owner for it would cost
        each batch one wake-up per feed (with 1,000 watchers, 35 ms of CPU per record at 20
        records a second); the owner gets that progress when its wait ends."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._catch_up_with_shared_frontier()
        while not self._records and self._failure is None:
            if deadline is None and self._frontier:
                break
            self._ready.clear()
            try:
                woken = await _wait_until(self._ready, deadline)
            finally:
                self._catch_up_with_shared_frontier()
            if not woken:
                break
        if self._failure is not None:
            raise self._failure
        records = self._records[:max_records]
        del self._records[:max_records]
        frontier = self._take_frontier()
        for record in records:
            self.taken[record.tp] = max(self.taken.get(record.tp, 0), record.offset + 1)
        self._room.set()
        return records, frontier

    def progress(self) -> dict[Partition, int]:
        """The frontier a :meth:`take` would return now with its records left buffered, without
        waiting: e.g. what a stopping owner read past (a partition with records still buffered has
        none)."""
        self._catch_up_with_shared_frontier()
        return self._take_frontier()

    def _take_frontier(self) -> dict[Partition, int]:
        left = {record.tp for record in self._records}
        frontier = {tp: o for tp, o in self._frontier.items() if tp not in left}
        for tp in frontier:
            del self._frontier[tp]
            self.taken[tp] = max(self.taken.get(tp, 0), frontier[tp])
        return frontier

    def rewind(self, tp: Partition, offset: int) -> None:
        """The owner must read ``tp`` again from ``offset`` (e.g. a record was not confirmed)."""
        self.taken[tp] = min(self.taken.get(tp, offset), offset)
        self._fall_back(f"{tp[0]}[{tp[1]}] is read again from {offset}")

    @property
    def buffered(self) -> int:
        return len(self._records)

    @property
    def catching_up(self) -> bool:
        return bool(self.behind)

    async def close(self) -> None:
        """Leave: the shared reader goes on for the other feeds (closed after the last one)."""
        if self._closed:
            return
        self._closed = True
        self._shared._detach(self)
        await self._stop_catch_up()
        self._records.clear()
        await self._shared.release()

    # ------------------------------------------------------------------ the shared reader's side
    def _wants(self, tp: Partition, offset: int, decoded: Any) -> bool:
        return tp in self.shared and offset >= self.next[tp] and self.match(decoded)

    def _offer(self, records: Sequence[FedRecord]) -> None:
        """This feed's records of a batch of the shared reader (how far the batch read is the shared
        reader's frontier, looked at when the owner takes: see :meth:`take`)."""
        if self._closed or not records:
            return
        self._records.extend(records)
        if len(self._records) > self.capacity:
            self._fall_back(f"its owner left {len(self._records)} records untaken")
            return
        self._ready.set()

    def _catch_up_with_shared_frontier(self) -> None:
        """The shared reader's frontier on the partitions it feeds this feed with is this feed's
        too: every record below it was handed to the feed or is not its owner's.  Looked at when
        the owner takes, not pushed with each batch: a batch then costs the feeds it has records
        for, not every feed (1,000 watchers of one topic, one record a batch)."""
        if self._failure is not None or self._closed:
            return  # detached from the shared reader: its frontier is no longer this feed's
        frontier = self._shared.frontier
        for tp in self.shared:
            moved = frontier.get(tp, 0)
            if moved > self.next[tp]:
                self.next[tp] = self._frontier[tp] = moved

    def _add_partition(self, tp: Partition, start: int) -> None:
        """A partition the topic gained: every record on it is new."""
        if tp in self.next:
            return
        self.next[tp] = self.taken[tp] = start
        self.shared.add(tp)
        self._frontier[tp] = start
        self._ready.set()

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._ready.set()

    # ------------------------------------------------------------------ falling back, catching up
    def _place(self) -> None:
        """Each partition on the shared reader if this feed is not behind its frontier there."""
        frontier = self._shared.frontier
        self.shared = {tp for tp, o in self.next.items() if o >= frontier.get(tp, 0)}
        self.behind = set(self.next) - self.shared
        if self.behind:
            self._start_catch_up()

    def _fall_back(self, why: str) -> None:
        """Drop what is buffered; read on its own from what the owner took, then merge again."""
        self.fallbacks += 1
        self._records.clear()
        self._frontier.clear()
        self.next = dict(self.taken)
        self.shared = set()
        self.behind = set(self.next)
        log.info(
            "%s reads on its own from %s until it reaches the shared reader (%s)",
            self.name,
            positions_to_json(self.next),
            why,
        )
        self._start_catch_up()
        self._room.set()

    def _start_catch_up(self) -> None:
        previous = self._catch_up
        if previous is not None and not previous.done():
            previous.cancel()  # its reader closes in its own ``finally``
        self._catch_up = asyncio.get_running_loop().create_task(
            self._run_catch_up(previous), name=f"catch-up[{self.name}]"
        )

    async def _stop_catch_up(self) -> None:
        task, self._catch_up = self._catch_up, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _run_catch_up(self, previous: asyncio.Task[None] | None) -> None:
        """Read the partitions this feed is behind on until each reaches the shared frontier, with
        a private reader that holds one of the shared reader's catch-up slots only while it reads.
        A failure that may pass starts a new reader from where this one got to (after a backoff,
        as the shared reader's, without a slot); one that does not fails this feed."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)  # one private client at a time
        shared = self._shared
        rebuilds = Rebuilds()
        while self.behind:
            await self._until_room()  # an owner that does not take holds no slot and no client
            try:
                async with shared.catch_up_slot():  # waits while the reader's cap of them run
                    shared.catch_ups_running += 1
                    shared.catch_ups_peak = max(shared.catch_ups_peak, shared.catch_ups_running)
                    try:
                        await self._read_behind()
                    finally:
                        shared.catch_ups_running -= 1
                rebuilds.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = rebuilds.delay_after(exc)
                if delay is None:
                    self._fail(exc)
                    return
                log.warning(
                    "%s: its catch-up reader failed (%s: %s); a new one reads on from %s in %.0fs",
                    self.name,
                    type(exc).__name__,
                    exc,
                    positions_to_json({tp: self.next[tp] for tp in self.behind}),
                    delay,
                )
                await asyncio.sleep(delay)
        log.info("%s caught up: it reads through the shared reader again", self.name)

    async def _until_room(self, timeout: float | None = None) -> bool:
        """Wait until the buffer has room, at most ``timeout`` seconds (``None``: no limit);
        whether it has."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._records) >= self.capacity:
            self._room.clear()
            if not await _wait_until(self._room, deadline):
                return False
        return True

    async def _read_behind(self) -> None:
        reader = self._shared._new_reader(f"{self.name}-catch-up")
        try:
            await reader.open()
            await reader.assign({tp: self.next[tp] for tp in self.behind})
            while self.behind:
                if not await self._until_room(SLOT_HOLD):
                    return  # the owner stopped taking: the slot goes to another feed meanwhile
                room = min(READ_BATCH, self.capacity - len(self._records))
                messages = await reader.poll_batch(room, self._shared.poll_timeout)
                if messages:
                    if self._shared.prepare is not None:
                        await self._shared.prepare(messages)
                    self._offer_own(messages)
                else:  # read to the end: step over offsets without a record (transaction markers)
                    self._skip_to(await reader.positions(sorted(self.behind)))
                merged = sorted(tp for tp in self.behind if self.next[tp] >= self._shared.frontier.get(tp, 0))
                if merged:
                    self.behind.difference_update(merged)
                    self.shared.update(merged)
                    if self.behind:
                        await reader.unassign(merged)
        finally:
            await reader.close()

    def _offer_own(self, messages: Sequence[Message]) -> None:
        decode = self._shared.decode
        for message in messages:
            tp, offset = _coordinates(message)
            if tp not in self.behind or offset < self.next[tp]:
                continue  # merged meanwhile, or read before a fallback
            decoded = decode(message)
            if self.match(decoded):
                self._records.append(FedRecord(message, decoded, tp, offset))
            self.next[tp] = self._frontier[tp] = offset + 1
        self._ready.set()

    def _skip_to(self, positions: Mapping[Partition, int]) -> None:
        for tp, position in positions.items():
            if tp in self.behind and position > self.next[tp]:
                self.next[tp] = self._frontier[tp] = position
                self._ready.set()
