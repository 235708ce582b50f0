"""The asset event signature test vectors: their definitions and the writer of tests/vectors/signatures.

Each vector is one JSON file: the key (hex), the exact envelope bytes the codec writes (base64,
Avro single-object or Confluent framing), the signed bytes (base64, for debugging a port) and the
expected ``signature`` field (hex).  ``expect`` is ``valid``, ``invalid`` (the bytes were altered
after signing) or ``legacy-v1`` (a deprecated version 1 signature that only the Python package
checks).  Regenerate after a deliberate change with::

    .venv/bin/python tests/unit/assets/signature_vectors.py
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_kafka_events.assets.authz import (
    compute_signature,
    sign_envelope,
    signing_payload,
)
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.framing import SINGLE_OBJECT_HEADER_SIZE, frame_confluent
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind

VECTOR_DIR = Path(__file__).resolve().parents[2] / "vectors" / "signatures"
SCHEMA_PATH = (
    Path(__file__).resolve().parents[3]
    / "src"
    / "airflow_kafka_events"
    / "envelopes"
    / "schemas"
    / "asset_event_envelope"
    / "v1.avsc"
)
#: The schema registry id the Confluent-framed vectors name (it stands for v1.avsc).
CONFLUENT_SCHEMA_ID = 7

UTC = timezone.utc
KEY = b"vector-key-0123456789abcdef-0123"
ASSET = AssetRef(name="orders", uri="s3://lake/orders")
EMITTED = datetime(2026, 2, 1, 0, 0, 0, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Vector:
    name: str
    description: str
    envelope: AssetEventEnvelope
    key: bytes = KEY
    framing: str = "single-object"
    expect: str = "valid"
    notes: dict[str, Any] = field(default_factory=dict)


def _env(**fields: Any) -> AssetEventEnvelope:
    base: dict[str, Any] = {"asset": ASSET, "event_id": "E1", "emitted_at": EMITTED}
    base.update(fields)
    return AssetEventEnvelope(**base)


VECTORS: tuple[Vector, ...] = (
    Vector(
        "integers",
        "integers, negative, zero and the int64 limits",
        _env(extra={"rows": 10, "neg": -7, "zero": 0, "max64": 2**63 - 1, "min64": -(2**63)}),
    ),
    Vector(
        "strings",
        "strings with escapes: quote, backslash, control characters, NUL, slash, empty",
        _env(extra={"s": "hello", "empty": "", "esc": 'a"b\\c/d', "ctrl": "\n\t\r\b\f\x00\x1f\x7f"}),
    ),
    Vector(
        "nested",
        "nested objects and arrays, booleans and null, key order inside a value kept as written",
        _env(extra={"nested": {"b": [1, 2, {"c": None}], "a": True}, "list": [], "obj": {}, "f": False}),
    ),
    Vector(
        "non-ascii",
        "non-ASCII text in keys, values and fields; keys whose UTF-8 order differs from UTF-16 order",
        _env(
            asset=AssetRef(name="commandes-été", uri="s3://lac/commandes/été"),
            event_id="évènement-1",
            extra={
                "name": "café ✓",
                "emoji": "😀",
                "κλειδί": "値",
                "\uff5e": "fullwidth tilde key (U+FF5E)",
                "😀": "emoji key (U+1F600)",
                "é": 1,
                "e": 2,
                "Z": 3,
                "\u2028": "line separator",
            },
            source=EventSource(SourceKind.EXTERNAL, producer="producteur-ñ"),
        ),
    ),
    Vector("float-one", "the float 1.0, not the int 1", _env(extra={"n": 1.0})),
    Vector("int-one", "the int 1: same envelope as float-one but for 1 vs 1.0", _env(extra={"n": 1})),
    Vector(
        "one-vs-one-point-zero",
        "1 and 1.0 side by side",
        _env(extra={"int_one": 1, "float_one": 1.0, "list": [1, 1.0, -1, -1.0]}),
    ),
    Vector(
        "big-integers",
        "integers beyond 2^53 and beyond 64 bits",
        _env(
            extra={
                "big": 12345678901234567890,
                "above_2_53": 2**53 + 1,
                "huge": 10**30,
                "neg_big": -(10**25),
            }
        ),
    ),
    Vector(
        "floats",
        "negative zero, exponents, shortest round-trip floats, the smallest subnormal",
        _env(
            extra={
                "negzero": -0.0,
                "small": 1e-07,
                "e16": 1e16,
                "pi": 3.141592653589793,
                "tenth": 0.1,
                "tiny": 5e-324,
                "large": 1.7976931348623157e308,
            }
        ),
    ),
    Vector(
        "empty-extra",
        "empty extra and every optional field absent (null items)",
        _env(extra={}, source=EventSource(SourceKind.EXTERNAL)),
    ),
    Vector(
        "causation",
        "a causation chain of three event ids, oldest first",
        _env(extra={"step": 3}, causation=("E0", "E00", "E000")),
    ),
    Vector(
        "partition-key-and-date",
        "a partition key with a partition date before the epoch (negative microseconds)",
        _env(
            partition_key="2026-01-31",
            partition_date=datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            idempotency_key="orders/2026-01-31",
        ),
    ),
    Vector(
        "partition-key-empty",
        "an empty partition key (an empty item, not a null one)",
        _env(partition_key="", idempotency_key=""),
    ),
    Vector(
        "task-source",
        "a task source with every field, a negative map index",
        _env(
            extra={"rows": 1},
            source=EventSource(
                SourceKind.TASK,
                dag_id="etl_daily",
                run_id="scheduled__2026-02-01T00:00:00+00:00",
                task_id="load",
                map_index=-1,
                try_number=3,
                producer="airflow",
            ),
            partition_key="batch-0042",
            partition_date=datetime(2026, 1, 31, 12, 30, 15, 123456, tzinfo=UTC),
            causation=("E0",),
        ),
    ),
    Vector(
        "confluent-framing",
        f"Confluent wire format (00 + schema id {CONFLUENT_SCHEMA_ID}, which stands for v1.avsc)",
        _env(extra={"rows": 10, "ratio": 0.25}, partition_key="p"),
        framing="confluent",
    ),
    Vector(
        "binary-key",
        "a key of arbitrary bytes (not UTF-8)",
        _env(extra={"rows": 10}),
        key=bytes(range(256))[::-7],
    ),
    Vector(
        "tampered-extra",
        "the signature of int-one on an envelope whose extra says 1.0: must NOT verify",
        _env(extra={"n": 1.0}),
        expect="invalid",
        notes={"signed": "int-one"},
    ),
    Vector(
        "legacy-v1",
        "a deprecated version 1 signature (Python JSON of the parsed extra); accepted by the Python "
        "package during the deprecation window, not reproducible in general elsewhere",
        _env(extra={"rows": 10, "name": "café"}),
        expect="legacy-v1",
    ),
)


def _frame(envelope: AssetEventEnvelope, framing: str) -> bytes:
    data = ASSET_EVENT_CODEC.encode(envelope)
    if framing == "confluent":
        return frame_confluent(CONFLUENT_SCHEMA_ID, data[SINGLE_OBJECT_HEADER_SIZE:])
    return data


def _version_1_payload(envelope: AssetEventEnvelope) -> bytes:
    """What a version 1 signature covered (development builds; the package refuses it now)."""

    def utc(value: datetime | None) -> str | None:
        return None if value is None else value.astimezone(timezone.utc).isoformat(timespec="microseconds")

    body = {
        "event_id": envelope.event_id,
        "asset": {"name": envelope.asset.name, "uri": envelope.asset.uri},
        "partition_key": envelope.partition_key,
        "partition_date": utc(envelope.partition_date),
        "extra": dict(envelope.extra),
        "idempotency_key": envelope.idempotency_key,
        "source": envelope.source.to_avro(),
        "emitted_at": utc(envelope.emitted_at),
        "causation": list(envelope.causation),
    }
    recipe = "airflow-kafka-events/asset-event-signature/v1"
    return json.dumps([recipe, body], sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def _signed(vector: Vector) -> tuple[AssetEventEnvelope, bytes]:
    """The envelope carrying its signature, and the bytes that signature covers."""
    env = vector.envelope
    if vector.expect == "legacy-v1":
        payload = _version_1_payload(env)
        return dataclasses.replace(
            env, signature=hmac.new(vector.key, payload, hashlib.sha256).digest()
        ), payload
    if vector.expect == "invalid":
        source = next(v for v in VECTORS if v.name == vector.notes["signed"])
        return dataclasses.replace(env, signature=compute_signature(source.envelope, vector.key)), (
            signing_payload(source.envelope)
        )
    return sign_envelope(env, vector.key), signing_payload(env)


def vector_document(vector: Vector) -> dict[str, Any]:
    signed, payload = _signed(vector)
    assert signed.signature is not None
    return {
        "name": vector.name,
        "description": vector.description,
        "expect": vector.expect,
        "key_hex": vector.key.hex(),
        "framing": vector.framing,
        **({"confluent_schema_id": CONFLUENT_SCHEMA_ID} if vector.framing == "confluent" else {}),
        "envelope_base64": base64.b64encode(_frame(signed, vector.framing)).decode("ascii"),
        "signed_bytes_base64": base64.b64encode(payload).decode("ascii"),
        "signature_hex": signed.signature.hex(),
        **({"notes": vector.notes} if vector.notes else {}),
    }


def write_vectors(directory: Path = VECTOR_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for vector in VECTORS:
        path = directory / f"{vector.name}.json"
        path.write_text(json.dumps(vector_document(vector), indent=2, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_vectors():
        print(written.relative_to(Path.cwd()) if written.is_relative_to(Path.cwd()) else written)
    sys.exit(0)
