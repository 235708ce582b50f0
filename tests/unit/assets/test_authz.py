"""Allowlists and HMAC-SHA256 envelope signatures, without a broker."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kafka_events.assets.authz import (
    SIGNATURE_RECIPE,
    Allowlist,
    AllowRule,
    NotAllowedError,
    SignatureInvalidError,
    SignatureMissingError,
    compute_signature,
    is_signature_valid,
    sign_envelope,
    signing_payload,
    verify_envelope,
)
from airflow_kafka_events.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import ValidationError

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
    assert signed.signature is not None and len(signed.signature) == 32
    decoded = ASSET_EVENT_CODEC.decode(ASSET_EVENT_CODEC.encode(signed))
    assert decoded.signature == signed.signature
    verify_envelope(decoded, KEY)
    verify_envelope(decoded, KEY.encode())
    assert is_signature_valid(decoded, [b"old-key", KEY])


def test_signature_covers_the_documented_canonical_payload():
    env = envelope()
    payload = json.loads(signing_payload(env))
    assert payload[0] == SIGNATURE_RECIPE
    body = payload[1]
    assert set(body) == {
        "event_id",
        "asset",
        "partition_key",
        "partition_date",
        "extra",
        "idempotency_key",
        "source",
        "emitted_at",
        "causation",
    }
    assert body["partition_date"] == "2026-01-31T12:30:15.123456+00:00"
    assert body["emitted_at"] == "2026-02-01T00:00:00.000001+00:00"
    assert body["source"]["kind"] == "dag_callback"
    # ASCII only, compact, sorted keys: another language can rebuild the same bytes
    raw = signing_payload(env)
    assert raw.isascii() and b" " not in raw.replace(b"\\u00e9", b"")
    assert raw == json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    expected = hmac.new(KEY.encode(), raw, hashlib.sha256).digest()
    assert compute_signature(env, KEY) == expected


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
    except Exception:  # e.g. text with lone surrogates that the codec refuses: nothing to sign
        return
    verify_envelope(ASSET_EVENT_CODEC.decode(wire), key)


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
    code = (
        "import sys, airflow_kafka_events.assets.authz\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
