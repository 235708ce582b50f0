"""Dead letters of asset watchers: a refused record goes to the dead-letter topic once.

:class:`WatcherDeadLetters` is the part of
:class:`~airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger` that writes them:
it waits for the broker's acknowledgement (retrying with backoff while the dead-letter topic is
unreachable) before the record is rejected, so the position only moves past a record that is
safe in the dead-letter topic.  :data:`DEAD_LETTERED` remembers, per process, which records were
dead-lettered already: an undecodable record is every watcher's of its topic, and the first
watcher that sees it writes it, the others move on.  Across triggerers, the watchers that meet such
a record claim it in Kafka first (:mod:`~airflow_kafka_events.watcher.dead_letter_claims`): only the
watcher whose claim came first writes it, or, when that watcher runs in this process too, the
watcher that met the record (any watcher of the topic may write it; :data:`RUNNING_WATCHERS`).
When the claim cannot be made (the watchers' topic
missing, Kafka unreachable) the watcher writes the dead letter anyway: another triggerer may
write one too, none is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterator

from airflow.utils.log.logging_mixin import LoggingMixin
from asgiref.sync import sync_to_async

from airflow_kafka_events import metrics
from airflow_kafka_events.assets.admission import AdmissionVerdict
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.dead_letters.log import log_dead_lettered
from airflow_kafka_events.dead_letters.writer import DLQ_ROLE, DLQ_TIMEOUT, DeadLetterWriter
from airflow_kafka_events.watcher.dead_letter_claims import CLAIM_WRITE_TIMEOUT, DeadLetterClaims
from airflow_kafka_events.watcher.records import KafkaRecord
from airflow_kafka_events.watcher.stops import mark_key, stops_topic

__all__ = [
    "DEAD_LETTERED",
    "RUNNING_WATCHERS",
    "WatcherDeadLetters",
]

#: Producer role of the dead-letter claims.
CLAIMS_ROLE = "dead-letter-claims"
_DLQ_RETRY_FIRST_DELAY = 1.0
_DLQ_RETRY_MAX_DELAY = 30.0


class _Claims:
    """A bounded set of claimed keys: the first caller of ``claim(key)`` gets ``True``."""

    def __init__(self, max_size: int = 65_536) -> None:
        self.max_size = max_size
        self._keys: OrderedDict[Hashable, None] = OrderedDict()

    def claim(self, key: Hashable) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        while len(self._keys) > self.max_size:
            self._keys.popitem(last=False)
        return True

    def release(self, key: Hashable) -> None:
        self._keys.pop(key, None)

    def clear(self) -> None:
        self._keys.clear()


#: Records already dead-lettered in this process (per shared stream, or per watcher for records
#: about its own asset): a redelivery after a sibling's failure is not dead-lettered twice.
DEAD_LETTERED = _Claims()


#: The watchers (by claimer name) whose stream runs in this process: a claim won by one of them is
#: this process's to write, whichever of its watchers holds the record (the winner may have claimed
#: it in an earlier run that stopped before its dead letter was acknowledged).
RUNNING_WATCHERS: Counter[str] = Counter()


class WatcherDeadLetters(LoggingMixin):
    """Writing a watcher's refused records to ``dlq_topic`` (a mixin of the watcher trigger)."""

    dlq_topic: str | None
    dlq_kafka_config_id: str | None
    kafka_config_id: str
    asset_uri: str | None
    asset_name: str | None
    _dlq_writer: DeadLetterWriter | None
    _claims: DeadLetterClaims | None = None
    _claims_warned: bool = False

    @property
    def consumer_label(self) -> str:  # pragma: no cover - the trigger defines it
        raise NotImplementedError

    def shared_stream_key(self) -> Hashable:  # pragma: no cover - the trigger defines it
        raise NotImplementedError

    def _make_dlq_writer(self) -> DeadLetterWriter:
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        assert self.dlq_topic is not None
        conn_id = self.dlq_kafka_config_id or self.kafka_config_id
        producer = KafkaEventsHook(kafka_config_id=conn_id).get_producer(
            role=DLQ_ROLE, message_timeout=DLQ_TIMEOUT
        )
        return DeadLetterWriter(producer, self.dlq_topic, timeout=DLQ_TIMEOUT)

    @property
    def claimer(self) -> str:
        """This watcher's name in dead-letter claims: its connection and asset (the same every run)."""
        return mark_key(self.kafka_config_id, self.asset_uri, self.asset_name).decode("utf-8")

    @contextlib.contextmanager
    def running_here(self) -> Iterator[None]:
        """Within the block this watcher counts as running in this process (:data:`RUNNING_WATCHERS`)."""
        name = self.claimer
        RUNNING_WATCHERS[name] += 1
        try:
            yield
        finally:
            RUNNING_WATCHERS[name] -= 1
            if RUNNING_WATCHERS[name] <= 0:
                del RUNNING_WATCHERS[name]

    def _make_claims(self) -> DeadLetterClaims:
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        hook = KafkaEventsHook(kafka_config_id=self.kafka_config_id)
        producer = hook.get_producer(role=CLAIMS_ROLE, message_timeout=CLAIM_WRITE_TIMEOUT)
        return DeadLetterClaims(producer, hook.get_settings(), stops_topic(), self.claimer)

    async def _left_to_another(self, record: KafkaRecord) -> str | None:
        """The watcher of another triggerer that dead-letters ``record``, ``None`` when it is this
        process's to write (its claim came first, or that of a watcher running here)."""
        assert self.dlq_topic is not None
        try:
            if self._claims is None:
                self._claims = await sync_to_async(self._make_claims)()
            first = await self._claims.first_claimer(
                self.dlq_topic, record.topic, record.partition, record.offset, record.timestamp_ms
            )
        except Exception as exc:
            if not self._claims_warned:
                self._claims_warned = True
                self.log.warning(
                    "Cannot claim %s[%s]@%s in %s before dead-lettering it (%s); it dead-letters the records "
                    "every watcher of the topic refuses without a claim, so another triggerer may write "
                    "them too",
                    record.topic,
                    record.partition,
                    record.offset,
                    self._claims.topic if self._claims is not None else "the watchers' topic",
                    exc,
                )
            return None
        return None if first == self._claims.claimer or first in RUNNING_WATCHERS else first

    async def _dead_letter_writer(self) -> DeadLetterWriter:
        if self._dlq_writer is None:
            self._dlq_writer = await sync_to_async(self._make_dlq_writer)()
        return self._dlq_writer

    async def _dead_letter(self, record: KafkaRecord, verdict: AdmissionVerdict) -> bool:
        """Write the dead-letter record of ``record`` and wait until it is acknowledged.

        Returns ``False`` when another watcher of the shared stream (or this one, before a
        redelivery) already dead-letters it: the caller then simply moves on.  While the
        dead-letter topic is unreachable it retries with backoff (up to 30 s between tries).
        """
        assert verdict.reason is not None and verdict.error is not None
        stream_key = self.shared_stream_key()
        # an undecodable record is every watcher's on the topic: one claim per process (then in Kafka)
        scope: Hashable = (
            ("any-watcher", self.kafka_config_id, self.dlq_topic)
            if verdict.group_scope
            else (stream_key, self.asset_uri, self.asset_name)
        )
        claim = (scope, record.topic, record.partition, record.offset)
        if not DEAD_LETTERED.claim(claim):
            return False
        if verdict.group_scope and self.dlq_topic is not None:
            try:
                other = await self._left_to_another(record)
            except BaseException:
                DEAD_LETTERED.release(claim)
                raise
            if other is not None:
                # should the winner stop before writing and run here next, its watcher must claim again
                DEAD_LETTERED.release(claim)
                self.log.info(
                    "Leaving %s[%s]@%s (%s) to %s, whose claim to dead-letter it came first",
                    record.topic,
                    record.partition,
                    record.offset,
                    verdict.reason,
                    other,
                )
                return False
        envelope = verdict.envelope
        letter = DeadLetter.of_record(
            verdict.reason, verdict.error, record, envelope, consumer=self.consumer_label
        )
        if self.dlq_topic is None:
            self.log.error(
                "Dropping %s[%s]@%s (%s: %s); no dlq_topic is configured",
                record.topic,
                record.partition,
                record.offset,
                letter.reason,
                letter.error_message,
            )
            return True
        delay = _DLQ_RETRY_FIRST_DELAY
        try:
            while True:
                try:
                    writer = await self._dead_letter_writer()
                    receipt = await writer.awrite(
                        letter, value=record.value, key=record.key, headers=record.headers
                    )
                except Exception as exc:
                    self.log.error(
                        "Cannot dead-letter %s[%s]@%s to %s (%s); retrying in %.0fs, the record stays "
                        "uncommitted meanwhile",
                        record.topic,
                        record.partition,
                        record.offset,
                        self.dlq_topic,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _DLQ_RETRY_MAX_DELAY)
                    continue
                metrics.dead_lettered(letter.reason, "watcher", record.topic)
                log_dead_lettered(self.log, record, receipt, letter)
                return True
        except BaseException:
            # cancelled (watcher removed, triggerer stopping) before the write was acknowledged:
            # whoever sees the record next must dead-letter it
            DEAD_LETTERED.release(claim)
            raise
