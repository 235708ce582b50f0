"""The partition bridge: asset events from Kafka become Airflow asset events WITH their partition key.

Airflow 3.3 gives the events of an ``AssetWatcher`` no partition key, so DAGs scheduled with
``PartitionedAssetTimetable`` never run from a watcher.  The public REST API does accept one
(``POST /api/v2/assets/events``), so the bridge consumes
:class:`~airflow_kafka_events.envelopes.model.AssetEventEnvelope` records and posts each of them there.

For each record, in partition order:

1-4. the asset watcher's admission pipeline (:mod:`airflow_kafka_events.assets.admission`):
   a record over ``max_record_bytes`` or an ``extra`` over ``max_extra_bytes`` (``too-large``)
   and a record that does not decode (poison: ``undecodable``, ``unknown-schema``,
   ``invalid-envelope``) go to the dead-letter topic; events of assets outside ``--asset``
   (when given), and without a partition key when ``--skip-unpartitioned``, are skipped (left
   to other consumers, e.g. an AssetWatcher); signature (``--signing-key-file``), source
   allowlist (``--allow``), causation depth (``--max-causation-depth``) and a partition key
   Airflow would accept (``invalid-envelope``) — a failure goes to the dead-letter topic; a
   repeat of an idempotency key seen recently (a bounded :class:`SeenKeys` per process, scoped
   by asset) is skipped;
5. the asset id is resolved by exact name and URI (cached; asked again on a miss) — an unknown
   asset goes to the dead-letter topic (``unknown-asset``);
6. for the first ``recheck_records`` records of a newly assigned partition (the window a previous
   owner may have posted without committing), and before repeating a POST whose outcome is
   unknown (timeout, 5xx), the asset's most recent Airflow events are searched for the envelope's
   ``event_id`` or idempotency key: when found, nothing is posted;
7. ``POST /api/v2/assets/events`` with the partition key and ``extra`` = the envelope's extra,
   ``partition_date`` (ISO-8601; the REST API has no such field, so it travels in ``extra``) and
   the provenance under ``extra["airflow_kafka_events"]`` (``event_id``, ``idempotency_key``,
   ``causation``, ``source``, ``emitted_at``, ``kafka`` coordinates) — what
   :func:`~airflow_kafka_events.assets.emit.triggering_causation` reads to extend causation chains;
   any other 4xx goes to the dead-letter topic with Airflow's answer (``rejected-by-airflow``);
8. the record's offset is committed — only after a 2xx, a found duplicate, a skip, or an
   acknowledged dead-letter write.

Transient failures (connection errors, timeouts, 5xx, 408, 425, 429) are retried with bounded
exponential backoff; when the budget is spent the bridge stops with an error *without* committing
(the record is not skipped: a restarted bridge, or another replica, takes it again).  A 401 renews
the token once; a 403 or refused credentials stop the bridge (configuration errors).

SIGTERM / SIGINT: the event in flight is finished and committed, then the consumer leaves the
group; records fetched but not handled are not committed and are delivered again.

Dead-letter records are those of :mod:`airflow_kafka_events.dead_letters.letter`.  Besides the
:class:`~airflow_kafka_events.dead_letters.headers.DeadLetterReason` codes the bridge writes
``unknown-asset`` (no active Airflow asset with that name and URI) and ``rejected-by-airflow`` (any
other 4xx answer; the status and Airflow's detail are in ``x-error-message``).

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from types import FrameType
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from airflow_kafka_events import metrics
from airflow_kafka_events.assets.admission import AdmissionPipeline, AdmissionVerdict
from airflow_kafka_events.assets.airflow_api import (
    AirflowApiClient,
    AssetIdCache,
    NotFoundError,
    RejectedError,
    TransientApiError,
    UnknownAssetError,
    retry_api_call,
)
from airflow_kafka_events.assets.idempotency import SeenKeys
from airflow_kafka_events.bridge.airflow_event import event_extra
from airflow_kafka_events.bridge.config import BridgeConfig
from airflow_kafka_events.bridge.errors import BridgeError, DeadLetterError, RetriesExhaustedError
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.dead_letters.log import BRIDGE_LINE, log_dead_lettered
from airflow_kafka_events.dead_letters.writer import DLQ_ROLE, DLQ_TIMEOUT, DeadLetterWriter
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    KafkaOperationError,
    SchemaRegistryUnavailableError,
)
from airflow_kafka_events.kafka.client_log import refusal_error
from airflow_kafka_events.kafka.consumer import RAW_BYTES, ConsumedRecord, EnvelopeConsumer
from airflow_kafka_events.kafka.producer import RecordProducer, get_producer

log = logging.getLogger(__name__)

__all__ = [
    "FAULT_EXIT_CODE",
    "REASON_REJECTED_BY_AIRFLOW",
    "REASON_UNKNOWN_ASSET",
    "BridgeService",
    "Outcome",
]

T = TypeVar("T")

#: Exit status of the process when the fault-injection hook fires (tests only).
FAULT_EXIT_CODE = 75
#: ``x-reason`` of an event whose asset Airflow does not have (active, with that name and URI).
REASON_UNKNOWN_ASSET = "unknown-asset"
#: ``x-reason`` of an event Airflow answered with a 4xx (other than 401/403).
REASON_REJECTED_BY_AIRFLOW = "rejected-by-airflow"
#: Commits failing this many times in a row stop the bridge: without commits every restart would
#: replay more than the recheck window covers.
MAX_CONSECUTIVE_COMMIT_FAILURES = 3
#: librdkafka errors of a poll that are worth waiting out.
_TRANSIENT_POLL_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)


class Outcome(str, Enum):
    """What the bridge did with one record (each one is committed afterwards)."""

    POSTED = "posted"
    ALREADY_PRESENT = "already_present"  # found among the asset's recent Airflow events
    DUPLICATE = "duplicate"  # idempotency key seen recently by this process
    DEAD_LETTERED = "dead_lettered"
    SKIPPED = "skipped"  # another asset (--asset), or no partition key and --skip-unpartitioned


class _StopRequested(Exception):
    """A stop was requested while waiting to retry."""


def _decoded(record: ConsumedRecord[Any]) -> AssetEventEnvelope | EnvelopeDecodeError | None:
    """What the consumer already made of a record (``None``: raw bytes, the pipeline decodes)."""
    if record.error is not None:
        return record.error
    return record.value if isinstance(record.value, AssetEventEnvelope) else None


def _tp(record: ConsumedRecord[Any]) -> tuple[str, int]:
    return (record.topic, record.partition)


# --------------------------------------------------------------------------- service
class BridgeService:
    """The consumer loop.  ``run()`` blocks until :meth:`request_stop` (or a signal) or a fatal error.

    ``api`` / ``producer`` replace the REST client / dead-letter producer built from ``config``.
    ``after_post(envelope)`` is called after a successful POST and before the commit: a test can
    raise (or exit) there to simulate a crash between the two.
    """

    def __init__(
        self,
        config: BridgeConfig,
        *,
        api: AirflowApiClient | None = None,
        producer: RecordProducer | None = None,
        after_post: Callable[[AssetEventEnvelope], None] | None = None,
    ) -> None:
        self.config = config
        self.api = api or AirflowApiClient(
            config.api_url,
            config.username,
            config.password,
            timeout=config.request_timeout,
            renew_margin=config.token_renew_margin,
        )
        self._own_api = api is None
        self._producer = producer
        self._after_post = after_post
        self._dlq: DeadLetterWriter | None = None
        self.assets = AssetIdCache(self.api)
        self.seen = SeenKeys(max_size=config.seen_keys_max, ttl=config.seen_keys_ttl)
        self.admission = AdmissionPipeline(
            config.admission_config(), seen=self.seen, decoder=config.kafka.codecs.asset
        )
        self.stats: Counter[str] = Counter()
        self._stop = threading.Event()
        self._consumer: EnvelopeConsumer[bytes] | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._recheck: dict[tuple[str, int], int] = {}
        self._commit_failures = 0
        self._lock = threading.Lock()
        self._lag = metrics.LagReporter(metrics.BRIDGE_LAG, records=metrics.BRIDGE_RECORDS)

    # ------------------------------------------------------------------ control
    def request_stop(self) -> None:
        """Finish the event in flight, commit it, and return from :meth:`run`."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT request a graceful stop (call from the main thread)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._stop.is_set():
                log.info("received %s again: still stopping", signal.Signals(signum).name)
                return
            log.info("received %s: finishing the event in flight, then stopping", signal.Signals(signum).name)
            self._stop.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> None:
        """Consume until stopped.  Raises :class:`BridgeError` (or a subclass) on a fatal error."""
        log.info("bridge starting: %s", self.config.describe())
        try:
            self._with_retries("logging in to the Airflow API", self.api.login)
            self._open_kafka()
            while not self._stop.is_set():
                records = self._poll()
                if records:
                    self._handle_batch(records)
        except _StopRequested:
            pass
        except Exception as exc:
            metrics.incr(f"{metrics.BRIDGE_ERRORS}.{metrics.error_part(exc)}")
            raise
        finally:
            self._close()
        log.info("bridge stopped: %s", dict(self.stats))

    def _dlq_producer(self) -> Any:
        """The dead-letter producer: it drops a letter it could not deliver within the writer's wait."""
        return get_producer(self.config.kafka.producer_config(), role=DLQ_ROLE, message_timeout=DLQ_TIMEOUT)

    def _open_kafka(self) -> None:
        config = self.config
        if self._producer is None:
            self._producer = self._dlq_producer()
        # raw bytes: the admission pipeline checks the size before it decodes
        consumer: EnvelopeConsumer[bytes] = EnvelopeConsumer(
            config.consumer_config(), RAW_BYTES, topics=[config.topic]
        )
        self._consumer = consumer
        # Subscribe again with rebalance callbacks (the first subscription had none).
        consumer.client.subscribe(
            [config.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        self._check_topics(consumer)

    def _check_topics(self, consumer: EnvelopeConsumer[Any]) -> None:
        for topic, required in ((self.config.dlq_topic, True), (self.config.topic, False)):
            try:
                meta = self._metadata(consumer, topic)
            except Exception as exc:  # metadata failure: the poll loop will report the broker
                log.warning("could not read the metadata of topic %r: %s", topic, exc)
                continue
            missing = meta is None or (
                meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if missing and required:
                raise ConfigurationError(
                    f"the dead-letter topic {topic!r} does not exist: create it (`airflow-kafka-events "
                    "topics ensure`) or pass --dlq-topic"
                )
            if missing:
                log.warning("topic %r does not exist yet; waiting (see: topics ensure)", topic)

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._own_api:
            self.api.close()

    # ------------------------------------------------------------------ rebalance callbacks
    def _on_assign(self, consumer: Any, partitions: Sequence[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._assigned.add(key)
                self._recheck[key] = self.config.recheck_records
        log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing")

    def _on_revoke(self, consumer: Any, partitions: Sequence[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._assigned.discard((tp.topic, tp.partition))
                self._recheck.pop((tp.topic, tp.partition), None)
        log.info("revoked %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing")

    def _take_recheck(self, record: ConsumedRecord[Any]) -> bool:
        with self._lock:
            left = self._recheck.get(_tp(record), 0)
            if left > 0:
                self._recheck[_tp(record)] = left - 1
            return left > 0

    # ------------------------------------------------------------------ the loop
    def _poll(self) -> list[ConsumedRecord[bytes]]:
        assert self._consumer is not None
        try:
            records = self._consumer.poll_batch(
                max_records=self.config.batch_size, timeout=self.config.poll_timeout
            )
        except KafkaOperationError as exc:
            if exc.code in _TRANSIENT_POLL_ERRORS or exc.retriable:
                log.warning("Kafka: %s; waiting", exc)
                self._stop.wait(self.config.poll_timeout)
                return []
            raise
        self._raise_if_refused(self._consumer)
        return records

    def _metadata(self, consumer: EnvelopeConsumer[Any], topic: str, timeout: float = 15.0) -> Any:
        """The topic's metadata, asked in 1 s tries so a refusal of the credentials ends it at once."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return consumer.client.list_topics(topic=topic, timeout=1.0).topics.get(topic)
            except KafkaException:
                self._raise_if_refused(consumer)
                if time.monotonic() >= deadline:
                    raise

    def _raise_if_refused(self, consumer: EnvelopeConsumer[Any]) -> None:
        """Refused credentials / TLS do not heal by retrying: stop with the typed error (the bridge
        exits non-zero; its supervisor restarts it with backoff) instead of spinning.

        The consumer learns of a refusal when it polls; the dead-letter producer (same
        connection) polls all the time, so it usually knows first."""
        for health in (consumer.health, getattr(self._producer, "health", None)):
            refused = health.refusal() if health is not None else None
            if health is not None and refused is not None:
                raise refusal_error(health, refused)

    def _handle_batch(self, records: Sequence[ConsumedRecord[Any]]) -> None:
        assert self._consumer is not None
        for index, record in enumerate(records):
            if self._stop.is_set():
                return  # not committed: delivered again after the restart
            if _tp(record) not in self._assigned:
                continue  # revoked since it was fetched: its new owner handles it
            try:
                outcome, envelope = self._handle(record)
            except SchemaRegistryUnavailableError as exc:
                # not the record's fault: neither dead-lettered nor committed; read again after a wait
                log.warning("%s[%d]@%d waits for the schema registry: %s", *_tp(record), record.offset, exc)
                self.stats["registry_unavailable"] += 1
                self._rewind(records[index:])
                self._stop.wait(self.config.poll_timeout)
                return
            self.stats[outcome.value] += 1
            self._lag.record(
                outcome.value, self._consumer.client, record.topic, record.partition, record.offset
            )
            if outcome is Outcome.POSTED:
                assert envelope is not None
                self._fire_after_post(envelope)
            if not self._commit(record):
                self._rewind(records[index + 1 :])
                return

    def _commit(self, record: ConsumedRecord[Any]) -> bool:
        assert self._consumer is not None
        try:
            self._consumer.commit([record])
        except KafkaOperationError as exc:
            self._commit_failures += 1
            log.warning(
                "committing %s[%d]@%d failed (%d in a row): %s; it will be checked against Airflow when "
                "delivered again",
                record.topic,
                record.partition,
                record.offset,
                self._commit_failures,
                exc,
            )
            if self._commit_failures >= MAX_CONSECUTIVE_COMMIT_FAILURES:
                raise BridgeError(
                    f"{self._commit_failures} offset commits failed in a row; stopping: {exc}"
                ) from exc
            return False
        self._commit_failures = 0
        return True

    def _rewind(self, rest: Sequence[ConsumedRecord[Any]]) -> None:
        """Seek back to the first record of each partition that was fetched but not handled."""
        assert self._consumer is not None
        first: dict[tuple[str, int], int] = {}
        for record in rest:
            first.setdefault(_tp(record), record.offset)
        for (topic, partition), offset in first.items():
            try:
                self._consumer.client.seek(TopicPartition(topic, partition, offset))
            except Exception as exc:  # not assigned any more: its new owner reads it
                log.info("not seeking %s[%d] back to %d: %s", topic, partition, offset, exc)

    def _fire_after_post(self, envelope: AssetEventEnvelope) -> None:
        if self._after_post is not None:
            self._after_post(envelope)
        config = self.config
        if config.fault_after_post and config.fault_partition_key in (None, envelope.partition_key):
            log.warning(
                "fault injection: exiting with status %d after posting %s, before committing it",
                FAULT_EXIT_CODE,
                envelope.event_id,
            )
            logging.shutdown()
            sys.stderr.flush()
            os._exit(FAULT_EXIT_CODE)

    # ------------------------------------------------------------------ one record
    def handle(self, record: ConsumedRecord[Any]) -> Outcome:
        """Post (or dead-letter, or skip) one record; the caller commits it afterwards.

        ``record.value`` is the raw bytes (what the bridge's consumer gives) or an envelope
        already decoded (with ``record.error`` for one that did not decode).
        """
        return self._handle(record)[0]

    def _handle(self, record: ConsumedRecord[Any]) -> tuple[Outcome, AssetEventEnvelope | None]:
        where = f"{record.topic}[{record.partition}]@{record.offset}"
        verdict = self.admission.admit(
            record.raw, key=record.key, headers=record.headers, decoded=_decoded(record)
        )
        if verdict.rejected:
            assert verdict.reason is not None and verdict.error is not None
            return self._dead_letter(record, verdict.reason.value, verdict.error, verdict.envelope), None
        envelope = verdict.envelope
        assert envelope is not None
        if verdict.skipped:
            level = logging.INFO if verdict.duplicate else logging.DEBUG
            log.log(level, "%s: event %s %s: skipped", where, envelope.event_id, verdict.detail)
            return (Outcome.DUPLICATE if verdict.duplicate else Outcome.SKIPPED), None
        return self._post(record, verdict, envelope), envelope

    def _post(
        self, record: ConsumedRecord[Any], verdict: AdmissionVerdict, envelope: AssetEventEnvelope
    ) -> Outcome:
        try:
            outcome, event = self._deliver(envelope, record)
        except UnknownAssetError as exc:
            return self._dead_letter(record, REASON_UNKNOWN_ASSET, exc, envelope)
        except RejectedError as exc:
            return self._dead_letter(record, REASON_REJECTED_BY_AIRFLOW, exc, envelope)
        self.admission.remember(verdict)
        log.info(
            "%s[%d]@%d: event %s of %s (partition_key=%r) %s as Airflow asset event %s",
            record.topic,
            record.partition,
            record.offset,
            envelope.event_id,
            envelope.asset.uri,
            envelope.partition_key,
            "posted" if outcome is Outcome.POSTED else "already present",
            event.get("id"),
        )
        return outcome

    def _deliver(
        self, envelope: AssetEventEnvelope, record: ConsumedRecord[Any]
    ) -> tuple[Outcome, Mapping[str, Any]]:
        asset = envelope.asset
        extra = event_extra(envelope, record)
        state = {"check": self._take_recheck(record), "refreshed": False}
        asset_id = self._with_retries(
            "resolving the asset id", lambda: self.assets.get(asset.name, asset.uri)
        )

        def attempt() -> tuple[Outcome, Mapping[str, Any]]:
            if state["check"]:
                found = self.api.find_recent_event(
                    asset_id,
                    event_id=envelope.event_id,
                    idempotency_key=envelope.idempotency_key,
                    limit=self.config.recent_events_limit,
                )
                if found is not None:
                    return Outcome.ALREADY_PRESENT, found
                state["check"] = False
            try:
                created = self.api.post_asset_event(
                    asset_id, partition_key=envelope.partition_key, extra=extra
                )
            except TransientApiError as exc:
                if exc.ambiguous:
                    state["check"] = True  # it may have been created: look before posting again
                raise
            return Outcome.POSTED, created

        while True:
            try:
                return self._with_retries(f"posting event {envelope.event_id}", attempt)
            except NotFoundError:
                if state["refreshed"]:
                    raise
                # the cached id may be stale (asset removed and added again): ask once more
                state["refreshed"] = True
                self.assets.invalidate(asset.name, asset.uri)
                asset_id = self._with_retries(
                    "resolving the asset id", lambda: self.assets.get(asset.name, asset.uri)
                )

    def _with_retries(self, what: str, operation: Callable[[], T]) -> T:
        """``operation()`` through the retry policy (``airflow_kafka_events.retry``); a stop ends waits."""
        policy = self.config.retry

        def exhausted(failures: int, exc: BaseException) -> BaseException:
            return RetriesExhaustedError(
                f"{what}: giving up after {failures} attempts; nothing was committed: {exc}"
            )

        def on_retry(failures: int, exc: BaseException, delay: float) -> None:
            log.warning(
                "%s failed (attempt %d of %d): %s; retrying in %.1fs",
                what,
                failures,
                policy.max_attempts,
                exc,
                delay,
            )

        def wait(delay: float) -> None:
            if self._stop.wait(delay):
                raise _StopRequested from None

        return retry_api_call(operation, policy, exhausted=exhausted, on_retry=on_retry, sleep=wait)

    def _dead_letter(
        self,
        record: ConsumedRecord[Any],
        reason: str,
        error: BaseException,
        envelope: AssetEventEnvelope | None,
    ) -> Outcome:
        """Write ``record`` to the dead-letter topic and wait for the broker's acknowledgement."""
        if self._dlq is None:
            if self._producer is None:
                self._producer = self._dlq_producer()
            self._dlq = DeadLetterWriter(self._producer, self.config.dlq_topic, timeout=DLQ_TIMEOUT)
        consumer = f"airflow-kafka-events bridge (group={self.config.group_id})"
        letter = DeadLetter.of_record(reason, error, record, envelope, consumer=consumer)
        try:
            receipt = self._dlq.write(letter, value=record.raw, key=record.key, headers=record.headers)
        except KafkaOperationError as exc:
            raise DeadLetterError(
                f"could not write {record.topic}[{record.partition}]@{record.offset} to the dead-letter "
                f"topic {self.config.dlq_topic!r}; nothing was committed: {exc}"
            ) from exc
        metrics.dead_lettered(letter.reason, "bridge", record.topic)
        log_dead_lettered(log, record, receipt, letter, line=BRIDGE_LINE)
        return Outcome.DEAD_LETTERED
