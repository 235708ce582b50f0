"""``airflow-kafka-events schemas`` against a real schema registry: an incompatible change to an
envelope schema fails ``check`` (exit 1), a compatible one passes."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest

from airflow_kafka_events.cli.main import main
from airflow_kafka_events.envelopes import schemas

pytestmark = pytest.mark.integration


def _changed_schema(tmp_path: Path, field: dict[str, object]) -> Path:
    raw = copy.deepcopy(schemas.raw_schema(schemas.ASSET_EVENT_ENVELOPE))
    raw["fields"].append(field)
    path = tmp_path / f"{field['name']}.avsc"
    path.write_text(json.dumps(raw), "utf-8")
    return path


def test_check_fails_on_an_incompatible_change_to_an_envelope_schema(
    schema_registry_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topics = [
        "--schema-registry-url",
        schema_registry_url,
        "--asset-events-topic",
        f"assets-{uuid.uuid4().hex[:8]}",
        "--trigger-events-topic",
        f"triggers-{uuid.uuid4().hex[:8]}",
    ]
    assert main(["schemas", "check", *topics]) == 0  # nothing registered: nothing to break
    assert "not registered yet" in capsys.readouterr().out

    assert main(["schemas", "register", *topics]) == 0
    registered = capsys.readouterr().out
    assert registered.count("compatibility FULL_TRANSITIVE") == 2
    assert main(["schemas", "check", *topics]) == 0
    assert registered.count("this schema is id") == 2

    required = _changed_schema(tmp_path, {"name": "added_without_default", "type": "string"})
    optional = _changed_schema(
        tmp_path, {"name": "added_with_default", "type": ["null", "string"], "default": None}
    )
    one = ["--schema", "asset_event_envelope"]
    assert main(["schemas", "check", *topics, *one, "--schema-file", f"asset_event_envelope={required}"]) == 1
    assert "INCOMPATIBLE" in capsys.readouterr().out
    assert main(["schemas", "check", *topics, *one, "--schema-file", f"asset_event_envelope={optional}"]) == 0
    assert "; compatible" in capsys.readouterr().out
    # registering the incompatible one is refused by the registry itself
    assert (
        main(["schemas", "register", *topics, *one, "--schema-file", f"asset_event_envelope={required}"]) == 1
    )
    assert "registering asset_event_envelope" in capsys.readouterr().err

    assert main(["schemas", "show", *topics, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["versions"] for r in shown] == [[1], [1]]


def test_without_a_registry_url_the_command_names_the_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_KAFKA_EVENTS_SCHEMA_REGISTRY_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_KAFKA_EVENTS_PROPERTIES", raising=False)
    assert main(["schemas", "show"]) == 1
    assert "no schema registry: set schema.registry.url" in capsys.readouterr().err


@pytest.mark.parametrize("name", [schemas.TRIGGER_EVENT_ENVELOPE, schemas.ASSET_EVENT_ENVELOPE])
def test_every_kept_schema_version_passes_the_registrys_check_of_the_ones_before(
    schema_registry_url: str, name: str
) -> None:
    """The gate in CI: a new version that breaks compatibility with any kept one fails here."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from airflow_kafka_events.envelopes.registry import (
        DEFAULT_COMPATIBILITY,
        register_schema,
        registry_schema,
    )

    client = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"kept-{name}-{uuid.uuid4().hex[:8]}-value"
    for version in schemas.schema_versions(name):
        report = register_schema(client, name, subject, registry_schema(name, version), DEFAULT_COMPATIBILITY)
        assert report.registered_id is not None and report.compatibility == DEFAULT_COMPATIBILITY
    assert client.get_versions(subject) == list(range(1, len(schemas.schema_versions(name)) + 1))
