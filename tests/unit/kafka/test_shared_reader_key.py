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


def test_a_forked_process_gets_its_own_reader(monkeypatch):
    """The key holds the process id: a forked child (same loop object id, same settings) does not
    find its parent's reader."""
    from airflow_kafka_events.kafka import shared_reader

    parent_pid = shared_reader.os.getpid()

    async def keys() -> tuple[tuple[object, ...], tuple[object, ...]]:
        parent = SharedReaders.key("watchers", CONFIG, ["t"])
        monkeypatch.setattr(shared_reader.os, "getpid", lambda: parent_pid + 1)
        return parent, SharedReaders.key("watchers", CONFIG, ["t"])  # type: ignore[return-value]

    parent, child = asyncio.run(keys())
    assert parent != child
    assert parent[1:] == child[1:]
