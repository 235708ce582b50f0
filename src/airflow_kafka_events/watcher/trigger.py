"""Asset events from Kafka into Airflow through an ``AssetWatcher``.

:class:`KafkaAssetEventTrigger` turns the
:class:`~airflow_kafka_events.envelopes.model.AssetEventEnvelope` records on a topic into Airflow
asset events for *one* asset::

    from airflow.sdk import DAG, Asset, AssetWatcher

    investigate = Asset(
        "ops://investigate",
        watchers=[
            AssetWatcher(
                name="investigate_from_kafka",
                trigger=KafkaAssetEventTrigger(
                    topics=["airflow.asset-events"],
                    asset_uri="ops://investigate",
                    kafka_config_id="kafka_watcher",
                    dlq_topic="airflow.kafka-events.dlq",
                ),
            )
        ],
    )

    with DAG("investigate_failure", schedule=[investigate]): ...

(:func:`kafka_watched_asset` builds the same ``Asset`` without repeating its URI.)

What Airflow records
    ``AssetEvent.extra == {"from_trigger": True, "payload": <payload>}`` where the payload is
    :func:`envelope_payload`: the envelope's ``event_id``, ``asset``, ``partition_key``,
    ``partition_date``, ``extra``, ``idempotency_key``, ``source``, ``emitted_at``,
    ``causation``, whether it was ``signed``, the ``kafka`` coordinates, the provenance under
    ``"airflow_kafka_events"``, and under ``"watcher"`` the run of the watcher that fired it and the
    record's number in that run (what tells its next start, after a graceful stop, which of its
    last events Airflow has: :mod:`~airflow_kafka_events.watcher.confirmations`).
    Airflow 3.3 and 3.4 give watcher events **no partition key**: this path serves non-partitioned
    consumer DAGs (``partition_key`` stays readable in the payload).  On Airflow 3.3 (and 3.4 with
    ``[scheduler] batch_asset_events = True``) several events that arrive before the consumer
    DAG's run is created coalesce into one run that sees all of them in
    ``triggering_asset_events`` (apache/airflow#54659, #56050); 3.4's default gives each event a
    run of its own (docs/airflow-versions.md).

How it consumes
    Each watcher has a stream and a position of its own, moved past a record only once Airflow
    confirmed the asset events made from it (or the record was dead-lettered); the watchers of one
    triggerer share one reader (:mod:`airflow_kafka_events.watcher.stream`).  After a triggerer
    crash (``kill -9``) duplicates are bounded to about a second of events, nothing is lost; after
    a graceful stop (SIGTERM) nothing fires twice.  Consumer DAGs should still be safe to re-run.

What it does with each record
    It runs the admission pipeline (:mod:`airflow_kafka_events.assets.admission`): records of
    other assets (``asset_uri`` / ``asset_name``; with ``include_partitioned=False``, also those
    with a partition key) are skipped; repeats of an ``idempotency_key`` (else ``event_id``) this
    watcher fired are dropped (``dedupe_max_keys`` / ``dedupe_ttl`` in memory, and the most recent
    1,000 stored with the position); everything else that passes fires one ``TriggerEvent``.
    Refused records (undecodable, ``signing_conn_id``, ``allow``, ``max_causation_depth``, sizes)
    are dead-lettered with their reason and never reach Airflow
    (:mod:`~airflow_kafka_events.watcher.dead_letters`: an undecodable record reaches the
    dead-letter topic once, over all watchers and triggerers); only once the broker acknowledged
    the dead letter is the record rejected (``reject_shared_stream_event``), which lets the
    position pass it.  Without ``dlq_topic`` refused records are logged and dropped.

Feedback loops
    An operational DAG that emits to the asset that triggers it (directly or through other
    DAGs) makes a chain: each event lists its ancestors in ``causation``.  The watcher refuses
    (dead-letters, ``causation-too-deep``) an event with more than ``max_causation_depth``
    ancestors, so such a loop runs at most ``max_causation_depth + 1`` times per seed event.
    Emitting code continues the chain with :func:`watcher_causation` (pass its result as
    ``causation=``): the emit helpers read provenance at the top level of an asset event's
    ``extra``, while a watcher's asset event carries it inside ``extra["payload"]``.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.kafka.triggers.shared_stream import KafkaSharedStreamTrigger
from airflow.triggers.base import TriggerEvent
from airflow.triggers.shared_stream import reject_shared_stream_event

from airflow_kafka_events import metrics
from airflow_kafka_events.airflow_versions import watcher_queue
from airflow_kafka_events.assets.admission import (
    DEFAULT_MAX_RECORD_BYTES,
    AdmissionConfig,
    AdmissionPipeline,
    AdmissionVerdict,
    Stage,
    asset_selector,
)
from airflow_kafka_events.assets.authz import Allowlist
from airflow_kafka_events.assets.idempotency import SeenKeys
from airflow_kafka_events.assets.validation import DEFAULT_MAX_EXTRA_BYTES, check_asset, sanitize_asset_uri
from airflow_kafka_events.assets.watcher_payload import (
    envelope_payload,
)
from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    InvalidAssetError,
    ValidationError,
)
from airflow_kafka_events.watcher.confirmations import PAYLOAD_KEY as CONFIRMATION_KEY
from airflow_kafka_events.watcher.confirmations import fired_mark
from airflow_kafka_events.watcher.dead_letters import WatcherDeadLetters
from airflow_kafka_events.watcher.keys import durable_key
from airflow_kafka_events.watcher.records import KafkaRecord
from airflow_kafka_events.watcher.stream import WatcherStream

if TYPE_CHECKING:
    from airflow.sdk import Asset

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_WATCHER_CONN_ID",
    "DEFAULT_WATCHER_MAX_CAUSATION_DEPTH",
    "KafkaAssetEventTrigger",
    "WatcherTriggerEvent",
    "kafka_watched_asset",
    "kafka_watcher_trigger",
]

#: Default Kafka connection of watchers: a connection of its own, with its own ``group.id``.
DEFAULT_WATCHER_CONN_ID = "kafka_watcher"
#: Default bound on an accepted event's ancestors (feedback-loop guard of the watcher).
DEFAULT_WATCHER_MAX_CAUSATION_DEPTH = 8
#: First element of every shared-stream key of this module.
SHARED_STREAM_NAMESPACE = "airflow_kafka_events.asset_watcher"

_SIGNING_KEY_RETRY_INTERVAL = 10.0


# --------------------------------------------------------------------------- the trigger
def _keys_given_per_record() -> list[bytes]:
    raise RuntimeError("the watcher passes its signing keys with each record")


def _check_arguments(*, asset_uri: Any, asset_name: Any, **optional_names: Any) -> None:
    """The watcher's asset and names, or :class:`ValidationError` naming the wrong one (the other
    arguments are checked by :class:`AdmissionConfig`)."""
    if asset_uri is None and asset_name is None:
        raise ValidationError("KafkaAssetEventTrigger needs asset_uri and/or asset_name")
    for name, value in (("asset_uri", asset_uri), ("asset_name", asset_name)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValidationError(f"{name} must be a non-empty str, got {value!r}")
    for name, value in optional_names.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise ValidationError(f"{name} must be a non-empty str or None, got {value!r}")


class WatcherTriggerEvent(TriggerEvent):
    """The event a watcher fires: Airflow's ``TriggerEvent`` (sent to the triggerer's supervisor and
    persisted as one, its whole payload the asset event's ``extra["payload"]``), which logs as the
    asset event it is, not as its payload.

    Airflow's runner logs each event (``Trigger fired event``, the event's repr) before it queues it,
    through a channel its supervisor reads only between its passes over the events it persists.  A
    watcher's whole payload (about 1 KB: the record's extra, source and provenance) filled that channel
    three times as fast as Airflow's own events and held the watchers' events back in a burst (B8); it
    also copied what the record's producer wrote into every trigger log.  The line keeps what an
    operator correlates: the asset event's id, its asset, its Kafka coordinates and the watcher's mark.
    """

    def __repr__(self) -> str:
        payload = self.payload if isinstance(self.payload, Mapping) else {}
        return f"TriggerEvent<{ {key: payload[key] for key in _LOGGED if key in payload}!r}>"


#: The payload keys a fired watcher event logs (see :class:`WatcherTriggerEvent`).
_LOGGED = ("event_id", "asset", "kafka", CONFIRMATION_KEY)


class KafkaAssetEventTrigger(WatcherDeadLetters, KafkaSharedStreamTrigger):
    """Fire one event per asset event envelope on ``topics`` that is about this watcher's asset.

    See the module docstring for the whole behaviour.

    :param topics: topics the asset events are published to.
    :param asset_uri: URI of the watched asset (normalized like ``Asset`` does); events match
        when their ``asset.uri`` equals it.
    :param asset_name: name of the watched asset; events match when their ``asset.name`` equals
        it.  At least one of ``asset_uri`` / ``asset_name``; with both, both must match.
    :param kafka_config_id: Kafka connection of the reader (default ``kafka_watcher``).
    :param group_id: the ``group.id`` of the watcher's client (default: the connection's); the
        watcher never joins the group, commits to it or reads its commits.
    :param poll_timeout: seconds each ``poll`` of the watcher's reader waits.
    :param dlq_topic: dead-letter topic for refused records (``None``: log and drop them).
    :param dlq_kafka_config_id: connection the dead-letter producer uses (default
        ``kafka_config_id``).
    :param allow: allowlist in its JSON form
        (:class:`~airflow_kafka_events.assets.authz.Allowlist`), e.g.
        ``[{"source_kinds": ["dag_callback"], "dag_ids": ["etl_*"]}]``; ``None``: any source.
    :param signing_conn_id: Airflow connection whose password is the HMAC-SHA256 key; when set,
        only events signed with it (or with a key listed in the connection extra's
        ``previous_keys``) are accepted.
    :param max_causation_depth: refuse events with more ancestors than this (default 8).
    :param include_partitioned: when ``False``, skip events that carry a partition key.
    :param dedupe_max_keys: idempotency keys remembered (most recently seen kept).
    :param dedupe_ttl: seconds a key is remembered from its first sighting (``None``: until
        evicted).
    :param max_record_bytes: records larger than this (value, key and headers) are
        dead-lettered ``too-large`` (default 256 KiB).
    :param max_extra_bytes: events whose ``extra`` is larger than this as compact JSON are
        dead-lettered ``too-large`` (default 64 KiB, the emit side's bound).
    :param queue: the trigger queue of the watcher (Airflow 3.4 on): only triggerers started with
        ``--queues`` naming it run the watcher (``[triggerer] queues_enabled = True``); ``None``
        (default): triggerers started without ``--queues``.  On Airflow 3.3, which has no watcher
        queues, a queue raises :class:`~airflow_kafka_events.errors.UnsupportedByAirflowError`.
    """

    def __init__(
        self,
        *,
        topics: Sequence[str],
        asset_uri: str | None = None,
        asset_name: str | None = None,
        kafka_config_id: str = DEFAULT_WATCHER_CONN_ID,
        group_id: str | None = None,
        poll_timeout: float = 1.0,
        dlq_topic: str | None = None,
        dlq_kafka_config_id: str | None = None,
        allow: Sequence[Mapping[str, Any]] | str | None = None,
        signing_conn_id: str | None = None,
        max_causation_depth: int = DEFAULT_WATCHER_MAX_CAUSATION_DEPTH,
        include_partitioned: bool = True,
        dedupe_max_keys: int = 100_000,
        dedupe_ttl: float | None = 24 * 3600.0,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_extra_bytes: int = DEFAULT_MAX_EXTRA_BYTES,
        queue: str | None = None,
    ) -> None:
        if isinstance(topics, str) or not topics or not all(isinstance(t, str) and t for t in topics):
            raise ValidationError(f"topics must be a non-empty list of topic names, got {topics!r}")
        super().__init__(
            topics=list(topics),
            kafka_config_id=kafka_config_id,
            poll_timeout=poll_timeout,
            dlq_topic=dlq_topic,
        )
        # read by Airflow 3.4's DAG processor when it registers the watcher's trigger
        self.queue = watcher_queue(queue)
        _check_arguments(
            asset_uri=asset_uri,
            asset_name=asset_name,
            kafka_config_id=kafka_config_id,
            group_id=group_id,
            dlq_topic=dlq_topic,
            dlq_kafka_config_id=dlq_kafka_config_id,
            signing_conn_id=signing_conn_id,
        )
        self.asset_uri = sanitize_asset_uri(asset_uri) if asset_uri is not None else None
        self.asset_name = asset_name
        self.group_id = group_id
        self.dlq_kafka_config_id = dlq_kafka_config_id
        rules: Any = allow
        if isinstance(allow, str):  # the serialized form (see serialize())
            try:
                rules = json.loads(allow)
            except ValueError as exc:
                raise ValidationError(f"allow must be a JSON list of rules, got {allow!r}") from exc
        allowlist = Allowlist.from_config(rules)
        self._allowlist = allowlist
        self.allow = allowlist.to_config() if allowlist is not None else None
        self.signing_conn_id = signing_conn_id
        self.max_causation_depth = max_causation_depth
        self.include_partitioned = bool(include_partitioned)
        self.dedupe_max_keys = dedupe_max_keys
        self.max_record_bytes = max_record_bytes
        self.max_extra_bytes = max_extra_bytes
        try:
            self.dedupe_ttl = float(dedupe_ttl) if dedupe_ttl is not None else None
            self._seen = SeenKeys(max_size=dedupe_max_keys, ttl=self.dedupe_ttl)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                "dedupe_ttl must be a number of seconds > 0 or None and dedupe_max_keys an int > 0, got "
                f"dedupe_ttl={dedupe_ttl!r}, dedupe_max_keys={dedupe_max_keys!r}"
            ) from exc
        try:
            config = AdmissionConfig(
                max_record_bytes=max_record_bytes,
                max_extra_bytes=max_extra_bytes,
                # the keys are loaded asynchronously from the connection and given per record
                signing_keys=_keys_given_per_record if signing_conn_id is not None else None,
                allowlist=allowlist,
                max_causation_depth=max_causation_depth,
                select=asset_selector(
                    asset_uri=self.asset_uri,
                    asset_name=asset_name,
                    include_partitioned=self.include_partitioned,
                ),
                remember_on_accept=True,
            )
        except ConfigurationError as exc:
            raise ValidationError(str(exc)) from exc
        self._admission = AdmissionPipeline(config, seen=self._seen)
        self._dlq_writer: DeadLetterWriter | None = None
        self._signing_keys: list[bytes] | None = None
        self._signing_key_error: BaseException | None = None
        self._signing_key_retry_at = 0.0

    # ------------------------------------------------------------------ identity
    @classmethod
    def classpath(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """This class's path (the provider's hard-codes its own) and every ``__init__`` argument."""
        return (
            self.classpath(),
            {
                "topics": list(self.topics),
                "asset_uri": self.asset_uri,
                "asset_name": self.asset_name,
                "kafka_config_id": self.kafka_config_id,
                "group_id": self.group_id,
                "poll_timeout": self.poll_timeout,
                "dlq_topic": self.dlq_topic,
                "dlq_kafka_config_id": self.dlq_kafka_config_id,
                # JSON text, not a list of dicts: Airflow 3.3 stores a dict inside a list in another
                # form than the DAG serializer gives it, so the watcher's trigger hash would differ
                # before and after storage and Airflow would never register the watcher.
                "allow": None if self.allow is None else json.dumps(self.allow, sort_keys=True),
                "signing_conn_id": self.signing_conn_id,
                "max_causation_depth": self.max_causation_depth,
                "include_partitioned": self.include_partitioned,
                "dedupe_max_keys": self.dedupe_max_keys,
                "dedupe_ttl": self.dedupe_ttl,
                "max_record_bytes": self.max_record_bytes,
                "max_extra_bytes": self.max_extra_bytes,
                # only when set, so a watcher without one keeps the trigger hash it always had;
                # with one, a changed queue is a new trigger that Airflow registers on that queue
                **({"queue": self.queue} if self.queue is not None else {}),
            },
        )

    @classmethod
    def _stream_key(cls, kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        kafka_config_id = kwargs.get("kafka_config_id") or DEFAULT_WATCHER_CONN_ID
        return (
            SHARED_STREAM_NAMESPACE,
            cls.classpath(),
            tuple(sorted(kwargs["topics"])),
            kafka_config_id,
            kwargs.get("group_id"),
            kwargs.get("dlq_topic"),
            kwargs.get("dlq_kafka_config_id") or kafka_config_id,
            kwargs.get("asset_uri"),
            kwargs.get("asset_name"),
            bool(kwargs.get("include_partitioned", True)),
        )

    def shared_stream_key(self) -> Hashable:
        """``(namespace, class, topics, connection, group_id, dlq, dlq connection, asset, partitioned)``.

        One stream per watcher: each has its own reader and its own durable position (see
        :mod:`airflow_kafka_events.watcher.stream`), so it sees every partition of its
        topics whichever triggerer runs it.
        """
        return self._stream_key(self.serialize()[1])

    @classmethod
    def create_shared_stream_producer(  # type: ignore[override]  # not the provider's group consumer
        cls, kwargs: dict[str, Any]
    ) -> WatcherStream:
        return WatcherStream(
            topics=sorted(kwargs["topics"]),
            kafka_config_id=kwargs.get("kafka_config_id") or DEFAULT_WATCHER_CONN_ID,
            asset_uri=kwargs.get("asset_uri"),
            asset_name=kwargs.get("asset_name"),
            poll_timeout=kwargs.get("poll_timeout", 1.0),
            group_id=kwargs.get("group_id"),
            include_partitioned=bool(kwargs.get("include_partitioned", True)),
            dedupe_ttl=kwargs.get("dedupe_ttl", 24 * 3600.0),
            identity=cls._stream_key(kwargs),
        )

    @property
    def consumer_label(self) -> str:
        """Who refuses a record, for the dead-letter ``x-consumer`` header and logs."""
        asset = self.asset_uri if self.asset_uri is not None else f"name={self.asset_name}"
        group = self.group_id or f"group.id of {self.kafka_config_id}"
        return f"{type(self).__name__}(asset={asset}, group={group})"

    # ------------------------------------------------------------------ filtering
    def _is_ours(self, envelope: AssetEventEnvelope) -> bool:
        select = self._admission.config.select
        return select is None or select(envelope) is None

    async def _load_signing_keys(self) -> list[bytes]:
        """The accepted keys: the connection's password, then its extra's ``previous_keys``."""
        from airflow.sdk import BaseHook

        assert self.signing_conn_id is not None
        conn = await BaseHook.aget_connection(self.signing_conn_id)
        keys: list[bytes] = []
        if conn.password:
            keys.append(conn.password.encode("utf-8"))
        previous = conn.extra_dejson.get("previous_keys") or []
        if isinstance(previous, str) or not isinstance(previous, list):
            raise ConfigurationError(
                f"connection {self.signing_conn_id!r}: extra 'previous_keys' must be a list of str"
            )
        keys.extend(str(key).encode("utf-8") for key in previous if key)
        if not keys:
            raise ConfigurationError(
                f"connection {self.signing_conn_id!r} holds no signing key (set its password)"
            )
        return keys

    async def _keys(self) -> list[bytes]:
        if self._signing_keys is not None:
            return self._signing_keys
        now = time.monotonic()
        if self._signing_key_error is not None and now < self._signing_key_retry_at:
            raise self._signing_key_error
        try:
            self._signing_keys = await self._load_signing_keys()
        except Exception as exc:
            self._signing_key_error = exc
            self._signing_key_retry_at = now + _SIGNING_KEY_RETRY_INTERVAL
            raise
        self._signing_key_error = None
        return self._signing_keys

    async def _keys_or_error(self) -> list[bytes] | BaseException | None:
        if self.signing_conn_id is None:
            return None
        try:
            return await self._keys()
        except Exception as exc:  # the pipeline refuses with signing-key-unavailable
            return exc

    async def judge(self, record: KafkaRecord) -> AdmissionVerdict:
        """The admission verdict on one record (:mod:`airflow_kafka_events.assets.admission`).

        The stream decoded the record once for every watcher of this triggerer; the pipeline is
        the one the partition bridge runs too.
        """
        decoded = record.decoded
        if decoded is not None and not isinstance(decoded, (AssetEventEnvelope, EnvelopeDecodeError)):
            decoded = None  # not a decode verdict (a bug while decoding): let the pipeline decode
        screened = self._admission.screen(
            record.value, key=record.key, headers=record.headers, decoded=decoded
        )
        if isinstance(screened, AdmissionVerdict):
            return screened
        envelope, size = screened
        keys = await self._keys_or_error() if self._is_ours(envelope) else None
        verdict = self._admission.judge(envelope, signing_keys=keys, record_bytes=size)
        if verdict.duplicate:
            self.log.info(
                "Dropping repeat of asset event %s (%s) at %s[%s]@%s",
                envelope.event_id,
                verdict.detail,
                record.topic,
                record.partition,
                record.offset,
            )
        elif verdict.accepted and record.ticket is not None:
            # stored with the position once Airflow confirmed the asset event
            record.ticket.accepted_key = durable_key(envelope)
        return verdict

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """Accepted records fire a :class:`WatcherTriggerEvent`; refused ones are dead-lettered,
        then rejected.

        Nothing in here raises while a record is being handled (the shared stream would count a
        failing watcher's current record as handled): every failure becomes a dead letter.
        """
        with self.running_here():
            async for record in shared_stream:
                verdict, payload = await self._handle(record)
                if payload is not None:
                    metrics.incr(metrics.WATCHER_EVENTS_FIRED, tags={"topic": record.topic})
                    yield WatcherTriggerEvent(payload=payload)
                elif verdict.rejected and await self._dead_letter(record, verdict):
                    reject_shared_stream_event()

    async def _handle(self, record: KafkaRecord) -> tuple[AdmissionVerdict, dict[str, Any] | None]:
        verdict: AdmissionVerdict | None = None
        try:
            verdict = await self.judge(record)
            if verdict.accepted and verdict.envelope is not None:
                payload = envelope_payload(verdict.envelope, record)
                ticket = record.ticket
                if ticket is not None and ticket.run:
                    payload[CONFIRMATION_KEY] = fired_mark(ticket.run, ticket.seq)
                return verdict, payload
            return verdict, None
        except Exception as exc:  # a bug: keep the record for replay rather than lose it
            self.log.exception("Checking %s[%s]@%s failed", record.topic, record.partition, record.offset)
            metrics.incr(f"{metrics.WATCHER_ERRORS}.{metrics.error_part(exc)}")
            envelope = verdict.envelope if verdict is not None else None
            failed = AdmissionVerdict(
                "reject", Stage.INTERNAL, envelope=envelope, reason=DeadLetterReason.INTERNAL_ERROR, error=exc
            )
            return failed, None


# --------------------------------------------------------------------------- DAG-side helper
_ASSET_ARGUMENTS = frozenset({"asset_uri", "asset_name"})


def _trigger_options() -> frozenset[str]:
    """The keyword arguments of :class:`KafkaAssetEventTrigger` besides its topics and asset."""
    names = inspect.signature(KafkaAssetEventTrigger.__init__).parameters
    return frozenset(names) - {"self", "topics"} - _ASSET_ARGUMENTS


def _check_trigger_kwargs(trigger_kwargs: Mapping[str, Any]) -> None:
    """Refuse (:class:`ValidationError`) what :class:`KafkaAssetEventTrigger` cannot take."""
    given_asset = sorted(_ASSET_ARGUMENTS & set(trigger_kwargs))
    if given_asset:
        raise ValidationError(
            f"{', '.join(given_asset)} cannot be given: the watcher's asset is uri= (and name=), "
            "as in kafka_watched_asset"
        )
    accepted = _trigger_options()
    unknown = sorted(set(trigger_kwargs) - accepted)
    if unknown:
        raise ValidationError(
            f"unknown watcher argument(s) {', '.join(unknown)}; KafkaAssetEventTrigger takes uri, name, "
            f"topics and {', '.join(sorted(accepted))}"
        )


def _normalized_asset(uri: Any, name: Any) -> Asset:
    """The plain ``Asset`` (no watcher) ``uri`` / ``name`` make, or :class:`InvalidAssetError`."""
    from airflow.sdk import Asset

    check_asset(uri, name)
    try:
        return Asset(name=name, uri=uri) if name is not None else Asset(uri=uri)
    except (TypeError, ValueError) as exc:  # a provider's URI normalizer refused it
        raise InvalidAssetError(f"asset uri {uri!r} is not one Airflow accepts: {exc}") from exc


def _asset_and_trigger(
    uri: Any, name: Any, topics: Sequence[str], trigger_kwargs: Mapping[str, Any]
) -> tuple[Asset, KafkaAssetEventTrigger]:
    _check_trigger_kwargs(trigger_kwargs)
    plain = _normalized_asset(uri, name)
    trigger = KafkaAssetEventTrigger(
        topics=topics, asset_uri=plain.uri, asset_name=plain.name, **trigger_kwargs
    )
    return plain, trigger


def kafka_watcher_trigger(
    uri: str, *, topics: Sequence[str], name: str | None = None, **trigger_kwargs: Any
) -> KafkaAssetEventTrigger:
    """The :class:`KafkaAssetEventTrigger` watching the asset ``uri`` / ``name``.

    The asset's URI is normalized as ``Asset`` does and its name defaults to ``uri``; the trigger
    matches events on both.  ``trigger_kwargs`` are the trigger's other arguments.  Every wrong
    argument is a :class:`ValidationError` (:class:`InvalidAssetError` for the asset).
    """
    return _asset_and_trigger(uri, name, topics, trigger_kwargs)[1]


def kafka_watched_asset(
    uri: str,
    *,
    topics: Sequence[str],
    name: str | None = None,
    watcher_name: str | None = None,
    group: str | None = None,
    extra: dict[str, Any] | None = None,
    **trigger_kwargs: Any,
) -> Asset:
    """An ``Asset`` whose ``AssetWatcher`` is a :class:`KafkaAssetEventTrigger` for it.

    ``uri`` / ``name`` / ``group`` / ``extra`` are the ``Asset``'s; the trigger is
    :func:`kafka_watcher_trigger` of ``uri``, ``name``, ``topics`` and ``trigger_kwargs``.
    ``watcher_name`` defaults to ``"kafka:<asset name>"``.  ``queue=`` (in ``trigger_kwargs``)
    places the watcher on that trigger queue (Airflow 3.4 on; see :class:`KafkaAssetEventTrigger`).
    """
    from airflow.sdk import Asset, AssetWatcher

    plain, trigger = _asset_and_trigger(uri, name, topics, trigger_kwargs)
    kwargs: dict[str, Any] = {}
    if group is not None:
        kwargs["group"] = group
    if extra is not None:
        kwargs["extra"] = extra
    return Asset(
        name=plain.name,
        uri=plain.uri,
        watchers=[AssetWatcher(name=watcher_name or f"kafka:{plain.name}", trigger=trigger)],
        **kwargs,
    )
