"""Allowlists and HMAC-SHA256 envelope signatures, without a broker."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import struct
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kafka_events.assets.authz import (
    SIGNATURE_PREFIX_V2,
    SIGNATURE_RECIPE_V2,
    Allowlist,
    AllowRule,
    compute_signature,
    extra_texts,
    is_signature_valid,
    sign_envelope,
    signature_version,
    signing_payload,
    verify_envelope,
)
from airflow_kafka_events.assets.errors import NotAllowedError, SignatureInvalidError, SignatureMissingError
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import EnvelopeEncodeError, ValidationError
from harness.airflow_free import run_without_airflow

pytestmark = pytest.mark.unit

KEY = "k" * 32


def envelope(**overrides) -> AssetEventEnvelope:
    fields = {
        "asset": AssetRef(name="orders", uri="s3://lake/orders"),
        "event_id": "E1",
        "partition_key": "batch-0042",
        "partition_date": datetime(2026, 1, 31, 12, 30, 15, 123456, tzinfo=timezone.utc),
        "extra": {"rows": 10, "ratio": 0.1, "name": "café", "nested": {"b": [1, 2], "a": None}},
        "idempotency_key": "idem-1",
        "source": EventSource(SourceKind.DAG_CALLBACK, dag_id="etl_daily", run_id="r1", producer="p"),
        "emitted_at": datetime(2026, 2, 1, 0, 0, 0, 1, tzinfo=timezone.utc),
        "causation": ("E0",),
    }
    fields.update(overrides)
    return AssetEventEnvelope(**fields)


# --------------------------------------------------------------------------- signatures
def test_sign_then_verify_round_trip_through_the_codec():
    signed = sign_envelope(envelope(), KEY)
    assert signed.signature is not None and len(signed.signature) == 35
    assert signed.signature.startswith(SIGNATURE_PREFIX_V2) and signature_version(signed.signature) == 2
    decoded = ASSET_EVENT_CODEC.decode(ASSET_EVENT_CODEC.encode(signed))
    assert decoded.signature == signed.signature
    verify_envelope(decoded, KEY)
    verify_envelope(decoded, KEY.encode())
    assert is_signature_valid(decoded, [b"old-key", KEY])


def _frame(*items: str | int | None) -> bytes:
    out = b""
    for value in items:
        if value is None:
            out += b"\xff\xff\xff\xff"
        else:
            data = str(value).encode("utf-8")
            out += struct.pack(">I", len(data)) + data
    return out


def test_signature_covers_the_documented_items():
    env = envelope()
    texts = {"rows": "10", "ratio": "0.1", "name": '"café"', "nested": '{"b":[1,2],"a":null}'}
    assert extra_texts(env) == texts == env.to_avro()["extra"]
    expected_items = _frame(
        SIGNATURE_RECIPE_V2,
        "E1",
        "orders",
        "s3://lake/orders",
        "batch-0042",
        1769862615123456,  # 2026-01-31T12:30:15.123456Z in microseconds
        4,
        *("name", '"café"', "nested", '{"b":[1,2],"a":null}', "ratio", "0.1", "rows", "10"),
        "idem-1",
        *("dag_callback", "etl_daily", "r1", None, None, None, "p"),
        1769904000000001,
        1,
        "E0",
    )
    assert signing_payload(env) == expected_items
    expected = hmac.new(KEY.encode(), expected_items, hashlib.sha256).digest()
    assert compute_signature(env, KEY) == SIGNATURE_PREFIX_V2 + expected


def test_extra_texts_from_the_wire_are_signed_verbatim():
    # another language may write 1e-7 where Python writes 1e-07: the texts as read are what count
    env = envelope(extra={"x": 1e-07, "n": 1})
    wire = {"x": "1e-7", "n": "1"}
    signed = dataclasses.replace(env, signature=compute_signature(env, KEY, extra_texts=wire))
    verify_envelope(signed, KEY, extra_texts=wire)
    with pytest.raises(SignatureInvalidError):
        verify_envelope(signed, KEY)  # re-derived texts: 1e-07
    assert _frame("x", "1e-7") in signing_payload(env, extra_texts=wire)
    with pytest.raises(ValidationError, match="same keys"):
        signing_payload(env, extra_texts={"x": "1e-7"})


def test_one_and_one_point_zero_sign_differently():
    one, one_float = envelope(extra={"n": 1}), envelope(extra={"n": 1.0})
    assert signing_payload(one) != signing_payload(one_float)
    with pytest.raises(SignatureInvalidError):
        verify_envelope(dataclasses.replace(one_float, signature=compute_signature(one, KEY)), KEY)


def test_version_1_signatures_are_refused_with_the_fix_named():
    env = envelope()
    legacy = dataclasses.replace(env, signature=hmac.new(KEY.encode(), b"any bytes", hashlib.sha256).digest())
    assert signature_version(legacy.signature) == 1
    with pytest.raises(SignatureInvalidError, match=r"version 1 signature .* sign it with sign_envelope"):
        verify_envelope(legacy, KEY)
    assert not is_signature_valid(legacy, KEY)


@pytest.mark.parametrize("signature", [b"", b"x" * 31, b"v2:" + b"x" * 31, b"v3:" + b"x" * 32, b"x" * 36])
def test_signatures_of_neither_version_are_invalid(signature):
    signed = dataclasses.replace(envelope(), signature=signature)
    assert signature_version(signature) is None
    with pytest.raises(SignatureInvalidError, match="neither version"):
        verify_envelope(signed, KEY)


def test_the_signature_field_is_not_signed():
    env = envelope()
    assert signing_payload(env) == signing_payload(dataclasses.replace(env, signature=b"x" * 32))
    resigned = sign_envelope(sign_envelope(env, "other key"), KEY)
    verify_envelope(resigned, KEY)


@pytest.mark.parametrize(
    "change",
    [
        {"event_id": "E2"},
        {"asset": AssetRef(name="orders", uri="s3://lake/other")},
        {"partition_key": "batch-0043"},
        {"partition_date": datetime(2026, 1, 31, 12, 30, 15, 123457, tzinfo=timezone.utc)},
        {"extra": {"rows": 11}},
        {"extra": {"rows": 10.0, "ratio": 0.1, "name": "café", "nested": {"b": [1, 2], "a": None}}},
        {"extra": {"rows": 10, "ratio": 0.1, "name": "café", "nested": {"a": None, "b": [1, 2]}}},
        {"idempotency_key": "idem-2"},
        {"source": EventSource(SourceKind.DAG_CALLBACK, dag_id="etl_daily", run_id="r2", producer="p")},
        {"emitted_at": datetime(2026, 2, 1, tzinfo=timezone.utc)},
        {"causation": ("E0", "E00")},
        {"causation": ()},
    ],
)
def test_any_tampered_field_fails_verification(change):
    signed = sign_envelope(envelope(), KEY)
    tampered = dataclasses.replace(signed, **change)
    with pytest.raises(SignatureInvalidError, match="matches none"):
        verify_envelope(tampered, KEY)


def test_wrong_key_and_missing_signature():
    signed = sign_envelope(envelope(), KEY)
    with pytest.raises(SignatureInvalidError) as info:
        verify_envelope(signed, "another key")
    assert info.value.reason == "signature-invalid"
    with pytest.raises(SignatureMissingError) as missing:
        verify_envelope(envelope(), KEY)
    assert missing.value.reason == "signature-missing"
    assert not is_signature_valid(envelope(), KEY)


@pytest.mark.parametrize("bad", ["", b"", [], 42])
def test_keys_must_be_non_empty_bytes_or_str(bad):
    with pytest.raises(ValidationError):
        verify_envelope(sign_envelope(envelope(), KEY), bad)


_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
_json = st.recursive(
    _json_leaf,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(extra=st.dictionaries(st.text(), _json, max_size=4), key=st.binary(min_size=1, max_size=64))
def test_signatures_survive_the_wire_for_any_json_extra(extra, key):
    env = envelope(extra=extra)
    try:
        wire = ASSET_EVENT_CODEC.encode(sign_envelope(env, key))
    except (ValidationError, EnvelopeEncodeError) as exc:
        # only text with lone surrogates (not UTF-8, so not on any wire) may be refused
        assert _has_surrogate(extra), exc
        return
    verify_envelope(ASSET_EVENT_CODEC.decode(wire), key)


def _has_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(item) for item in value)
    return False


# --------------------------------------------------------------------------- allowlists
def test_allowlist_rules_are_or_of_ands():
    allow = Allowlist.from_config(
        [
            {"source_kinds": ["dag_callback", "task_callback"], "dag_ids": ["etl_*"]},
            {"source_kinds": ["external"], "producers": ["ci-pipeline"]},
        ]
    )
    assert allow is not None
    allow.check(envelope())
    allow.check(envelope(source=EventSource(SourceKind.EXTERNAL, producer="ci-pipeline")))
    for source in (
        EventSource(SourceKind.TASK, dag_id="etl_daily", task_id="t"),  # kind not allowed for etl_*
        EventSource(SourceKind.DAG_CALLBACK, dag_id="reporting"),  # dag not allowed
        EventSource(SourceKind.DAG_CALLBACK),  # no dag id at all
        EventSource(SourceKind.EXTERNAL, producer="laptop"),
        EventSource(SourceKind.EXTERNAL),
    ):
        with pytest.raises(NotAllowedError, match="matches no allow rule") as info:
            allow.check(envelope(source=source))
        assert info.value.reason == "not-allowed"


def test_allowlist_json_form_round_trips_and_globs_are_case_sensitive():
    config = [{"dag_ids": ["ETL_*", "x"]}, {"producers": ["svc-?"], "source_kinds": ["external"]}]
    allow = Allowlist.from_config(config)
    assert allow is not None
    assert Allowlist.from_config(allow.to_config()) == allow
    assert allow.to_config() == [
        {"dag_ids": ["ETL_*", "x"]},
        {"source_kinds": ["external"], "producers": ["svc-?"]},
    ]
    assert allow.allows(EventSource(SourceKind.TASK, dag_id="ETL_1"))
    assert not allow.allows(EventSource(SourceKind.TASK, dag_id="etl_1"))
    assert allow.allows(EventSource(SourceKind.EXTERNAL, producer="svc-a"))
    assert Allowlist.from_config(None) is None


@pytest.mark.parametrize(
    "config",
    [
        [],
        [{}],
        [{"dag_ids": []}],
        [{"source_kinds": ["robot"]}],
        [{"dag_id": ["x"]}],
        [{"dag_ids": "etl"}],
        [{"dag_ids": [""]}],
        ["etl"],
        {"dag_ids": ["x"]},
        "etl",
    ],
)
def test_bad_allowlists_are_refused(config):
    with pytest.raises(ValidationError):
        Allowlist.from_config(config)


def test_allow_rule_requires_a_restriction():
    with pytest.raises(ValidationError, match="at least one"):
        AllowRule()


def test_authz_imports_no_airflow():
    run_without_airflow("import airflow_kafka_events.assets.authz")


def test_a_signature_over_another_languages_extra_texts_verifies_after_decoding():
    """A producer in another language may write ``1e-7`` where Python writes ``1e-07``: the
    consumer checks the texts as they were on the wire, not as Python would re-serialize them."""
    import io

    import fastavro

    from airflow_kafka_events.assets.authz import compute_signature, signing_payload, verify_envelope
    from airflow_kafka_events.envelopes import schemas
    from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
    from airflow_kafka_events.envelopes.framing import SINGLE_OBJECT_HEADER_SIZE, frame_single_object
    from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind

    key = b"k" * 32
    envelope = AssetEventEnvelope(
        asset=AssetRef(name="a", uri="s3://a"),
        source=EventSource(SourceKind.EXTERNAL, producer="js"),
        extra={"tiny": 1e-7, "n": 1},
    )
    wire = ASSET_EVENT_CODEC.encode(envelope)
    parsed = fastavro.parse_schema(schemas.raw_schema(schemas.ASSET_EVENT_ENVELOPE))
    record = fastavro.schemaless_reader(io.BytesIO(wire[SINGLE_OBJECT_HEADER_SIZE:]), parsed, parsed)
    assert record["extra"]["tiny"] == "1e-07"  # how Python writes it
    record["extra"] = {"tiny": "1e-7", "n": "1"}  # how JSON.stringify writes it
    foreign_texts = dict(record["extra"])
    unsigned = AssetEventEnvelope.from_avro(record)
    record["signature"] = compute_signature(unsigned, key)
    assert signing_payload(unsigned) == signing_payload(unsigned, extra_texts=foreign_texts)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, parsed, record)
    decoded = ASSET_EVENT_CODEC.decode(
        frame_single_object(wire[2:SINGLE_OBJECT_HEADER_SIZE], body.getvalue())
    )
    assert decoded.extra == {"tiny": 1e-7, "n": 1} and decoded.wire_extra == foreign_texts
    verify_envelope(decoded, [key])  # the wire texts, not Python's "1e-07"
