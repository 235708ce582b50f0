"""Every check that runs before an asset event is sent, against Airflow 3.3's own rules."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kafka_events.assets import validation as v
from airflow_kafka_events.errors import (
    AssetEventValidationError,
    CausationError,
    CausationLoopError,
    ExtraNotSerializableError,
    ExtraTooLargeError,
    IdempotencyKeyError,
    InvalidAssetError,
    NaiveDatetimeError,
    PartitionDateError,
    PartitionDateWithoutKeyError,
    PartitionKeyError,
    ValidationError,
)

pytestmark = pytest.mark.unit

AWARE = datetime(2026, 1, 31, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- partition keys
@pytest.mark.parametrize("key", ["", " ", "\t\n", "\u2003", " " * 300])
def test_blank_partition_keys_are_rejected(key):
    with pytest.raises(PartitionKeyError, match="empty or whitespace-only"):
        v.check_partition_key(key)


def test_partition_key_length_bound_is_airflows_id_len():
    from airflow.models.base import ID_LEN

    assert v.PARTITION_KEY_MAX_LENGTH == ID_LEN == 250
    assert v.check_partition_key("k" * 250) == "k" * 250
    with pytest.raises(PartitionKeyError, match="at most 250"):
        v.check_partition_key("k" * 251)


@pytest.mark.parametrize("key", [1, b"batch", ["a"]])
def test_non_str_partition_keys_are_rejected(key):
    with pytest.raises(PartitionKeyError, match="must be a str"):
        v.check_partition_key(key)


def test_surrounding_whitespace_is_kept_as_airflow_keeps_it():
    assert v.check_partition_key(" batch-41 ") == " batch-41 "


def _airflow_accepts(key: str) -> bool:
    from airflow.sdk.definitions.asset import AssetUniqueKey
    from airflow.sdk.execution_time.context import OutletEventAccessor

    try:
        OutletEventAccessor(key=AssetUniqueKey(name="a", uri="a")).add_partitions(key)
    except ValueError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=260), st.text(alphabet=" \t\n\r\x0b\x0c\u00a0\u2003x", max_size=6)))
def test_partition_key_rule_matches_airflows_outlet_rule(key):
    try:
        v.check_partition_key(key)
        ours = True
    except PartitionKeyError:
        ours = False
    assert ours == _airflow_accepts(key)


# --------------------------------------------------------------------------- partition dates
def test_partition_date_requires_a_key():
    with pytest.raises(PartitionDateWithoutKeyError):
        v.check_partition(None, AWARE)


def test_naive_partition_date_is_rejected():
    with pytest.raises(NaiveDatetimeError, match="timezone-aware"):
        v.check_partition("k", datetime(2026, 1, 31))


@pytest.mark.parametrize("value", [date(2026, 1, 31), "2026-01-31T00:00:00+00:00", 1769817600])
def test_partition_date_must_be_a_datetime(value):
    with pytest.raises(PartitionDateError, match="datetime"):
        v.check_partition("k", value)


def test_aware_partition_date_with_key_is_accepted():
    tz = timezone(timedelta(hours=2))
    assert v.check_partition("k", datetime(2026, 1, 31, 2, tzinfo=tz)) == (
        "k",
        datetime(2026, 1, 31, 2, tzinfo=tz),
    )
    assert v.check_partition(None, None) == (None, None)


# --------------------------------------------------------------------------- extra
@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["a"], "mapping"),
        ({1: "a"}, "keys must be str"),
        ({"a": {1, 2}}, "set"),
        ({"a": math.nan}, "NaN"),
        ({"a": AWARE}, "datetime"),
        ({"a": object()}, "object"),
    ],
)
def test_extra_that_is_not_a_json_object_is_rejected(extra, match):
    with pytest.raises(ExtraNotSerializableError, match=match):
        v.check_extra(extra)


def test_circular_extra_is_rejected():
    extra: dict = {}
    extra["self"] = extra
    with pytest.raises(ExtraNotSerializableError, match="circular"):
        v.check_extra(extra)


def test_extra_is_copied_as_plain_json():
    class Name(str):
        pass

    result = v.check_extra({"t": (1, 2), "n": Name("x"), "nested": {"l": [True, None, 1.5]}})
    assert result == {"t": [1, 2], "n": "x", "nested": {"l": [True, None, 1.5]}}
    assert type(result["n"]) is str
    assert v.check_extra(None) == {}


def test_extra_size_bound_default_is_64_kib_and_is_measured_as_compact_utf8_json():
    assert v.DEFAULT_MAX_EXTRA_BYTES == 65536
    overhead = len('{"k":""}')
    fits = {"k": "x" * (65536 - overhead)}
    assert v.extra_size(fits) == 65536
    v.check_extra(fits)
    with pytest.raises(ExtraTooLargeError, match="65537 bytes"):
        v.check_extra({"k": "x" * (65537 - overhead)})
    # non-ASCII counts in UTF-8 bytes
    with pytest.raises(ExtraTooLargeError):
        v.check_extra({"k": "é" * 40000})


def test_extra_size_bound_is_configurable():
    with pytest.raises(ExtraTooLargeError, match="over the 10-byte bound"):
        v.check_extra({"key": "value"}, max_bytes=10)
    v.check_extra({"k": "x" * 100_000}, max_bytes=200_000)
    with pytest.raises(ValidationError, match="positive int"):
        v.check_extra({}, max_bytes=0)


def test_extra_size_is_measured_after_redaction():
    big_secret = {"password": "p" * 100}
    assert v.check_extra(big_secret, max_bytes=30) == {"password": "***"}


def test_a_redactor_that_breaks_the_object_is_refused():
    with pytest.raises(ExtraNotSerializableError, match="redacting"):
        v.check_extra({"a": 1}, redactor=lambda extra: "<redaction-failed>")


# --------------------------------------------------------------------------- redaction (external path)
def test_external_sensitive_names_include_airflows_defaults():
    from airflow.sdk._shared.secrets_masker import DEFAULT_SENSITIVE_FIELDS

    assert DEFAULT_SENSITIVE_FIELDS <= v.EXTERNAL_SENSITIVE_KEYS


def test_external_redaction_by_key_name_at_any_depth():
    extra = {
        "rows": 10,
        "password": "hunter22",
        "X-Api-Key": "abc",
        "db": {"user": "u", "Secret_Token": "t", "port": 5432},
        "hooks": [{"webhook_url": "https://x"}, {"name": "ok"}],
        "pin_password": 1234,
        "auth": {"bearer": {"value": "v", "n": 1}},
        "token_none": None,
    }
    assert v.redact_external(extra) == {
        "rows": 10,
        "password": "***",
        "X-Api-Key": "***",
        "db": {"user": "u", "Secret_Token": "***", "port": 5432},
        "hooks": [{"webhook_url": "***"}, {"name": "ok"}],
        "pin_password": "***",
        "auth": {"bearer": {"value": "***", "n": "***"}},
        "token_none": None,
    }
    assert extra["password"] == "hunter22"  # a copy, the caller's dict is untouched


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("password", True),
        ("PASSWORD", True),
        ("db-password", True),
        ("access-token", True),
        ("apikey", True),
        ("row_count", False),
        ("path", False),
        ("", False),
    ],
)
def test_sensitive_key_rule_matches_airflows(name, sensitive):
    from airflow.sdk._shared.secrets_masker import should_hide_value_for_key

    assert v.is_sensitive_key(name) is sensitive
    assert bool(should_hide_value_for_key(name)) is sensitive


# --------------------------------------------------------------------------- assets
@pytest.mark.parametrize(
    "uri",
    [
        "s3://Bucket/key/?b=2&a=1#frag",
        "S3://bucket/a//",
        "file:///tmp/data/",
        "postgres://host:5432/db/schema/table",
        "x-custom://Anything/Goes/",
        "just-a-name",
        "gs://b/p?z=1&z=0",
        "https://user@example.com/a/",
    ],
)
def test_uri_normalization_matches_airflow_for_schemes_without_provider_normalizers(uri):
    from airflow.sdk import Asset

    assert v.check_asset(uri) == (Asset(uri).name, Asset(uri).uri)


def test_password_in_uri_is_dropped_with_a_warning_like_airflow():
    from airflow.sdk import Asset

    with pytest.warns(UserWarning, match="password"):
        ours = v.check_asset("https://user:pw@example.com/a")
    with pytest.warns(UserWarning):
        theirs = Asset("https://user:pw@example.com/a")
    assert ours == (theirs.name, theirs.uri) == ("https://user:pw@example.com/a", "https://example.com/a")


@pytest.mark.parametrize(
    ("uri", "name", "match"),
    [
        ("", None, "cannot be empty"),
        ("   ", None, "whitespace"),
        ("a" * 1501, None, "1500"),
        ("airflow://dag/x", None, "reserved"),
        ("s3://b/k", "self", "prohibited"),
        ("s3://b/k", "context", "prohibited"),
        (123, None, "must be a str"),
        ("s3://b/k", "", "cannot be empty"),
        ("http://[::1/x", None, "cannot be parsed"),
    ],
)
def test_assets_airflow_would_reject_are_rejected(uri, name, match):
    with pytest.raises(InvalidAssetError, match=match):
        v.check_asset(uri, name)


# --------------------------------------------------------------------------- idempotency keys, causation
@pytest.mark.parametrize("key", ["", "  ", 5, "k" * 513])
def test_bad_explicit_idempotency_keys_are_rejected(key):
    with pytest.raises(IdempotencyKeyError):
        v.check_idempotency_key(key)


def test_causation_keeps_order_and_drops_repeats():
    assert v.check_causation(["a", "b", "a", "c"]) == ("a", "b", "c")
    assert v.check_causation(None) == ()


@pytest.mark.parametrize("causation", ["abc", [""], [None], [1], 5])
def test_bad_causation_is_rejected(causation):
    with pytest.raises(CausationError):
        v.check_causation(causation)


def test_too_long_causation_chain_is_a_suspected_feedback_loop():
    chain = [f"e{i}" for i in range(v.DEFAULT_MAX_CAUSATION_DEPTH)]
    assert len(v.check_causation(chain)) == 32
    with pytest.raises(CausationLoopError, match="feedback loop"):
        v.check_causation([*chain, "one-more"])
    with pytest.raises(CausationLoopError):
        v.check_causation(["a", "b"], max_depth=1)


@pytest.mark.parametrize("timeout", [0, -1, math.inf, "1", True])
def test_bad_timeouts_are_rejected(timeout):
    with pytest.raises(ValidationError):
        v.check_timeout(timeout)


def test_every_asset_event_error_is_a_validation_error():
    for cls in (
        InvalidAssetError,
        PartitionKeyError,
        PartitionDateError,
        NaiveDatetimeError,
        PartitionDateWithoutKeyError,
        ExtraNotSerializableError,
        ExtraTooLargeError,
        IdempotencyKeyError,
        CausationError,
        CausationLoopError,
    ):
        assert issubclass(cls, AssetEventValidationError)
        assert issubclass(cls, ValidationError)
        assert issubclass(cls, ValueError)
