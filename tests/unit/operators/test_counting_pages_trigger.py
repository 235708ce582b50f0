"""The demo CountingPagesTrigger used by the streaming e2e DAGs (no Kafka: only its pages)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from airflow_kafka_events.errors import AirflowKafkaEventsError, ConfigurationError
from airflow_kafka_events.provider.serialization import check_trigger_kwargs, roundtrip_trigger_kwargs
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger, GateTimeoutError

pytestmark = pytest.mark.unit


async def _pages(trigger: CountingPagesTrigger, cursor: str | None = None) -> list:
    return [page async for page in trigger.pages(cursor)]


def test_serialize_maps_onto_init_and_survives_airflow_serialization():
    trigger = CountingPagesTrigger(pages=5, delay=0.0, extra={"k": "v"}, gate_path="/tmp/x", gate_page=2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger"
    check_trigger_kwargs(kwargs, owner="test")
    again = CountingPagesTrigger(**roundtrip_trigger_kwargs(kwargs))
    assert again.serialize() == (classpath, kwargs)


def test_pages_are_numbered_and_resume_after_the_cursor():
    pages = asyncio.run(_pages(CountingPagesTrigger(pages=4, extra={"source": "s"})))
    assert [p.payload for p in pages] == [{"source": "s", "page": i, "pages": 4} for i in range(4)]
    assert [p.cursor for p in pages] == ["1", "2", "3", "4"]
    assert [p.payload["page"] for p in asyncio.run(_pages(CountingPagesTrigger(pages=4), "2"))] == [2, 3]
    assert asyncio.run(_pages(CountingPagesTrigger(pages=0))) == []


def test_the_gate_holds_its_page_until_the_file_exists(tmp_path: Path):
    gate = tmp_path / "gate"
    trigger = CountingPagesTrigger(pages=3, gate_path=str(gate), gate_page=1, gate_timeout=5)

    async def scenario() -> list[int]:
        seen: list[int] = []

        async def consume() -> None:
            async for page in trigger.pages(None):
                seen.append(page.payload["page"])

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.3)
        assert seen == [0]  # page 1 waits for the gate
        gate.write_text("open")
        await asyncio.wait_for(task, 5)
        return seen

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_a_gate_that_never_opens_ends_the_stream_with_an_error(tmp_path: Path):
    trigger = CountingPagesTrigger(pages=3, gate_path=str(tmp_path / "never"), gate_page=0, gate_timeout=0.2)
    with pytest.raises(GateTimeoutError, match=r"did not appear within 0\.2s") as info:
        asyncio.run(_pages(trigger))
    # one hierarchy, still a TimeoutError, recorded under the module that defines it
    assert isinstance(info.value, AirflowKafkaEventsError) and isinstance(info.value, TimeoutError)
    assert type(info.value).__module__ + "." + type(info.value).__qualname__ == (
        "airflow_kafka_events.streams.producing.demo_trigger.GateTimeoutError"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pages": -1},
        {"pages": True},
        {"pages": 1, "delay": -1},
        {"pages": 1, "gate_path": ""},
        {"pages": 1, "gate_page": -1},
        {"pages": 1, "gate_timeout": 0},
        {"pages": 1, "extra": [1]},
    ],
)
def test_bad_arguments_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        CountingPagesTrigger(**kwargs)
