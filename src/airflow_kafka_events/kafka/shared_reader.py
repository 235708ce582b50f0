"""One reader per process and topic set, feeding many owners that each keep their own position.

Each record is fetched and decoded once per process and handed to the feeds that want it: a
:class:`SharedReader` serves every asset watcher of its topics in one triggerer through a
routing index (a record about asset A reaches A's watcher, not the 99 others).  Each owner keeps
its OWN position: a feed reports, with its records, how far every partition was read for it
(its *frontier*), and the owner stores what it accepted and finished.  Nothing about a position
is shared.

Joining behind, catching up
    The shared reader reads from where its first feed started.  A feed that starts behind its
    frontier on a partition (a late joiner, a restarted or moved watcher, a rewind after an
    unconfirmed record) reads that partition with a private catch-up reader from its own
    position; once its position reaches the shared frontier of the partition it merges into the
    shared reader there (records between the frontier and its position are not handed to it
    twice) and the private reader is closed when no partition is left behind.  A feed never
    misses a record between its position and the frontier.

Backpressure (bounded memory)
    A feed buffers at most ``capacity`` records its owner has not taken yet (plus one read
    batch).  A slow owner does not slow the shared reader: when its buffer overflows, the
    feed drops what it buffered and falls back to catch-up from the last record its owner
    took; its private reader then goes at the owner's pace (it waits while the buffer is full)
    and merges back when it has caught up.  So memory is bounded per feed, and one slow watcher
    never delays the others.

Scoped readers
    A reader made with ``whole_topics=False`` reads only the partitions its feeds start on (and
    looks for no new partition): each feed then follows only the partitions it subscribed with
    (e.g. a stream, which lives on one partition).

Catch-up clients
    With ``max_catch_up`` a reader runs at most that many catch-up readers at once; a feed behind
    beyond that waits for a slot (it is not fed meanwhile, and misses nothing: it reads from its
    own position once it has one).  A catch-up reader whose buffer stays full for
    :data:`~airflow_kafka_events.kafka.shared_feed.SLOT_HOLD` (its owner stopped taking) closes and
    gives its slot up until its owner takes again.

Failures
    A failure that may pass (a broker down or restarting, a metadata request timing out, a
    client call or a ``prepare`` that raised) does not reach the feeds: the reader logs it, waits
    (:data:`~airflow_kafka_events.kafka.shared_feed.REBUILD_BACKOFF`, doubling up to
    :data:`~airflow_kafka_events.kafka.shared_feed.REBUILD_BACKOFF_MAX`), closes its client and
    reads on with a new one from its frontier (nothing is skipped: the frontier only moves past
    records handed out).  librdkafka rides out a broker outage by itself, so a broker that stops
    and comes back costs no rebuild at all.  A problem with one feed or one record stays there: a
    record that cannot be decoded (``decode`` raised) reaches every feed as the exception, for
    each ``match`` to judge; a feed whose ``match`` or buffer raises is failed alone.  Only what
    does not heal by retrying (see
    :func:`~airflow_kafka_events.kafka.assigned_reader.heals_by_retrying`: credentials, TLS or
    authorization refused, a fatal librdkafka error, a topic deleted, seen missing on two looks
    at the metadata :data:`TOPIC_GONE_CONFIRM` seconds apart) fails every feed, with that error.

Every client call runs on the owning reader's own thread
(:class:`~airflow_kafka_events.kafka.client_executor.ClientExecutor` inside
:class:`~airflow_kafka_events.kafka.assigned_reader.AssignedReader`).  The registry
(:data:`SHARED_READERS`) holds no client until a feed subscribes, and a reader is closed when its
last feed leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import Message

from airflow_kafka_events.errors import TopicError
from airflow_kafka_events.kafka.assigned_reader import AssignedReader, heals_by_retrying
from airflow_kafka_events.kafka.positions import Partition, positions_to_json
from airflow_kafka_events.kafka.settings import config_key
from airflow_kafka_events.kafka.shared_feed import (
    FEED_CAPACITY,
    READ_BATCH,
    FedRecord,
    Feed,
    Rebuilds,
    _coordinates,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "SHARED_READERS",
    "SharedReader",
    "SharedReaders",
]

#: Longest wait of one poll (a reader per process and topic set can afford to wake up often).
MAX_POLL_TIMEOUT = 0.25
#: Seconds between two looks at the topics' metadata while idle: for partitions a topic gained
#: (a reader of whole topics) and for a topic deleted (every reader).
PARTITION_REFRESH_INTERVAL = 30.0
#: Seconds a topic must stay missing from the metadata (two looks at least this far apart) before
#: the reader calls it deleted and fails its feeds (a restarting broker may not list it for a moment).
TOPIC_GONE_CONFIRM = 10.0

#: ``decode(message)``: what the feeds' ``match`` and the router see (computed once per record).
Decode = Callable[[Message], Any]
#: ``prepare(messages)``: awaited before a batch is decoded, e.g. to fetch what ``decode`` needs
#: without blocking the event loop (a schema registry's writer schemas, in a thread).
Prepare = Callable[[Sequence[Message]], Awaitable[None]]
#: ``route(decoded)``: the routing keys of a decoded record; ``None``: every feed gets it.
Route = Callable[[Any], Iterable[Hashable] | None]
#: ``on_read(client, topic, partition, offset)``: called with the last record read per partition
#: and batch (e.g. a lag gauge from the client's cached watermarks).
OnRead = Callable[[Any, str, int, int], None]
#: ``make_on_read()``: the ``on_read`` of a reader, called only when a new reader is made.
MakeOnRead = Callable[[], OnRead]


# --------------------------------------------------------------------------- the shared reader
class SharedReader:
    """One :class:`AssignedReader` over ``topics``, feeding every subscribed :class:`Feed`.

    Get one from :meth:`SharedReaders.acquire`; subscribe with :meth:`subscribe`.
    """

    def __init__(
        self,
        registry: SharedReaders,
        key: Hashable,
        config: Mapping[str, Any],
        topics: Sequence[str],
        *,
        name: str,
        decode: Decode,
        route: Route,
        poll_timeout: float,
        on_read: OnRead | None = None,
        prepare: Prepare | None = None,
        whole_topics: bool = True,
        max_catch_up: int | None = None,
        kind: str = "",
    ) -> None:
        self._registry = registry
        self.key = key
        self.kind = kind
        self.config = dict(config)
        self.topics = sorted(topics)
        self.name = name
        self.decode = decode
        self.prepare = prepare
        self._route = route
        #: seconds a poll of the shared reader (or a catch-up reader) waits: short, because a
        #: feed's client calls (e.g. where a new watcher starts) queue behind it on its thread
        self.poll_timeout = min(poll_timeout, MAX_POLL_TIMEOUT)
        self._on_read = on_read
        #: every partition of the topics (``False``: only those its feeds subscribed with)
        self.whole_topics = whole_topics
        #: catch-up readers running at most at once (``None``: no limit)
        self.max_catch_up = max_catch_up
        self._catch_up_slots = None if max_catch_up is None else asyncio.Semaphore(max(1, max_catch_up))
        self.reader = self._new_reader(name)
        #: per partition, the offset after the last record the shared reader handed out
        self.frontier: dict[Partition, int] = {}
        #: counters for tests and benchmarks
        self.records_read = 0
        self.catch_up_readers = 0  # made so far
        self.catch_ups_running = 0  # open now (at most ``max_catch_up``)
        self.catch_ups_peak = 0
        self.rebuilds = 0  # new clients after a failure that may pass
        self._feeds: list[Feed] = []
        self._index: dict[Hashable, list[Feed]] = {}
        self._users = 0
        self._lock = asyncio.Lock()  # subscribing (the first feed places the reader)
        self._open_lock = asyncio.Lock()
        self._opened = False
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._next_refresh = 0.0
        #: when a look at the metadata first found a topic missing (``None``: every topic was there)
        self._topic_missing_since: float | None = None
        #: metadata and start-offset requests in flight, answering every feed that asks meanwhile
        self._asking: dict[Hashable, asyncio.Future[Any]] = {}
        #: requests made to the client for feeds starting (for tests and benchmarks)
        self.start_requests = 0

    def _new_reader(self, name: str) -> AssignedReader:
        if name != self.name:
            self.catch_up_readers += 1
        return AssignedReader(self.config, self.topics, name=name)

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    @property
    def feeds_behind(self) -> int:
        """Feeds reading (or waiting to read) a partition with a catch-up reader."""
        return sum(1 for feed in self._feeds if feed.catching_up)

    # ------------------------------------------------------------------ opening, subscribing
    async def _open(self) -> None:
        async with self._open_lock:
            if not self._opened:
                await self.reader.open()
                self._opened = True

    async def _ask_once(self, key: Hashable, ask: Callable[[], Awaitable[T]]) -> T:
        """``ask()``'s answer, from one request for every caller that asks while it is in flight.

        Many watchers start at once (a triggerer's start: up to its capacity, 1,000 by default);
        each asking the client alone queued one request per watcher on the reader's one thread,
        where, once the first feed reads, each waits behind the connection's pending fetch (up to
        ``fetch.wait.max.ms``): minutes before the last watcher started.  A caller cancelled
        leaves the request to the others."""
        future = self._asking.get(key)
        if future is None:
            self.start_requests += 1
            future = asyncio.ensure_future(ask())
            self._asking[key] = future
            future.add_done_callback(functools.partial(self._answered, key))
        return await asyncio.shield(future)

    def _answered(self, key: Hashable, future: asyncio.Future[Any]) -> None:
        if self._asking.get(key) is future:
            del self._asking[key]
        if not future.cancelled():
            future.exception()  # looked at: every caller may have gone

    async def partitions(self) -> list[Partition]:
        """The partitions a feed must start on: those read already, else the topics' metadata (one
        request for the feeds asking at the same time)."""
        self._raise_if_failed()
        await self._open()
        if self.frontier:
            return sorted(self.frontier)
        return list(await self._ask_once("partitions", self.reader.partitions))

    async def topic_partitions(self) -> list[Partition]:
        """Every partition of the topics, from their metadata (raises :class:`TopicError` naming a
        missing topic)."""
        self._raise_if_failed()
        await self._open()
        return await self.reader.partitions()

    def catch_up_slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held by a feed while its catch-up reader exists (waits while ``max_catch_up`` are)."""
        if self._catch_up_slots is None:
            return contextlib.nullcontext()
        return self._catch_up_slots

    async def start_offsets(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        """Where partitions without a stored position start (see :class:`AssignedReader`).

        Not serialized with other feeds' calls, and feeds asking for the same partitions while a
        request is in flight share its answer (taken after the first of them asked: a new feed
        starting at ``latest`` may also get a record produced while it started)."""
        if not partitions:
            return {}
        await self._open()
        wanted = sorted(partitions)
        found = await self._ask_once(("offsets", *wanted), lambda: self.reader.policy_offsets(wanted))
        return dict(found)

    async def subscribe(
        self,
        starts: Mapping[Partition, int],
        *,
        keys: Sequence[Hashable],
        match: Callable[[Any], bool],
        capacity: int = FEED_CAPACITY,
        name: str,
    ) -> Feed:
        """A feed reading from ``starts`` (every partition of the topics; of a scoped reader, the
        partitions the feed follows).  ``keys`` are the routing keys whose records it gets (see
        ``route``); ``match`` has the last word."""
        async with self._lock:
            self._raise_if_failed()
            await self._open()
            if not self.frontier:  # the first feed: the shared reader starts where it starts
                await self.reader.assign(starts)
                self.frontier = dict(starts)
                self._next_refresh = time.monotonic() + PARTITION_REFRESH_INTERVAL
                self._task = asyncio.get_running_loop().create_task(self._run(), name=f"reader[{self.name}]")
            unknown = {tp: o for tp, o in starts.items() if tp not in self.frontier}
            if unknown:  # partitions this reader does not read yet: from the feed's start
                await self.reader.assign(unknown)
                self.frontier.update(unknown)
            full = {tp: 0 for tp in self.frontier} if self.whole_topics else {}
            full.update(starts)  # a partition of the topics the feed did not know: all new
            feed = Feed(self, full, keys=keys, match=match, capacity=capacity, name=name)
            self._feeds.append(feed)
            for key in feed.keys:
                self._index.setdefault(key, []).append(feed)
            feed._place()
            return feed

    def _detach(self, feed: Feed) -> None:
        if feed in self._feeds:
            self._feeds.remove(feed)
        for key in feed.keys:
            bucket = self._index.get(key)
            if bucket is not None and feed in bucket:
                bucket.remove(feed)
                if not bucket:
                    del self._index[key]

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    # ------------------------------------------------------------------ reading
    async def _run(self) -> None:
        rebuilds = Rebuilds()
        while True:
            try:
                messages = await self.reader.poll_batch(READ_BATCH, self.poll_timeout)
                if messages:
                    if self.prepare is not None:
                        await self.prepare(messages)
                    self._dispatch(messages)
                elif time.monotonic() >= self._next_refresh:
                    await self._look_at_topics()
                rebuilds.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = rebuilds.delay_after(exc)
                if delay is None:
                    self._fail(exc)
                    return
                await self._rebuild(exc, delay)

    async def _rebuild(self, cause: BaseException, delay: float) -> None:
        """Read on with a new client from the frontier ``delay`` seconds after a failure that may
        pass (see the module doc, *Failures*); the feeds keep waiting meanwhile."""
        log.warning(
            "%s failed (%s: %s); its %d feed(s) keep waiting and it reads on with a new client in %.0fs",
            self.name,
            type(cause).__name__,
            cause,
            len(self._feeds),
            delay,
        )
        await asyncio.sleep(delay)
        async with self._lock:  # a feed subscribing meanwhile assigns its partitions to the new client
            new = self._new_reader(self.name)
            try:
                await new.open()
                await new.assign(dict(self.frontier))
            except BaseException:
                await new.close()
                raise
            old, self.reader = self.reader, new
            self.rebuilds += 1
        log.info("%s reads on from %s with a new client", self.name, positions_to_json(self.frontier))
        try:
            await old.close()
        except Exception as exc:  # the old client is dropped all the same
            log.warning("%s: closing the failed client failed too (%s)", self.name, exc)

    def _dispatch(self, messages: Sequence[Message]) -> None:
        """Move the frontier past ``messages`` and hand each record to the feeds that want it (a
        feed looks at the frontier when its owner takes, so a batch costs only the feeds it feeds).

        A feed whose ``match`` or buffer raises is failed alone; a record ``decode`` raises on is
        handed on as that exception (see the module doc, *Failures*)."""
        self.records_read += len(messages)
        broken: dict[int, tuple[Feed, BaseException]] = {}
        per_feed, advanced = self._sort(messages, broken)
        for tp, next_offset in advanced.items():
            self.frontier[tp] = max(self.frontier.get(tp, 0), next_offset)
            if self._on_read is not None:
                try:
                    self._on_read(self.reader.client, tp[0], tp[1], next_offset - 1)
                except Exception:
                    log.exception("%s: on_read failed for %s[%s]", self.name, tp[0], tp[1])
        for feed, records in per_feed.values():
            if id(feed) in broken:
                continue
            try:
                feed._offer(records)
            except Exception as exc:
                broken[id(feed)] = (feed, exc)
        for feed, error in broken.values():
            self._fail_feed(feed, error)

    def _sort(
        self, messages: Sequence[Message], broken: dict[int, tuple[Feed, BaseException]]
    ) -> tuple[dict[int, tuple[Feed, list[FedRecord]]], dict[Partition, int]]:
        """Per feed, the records of ``messages`` it wants; per partition, the offset after the
        last one.  A feed whose ``match`` raises is put in ``broken`` and gets nothing more."""
        per_feed: dict[int, tuple[Feed, list[FedRecord]]] = {}
        advanced: dict[Partition, int] = {}
        for message in messages:
            tp, offset = _coordinates(message)
            if offset < self.frontier.get(tp, 0):
                continue  # read before (a client that went back): every feed had it or passed it
            advanced[tp] = offset + 1
            decoded = self._decoded(message, tp, offset)
            for feed in self._candidates(decoded):
                if id(feed) in broken:
                    continue
                try:
                    wanted = feed._wants(tp, offset, decoded)
                except Exception as exc:
                    broken[id(feed)] = (feed, exc)
                    continue
                if wanted:
                    record = FedRecord(message, decoded, tp, offset)
                    per_feed.setdefault(id(feed), (feed, []))[1].append(record)
        return per_feed, advanced

    def _decoded(self, message: Message, tp: Partition, offset: int) -> Any:
        try:
            return self.decode(message)
        except Exception as exc:
            log.warning(
                "%s cannot decode %s[%s]@%s (%r); handed on as the error", self.name, *tp, offset, exc
            )
            return exc

    def _candidates(self, decoded: Any) -> Iterable[Feed]:
        try:
            keys = self._route(decoded)
        except Exception as exc:
            log.warning("%s cannot route a record (%r); every feed gets it", self.name, exc)
            keys = None
        if keys is None:
            return list(self._feeds)
        found: dict[int, Feed] = {}
        for key in keys:
            for feed in self._index.get(key, ()):
                found[id(feed)] = feed
        return found.values()

    def _fail_feed(self, feed: Feed, exc: BaseException) -> None:
        """One feed failed (its ``match`` or buffer raised): it alone gets the error, the others read on."""
        log.error(
            "%s: feed %s failed (%r); the reader goes on for the other feeds", self.name, feed.name, exc
        )
        self._detach(feed)
        feed._fail(exc)

    async def _look_at_topics(self) -> None:
        """Look at the topics' metadata: partitions a topic gained (a reader of whole topics) and a
        topic deleted (raises :class:`TopicError` once it was missing for :data:`TOPIC_GONE_CONFIRM`
        seconds).  Metadata that cannot be read (a broker down) is looked at again later."""
        now = time.monotonic()
        self._next_refresh = now + PARTITION_REFRESH_INTERVAL
        try:
            partitions = await self.reader.partitions()
        except TopicError as exc:
            since = self._topic_missing_since
            if since is None:
                self._topic_missing_since = now
                self._next_refresh = now + TOPIC_GONE_CONFIRM
                log.warning("%s: %s; looking again in %.0fs", self.name, exc.message, TOPIC_GONE_CONFIRM)
                return
            if now - since < TOPIC_GONE_CONFIRM:
                self._next_refresh = since + TOPIC_GONE_CONFIRM
                return
            raise TopicError(
                f"{self.name}: a topic it reads was deleted: {exc.message}; every task waiting on "
                "it fails: recreate the topic, then run the tasks again"
            ) from exc
        except Exception as exc:
            if not heals_by_retrying(exc):
                raise
            log.info("%s cannot read the topics' metadata (%s); looking again later", self.name, exc)
            return
        self._topic_missing_since = None
        if not self.whole_topics:
            return
        new = {tp: 0 for tp in partitions if tp not in self.frontier}
        if not new:
            return
        await self.reader.assign(new)
        self.frontier.update(new)
        for feed in self._feeds:
            for tp, start in new.items():
                feed._add_partition(tp, start)
        log.info("%s reads new partition(s) %s from the beginning", self.name, positions_to_json(new))

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._registry._forget(self)  # the next subscriber gets a fresh reader
        for feed in list(self._feeds):
            feed._fail(exc)

    # ------------------------------------------------------------------ closing
    async def release(self) -> None:
        """One user (a feed, or a subscriber that gave up) is done; the last one closes the reader."""
        self._users -= 1
        if self._users > 0:
            return
        self._registry._forget(self)
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self.reader.close()


# --------------------------------------------------------------------------- the registry
class SharedReaders:
    """The shared readers of this process: one per event loop, kind, client settings, topics and
    decoding (``variant``: e.g. the codec of a schema registry, which is not a client setting).
    The key holds the process id: a forked child never uses its parent's clients."""

    def __init__(self) -> None:
        self._readers: dict[Hashable, SharedReader] = {}
        #: readers created so far (for tests and benchmarks)
        self.created = 0

    @staticmethod
    def key(
        kind: str, config: Mapping[str, Any], topics: Sequence[str], variant: Hashable = None
    ) -> Hashable:
        loop = id(asyncio.get_running_loop())
        return (os.getpid(), loop, kind, config_key(config), tuple(sorted(topics)), variant)

    def acquire(
        self,
        kind: str,
        config: Mapping[str, Any],
        topics: Sequence[str],
        *,
        name: str,
        decode: Decode,
        route: Route,
        poll_timeout: float = 1.0,
        make_on_read: MakeOnRead | None = None,
        prepare: Prepare | None = None,
        variant: Hashable = None,
        whole_topics: bool = True,
        max_catch_up: int | None = None,
    ) -> SharedReader:
        """The reader for these settings and topics (created on first use); pair every call with
        one :meth:`SharedReader.release` (a feed's ``close`` does it).  ``make_on_read`` is called
        only when the reader is created (its ``on_read``); ``prepare`` is awaited before each batch
        is decoded (the reader's records, and its feeds' catch-up readers'); readers of equal
        settings that decode differently (``variant``) are distinct.  ``whole_topics`` and
        ``max_catch_up``: see the module doc (*Scoped readers*, *Catch-up clients*); a kind passes
        the same ones each time (they are not part of the key)."""
        key = self.key(kind, config, topics, variant)
        reader = self._readers.get(key)
        if reader is None:
            reader = SharedReader(
                self,
                key,
                config,
                topics,
                name=name,
                decode=decode,
                route=route,
                poll_timeout=poll_timeout,
                on_read=None if make_on_read is None else make_on_read(),
                prepare=prepare,
                whole_topics=whole_topics,
                max_catch_up=max_catch_up,
                kind=kind,
            )
            self._readers[key] = reader
            self.created += 1
        reader._users += 1
        return reader

    def get(
        self, kind: str, config: Mapping[str, Any], topics: Sequence[str], variant: Hashable = None
    ) -> SharedReader | None:
        return self._readers.get(self.key(kind, config, topics, variant))

    def __len__(self) -> int:
        return len(self._readers)

    def readers(self) -> list[SharedReader]:
        return list(self._readers.values())

    def _forget(self, reader: SharedReader) -> None:
        if self._readers.get(reader.key) is reader:
            del self._readers[reader.key]


#: The process's shared readers (no client exists until a feed subscribes).
SHARED_READERS = SharedReaders()
