"""OnePageTrigger, the classic one-page-per-deferral baseline of the benchmarks (no Kafka)."""

from __future__ import annotations

import asyncio
import importlib

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.provider.serialization import check_trigger_kwargs, roundtrip_trigger_kwargs
from airflow_kafka_events.streams.producing.demo_trigger import OnePageTrigger

pytestmark = pytest.mark.unit


def _events(trigger: OnePageTrigger) -> list:
    async def collect() -> list:
        return [event async for event in trigger.run()]

    return asyncio.run(collect())


def test_serialize_round_trips_through_airflow_serialization():
    trigger = OnePageTrigger(page=3, pages=10, delay=0.02)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_events.streams.producing.demo_trigger.OnePageTrigger"
    assert kwargs == {"page": 3, "pages": 10, "delay": 0.02}
    check_trigger_kwargs(kwargs, owner="test")
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)  # what the triggerer does
    again = cls(**roundtrip_trigger_kwargs(kwargs))
    assert again.serialize() == (classpath, kwargs)


def test_yields_one_event_with_the_next_page():
    (event,) = _events(OnePageTrigger(page=0, pages=3))
    assert event.payload == {"page": 0, "next": 1}
    (event,) = _events(OnePageTrigger(page=2, pages=3, delay=0.01))
    assert event.payload == {"page": 2, "next": None}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"page": -1, "pages": 3},
        {"page": 3, "pages": 3},
        {"page": True, "pages": 3},
        {"page": 0, "pages": 3, "delay": -1},
        {"page": 0, "pages": 3, "delay": "1"},
    ],
)
def test_rejects_bad_arguments(kwargs):
    with pytest.raises(ConfigurationError):
        OnePageTrigger(**kwargs)
