"""The stream behind one asset watcher: one reader per triggerer, a durable position per watcher.

Why not one consumer group shared by the watchers: Airflow places each watcher on a triggerer of
its choice, and a group splits the partitions between the triggerers' consumers, so a watcher
would see only its triggerer's share of the topic (measured: 60 of 120 events lost, silently,
with two triggerers).  Commits cannot repair that: the shared stream reports how many
subscribers accepted a record, not which.

So each watcher (:class:`~airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger`)
has its own shared-stream group and :class:`WatcherStream`, and:

* the watchers of one triggerer that read the same topics through the same client settings
  share ONE :class:`~airflow_kafka_events.kafka.shared_reader.SharedReader`: it ``assign()``s
  every partition (no group membership, nothing committed), fetches and decodes each record
  once, on its own thread, and hands each watcher only its asset's records (and every
  undecodable one) plus how far each partition was read for it;
* its position lives in the watcher's asset's ``asset_state_store`` (AIP-103) under
  :data:`STATE_KEY`: per partition, the first record whose asset event Airflow has not yet
  confirmed (the shared stream's persistence-gated ``advance``), else the offset after the last
  record read for it.  The watcher resumes there on any triggerer, after any restart or move;
  behind the shared reader it reads on its own until it has caught up (see
  :mod:`airflow_kafka_events.kafka.shared_reader`);
* the idempotency keys of the events it turned into asset events (the most recent
  :data:`DURABLE_KEYS`, each for ``dedupe_ttl``) are stored with the position, so a repeat
  published later is dropped after a restart too;
* a partition without a stored position starts at the connection's ``auto.offset.reset``
  (default ``earliest``); that start is stored at once.

A position is stored at most every store interval: :data:`FLUSH_INTERVAL` (1 s) with up to 10
watcher streams in a triggerer, ``N / 10`` s with N of them.  A position that moved only past other
assets' records is stored every :data:`SKIP_FLUSH_INTERVAL` seconds, ``N /``
:data:`SKIP_STORES_PER_SECOND` when that is longer.  Once due, a store waits for its turn: the
process's :class:`WatcherLoad` hands out store slots first come, first served, ``1 /``
:data:`STORES_PER_SECOND` s apart while Airflow has none of the process's watcher events to persist,
and ``1 /`` :data:`BUSY_STORES_PER_SECOND` s apart while it has (records handed on and not confirmed
yet, or confirmed less than :data:`BUSY_LINGER` s ago).  A store is one request through the
triggerer's supervisor, which answers it between its passes over the events it persists, and costs
it more than an event (B8 measured about 30 ms of CPU through Airflow's in-process execution API,
against about 16 ms for persisting an event); with one store per event, a burst of events into
1,000 watchers ran at half of Airflow's own rate.  So while Airflow is busy with the watchers' events
the stores make way for them, and catch up at the quicker pace once it is not.  The state stored is
taken when the slot comes.  A stream's first store and its last (at a stop) do not wait.

After ``kill -9`` of a triggerer, records whose asset events were persisted after the last
store become asset events once more: duplicates are bounded by what a watcher confirmed in its
last store interval plus its wait for a slot, plus one confirmation round; nothing is lost.  The
wait for a slot is at most about ``N / 10`` s while Airflow has no watcher events to persist, and
``N /`` :data:`BUSY_STORES_PER_SECOND` s (with N watcher streams due in the triggerer) under a
steady flow of them.  ``[kafka_events] watcher_airflow_api_conn_id`` removes those repeats
(:mod:`airflow_kafka_events.watcher.recheck`).

A graceful stop (SIGTERM) is no crash: Airflow's runner no longer answers asset-state-store writes
while it closes the streams, so a closing stream writes its last state to Kafka instead, and the
next start resumes from it (:mod:`airflow_kafka_events.watcher.stops`); of the records
Airflow had not confirmed at the stop, it fires again only those Airflow did not persist
(:mod:`airflow_kafka_events.watcher.confirmations`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any

from airflow.providers.apache.kafka.triggers.shared_stream import KafkaBrokerPayload
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer
from asgiref.sync import sync_to_async

from airflow_kafka_events.assets.admission import asset_selector
from airflow_kafka_events.assets.validation import sanitize_asset_uri
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.errors import ConfigurationError, SchemaRegistryUnavailableError
from airflow_kafka_events.kafka.positions import (
    Partition,
    PositionTracker,
    positions_from_json,
    positions_to_json,
)
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.shared_feed import FEED_CAPACITY, READ_BATCH, FedRecord, Feed
from airflow_kafka_events.watcher.keys import DurableKeys, durable_key
from airflow_kafka_events.watcher.reader import shared_reader
from airflow_kafka_events.watcher.records import KafkaRecord, Ticket, kafka_record
from airflow_kafka_events.watcher.resume import PositionStore, StopMarks, forget_run, recheck_airflow, resume
from airflow_kafka_events.watcher.stops import (
    MARK_WRITE_TIMEOUT,
    encode_mark,
    mark_key,
    stops_topic,
    write_mark,
)

#: Longest wait (seconds) between two tries of a record while the schema registry does not answer.
_REGISTRY_WAIT_MAX = 30.0
log = logging.getLogger(__name__)

__all__ = [
    "FLUSH_INTERVAL",
    "PROCESS_LOAD",
    "STATE_KEY",
    "WatcherLoad",
    "WatcherStream",
    "state_key",
]

#: ``asset_state_store`` key prefix of a watcher's position (``<prefix>[<connection id>]``).
STATE_KEY = "airflow_kafka_events.watcher"
#: Seconds between two stores of a changing position (the bound on duplicates after a crash).
FLUSH_INTERVAL = 1.0
#: Position stores per second a triggerer's watchers stay under together while Airflow has none of
#: their events to persist: with N watcher streams open in a process each stores at most every
#: ``FLUSH_INTERVAL * max(1, N / this)`` seconds, and the process hands out store slots at most this
#: many a second (each store is one request through the triggerer's supervisor to the metadata DB).
STORES_PER_SECOND = 10.0
#: Store slots per second while Airflow persists the process's watcher events: a store costs the
#: triggerer's supervisor more than an event (see the module docstring), so stores make way.
BUSY_STORES_PER_SECOND = 1.0
#: Seconds after the last record awaiting Airflow's confirmation that the slots stay at the busy pace
#: (events come in bursts: a lull of a second is not the end of one).
BUSY_LINGER = 5.0
#: Longest sleep of a store waiting for its slot before it looks at the pace again (it quickens when
#: Airflow is no longer busy).
SLOT_RECHECK = 1.0
#: Seconds between two stores of a position that moved only past other assets' records (losing
#: such progress in a crash only means reading records again that are skipped again).
SKIP_FLUSH_INTERVAL = 30.0
#: Stores of such progress per second a triggerer's watchers aim to stay under together: every
#: record on a shared topic moves every watcher's position, so without this N watchers would store
#: N / 30 times a second (33 with 1,000: more than the asset events Airflow persists in B8).
SKIP_STORES_PER_SECOND = 2.0
#: Seconds the last store of a closing stream may take.
FINAL_FLUSH_TIMEOUT = 2.0
#: Share of Airflow's ``[triggerer] shared_stream_subscriber_queue_size`` (default 1024) a watcher
#: keeps in flight (handed on, not yet confirmed) before reading pauses: the shared stream fails a
#: subscriber whose queue overflows, and throughput is about this window per confirmation round.
PENDING_SHARE = 0.875
#: The window when Airflow's setting cannot be read.
MAX_PENDING = 896
_STORE_WARN_INTERVAL = 60.0
#: Producer role of the clean-stop marks (a producer of its own, with the marks' delivery timeout).
STOPS_ROLE = "watcher-stops"


class WatcherLoad:
    """What every watcher stream of this process shares: how many are open, their backlog, and the
    pace of their position stores.

    One object per process (:data:`PROCESS_LOAD`), on purpose: the store interval, the backlog and
    the pace above are about the triggerer's supervisor, which all the process's watchers share.

    :param clock: the monotonic clock the store slots are counted on.
    :param sleep: how a store waits for its slot (``asyncio.sleep``; a test's goes with its clock).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        #: Watcher streams open in this process (for ``STORES_PER_SECOND``).
        self.streams_open = 0
        #: Records this process's watcher streams handed on and Airflow has not confirmed (each
        #: stream adds its own count when it looks: a moment late at worst).
        self.backlog = 0
        self.clock = clock
        self._sleep = sleep
        self._busy_until = -math.inf  # the end of the lull after the last record awaiting Airflow
        self._last_slot = -math.inf  # when the last store slot was handed out
        self._turns: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def add_backlog(self, change: int) -> None:
        """``change`` more (or fewer) records await Airflow's confirmation."""
        self.backlog += change
        if change < 0:  # some were just confirmed: busy() lingers after the backlog empties
            self._busy_until = self.clock() + BUSY_LINGER

    def busy(self) -> bool:
        """Whether Airflow is persisting this process's watcher events (or was, a moment ago)."""
        return self.backlog > 0 or self.clock() < self._busy_until

    def store_spacing(self) -> float:
        """Seconds between two store slots: ``1 /`` :data:`BUSY_STORES_PER_SECOND` while
        :meth:`busy`, else ``1 /`` :data:`STORES_PER_SECOND`."""
        return 1.0 / (BUSY_STORES_PER_SECOND if self.busy() else STORES_PER_SECOND)

    def _queue(self) -> asyncio.Lock:
        """The line the stores wait in (first come, first served), one per event loop."""
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns[0] is not loop:
            self._turns = (loop, asyncio.Lock())
        return self._turns[1]

    async def store_slot(self) -> None:
        """Wait for this store's turn: slots are handed out in turn, :meth:`store_spacing` apart,
        the pace read again while waiting, so the stores catch up quickly once Airflow is idle."""
        async with self._queue():
            while (wait := self._last_slot + self.store_spacing() - self.clock()) > 0:
                await self._sleep(min(wait, SLOT_RECHECK))
            self._last_slot = self.clock()


#: The process's :class:`WatcherLoad`.
PROCESS_LOAD = WatcherLoad()


def _pending_window() -> int:
    """:data:`PENDING_SHARE` of Airflow's subscriber queue size (read when a stream opens)."""
    try:
        from airflow.configuration import conf

        size = conf.getint("triggerer", "shared_stream_subscriber_queue_size", fallback=1024)
    except Exception:  # no Airflow configuration here: the default queue
        return MAX_PENDING
    return max(1, int(size * PENDING_SHARE))


def state_key(kafka_config_id: str) -> str:
    """The ``asset_state_store`` key of a watcher reading through ``kafka_config_id``."""
    return f"{STATE_KEY}[{kafka_config_id}]"


# --------------------------------------------------------------------------- the producer
class WatcherStream(SharedStreamProducer):
    """Reads Kafka for one watcher's shared stream (ack mode): read, skip, hand on, store.

    It implements Airflow's shared-stream *producer* interface (``SharedStreamProducer``), which
    is the side that reads the source and produces events for Airflow.

    :param store: where the position is kept (default: the watched asset's ``asset_state_store``
        accessor; anything with ``aget``/``aset``).
    :param load: what it shares with the process's other watcher streams (default
        :data:`PROCESS_LOAD`).
    """

    def __init__(
        self,
        *,
        topics: Sequence[str],
        kafka_config_id: str,
        asset_uri: str | None,
        asset_name: str | None,
        poll_timeout: float = 1.0,
        group_id: str | None = None,
        include_partitioned: bool = True,
        dedupe_ttl: float | None = 24 * 3600.0,
        identity: Hashable = None,
        store: PositionStore | None = None,
        flush_interval: float = FLUSH_INTERVAL,
        max_pending: int | None = None,
        feed_capacity: int = FEED_CAPACITY,
        load: WatcherLoad | None = None,
    ) -> None:
        if asset_uri is None and asset_name is None:
            raise ConfigurationError("a watcher's stream needs asset_uri and/or asset_name")
        self.topics = sorted(topics)
        self.kafka_config_id = kafka_config_id
        self.asset_uri = asset_uri
        self.asset_name = asset_name
        self.poll_timeout = poll_timeout
        self.group_id = group_id
        self.include_partitioned = include_partitioned
        self.dedupe_ttl = dedupe_ttl
        self.identity = identity
        self.flush_interval = flush_interval
        self.max_pending = max_pending if max_pending is not None else _pending_window()
        self.feed_capacity = feed_capacity
        self._store = store
        self._load = load if load is not None else PROCESS_LOAD
        self._select = asset_selector(
            asset_uri=asset_uri, asset_name=asset_name, include_partitioned=include_partitioned
        )
        self._select_uri = sanitize_asset_uri(asset_uri) if asset_uri is not None else None
        self._state_key = state_key(kafka_config_id)
        self._feed: Feed | None = None
        self._tracker: PositionTracker | None = None
        self._keys = DurableKeys(None, ttl=dedupe_ttl)
        self._stops: StopMarks | None = None  # where its clean-stop mark goes (set when it opens)
        self._run = uuid.uuid4().hex  # this run's mark on what it stores and fires
        self._seqs = itertools.count()  # numbers of the records it hands on, in order
        self._room = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        self._last_flush = 0.0
        self._counted = False  # counted in its load's streams_open
        self._in_backlog = 0  # its records counted in its load's backlog
        self._sending = False  # a store's request is under way (until then its task may be cancelled)
        self._urgent = False  # an own record finished since the last store: store within flush_interval
        # per partition, how often advance() sought it back: records taken before a rewind are stale
        self._rewinds: dict[tuple[str, int], int] = {}
        self._last_store_warning = -_STORE_WARN_INTERVAL
        #: the fired records Airflow's shared stream reported confirmed since the state of the last
        #: successful store was taken: in doubt at a clean stop (see :meth:`_write_mark`)
        self._unstored: list[Ticket] = []
        #: a batch taken from the feed is being handed on (its frontier not applied yet)
        self._handing_on = False

    # ------------------------------------------------------------------ configuration
    @property
    def label(self) -> str:
        asset = self.asset_uri if self.asset_uri is not None else f"name={self.asset_name}"
        return f"watcher of {asset} on {self.topics}"

    def _clients(self) -> tuple[dict[str, Any], StopMarks]:
        """The reader's configuration and the clean-stop marks' clients, from the connection (sync:
        reads it, while the supervisor still answers; a closing watcher cannot ask it)."""
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        settings = KafkaEventsHook(kafka_config_id=self.kafka_config_id).get_settings()
        stops = StopMarks(
            settings=settings,
            producer=get_producer(
                settings.producer_config(), role=STOPS_ROLE, message_timeout=MARK_WRITE_TIMEOUT
            ),
            topic=stops_topic(),
            key=mark_key(self.kafka_config_id, self._select_uri, self.asset_name),
        )
        try:
            return settings.consumer_config(self.group_id), stops
        except ConfigurationError:  # no group.id anywhere: fine, the reader joins no group
            return settings.consumer_config("airflow-kafka-events.assigned-reader"), stops

    def store(self) -> PositionStore:
        if self._store is None:
            from airflow.sdk.execution_time.context import AssetStateStoreAccessor

            if self.asset_name is not None:
                self._store = AssetStateStoreAccessor(name=self.asset_name)
            else:
                self._store = AssetStateStoreAccessor(uri=self.asset_uri)
        return self._store

    # ------------------------------------------------------------------ opening
    def _matches(self, decoded: AssetEventEnvelope | BaseException) -> bool:
        """The shared reader's test for this watcher: its asset's envelopes and every undecodable
        record (which the watcher dead-letters)."""
        return not isinstance(decoded, AssetEventEnvelope) or self._select(decoded) is None

    async def _open(self) -> tuple[Feed, PositionTracker]:
        self._load.streams_open += 1
        self._counted = True
        config, self._stops = await sync_to_async(self._clients)()
        assert self._stops is not None
        shared = shared_reader(config, self.topics, self.poll_timeout, self._stops.settings.codecs.asset)
        try:
            partitions = await shared.partitions()
            resumed = await resume(self.label, self.store(), self._state_key, self._stops, self.dedupe_ttl)
            stored, self._keys = resumed.positions, resumed.keys
            if stored and resumed.resumption.recheck:
                await recheck_airflow(
                    self.label,
                    resumed.resumption,
                    self._keys,
                    name=self.asset_name,
                    uri=self._select_uri,
                    topics=self.topics,
                )
            missing = [tp for tp in partitions if tp not in stored]
            starts = {tp: stored[tp] for tp in partitions if tp in stored}
            starts.update(await shared.start_offsets(missing))
            feed = await shared.subscribe(
                starts,
                keys=[("uri", self._select_uri) if self.asset_uri is not None else ("name", self.asset_name)],
                match=self._matches,
                capacity=self.feed_capacity,
                name=f"watcher-{self.asset_name or self.asset_uri}",
            )
        except BaseException:
            await shared.release()
            raise
        self._feed = feed
        tracker = PositionTracker(feed.next)
        self._tracker = tracker
        log.info(
            "%s reads %d partition(s) from %s (%d stored, %d new; %s)",
            self.label,
            len(feed.next),
            positions_to_json(feed.next),
            len(starts) - len(missing),
            len(missing),
            "catching up with the shared reader" if feed.catching_up else "through the shared reader",
        )
        await self.flush(force=True)  # a new start (earliest or latest) is durable from now on
        await forget_run(self.label, self.store(), resumed.previous_run, self._run)
        return feed, tracker

    # ------------------------------------------------------------------ reading
    def _wanted(self, decoded: AssetEventEnvelope | BaseException) -> bool:
        """A record the shared reader handed on: not a repeat of an event already in Airflow."""
        if not isinstance(decoded, AssetEventEnvelope):
            return True  # the watcher dead-letters it
        key = durable_key(decoded)
        if key in self._keys:
            log.info(
                "%s drops a repeat of asset event %s (idempotency key %s)", self.label, decoded.event_id, key
            )
            return False
        return True

    async def open_stream(self) -> AsyncIterator[tuple[KafkaRecord, KafkaBrokerPayload]]:
        feed, tracker = await self._open()
        while True:
            room = self.max_pending - tracker.pending_count()
            while room <= 0:
                self._room.clear()
                await self._room.wait()
                room = self.max_pending - tracker.pending_count()
            # at least every poll_timeout, so that the position is stored while nothing arrives
            records, frontier = await feed.take(min(room, READ_BATCH), self.poll_timeout)
            self._handing_on = True  # until the batch's frontier is applied (see _take_progress)
            taken = dict(self._rewinds)
            for fed in records:
                tp, offset = fed.tp, fed.offset
                if self._rewinds.get(tp, 0) != taken.get(tp, 0):
                    continue  # sought back while this batch was handed on: the catch-up reads it again
                if not tracker.knows(tp):
                    tracker.add_partitions({tp: 0})  # a partition the topic gained: all new
                fed = await self._decided(fed)
                if not self._wanted(fed.decoded):
                    tracker.read(tp, offset)
                    continue
                record = kafka_record(fed, self._run, next(self._seqs))
                tracker.hand_on(tp, offset, record.ticket)
                yield record, KafkaBrokerPayload(topic=tp[0], partition=tp[1], offset=offset)
            for tp, next_offset in frontier.items():  # only after its records were handed on
                if self._rewinds.get(tp, 0) != taken.get(tp, 0):
                    continue  # never past a record a rewind will read again
                if not tracker.knows(tp):
                    tracker.add_partitions({tp: next_offset})
                tracker.advance_to(tp, next_offset)
            self._handing_on = False
            self._request_flush()

    async def _decided(self, fed: FedRecord) -> FedRecord:
        if isinstance(fed.decoded, SchemaRegistryUnavailableError):
            return fed._replace(decoded=await self._decode_again(fed))
        return fed

    async def _decode_again(self, fed: FedRecord) -> AssetEventEnvelope | BaseException:
        """Decode a record the schema registry could not help with, until it can (the record is not at
        fault: never a dead letter for this); the records after it wait."""
        assert self._stops is not None
        codec, value = self._stops.settings.codecs.asset, fed.message.value()
        delay = 1.0
        while True:
            try:
                return await asyncio.to_thread(codec.decode, value or b"")
            except SchemaRegistryUnavailableError as exc:
                log.warning(
                    "%s: %s[%s]@%s waits %.0fs for the schema registry: %s",
                    self.label,
                    fed.tp[0],
                    fed.tp[1],
                    fed.offset,
                    delay,
                    exc,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _REGISTRY_WAIT_MAX)
            except Exception as exc:  # a verdict on the record (unknown schema id, ...)
                return exc

    # ------------------------------------------------------------------ advancing
    def get_advance_lane(self, broker_payload: KafkaBrokerPayload) -> Hashable:
        return broker_payload.topic, broker_payload.partition

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        """Records Airflow confirmed (or the watcher dead-lettered) stop holding the position back.

        A failed record (ack timeout, overflow) holds it: the reader seeks back and reads it again.
        Records confirmed after it are finished all the same (their idempotency keys recorded), so
        the re-read drops them as repeats instead of firing them twice.
        """
        tracker, feed = self._tracker, self._feed
        if tracker is None or feed is None:
            raise RuntimeError(f"{self.label}: advance before the stream was opened")
        first = batch[0].broker_payload
        tp = (first.topic, first.partition)
        done: list[int] = []
        failed: list[int] = []
        for item in batch:
            outcome = item.outcome
            unconfirmed = outcome.failed > 0 or (outcome.acked == 0 and outcome.rejected == 0)
            (failed if unconfirmed else done).append(item.broker_payload.offset)
        held = min(failed) if failed else None
        finished = tracker.finish(tp, done)
        self._urgent = self._urgent or bool(finished)
        for ticket in finished:
            if ticket is not None and ticket.accepted_key is not None:
                self._keys.add(ticket.accepted_key)
                self._unstored.append(ticket)
        if held is not None:
            log.warning("%s reads %s[%s]@%s again: it was not confirmed", self.label, tp[0], tp[1], held)
            self._rewinds[tp] = self._rewinds.get(tp, 0) + 1
            tracker.rewind(tp, held)
            feed.rewind(tp, held)
        self._room.set()
        self._request_flush()

    # ------------------------------------------------------------------ storing
    def _flush_due(self) -> bool:
        tracker = self._tracker
        if tracker is None:
            return False
        since = time.monotonic() - self._last_flush
        interval = self.store_interval() if self._urgent else self.skip_store_interval()
        return since >= interval

    def _count_backlog(self, pending: int) -> None:
        """This stream's part of the process's backlog (its :class:`WatcherLoad`) is now ``pending``."""
        if pending != self._in_backlog:
            self._load.add_backlog(pending - self._in_backlog)
            self._in_backlog = pending

    def _request_flush(self) -> None:
        """Store in the background once due: neither reading nor the shared stream's advance waits
        for the asset state store, whose requests queue behind the events the triggerer's
        supervisor is persisting (awaited inline, one store held up every watcher's next record)."""
        if self._tracker is not None:
            self._count_backlog(self._tracker.pending_count())
        if (self._flush_task is not None and not self._flush_task.done()) or not self._flush_due():
            return
        self._flush_task = asyncio.get_running_loop().create_task(self.flush(), name=f"store[{self.label}]")

    async def flush(self, *, force: bool = False, stopping: bool = False) -> None:
        """Store the position (and the durable keys) if it changed; ``stopping``: the last store of a
        clean stop (a restart after it needs no recheck of what Airflow has).

        At most every ``flush_interval`` once one of the watcher's own records finished (that
        bounds what a crash repeats), else every :data:`SKIP_FLUSH_INTERVAL` (a position that only
        moved past other assets' records: with 100 watchers on a topic those stores would outnumber
        the asset events).  An unforced store then waits for its slot in the process's pace
        (:meth:`WatcherLoad.store_slot`) and takes its state after the wait: the freshest position.
        A forced store (a stream's last) goes at once.
        """
        tracker = self._tracker
        if tracker is None or (not force and not self._flush_due()):
            return
        if not force:
            await self._load.store_slot()
        async with self._flush_lock:
            positions = tracker.durable()
            if not force and not self._keys.dirty and not tracker.changed_since_stored():
                return
            if stopping:  # the confirmations after the last store are not trusted (see _stop_state)
                value, _, unstored = self._stop_state()
                positions = positions_from_json(value["positions"])
                # a clean stop: nothing it handed on awaits Airflow (the shared stream drops what is
                # unconfirmed at a stop, to be read again: only a recheck tells what Airflow has of it)
                value["stopped"] = tracker.pending_count() == 0 and unstored == 0
            else:
                value = self._state(positions)
            # cleared before the store: a record finishing while it is under way makes it urgent again
            urgent, self._urgent, self._keys.dirty = self._urgent, False, False
            covered = len(self._unstored)  # the confirmations this state holds
            self._sending = True
            try:
                await self.store().aset(self._state_key, value)
            except Exception as exc:
                self._urgent, self._keys.dirty = self._urgent or urgent, True
                self._warn_store(exc)
                return
            finally:
                self._sending = False
            self._last_flush = time.monotonic()
            tracker.mark_stored(positions)
            # Airflow's supervisor answered this store, so it took this state before the runner
            # stopped exchanging with it: the confirmations in it were Airflow's
            del self._unstored[:covered]

    def _state(self, positions: Mapping[Partition, int]) -> dict[str, Any]:
        """What is stored: the positions, the durable keys, the run that stored them."""
        return {
            "version": 1,
            "positions": positions_to_json(positions),
            "seen": self._keys.to_json(),
            "run": self._run,
            "stopped": False,
        }

    def store_interval(self) -> float:
        """Seconds between two stores once an own record finished: ``flush_interval``, stretched so
        that all watcher streams of this process store at most :data:`STORES_PER_SECOND` times a second."""
        return self.flush_interval * max(1.0, self._load.streams_open / STORES_PER_SECOND)

    def skip_store_interval(self) -> float:
        """Seconds between two stores of a position that moved only past other assets' records:
        :data:`SKIP_FLUSH_INTERVAL`, stretched so that all watcher streams of this process store such
        progress at most :data:`SKIP_STORES_PER_SECOND` times a second."""
        return max(SKIP_FLUSH_INTERVAL, self._load.streams_open / SKIP_STORES_PER_SECOND)

    def _warn_store(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_store_warning >= _STORE_WARN_INTERVAL:
            self._last_store_warning = now
            log.warning(
                "%s cannot store its position in the asset state store (%r); it keeps reading and "
                "retries, and a restart before the next store reads the unstored records again",
                self.label,
                exc,
            )

    async def _final_flush(self) -> None:
        task = self._flush_task
        if task is not None and not task.done():
            if (
                not self._sending
            ):  # not sent yet (it may wait for its slot): the forced store below replaces it
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        stored = await self.store().aget(self._state_key, None)
        if isinstance(stored, Mapping) and stored.get("run") not in (None, self._run):
            # a newer run of this watcher (the shared stream reopened it) stored since: its state stands
            log.info("%s leaves the stored state to a newer run of this watcher", self.label)
            return
        await self.flush(force=True, stopping=True)

    def _in_doubt(self) -> list[tuple[int, str]]:
        """``(sequence number, key)`` of the records it fired (turned into a ``TriggerEvent``) that
        Airflow has not confirmed."""
        tracker = self._tracker
        tags = tracker.pending_tags() if tracker is not None else []
        return sorted(
            (tag.seq, tag.accepted_key)
            for tag in tags
            if isinstance(tag, Ticket) and tag.accepted_key is not None
        )

    def _stop_state(self) -> tuple[dict[str, Any], list[tuple[int, str]], int]:
        """The state a clean-stop mark carries, the records in doubt, and how many of those Airflow's
        shared stream reported confirmed after the last successful store.

        Such a confirmation may be of an event Airflow never persisted: at a stop the runner leaves
        its loop (no exchange with its supervisor follows), then ``stop_all()`` evicts every group
        and stops them in turn; a watcher whose group still runs fires the records in its queue,
        nothing binds them (``bind_pending_event`` finds no group), so each counts as acknowledged
        when the watcher takes the next, and the group's advance pump hands it on as ``acked``.  A
        store the supervisor answered was taken before the runner stopped exchanging, so what it
        holds was confirmed by Airflow; what came after it stays in doubt: the mark's position
        does not pass it and its key is not among those dropped as repeats.  The listener's record
        of the run's last persisted number then tells the next start which of them Airflow has
        (``watcher.resume``), exactly as for the records never confirmed.
        """
        tracker = self._tracker
        assert tracker is not None
        positions = tracker.durable()
        unstored = [t for t in self._unstored if t.partition is not None and t.accepted_key is not None]
        for ticket in unstored:
            assert ticket.partition is not None
            positions[ticket.partition] = min(positions.get(ticket.partition, ticket.offset), ticket.offset)
        state = self._state(positions)
        doubted = {t.accepted_key for t in unstored}
        state["seen"] = {key: at for key, at in state["seen"].items() if key not in doubted}
        in_doubt = sorted({*self._in_doubt(), *((t.seq, str(t.accepted_key)) for t in unstored)})
        return state, in_doubt, len(unstored)

    async def _write_mark(self) -> bool:
        """Its last state as a clean-stop mark in Kafka (see :mod:`.stops`)."""
        tracker, stops = self._tracker, self._stops
        if tracker is None or stops is None:
            return False
        state, in_doubt, unstored = self._stop_state()
        try:
            mark = encode_mark(state, in_doubt)
            await write_mark(stops.producer, stops.topic, stops.key, mark)
        except Exception as exc:
            log.warning(
                "%s cannot write its clean-stop mark to %s (%s): its next start treats this stop as a crash",
                self.label,
                stops.topic,
                exc,
            )
            return False
        log.info(
            "%s stops cleanly: its position is in %s; %d record(s) it fired are in doubt (%d await "
            "Airflow's confirmation, %d confirmed after its last store)",
            self.label,
            stops.topic,
            len(in_doubt),
            len(in_doubt) - unstored,
            unstored,
        )
        return True

    def _take_progress(self) -> None:
        """What the shared reader read past for this watcher (other assets' records), into the
        position its clean stop writes.  Watchers stopping together then write the same position,
        so at their next start none is behind the one that starts the shared reader: each behind
        reads with a client of its own until it catches up (682 of 1,000 at once in B8's footprint
        benchmark with ``--restart``, while each mark held the progress of its last poll)."""
        feed, tracker = self._feed, self._tracker
        if feed is None or tracker is None or self._handing_on:
            return  # stopped inside a batch: records taken and not handed on are below the progress
        for tp, next_offset in feed.progress().items():
            if not tracker.knows(tp):
                tracker.add_partitions({tp: next_offset})
            tracker.advance_to(tp, next_offset)

    async def aclose(self) -> None:
        try:
            self._take_progress()
            if await self._write_mark():
                # its last word is in Kafka; a store still under way is of an older position
                task = self._flush_task
                if task is not None and not task.done():
                    task.cancel()
            else:
                # bounded: at a triggerer's shutdown the supervisor may no longer answer
                async with asyncio.timeout(FINAL_FLUSH_TIMEOUT):
                    await self._final_flush()
        except Exception as exc:
            self._warn_store(exc)
        finally:
            if self._counted:
                self._counted = False
                self._load.streams_open -= 1
            self._count_backlog(0)
            feed, self._feed = self._feed, None
            if feed is not None:
                await feed.close()
