"""Airflow discovers the package as a provider and as a plugin (through the real ``airflow`` CLI)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kafka_events.__about__ import __version__
from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

PACKAGE = "airflow-kafka-events"
PLUGIN = "airflow_kafka_events"


def _json_output(stack: AirflowStack, *args: str) -> Any:
    result = stack.cli(*args, "-o", "json", timeout=180)
    start = min(i for i in (result.stdout.find("["), result.stdout.find("{")) if i >= 0)
    try:
        return json.loads(result.stdout[start:])
    except ValueError as exc:
        raise AssertionError(
            f"`airflow {' '.join(args)}` printed no JSON:\n{result.stdout}\n{result.stderr}"
        ) from exc


@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_providers_list_includes_package(migrated_airflow_home: AirflowStack) -> None:
    providers = _json_output(migrated_airflow_home, "providers", "list")
    by_name = {p["package_name"]: p for p in providers}
    assert PACKAGE in by_name, sorted(by_name)
    assert by_name[PACKAGE]["version"] == __version__


def test_plugins_lists_plugin(migrated_airflow_home: AirflowStack) -> None:
    plugins = _json_output(migrated_airflow_home, "plugins")
    names = [p["name"] for p in plugins]
    assert PLUGIN in names, plugins


def test_provider_config_defaults_are_registered(migrated_airflow_home: AirflowStack) -> None:
    result = migrated_airflow_home.cli("config", "get-value", "kafka_events", "trigger_events_topic")
    assert result.stdout.strip().splitlines()[-1] == "airflow.trigger-events"
