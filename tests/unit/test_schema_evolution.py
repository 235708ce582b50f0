"""Schema evolution rules.

* Every released schema version stays in the repo (``schemas/<name>/v<N>.avsc``).
* A field added in a later version must have a default (so the new schema reads old
  bytes); a field removed must have had one (so old readers read new bytes).
* The current codec decodes bytes written with every kept version.
"""

from __future__ import annotations

import copy
import io
import itertools
from collections.abc import Iterator
from typing import Any

import fastavro
import fastavro.schema
import pytest

from airflow_kafka_events.envelopes import codec as codec_module
from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.framing import frame_single_object
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, TriggerEventEnvelope
from airflow_kafka_events.errors import UnknownSchemaError

pytestmark = pytest.mark.unit

ENVELOPE_TYPES = {
    schemas.TRIGGER_EVENT_ENVELOPE: TriggerEventEnvelope,
    schemas.ASSET_EVENT_ENVELOPE: AssetEventEnvelope,
}
ALL_VERSIONS = [(name, version) for name in ENVELOPE_TYPES for version in schemas.schema_versions(name)]


# --------------------------------------------------------------------------- rule checker
def _records(schema: Any, namespace: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(full name, record) of every record defined anywhere in ``schema``."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _records(branch, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            ns = schema.get("namespace", namespace)
            name = schema["name"] if "." in schema["name"] else f"{ns}.{schema['name']}".lstrip(".")
            yield name, schema
            for field in schema["fields"]:
                yield from _records(field["type"], ns)
        elif kind == "array":
            yield from _records(schema["items"], namespace)
        elif kind == "map":
            yield from _records(schema["values"], namespace)
        elif isinstance(kind, (dict, list)):
            yield from _records(kind, namespace)


def evolution_violations(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Fields added without a default, or removed without having had one, per record."""
    old_records = dict(_records(old))
    problems = []
    for name, record in _records(new):
        if name not in old_records:
            continue
        old_fields = {f["name"]: f for f in old_records[name]["fields"]}
        new_fields = {f["name"]: f for f in record["fields"]}
        problems += [
            f"{name}.{f} added without a default"
            for f in new_fields.keys() - old_fields.keys()
            if "default" not in new_fields[f]
        ]
        problems += [
            f"{name}.{f} removed without a default"
            for f in old_fields.keys() - new_fields.keys()
            if "default" not in old_fields[f]
        ]
    return sorted(problems)


@pytest.mark.parametrize("name", list(ENVELOPE_TYPES))
def test_kept_versions_follow_the_evolution_rule(name: str) -> None:
    versions = schemas.schema_versions(name)
    assert versions == list(range(1, len(versions) + 1)), "versions are numbered 1, 2, 3, ... without gaps"
    for older, newer in itertools.pairwise(versions):
        old, new = schemas.raw_schema(name, older), schemas.raw_schema(name, newer)
        assert evolution_violations(old, new) == [], f"{name} v{older} -> v{newer}"
        assert old["name"] == new["name"] and old["namespace"] == new["namespace"]


def _with_field(schema: dict[str, Any], field: dict[str, Any], record: str | None = None) -> dict[str, Any]:
    result = copy.deepcopy(schema)
    target = result if record is None else next(r for n, r in _records(result) if n.endswith("." + record))
    target["fields"].append(field)
    return result


V1_TRIGGER = schemas.raw_schema(schemas.TRIGGER_EVENT_ENVELOPE, 1)
V2_TRIGGER = _with_field(
    _with_field(V1_TRIGGER, {"name": "trace_id", "type": ["null", "string"], "default": None}),
    {"name": "hostname", "type": "string", "default": "unknown"},
    record="ProducerIdentity",
)


def test_checker_flags_fields_without_default() -> None:
    assert evolution_violations(V1_TRIGGER, V2_TRIGGER) == []
    bad = _with_field(V1_TRIGGER, {"name": "required_now", "type": "string"})
    assert evolution_violations(V1_TRIGGER, bad) == [
        "io.airflow_kafka_events.TriggerEventEnvelope.required_now added without a default"
    ]
    nested_bad = _with_field(V1_TRIGGER, {"name": "pid", "type": "int"}, record="ProducerIdentity")
    assert evolution_violations(V1_TRIGGER, nested_bad) == [
        "io.airflow_kafka_events.ProducerIdentity.pid added without a default"
    ]
    removed = copy.deepcopy(V1_TRIGGER)
    removed["fields"] = [f for f in removed["fields"] if f["name"] != "sequence_index"]
    assert evolution_violations(V1_TRIGGER, removed) == [
        "io.airflow_kafka_events.TriggerEventEnvelope.sequence_index removed without a default"
    ]
    # and it matters: a reader with a new required field cannot read old bytes
    with pytest.raises(Exception, match="required_now"):
        fastavro.schemaless_reader(
            io.BytesIO(_write(V1_TRIGGER, sample_record(V1_TRIGGER))),
            fastavro.parse_schema(V1_TRIGGER),
            fastavro.parse_schema(bad),
        )


# --------------------------------------------------------------------------- sample data per schema
def sample_record(schema: Any, *, minimal: bool = False) -> Any:
    """A datum valid for ``schema``: every optional part set (or, if ``minimal``, left empty).

    Strings are ``'"s"'``: a non-empty identifier and valid JSON text at once, so the
    sample also decodes into an envelope (payload JSON text, extra values).
    """
    if isinstance(schema, list):
        branch = schema[0] if minimal or len(schema) == 1 else next(b for b in schema if b != "null")
        if minimal and "null" in schema:
            branch = "null"
        return sample_record(branch, minimal=minimal)
    if isinstance(schema, str):
        return {
            "null": None,
            "boolean": True,
            "int": 1,
            "long": 2,
            "float": 1.5,
            "double": 2.5,
            "bytes": b"\x00b",
            "string": '"s"',
        }[schema]
    kind = schema["type"]
    if kind == "record":
        return {f["name"]: sample_record(f["type"], minimal=minimal) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][0]
    if kind == "array":
        return [] if minimal else [sample_record(schema["items"], minimal=minimal)]
    if kind == "map":
        return {} if minimal else {"k": sample_record(schema["values"], minimal=minimal)}
    if kind == "fixed":
        return b"\x00" * schema["size"]
    return sample_record(kind, minimal=minimal)  # e.g. {"type": "long", "logicalType": ...}


def _write(schema: dict[str, Any], datum: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), datum)
    return buffer.getvalue()


@pytest.mark.parametrize("minimal", [False, True], ids=["full", "minimal"])
@pytest.mark.parametrize(("name", "version"), ALL_VERSIONS, ids=[f"{n}-v{v}" for n, v in ALL_VERSIONS])
def test_current_codec_decodes_every_kept_version(name: str, version: int, minimal: bool) -> None:
    raw = schemas.raw_schema(name, version)
    datum = sample_record(raw, minimal=minimal)
    body = _write(raw, datum)
    data = frame_single_object(schemas.schema_fingerprint(name, version), body)
    envelope_type = ENVELOPE_TYPES[name]
    decoded = EnvelopeCodec(envelope_type).decode(data)
    assert type(decoded) is envelope_type
    if name == schemas.TRIGGER_EVENT_ENVELOPE:
        assert decoded.trigger_run_id == '"s"'
        assert decoded.payload == (None if minimal else b"\x00b")  # first non-null branch is bytes
    else:
        assert decoded.event_id == '"s"'
        assert decoded.extra == ({} if minimal else {"k": "s"})


# --------------------------------------------------------------------------- a hypothetical v2
def test_hypothetical_v2_reads_v1_bytes_and_v1_reads_v2_bytes() -> None:
    v1, v2 = fastavro.parse_schema(V1_TRIGGER), fastavro.parse_schema(V2_TRIGGER)
    v1_datum = sample_record(V1_TRIGGER)
    read_by_v2: Any = fastavro.schemaless_reader(io.BytesIO(_write(V1_TRIGGER, v1_datum)), v1, v2)
    assert read_by_v2["trace_id"] is None
    assert read_by_v2["producer"]["hostname"] == "unknown"
    assert read_by_v2["trigger_run_id"] == v1_datum["trigger_run_id"]

    v2_datum = {**sample_record(V2_TRIGGER), "trace_id": "t-1"}
    read_by_v1: Any = fastavro.schemaless_reader(io.BytesIO(_write(V2_TRIGGER, v2_datum)), v2, v1)
    assert "trace_id" not in read_by_v1 and "hostname" not in read_by_v1["producer"]


@pytest.fixture
def trigger_schemas_with_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the repo keeps trigger v1 (the real file) and the hypothetical v2 (current)."""
    name = schemas.TRIGGER_EVENT_ENVELOPE
    real_versions, real_load, real_fingerprint = (
        schemas.schema_versions,
        schemas.load_schema,
        schemas.schema_fingerprint,
    )
    parsed_v2: Any = fastavro.parse_schema(V2_TRIGGER)
    fingerprint_v2 = bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(parsed_v2), "CRC-64-AVRO")
    )

    def versions(n: str) -> list[int]:
        return [1, 2] if n == name else real_versions(n)

    def load(n: str, version: int | None = None) -> dict[str, Any]:
        return parsed_v2 if n == name and version in (None, 2) else real_load(n, version)

    def fingerprint(n: str, version: int | None = None) -> bytes:
        return fingerprint_v2 if n == name and version in (None, 2) else real_fingerprint(n, version)

    monkeypatch.setattr(codec_module.schemas, "schema_versions", versions)
    monkeypatch.setattr(codec_module.schemas, "load_schema", load)
    monkeypatch.setattr(codec_module.schemas, "schema_fingerprint", fingerprint)


def test_codec_resolves_older_kept_version_against_current(trigger_schemas_with_v2: None) -> None:
    from datetime import datetime, timezone

    from airflow_kafka_events.envelopes.model import ProducerIdentity

    envelope = TriggerEventEnvelope(
        "run",
        3,
        False,
        payload={"x": [1]},
        producer=ProducerIdentity("d", "r", "t", 0, 1),
        emitted_at=datetime(2024, 1, 1, tzinfo=timezone.utc),
    )
    # bytes written by a producer that only knows v1 (the released file)
    v1_bytes = frame_single_object(
        schemas.schema_fingerprint(schemas.TRIGGER_EVENT_ENVELOPE, 1),
        _write(V1_TRIGGER, envelope.to_avro()),
    )
    v2_codec = EnvelopeCodec(TriggerEventEnvelope)
    assert v2_codec.fingerprint != schemas.schema_fingerprint(schemas.TRIGGER_EVENT_ENVELOPE, 1)
    assert v2_codec.decode(v1_bytes) == envelope
    # and the v2 codec writes v2 bytes (the new fields take their defaults), which it reads back
    v2_bytes = v2_codec.encode(envelope)
    assert v2_bytes[2:10] == v2_codec.fingerprint
    assert v2_codec.decode(v2_bytes) == envelope


def test_codec_rejects_a_version_that_is_not_kept() -> None:
    """A producer writing an unreleased schema gets UnknownSchemaError, not a wrong decode."""
    body = _write(V2_TRIGGER, sample_record(V2_TRIGGER))
    parsed = fastavro.parse_schema(V2_TRIGGER)
    fp = bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    )
    with pytest.raises(UnknownSchemaError, match=fp.hex()):
        EnvelopeCodec(TriggerEventEnvelope).decode(frame_single_object(fp, body))
