"""The watchers' shared reader of a triggerer: each record fetched and decoded once, routed to its
asset's watchers (see :mod:`airflow_kafka_events.kafka.shared_reader`).

One :class:`~airflow_kafka_events.kafka.shared_reader.SharedReader` per process, topic set and client
settings (:data:`READER_KIND`); records are decoded once per process (:class:`_DecodeCache`, also
when a watcher catching up reads a record the shared reader read) and routed by their asset's
URI (as given and normalized) and name.  Decoding never calls a schema registry on the event loop:
the writer schemas of a batch's new schema ids are fetched in a thread first
(:meth:`~airflow_kafka_events.envelopes.codec.EnvelopeCodec.fetch_writers`), in the batch's order.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events import metrics
from airflow_kafka_events.assets.admission import _normalized_uri
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.errors import SchemaRegistryUnavailableError
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS, SharedReader

__all__ = [
    "MAX_CATCH_UP",
    "READER_KIND",
    "shared_reader",
]

#: :class:`~airflow_kafka_events.kafka.shared_reader.SharedReaders` kind of the watchers' readers.
READER_KIND = "asset-watcher"
#: Catch-up readers (each a Kafka client with its threads and broker connections) of one watchers'
#: reader running at once; a watcher behind waits for a slot.  A triggerer's restart leaves every
#: watcher with records in doubt behind (B8's footprint benchmark with ``--restart``: 99 of 1,000
#: after 100 records, up to 682 clients and 3,410 threads at once without a cap).
MAX_CATCH_UP = 16


class _DecodeCache:
    """Recently decoded records of this process, so N watchers on one topic decode a record once."""

    def __init__(self, max_size: int = 4096) -> None:
        self.max_size = max_size
        self._items: OrderedDict[Hashable, AssetEventEnvelope | BaseException] = OrderedDict()

    def decode(
        self,
        where: Hashable,
        value: bytes | None,
        codec: EnvelopeCodec[AssetEventEnvelope] = ASSET_EVENT_CODEC,
    ) -> AssetEventEnvelope | BaseException:
        found = self._items.get(where)
        if found is not None:
            self._items.move_to_end(where)
            return found
        result: AssetEventEnvelope | BaseException
        if value is None:
            from airflow_kafka_events.errors import EnvelopeDecodeError

            result = EnvelopeDecodeError("the record has no value (a tombstone), not an asset event envelope")
        else:
            try:
                result = codec.decode(value, fetch=False)  # no registry call on the event loop
            except SchemaRegistryUnavailableError as exc:
                return exc  # not a verdict on the record: decoded again (in a thread) when it is handled
            except Exception as exc:
                result = exc
        self._items[where] = result
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)
        return result


_DECODED = _DecodeCache()


def _decoder(
    bootstrap_servers: str, codec: EnvelopeCodec[AssetEventEnvelope]
) -> Callable[[Message], AssetEventEnvelope | BaseException]:
    def decode(message: Message) -> AssetEventEnvelope | BaseException:
        where = (bootstrap_servers, str(message.topic()), message.partition(), message.offset())
        return _DECODED.decode(where, message.value(), codec)

    return decode


def _preparer(codec: EnvelopeCodec[AssetEventEnvelope]) -> Callable[[Sequence[Message]], Awaitable[None]]:
    async def prepare(messages: Sequence[Message]) -> None:
        await codec.fetch_writers([message.value() for message in messages])

    return prepare


def _route(decoded: AssetEventEnvelope | BaseException) -> list[Hashable] | None:
    """Routing keys of a record: its asset's URI (as given and normalized) and name; an
    undecodable record goes to every watcher (each may have to dead-letter it)."""
    if not isinstance(decoded, AssetEventEnvelope):
        return None
    asset = decoded.asset
    keys: list[Hashable] = [("uri", asset.uri), ("name", asset.name)]
    try:
        normalized = _normalized_uri(asset.uri)
    except Exception:  # a URI Airflow would refuse: no watcher's, except by name
        return keys
    if normalized != asset.uri:
        keys.append(("uri", normalized))
    return keys


def shared_reader(
    config: Mapping[str, Any],
    topics: Sequence[str],
    poll_timeout: float,
    codec: EnvelopeCodec[AssetEventEnvelope] = ASSET_EVENT_CODEC,
) -> SharedReader:
    """This process's reader of ``topics`` with these client settings and this codec (one per
    triggerer: watchers whose connections differ only in their schema registry read apart); its lag
    gauge is built only when the reader is new."""
    return SHARED_READERS.acquire(
        READER_KIND,
        config,
        topics,
        name=f"watchers-of-{'+'.join(sorted(topics))}",
        decode=_decoder(str(config.get("bootstrap.servers", "")), codec),
        route=_route,
        poll_timeout=poll_timeout,
        make_on_read=lambda: metrics.LagReporter(metrics.WATCHER_LAG).observe,
        prepare=_preparer(codec),
        variant=codec,
        max_catch_up=MAX_CATCH_UP,
    )
