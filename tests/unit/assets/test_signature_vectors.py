"""The signature test vectors in tests/vectors/signatures, checked in Python and in node.

Three independent checks of every vector file: the Python package decodes the envelope bytes and
re-derives the signed bytes and the signature; a from-the-spec rebuild reads the raw Avro record
with fastavro (no package code) and frames the items itself; and tests/node/verify_signatures.js
does the same with avsc and node's crypto.  In CI (CI=true) a missing node or npm package is a
failure (scripts/bootstrap.sh runs ``npm ci`` in tests/node).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import io
import json
import os
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

import fastavro
import pytest

from airflow_kafka_events.assets.authz import signature_version, signing_payload, verify_envelope
from airflow_kafka_events.assets.errors import SignatureInvalidError
from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.framing import CONFLUENT_HEADER_SIZE, SINGLE_OBJECT_HEADER_SIZE
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from unit.assets.signature_vectors import (
    CONFLUENT_SCHEMA_ID,
    SCHEMA_PATH,
    VECTOR_DIR,
    VECTORS,
    vector_document,
)

pytestmark = pytest.mark.unit

NODE_DIR = Path(__file__).resolve().parents[2] / "node"
NODE_CHECKER = NODE_DIR / "verify_signatures.js"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _documents() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(VECTOR_DIR.glob("*.json"))]


DOCUMENTS = _documents()


class _OneSchemaRegistry:
    """A registry that knows one id: the Confluent-framed vectors' v1.avsc."""

    def get_schema(self, schema_id: int) -> Any:
        assert schema_id == CONFLUENT_SCHEMA_ID
        return SimpleNamespace(schema_str=SCHEMA_PATH.read_text(), schema_type="AVRO")


CODEC = EnvelopeCodec(AssetEventEnvelope, registry_client=_OneSchemaRegistry())


def _decoded(doc: dict[str, Any]) -> AssetEventEnvelope:
    return CODEC.decode(base64.b64decode(doc["envelope_base64"]))


def test_every_definition_has_its_file_and_the_files_are_current():
    assert sorted(doc["name"] for doc in DOCUMENTS) == sorted(vector.name for vector in VECTORS)
    by_name = {doc["name"]: doc for doc in DOCUMENTS}
    for vector in VECTORS:
        assert by_name[vector.name] == vector_document(vector), (
            f"{vector.name}.json is stale: run .venv/bin/python tests/unit/assets/signature_vectors.py"
        )


def test_the_vectors_cover_what_the_scheme_promises():
    texts = {doc["name"]: _raw_record(doc)["extra"] for doc in DOCUMENTS}
    assert texts["float-one"] == {"n": "1.0"} and texts["int-one"] == {"n": "1"}
    assert texts["big-integers"]["big"] == "12345678901234567890"
    assert texts["floats"]["negzero"] == "-0.0"
    assert texts["empty-extra"] == {}
    by_name = {doc["name"]: doc for doc in DOCUMENTS}
    assert by_name["float-one"]["signature_hex"] != by_name["int-one"]["signature_hex"]
    assert {doc["framing"] for doc in DOCUMENTS} == {"single-object", "confluent"}
    assert {doc["expect"] for doc in DOCUMENTS} == {"valid", "invalid", "legacy-v1"}


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda doc: doc["name"])
def test_the_package_rederives_every_vector(doc):
    envelope = _decoded(doc)
    key = bytes.fromhex(doc["key_hex"])
    assert envelope.signature is not None and envelope.signature.hex() == doc["signature_hex"]
    if doc["expect"] == "valid":
        assert signature_version(envelope.signature) == 2
        assert signing_payload(envelope) == base64.b64decode(doc["signed_bytes_base64"])
        verify_envelope(envelope, key)
        with pytest.raises(SignatureInvalidError):
            verify_envelope(envelope, key + b"!")
        with pytest.raises(SignatureInvalidError):
            verify_envelope(dataclasses.replace(envelope, event_id=envelope.event_id + "x"), key)
    elif doc["expect"] == "invalid":
        with pytest.raises(SignatureInvalidError):
            verify_envelope(envelope, key)
    else:
        assert doc["expect"] == "legacy-v1" and signature_version(envelope.signature) == 1
        with pytest.raises(SignatureInvalidError, match="version 1"):
            verify_envelope(envelope, key)


# --------------------------------------------------------------------------- from the spec alone
def _raw_record(doc: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64decode(doc["envelope_base64"])
    body = data[CONFLUENT_HEADER_SIZE:] if data[:1] == b"\x00" else data[SINGLE_OBJECT_HEADER_SIZE:]
    schema = fastavro.parse_schema(json.loads(SCHEMA_PATH.read_text()))
    record = fastavro.schemaless_reader(io.BytesIO(body), schema, None, return_record_name=False)
    assert isinstance(record, dict)
    return record


def _spec_item(value: Any) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    data = str(value).encode("utf-8")
    return len(data).to_bytes(4, "big") + data


def _spec_micros(value: datetime | None) -> int | None:
    """fastavro reads timestamp-micros as an aware datetime: back to the long it was on the wire."""
    return None if value is None else (value - _EPOCH) // timedelta(microseconds=1)


def _spec_signed_bytes(record: dict[str, Any]) -> bytes:
    source = record["source"]
    extra = sorted(record["extra"].items(), key=lambda pair: pair[0].encode("utf-8"))
    items: list[Any] = [
        "airflow-kafka-events/asset-event-signature/v2",
        record["event_id"],
        record["asset"]["name"],
        record["asset"]["uri"],
        record["partition_key"],
        _spec_micros(record["partition_date"]),
        len(extra),
        *(part for pair in extra for part in pair),
        record["idempotency_key"],
        source["kind"],
        *(source[name] for name in ("dag_id", "run_id", "task_id", "map_index", "try_number", "producer")),
        _spec_micros(record["emitted_at"]),
        len(record["causation"]),
        *record["causation"],
    ]
    return b"".join(_spec_item(value) for value in items)


@pytest.mark.parametrize(
    "doc", [doc for doc in DOCUMENTS if doc["expect"] != "legacy-v1"], ids=lambda doc: doc["name"]
)
def test_the_spec_alone_rebuilds_every_vector(doc):
    record = _raw_record(doc)
    payload = _spec_signed_bytes(record)
    digest = hmac.new(bytes.fromhex(doc["key_hex"]), payload, hashlib.sha256).digest()
    verifies = record["signature"] == b"v2:" + digest
    if doc["expect"] == "valid":
        assert payload == base64.b64decode(doc["signed_bytes_base64"])
        assert verifies
    else:
        assert not verifies


# --------------------------------------------------------------------------- node
def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _unavailable(reason: str) -> NoReturn:
    message = f"{reason}: install node 18+ and run scripts/bootstrap.sh (npm ci in tests/node)"
    if _in_ci():
        pytest.fail(f"the node signature checker cannot run in CI: {message}", pytrace=False)
    pytest.skip(message)


def test_node_verifies_every_vector_with_its_own_avro_and_hmac():
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not on PATH")
    if not (NODE_DIR / "node_modules" / "avsc" / "package.json").is_file():
        _unavailable("the npm package avsc is not installed in tests/node")
    result = subprocess.run(
        [node, str(NODE_CHECKER), str(VECTOR_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith(f"{len(DOCUMENTS)}/{len(DOCUMENTS)} vectors as expected"), result.stdout
    assert sum(line.startswith("ok ") for line in lines) == len(DOCUMENTS)
