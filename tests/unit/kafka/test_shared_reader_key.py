"""Readers are shared only by watchers that read the same way: equal client settings and topics are
not enough when their connections decode through different schema registries."""

from __future__ import annotations

import asyncio

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.kafka.shared_reader import SharedReaders

pytestmark = pytest.mark.unit

CONFIG = {"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"}


def test_a_different_codec_is_a_different_reader_and_the_same_codec_the_same():
    other = EnvelopeCodec(AssetEventEnvelope)

    async def keys() -> tuple[object, object, object]:
        return (
            SharedReaders.key("watchers", CONFIG, ["t"], ASSET_EVENT_CODEC),
            SharedReaders.key("watchers", dict(CONFIG), ["t"], ASSET_EVENT_CODEC),
            SharedReaders.key("watchers", CONFIG, ["t"], other),
        )

    same, again, different = asyncio.run(keys())
    assert same == again
    assert same != different
