"""The bottom layers import no Airflow module, so external producers never load Airflow."""

from __future__ import annotations

import pytest

from harness.airflow_free import run_without_airflow

pytestmark = pytest.mark.unit

AIRFLOW_FREE = [
    "airflow_kafka_events",
    "airflow_kafka_events.errors",
    "airflow_kafka_events.retry",
    "airflow_kafka_events.retry",
    "airflow_kafka_events.lazy_exports",
    "airflow_kafka_events.envelopes.schemas",
    "airflow_kafka_events.envelopes.model",
    "airflow_kafka_events.envelopes.codec",
    "airflow_kafka_events.envelopes.registry",
    "airflow_kafka_events.envelopes.json_values",
    "airflow_kafka_events.kafka",
    "airflow_kafka_events.kafka.settings",
    "airflow_kafka_events.kafka.producer",
    "airflow_kafka_events.kafka.consumer",
    "airflow_kafka_events.kafka.topics",
    "airflow_kafka_events.local_broker",
    "airflow_kafka_events.cli.main",
    "airflow_kafka_events.cli.topics",
    "airflow_kafka_events.cli.streams",
    "airflow_kafka_events.cli.dlq",
    "airflow_kafka_events.cli.replay",
    "airflow_kafka_events.cli.inspection",
    "airflow_kafka_events.cli.terminal",
    "airflow_kafka_events.cli.bridge",
    "airflow_kafka_events.cli.inspection",
    "airflow_kafka_events.cli.schemas",
    "airflow_kafka_events.ui.inspection",
    "airflow_kafka_events.ui.inspection.window",
    "airflow_kafka_events.ui.inspection.reader",
    "airflow_kafka_events.ui.inspection.streams",
    "airflow_kafka_events.ui.inspection.stream_state",
    "airflow_kafka_events.ui.inspection.dead_letters",
    "airflow_kafka_events.ui.inspection.replay",
    "airflow_kafka_events.ui.inspection.asset_events",
    "airflow_kafka_events.ui.inspection.redact",
    "airflow_kafka_events.ui.inspection.errors",
    "airflow_kafka_events.ui.inspection.replay_targets",
    "airflow_kafka_events.ui.inspection.listing",
    "airflow_kafka_events.kafka.topic_plan",
    "airflow_kafka_events.airflow_config",
    "airflow_kafka_events.metrics",
    "airflow_kafka_events.provider",
    "airflow_kafka_events.streams.descriptor",
    "airflow_kafka_events.streams.checkpoint",
    "airflow_kafka_events.streams.consuming.slot_release",
    "airflow_kafka_events.dead_letters.letter",
    "airflow_kafka_events.dead_letters.headers",
    "airflow_kafka_events.dead_letters.log",
    "airflow_kafka_events.kafka.partitioner",
    "airflow_kafka_events.streams.progress",
    "airflow_kafka_events.streams.consuming.reader",
    "airflow_kafka_events.streams.consuming.sequence",
    "airflow_kafka_events.streams.consuming.sequence",
    "airflow_kafka_events.streams.consuming.partition",
    "airflow_kafka_events.streams.consuming.commits",
    "airflow_kafka_events.streams.consuming.deadlines",
    "airflow_kafka_events.streams.consuming.reader",
    "airflow_kafka_events.kafka.delivery",
    "airflow_kafka_events.kafka.client_executor",
    "airflow_kafka_events.kafka.positions",
    "airflow_kafka_events.kafka.assigned_reader",
    "airflow_kafka_events.kafka.shared_reader",
    "airflow_kafka_events.kafka.shared_feed",
    "airflow_kafka_events.kafka.client_log",
    "airflow_kafka_events.kafka.clients",
    "airflow_kafka_events.kafka.assigned_reader",
    "airflow_kafka_events.kafka.compacted",
    "airflow_kafka_events.streams.index",
    "airflow_kafka_events.streams.index.record",
    "airflow_kafka_events.streams.index.options",
    "airflow_kafka_events.streams.index.publisher",
    "airflow_kafka_events.ui.inspection.index_reader",
    "airflow_kafka_events.ui.inspection.index_listing",
    "airflow_kafka_events.streams.consuming.consumption",
    "airflow_kafka_events.assets.publish",
    "airflow_kafka_events.assets.validation",
    "airflow_kafka_events.assets.idempotency",
    "airflow_kafka_events.assets.authz",
    "airflow_kafka_events.assets.admission",
    "airflow_kafka_events.assets.errors",
    "airflow_kafka_events.assets.watcher_payload",
    "airflow_kafka_events.bridge",
    "airflow_kafka_events.bridge.service",
    "airflow_kafka_events.assets.airflow_api",
    "airflow_kafka_events.bridge.config",
    "airflow_kafka_events.bridge.errors",
    "airflow_kafka_events.bridge.airflow_event",
]


@pytest.mark.parametrize("module", AIRFLOW_FREE)
def test_module_imports_no_airflow(module):
    run_without_airflow(f"import {module}")


def test_provider_info_lists_importable_modules():
    import importlib

    from airflow_kafka_events.provider import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-kafka-events"
    for kind in ("hooks", "triggers", "operators"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    (plugin,) = info["plugins"]
    module, _, cls = plugin["plugin-class"].rpartition(".")
    assert getattr(importlib.import_module(module), cls).name == plugin["name"]
