"""Where the items of an iteration come from: upstream lists, or another task's stream.

* A plain value of ``iterate(name=...)``: a list (or tuple) given in the DAG file, or an
  upstream task's XCom (an ``XComArg``, resolved when the task runs).  Several such
  arguments combine like Airflow's ``expand()``: their cartesian product, the last one
  varying fastest (:class:`ListItems`).
* A stream (:class:`StreamItems`, or a bare :class:`~airflow_kafka_events.streams.consuming.operator.
  StreamRef`): the pages another task of the same DAG run writes to Kafka, read WHILE that
  task is still paging (no DAG edge needed).  Each page payload is an item, or with
  ``items_path`` (a dotted path into the payload, e.g. ``"results"`` or ``"data.items"``)
  each element of the list found there is an item (``explode``, the default when
  ``items_path`` is given).  :func:`results_of` reads the results stream of another
  ``@task.iterable`` task, so iterations chain lazily.

Item ordinals are positions in the source: the product index for lists, the running count
of items over the stream's pages for streams.  They are stable across tries (the upstream
XCom does not change within a generation; a stream attempt is append-only), which is what
the runner's checkpoint and the shard rule (``ordinal % shards``) rely on.

Streams are read from the start of their latest attempt by every try and every shard
(re-reading pages is cheap; the items already done are skipped).  A producer that starts
its stream over (a new attempt) while it is iterated fails the try with
:class:`~airflow_kafka_events.iteration.errors.SourceRestartedError`; the retry iterates
the new attempt from its start.

Idle streams: with a :class:`StreamIdle` policy the source yields
:data:`~airflow_kafka_events.iteration.items.SOURCE_IDLE` when no page came for
``StreamIdle.interval`` seconds, instead of waiting in the worker, and reads on when pulled
again; past the real ``start_timeout`` / ``gap_timeout`` it raises the reader's typed errors
as an in-worker read does.  :attr:`StreamItemSource.position` (the stream position after
the last page whose items were all yielded) and :attr:`StreamItemSource.next_ordinal` let a
later source of the same try go on from there (``checkpoint=``, ``ordinal=``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_events.errors import (
    ConfigurationError,
    StreamGapError,
    StreamNotStartedError,
    StreamProgressError,
    ValidationError,
)
from airflow_kafka_events.iteration.errors import SourceRestartedError
from airflow_kafka_events.iteration.items import SOURCE_IDLE, Item, SourceIdle
from airflow_kafka_events.iteration.retries import settle
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.consumption import is_end_marker
from airflow_kafka_events.streams.consuming.deadlines import with_gap_timeout, with_start_timeout
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from airflow_kafka_events.streams.consuming.sequence import StreamBatch

__all__ = [
    "RESULT_PATH",
    "ListItems",
    "StreamIdle",
    "StreamItemSource",
    "StreamItems",
    "from_stream",
    "locate_stream_start",
    "page_items",
    "results_of",
    "value_at",
]

log = logging.getLogger(__name__)

#: Where a result is in the payload of a results stream element.
RESULT_PATH = "result"


# ====================================================================== stream specs
def _split_path(path: str) -> tuple[str, ...]:
    parts = tuple(path.split("."))
    if not path or any(not p for p in parts):
        raise ConfigurationError(f"items_path must be dotted names like 'data.items', got {path!r}")
    return parts


@dataclass(frozen=True)
class StreamItems:
    """The items of another task's stream: page payloads, or elements at ``items_path``.

    ``explode`` (default: ``True`` exactly when ``items_path`` is given) makes every element
    of the list at ``items_path`` (or of the payload itself) an item of its own.
    """

    stream: StreamRef
    items_path: str | None = None
    explode: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stream, StreamRef):
            raise ConfigurationError(
                f"StreamItems.stream must be a StreamRef, got {type(self.stream).__qualname__}"
            )
        if self.items_path is not None:
            if not isinstance(self.items_path, str):
                raise ConfigurationError(f"items_path must be a str, got {self.items_path!r}")
            _split_path(self.items_path)
        if self.explode is not None and not isinstance(self.explode, bool):
            raise ConfigurationError(f"explode must be a bool or None, got {self.explode!r}")

    @property
    def exploding(self) -> bool:
        return self.items_path is not None if self.explode is None else self.explode

    def __str__(self) -> str:
        where = f"stream of {self.stream.producer_task_id!r}"
        if self.stream.map_index >= 0:
            where += f"[{self.stream.map_index}]"
        if self.items_path:
            where += f" at {self.items_path!r}"
        return where + (" (exploded)" if self.exploding else "")


def from_stream(
    stream: StreamRef | str,
    *,
    items_path: str | None = None,
    explode: bool | None = None,
    map_index: int = -1,
    topic: str = DEFAULT_TOPIC,
    kafka_config_id: str = "kafka_default",
) -> StreamItems:
    """Items of the stream of task ``stream`` (a task id or a ``StreamRef``) of the same DAG run."""
    ref = (
        stream
        if isinstance(stream, StreamRef)
        else StreamRef(stream, map_index=map_index, topic=topic, kafka_config_id=kafka_config_id)
    )
    return StreamItems(ref, items_path=items_path, explode=explode)


def results_of(
    task_id: str,
    *,
    map_index: int = -1,
    topic: str = DEFAULT_TOPIC,
    kafka_config_id: str = "kafka_default",
) -> StreamItems:
    """The per-item results of ``@task.iterable`` task ``task_id`` (one item per result).

    For a ``batch(size=n)`` task each of its n instances writes its own results stream:
    name it with ``map_index`` (0 .. n-1).
    """
    return StreamItems(
        StreamRef(task_id, map_index=map_index, topic=topic, kafka_config_id=kafka_config_id),
        items_path=RESULT_PATH,
        explode=False,
    )


def value_at(payload: Any, path: str | None) -> Any:
    """The value at dotted ``path`` in ``payload`` (list positions are ints); ``KeyError`` if absent."""
    if path is None:
        return payload
    value = payload
    for part in _split_path(path):
        if isinstance(value, Mapping):
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit():
            try:
                value = value[int(part)]
            except IndexError:
                raise KeyError(part) from None
        else:
            raise KeyError(part)
    return value


def page_items(payload: Any, spec: StreamItems) -> list[Any]:
    """The items of one page.

    Exploding: the elements of the list at ``items_path`` (a page without it, or with
    ``null`` there, has no items; anything but a list is an error).  Otherwise the value
    at ``items_path`` (or the payload) is the one item of the page.
    """
    try:
        value = value_at(payload, spec.items_path)
    except (KeyError, TypeError):
        if spec.exploding:
            return []
        raise ValidationError(f"a page of the {spec} has nothing at items_path {spec.items_path!r}") from None
    if not spec.exploding:
        return [value]
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError(
            f"a page of the {spec} has a {type(value).__qualname__} at items_path "
            f"{spec.items_path!r}, not a list to explode"
        )
    return value


# ====================================================================== list items
def _as_sequence(name: str, value: Any) -> Sequence[Any]:
    if not isinstance(value, (str, bytes, Mapping)) and value is not None:
        if isinstance(value, Sequence):
            return value
        try:
            return list(value)
        except TypeError:
            pass
    raise ConfigurationError(f"iterate({name}=...) must be a list of items, got {type(value).__qualname__}")


class ListItems:
    """The cartesian product of lists as items (``value``: ``{name: element, ...}``)."""

    def __init__(self, lists: Mapping[str, Any]) -> None:
        if not lists:
            raise ConfigurationError("iterate() needs at least one list to iterate over")
        self.names = tuple(lists)
        self.lists = tuple(_as_sequence(name, value) for name, value in lists.items())
        total = 1
        for values in self.lists:
            total *= len(values)
        self.total = total

    @property
    def key(self) -> str:
        """What the checkpoint records of the source (the item count)."""
        return f"list:{'*'.join(self.names)}:{self.total}"

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[Item]:
        names = self.names
        if len(names) == 1:
            (name,) = names
            for ordinal, value in enumerate(self.lists[0]):
                yield Item(ordinal, {name: value})
            return
        for ordinal, combo in enumerate(itertools.product(*self.lists)):
            yield Item(ordinal, dict(zip(names, combo, strict=True)))


# ====================================================================== stream items
class _Reader(Protocol):
    def next_batch(self) -> StreamBatch: ...

    def close(self) -> None: ...


def locate_stream_start(
    settings: KafkaSettings | Mapping[str, Any],
    topic: str,
    trigger_run_id: str,
    *,
    not_before: datetime | None = None,
    timeout: float = 30.0,
) -> tuple[Checkpoint, int, bool]:
    """Where to read a stream from its start: ``(checkpoint, attempt, unwritten)``.

    The first page of the latest attempt found in Kafka; when the stream has not started
    yet, the first offset at or after ``not_before`` of its partition (attempt 0, ``unwritten``
    ``True``); when the lookup fails (e.g. the topic does not exist yet), the start of the
    stream's partition.
    """
    from airflow_kafka_events.streams.progress import lookup_stream

    not_before_ms = None if not_before is None else max(0, int(not_before.timestamp() * 1000))
    try:
        location, progress = lookup_stream(
            settings, topic, trigger_run_id, timeout=timeout, not_before_ms=not_before_ms
        )
    except StreamProgressError as exc:
        log.info("stream %s: no progress found (%s); reading from the start", trigger_run_id, exc)
        return Checkpoint(), 0, False
    if progress is None:
        return Checkpoint(offset=location.scan_start, partition=location.partition), 0, True
    return (
        Checkpoint(
            attempt=progress.attempt,
            next_sequence_index=0,
            offset=progress.first_offset,
            partition=progress.partition,
        ),
        progress.attempt,
        False,
    )


class _Fetcher:
    """One daemon thread calling a blocking ``fetch`` on request; results come back to the loop.

    Daemon, so a fetch still blocked when the task ends (e.g. waiting out a stalled
    producer after the iteration failed) never holds the process up.
    """

    def __init__(self, fetch: Any, on_idle_close: Any) -> None:
        self._fetch = fetch
        self._on_idle_close = on_idle_close
        self._lock = threading.Lock()
        self._busy = False
        self._closing = False
        self._requests: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._serve, name="iteration-stream", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            loop, future = request
            try:
                value, ok = self._fetch(), True
            except BaseException as exc:
                value, ok = exc, False
            with self._lock:
                self._busy = False
                closing = self._closing
            if closing:
                self._on_idle_close()
                return
            try:
                loop.call_soon_threadsafe(settle, future, ok, value)
            except RuntimeError:  # the loop is closed
                pass

    def submit(self) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closing:
                raise RuntimeError("the stream fetcher is closed")
            self._busy = True
        self._requests.put((loop, future))
        return future

    def close(self) -> None:
        """Stop; ``on_idle_close`` runs now, or when a fetch in flight returns."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            busy = self._busy
        if not busy:
            self._requests.put(None)
            self._on_idle_close()


@dataclass(frozen=True)
class StreamIdle:
    """When a stream source reports itself idle rather than waiting for pages in the worker.

    ``interval``: seconds without a new page (give the reader this as its start and gap
    windows); ``start_deadline``: epoch seconds by which the stream must have started (the
    real ``start_timeout``); ``gap_timeout``: the real gap timeout, counted from the last page;
    ``max_buffered``: more pages held ahead of a missing one is a gap, not an idle wait.
    """

    interval: float
    start_deadline: float
    gap_timeout: float
    start_timeout: float
    max_buffered: int = 10_000

    def reader_windows(self) -> tuple[float, float]:
        """The reader's ``(start_timeout, gap_timeout)``: the idle interval, within the real ones."""
        remaining = self.start_deadline - time.time()
        return max(min(self.interval, remaining), 0.1), min(self.interval, self.gap_timeout)


class StreamItemSource:
    """Items of one stream attempt, read with a blocking reader in a thread of its own.

    The next batch is fetched while the items of the current one are handled.  ``name`` is
    the handler argument each item is passed as (``value``: ``{name: element}``).  The
    reader is used by that one thread only and closed by :meth:`close` (at once, or when a
    fetch still in flight returns).  ``idle``: report an idle stream (see the module doc);
    ``checkpoint`` / ``ordinal``: where the reader starts and the ordinal of its first item.
    """

    def __init__(
        self,
        reader: _Reader,
        *,
        name: str,
        spec: StreamItems,
        trigger_run_id: str,
        attempt: int = 0,
        idle: StreamIdle | None = None,
        checkpoint: Checkpoint | None = None,
        ordinal: int = 0,
    ) -> None:
        self.reader = reader
        self.name = name
        self.spec = spec
        self.trigger_run_id = trigger_run_id
        self.attempt = attempt
        self.idle = idle
        self.position = checkpoint
        self.next_ordinal = ordinal
        self.pages = 0
        self.items = 0
        self.last_progress = time.time()
        #: the lookup found nothing of the stream written yet (set by whoever located the start)
        self.unwritten = False
        self._fetcher = _Fetcher(reader.next_batch, reader.close)

    @property
    def key(self) -> str:
        """What the checkpoint records of the source: the stream and its attempt."""
        return f"stream:{self.trigger_run_id}:attempt={self.attempt}"

    def _check_attempt(self, batch: StreamBatch) -> None:
        if batch.restarted or (batch.events and batch.attempt != self.attempt):
            raise SourceRestartedError(
                f"stream {self.trigger_run_id!r} started over (attempt {batch.attempt} after attempt "
                f"{self.attempt}) while it was iterated; the retry iterates the new attempt from its start"
            )

    def _idle_or_raise(self, exc: StreamNotStartedError | StreamGapError) -> None:
        """Return when ``exc`` is an idle wait; raise it (with the real timeout) when it is not."""
        idle = self.idle
        if idle is None:
            raise exc
        now = time.time()
        if isinstance(exc, StreamNotStartedError):
            if now < idle.start_deadline:
                return
            raise with_start_timeout(exc, idle.start_timeout) from exc
        if now - self.last_progress < idle.gap_timeout and len(exc.present) <= idle.max_buffered:
            return
        raise with_gap_timeout(exc, idle.gap_timeout) from exc

    def _batch_items(self, batch: StreamBatch) -> Iterator[Item]:
        for record in batch.rejected:
            log.warning(
                "stream %s: skipping an undecodable record at offset %s: %s",
                self.trigger_run_id,
                record.offset,
                record.error,
            )
        if batch.events:
            self.last_progress = time.time()
        for envelope in batch.events:
            if is_end_marker(envelope):
                continue
            self.pages += 1
            for element in page_items(envelope.payload, self.spec):
                self.items += 1
                yield Item(self.next_ordinal, {self.name: element})
                self.next_ordinal += 1

    async def _items(self) -> AsyncIterator[Item | SourceIdle]:
        pending = self._fetcher.submit()
        while True:
            try:
                batch = await pending
            except (StreamNotStartedError, StreamGapError) as exc:
                self._idle_or_raise(exc)
                yield SOURCE_IDLE
                pending = self._fetcher.submit()
                continue
            self._check_attempt(batch)
            if not batch.finished:
                pending = self._fetcher.submit()  # fetch the next batch while this one is handled
            for item in self._batch_items(batch):
                yield item
            self.position = batch.checkpoint  # every item up to here was handed out
            if batch.finished:
                return

    def __aiter__(self) -> AsyncIterator[Item | SourceIdle]:
        return self._items()

    def close(self) -> None:
        """Release the reader: now, or once a fetch still in flight returns. Never blocks."""
        self._fetcher.close()
