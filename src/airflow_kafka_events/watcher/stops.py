"""A watcher's clean-stop mark, kept in Kafka: how the next start tells a graceful stop from a crash.

A watcher stores its position in its asset's ``asset_state_store``, through the triggerer's
supervisor.  On SIGTERM, Airflow's trigger runner cancels its channel to the supervisor before it
closes the shared streams, so the last store of a closing watcher is never answered: the asset
state store alone holds a position up to a store interval old and no clean-stop flag, as after a
crash.  Kafka does not go through the supervisor, so a closing watcher writes its last
state there instead: one record, keyed by the watcher (:func:`mark_key`), in a compacted topic
(``[kafka_events] watcher_stops_topic``, default :data:`DEFAULT_STOPS_TOPIC`, made by
``airflow-kafka-events topics ensure``).  Its value is the state the asset state store would have
got (positions, the idempotency keys of the events Airflow confirmed, the run that wrote it) plus
the records the watcher fired that Airflow had not confirmed at the stop (:data:`IN_DOUBT_FIRED`:
each one's sequence number in the run and idempotency key; :data:`IN_DOUBT`: how many).

At its next start a watcher reads the asset state store and its mark; :func:`resumption` decides:
the mark of the run that wrote the stored state is that run's last word (a clean stop); a mark of
another run is stale (a newer run stored since, and did not stop cleanly); no mark is a crash
(``kill -9``) or a stop whose mark could not be written (the topic missing: logged).

The records in doubt are read again (never lost): Airflow persisted some of them in its last
round before the stop (its confirmation never came back) and dropped the others (fired after the
runner's last exchange with the supervisor).  Which ones, the package's listener recorded in the
asset state store with the events themselves
(:mod:`~airflow_kafka_events.watcher.confirmations`): the next start fires only those
Airflow does not have.  Without that record (a mark of an older version, another state backend)
they are rechecked when ``[kafka_events] watcher_airflow_api_conn_id`` is set, and may repeat
otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.errors import TopicError, ValidationError
from airflow_kafka_events.kafka.topic_plan import WATCHER_STOPS_TOPIC, configured_topic

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.producer import RecordProducer
    from airflow_kafka_events.kafka.settings import ConfigKey, KafkaSettings

log = logging.getLogger(__name__)

__all__ = [
    "IN_DOUBT",
    "IN_DOUBT_FIRED",
    "MARK_READS",
    "MARK_READ_TIMEOUT",
    "MARK_WRITE_TIMEOUT",
    "STOPS_OPTION",
    "MarkReads",
    "WatcherResumption",
    "decode_mark",
    "encode_mark",
    "mark_key",
    "read_marks",
    "resumption",
    "stops_topic",
    "write_mark",
]

#: ``[kafka_events]`` option naming the compacted topic of the clean-stop marks.
STOPS_OPTION = "watcher_stops_topic"
#: Key of the mark's count of records fired and not confirmed by Airflow at the stop.
IN_DOUBT = "in_doubt"
#: Key of the mark's ``[sequence number, idempotency key]`` of each of those records, in the order fired.
IN_DOUBT_FIRED = "in_doubt_fired"
#: Seconds a closing watcher waits for the broker's acknowledgement of its mark (its producer connected
#: when the watcher opened; Airflow's runner closes the watchers one after the other and is sent
#: SIGKILL 20 s after the stop began).
MARK_WRITE_TIMEOUT = 3.0
#: Seconds a starting watcher may spend reading its mark (then it starts as after a crash).
MARK_READ_TIMEOUT = 15.0


def stops_topic(environ: Mapping[str, str] | None = None) -> str:
    """The topic ``[kafka_events] watcher_stops_topic`` names (default :data:`DEFAULT_STOPS_TOPIC`)."""
    return configured_topic(STOPS_OPTION, WATCHER_STOPS_TOPIC, environ)


def mark_key(kafka_config_id: str, asset_uri: str | None, asset_name: str | None) -> bytes:
    """The mark's record key: one per connection and asset (as the asset state store keys the state)."""
    return json.dumps([kafka_config_id, asset_uri, asset_name], separators=(",", ":")).encode("utf-8")


def encode_mark(state: Mapping[str, Any], in_doubt: Sequence[tuple[int, str]]) -> bytes:
    """The mark of a clean stop: the watcher's last ``state`` and the ``(sequence number, idempotency
    key)`` of each record it fired that awaits Airflow's confirmation."""
    fired = sorted([int(seq), str(key)] for seq, key in in_doubt)
    return json.dumps(
        {**state, "stopped": True, IN_DOUBT: len(fired), IN_DOUBT_FIRED: fired, "stopped_at": time.time()}
    ).encode("utf-8")


def decode_mark(raw: bytes) -> dict[str, Any]:
    """A mark's value, or :class:`ValidationError` naming what is wrong with it."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValidationError(f"a clean-stop mark is not JSON: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("run"), str):
        raise ValidationError("a clean-stop mark must be a JSON object with the run that wrote it")
    in_doubt = value.get(IN_DOUBT)
    if isinstance(in_doubt, bool) or not isinstance(in_doubt, int) or in_doubt < 0:
        raise ValidationError(f"a clean-stop mark's {IN_DOUBT} must be an int >= 0, got {in_doubt!r}")
    fired = value.get(IN_DOUBT_FIRED)
    if fired is not None and not (
        isinstance(fired, list)
        and len(fired) == in_doubt
        and all(
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], int)
            and not isinstance(item[0], bool)
            and isinstance(item[1], str)
            for item in fired
        )
    ):
        raise ValidationError(
            f"a clean-stop mark's {IN_DOUBT_FIRED} must list {in_doubt} [sequence number, key] pairs"
        )
    return value


@dataclass(frozen=True)
class WatcherResumption:
    """Where a starting watcher resumes from, and how its previous run ended."""

    #: the state to resume from (positions, keys, run), ``None`` for a first start
    state: Mapping[str, Any] | None
    #: the previous run stopped cleanly (or there was none)
    clean: bool
    #: records the previous run fired that Airflow had not confirmed at its clean stop
    in_doubt: int = 0
    #: the state came from the Kafka mark (not from the asset state store)
    from_mark: bool = False
    #: ``[sequence number, key]`` of each record in doubt (``None``: a mark that does not list them)
    in_doubt_fired: tuple[tuple[int, str], ...] | None = None

    @property
    def recheck(self) -> bool:
        """Ask Airflow what it has (when configured): after a crash, or records in doubt."""
        return self.state is not None and (not self.clean or self.in_doubt > 0)


def resumption(stored: Mapping[str, Any] | None, mark: Mapping[str, Any] | None) -> WatcherResumption:
    """How to resume from the asset state store's ``stored`` state and the Kafka ``mark`` (decoded)."""
    if stored is None:  # a first start (or a cleared store): its mark is not about it
        return WatcherResumption(None, clean=True)
    if mark is not None and mark.get("run") == stored.get("run"):
        fired = mark.get(IN_DOUBT_FIRED)
        return WatcherResumption(
            mark,
            clean=True,
            in_doubt=int(mark.get(IN_DOUBT, 0)),
            from_mark=True,
            in_doubt_fired=tuple((int(seq), str(key)) for seq, key in fired) if fired is not None else None,
        )
    return WatcherResumption(stored, clean=stored.get("stopped") is True)


async def write_mark(
    producer: RecordProducer, topic: str, key: bytes, value: bytes, timeout: float = MARK_WRITE_TIMEOUT
) -> None:
    """Produce the mark and wait for the broker's acknowledgement (raises the producer's errors)."""
    await producer.send_async(topic, value, key=key, timeout=timeout)


def read_marks(
    settings: KafkaSettings, topic: str, keys: Collection[bytes], timeout: float = MARK_READ_TIMEOUT
) -> dict[bytes, bytes | None]:
    """The latest mark of each of ``keys`` (blocking: call it on a thread), ``None`` for a key
    without one.

    Reads only the partitions the keys are in, from their start to their end as it is now.  Raises
    :class:`TopicError` when the topic does not exist, :class:`TimeoutError` past ``timeout``.
    """
    from airflow_kafka_events.kafka.compacted import read_compacted_keys

    def missing() -> TopicError:
        return TopicError(
            f"the clean-stop topic {topic!r} does not exist ([kafka_events] {STOPS_OPTION}): "
            "create it with `airflow-kafka-events topics ensure`"
        )

    return read_compacted_keys(
        settings, topic, keys, timeout=timeout, purpose="watcher-stops", missing=missing
    )


#: ``read(settings, topic, keys)``: the latest mark of each key (blocking), as :func:`read_marks`.
ReadMarks = Callable[["KafkaSettings", str, Collection[bytes]], Mapping[bytes, "bytes | None"]]


#: a topic of one cluster: its settings' identity and its name
_Topic = tuple["ConfigKey", str]


@dataclass
class _Batch:
    """The marks asked for since the last read of a topic began, and the read that answers them."""

    settings: KafkaSettings
    keys: set[bytes]
    answer: asyncio.Future[Mapping[bytes, bytes | None]]


@dataclass
class _LoopReads:
    """The reads of one event loop, per cluster and topic: the batch waiting for the next read,
    and the reader running (one per cluster and topic)."""

    waiting: dict[_Topic, _Batch] = field(default_factory=dict)
    readers: dict[_Topic, asyncio.Task[None]] = field(default_factory=dict)


class MarkReads:
    """The clean-stop marks of the watchers of a process that start together, read in a few passes.

    One read of a topic at a time runs, on a thread, for every key asked for before it began; a
    key asked for while a read runs waits for the next one.  So a mark written before its watcher
    asked is in the read that answers it, as if each watcher read its own, and the watchers a
    triggerer starts together (up to its capacity) make one or two reads, not one each.

    :param read: reads the latest marks of some keys (blocking, run in a thread).
    """

    def __init__(self, read: ReadMarks | None = None) -> None:
        self._read = read
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopReads] = (
            weakref.WeakKeyDictionary()
        )
        #: reads made (for tests and benchmarks)
        self.reads = 0

    async def read(self, settings: KafkaSettings, topic: str, key: bytes) -> bytes | None:
        """The latest mark of ``key`` in ``topic``, ``None`` when it has none (raises the read's error)."""
        loop = asyncio.get_running_loop()
        where = (settings.key, topic)
        reads = self._loops.get(loop)
        if reads is None:
            reads = self._loops[loop] = _LoopReads()
        batch = reads.waiting.get(where)
        if batch is None:
            batch = reads.waiting[where] = _Batch(settings, set(), loop.create_future())
            batch.answer.add_done_callback(_looked_at)
        batch.keys.add(key)
        if where not in reads.readers:
            reads.readers[where] = loop.create_task(self._serve(where, reads), name=f"marks[{topic}]")
        found = await asyncio.shield(batch.answer)
        return found.get(key)

    async def _serve(self, where: _Topic, reads: _LoopReads) -> None:
        try:
            while (batch := reads.waiting.pop(where, None)) is not None:
                try:
                    found = await self._read_batch(where[1], batch)
                except asyncio.CancelledError:
                    batch.answer.cancel()  # the loop is closing: so are the watchers waiting
                    raise
                except BaseException as exc:
                    batch.answer.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                else:
                    batch.answer.set_result(found)
        finally:
            reads.readers.pop(where, None)
            left = reads.waiting.pop(where, None)
            if left is not None and not left.answer.done():
                left.answer.cancel()  # not served: the loop is closing

    async def _read_batch(self, topic: str, batch: _Batch) -> Mapping[bytes, bytes | None]:
        """The batch's marks; a read that fails is tried once more (it fails every watcher of the
        batch: each would start as after a crash)."""
        read = self._read or read_marks
        keys = frozenset(batch.keys)
        self.reads += 1
        try:
            return await asyncio.to_thread(read, batch.settings, topic, keys)
        except Exception as exc:
            log.info(
                "reading %d clean-stop mark(s) from %s failed (%s); trying once more", len(keys), topic, exc
            )
        self.reads += 1
        return await asyncio.to_thread(read, batch.settings, topic, keys)


def _looked_at(answer: asyncio.Future[Any]) -> None:
    if not answer.cancelled():
        answer.exception()  # every watcher that asked may have gone


#: The marks' reads of this process: its watchers start together (see :class:`MarkReads`).
MARK_READS = MarkReads()
