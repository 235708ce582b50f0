"""Pure logic of the inspection package and its CLI: redaction, previews, windows, time flags."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_events.cli.inspection import parse_time
from airflow_kafka_events.ui.inspection.errors import InvalidWindowError
from airflow_kafka_events.ui.inspection.redact import MASK, is_secret_name, preview, redact, redact_text
from airflow_kafka_events.ui.inspection.window import ScanWindow

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name",
    ["password", "sasl.password", "api_token", "X-Api-Key", "secret", "Authorization", "signature",
     "aws_secret_access_key", "signing_key", "key", "private_key_pem", "credentials"],
)  # fmt: skip
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["partition_key", "idempotency_key", "trace-id", "rows", "keyboard", "monkey"]
)
def test_names_that_are_not_secrets(name):
    assert not is_secret_name(name)


def test_redact_masks_nested_values_and_text_fragments_and_keeps_none():
    value = {
        "rows": 3,
        "partition_key": "2026-12-01",
        "db": {"password": "hunter2", "hosts": [{"token": "t0k"}]},
        "signature": None,
        "note": "connect with password=hunter2 and Authorization: Bearer abc.def",
        "blob": b"\x00\x01",
    }
    shown = redact(value)
    assert shown["db"]["password"] == MASK and shown["db"]["hosts"][0]["token"] == MASK
    assert shown["rows"] == 3 and shown["partition_key"] == "2026-12-01" and shown["signature"] is None
    assert "hunter2" not in shown["note"] and "abc.def" not in shown["note"]
    assert shown["blob"] == "<2 bytes>"
    assert value["db"]["password"] == "hunter2"  # a copy
    assert redact_text("token: xyz, rest") == f"token: {MASK}, rest"


def test_a_preview_is_bounded_and_says_how_long_the_whole_was():
    text = preview({"big": "x" * 10_000}, 200)
    assert len(text) <= 200 and text.endswith("characters in all)")
    assert preview({"a": 1}) == json.dumps({"a": 1})


def test_scan_windows_are_checked_on_construction():
    since = datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert ScanWindow(since=since).until is None
    with pytest.raises(InvalidWindowError, match="timezone-aware"):
        ScanWindow(until=datetime(2026, 12, 1))
    with pytest.raises(InvalidWindowError, match="must be after since"):
        ScanWindow(since=since, until=since)
    for bad in (0, -1, 10**7, True, 2.5):
        with pytest.raises(InvalidWindowError, match="max_records"):
            ScanWindow(max_records=bad)  # type: ignore[arg-type]


def test_time_flags_take_iso_8601_or_a_duration_ago():
    assert parse_time("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert parse_time("2026-12-01T10:00:00") == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)  # UTC
    before = datetime.now(timezone.utc)
    parsed = parse_time("15m")
    assert before - timedelta(minutes=15) <= parsed <= datetime.now(timezone.utc) - timedelta(minutes=15)
    with pytest.raises(argparse.ArgumentTypeError, match="ISO-8601"):
        parse_time("yesterday")


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('{"nested": {"password": "pw-json"}, "rows": 1}', "pw-json"),
        ('ValueError: bad config {"password": "pw-in-error"} here', "pw-in-error"),
        ("KeyError: {'password': 'pw-repr', 'user': 'u'}", "pw-repr"),
        ("request refused, cookie: session=sess-123; theme=dark", "sess-123"),
        ("Set-Cookie: session=sess-456; Path=/", "sess-456"),
        ("could not connect to postgresql://u:pw-url@db.example:5432/db", "pw-url"),
        ("https://tok-user@github.com/org/repo", "tok-user"),
        ('{"passphrase": "pass-phrase"}', "pass-phrase"),
        ('{"extra": "{\\"db_password\\": \\"pw-escaped\\"}"}', "pw-escaped"),
        ('outer {"extra": "{\\"password\\": \\"pw-escaped-in-text\\"}"} tail', "pw-escaped-in-text"),
        ("{'credentials': {'user': 'u', 'pw': 'pw-under-secret-key'}}", "pw-under-secret-key"),
        ("Authorization: Bearer abc.def", "abc.def"),
        ("x-api-key=key-123&rows=2", "key-123"),
        ("pwd=pw-short auth=auth-short", "pw-short"),
        ("pwd=pw-short auth=auth-short", "auth-short"),
        ('{"pass": "pw-pass", "jwt": "x"}', "pw-pass"),
        ("retried with Bearer abc123secret after 401", "abc123secret"),
        ("token in log eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJl end", "eyJzdWIiOiIxMjM0"),
        ("key file -----BEGIN PRIVATE KEY-----\nMIIEv-pem-body\n-----END PRIVATE KEY----- read", "pem-body"),
        ("https://u:p@ss-word@db.example/db", "ss-word"),
        ('[["authorization", "Basic dXNlcjpwdw=="], ["x-trace", "1"]]', "dXNlcjpwdw=="),
        ('error "token": "unclosed-secret and the rest', "unclosed-secret"),
    ],
)
def test_redact_text_masks_keys_in_json_and_repr_text_headers_and_url_credentials(text, secret):
    shown = redact_text(text)
    assert secret not in shown and MASK in shown, shown


def test_redact_text_keeps_what_is_no_secret():
    assert redact_text("idempotency_key=abc partition_key: 2026") == "idempotency_key=abc partition_key: 2026"
    assert redact_text("the token expired at 10:00") == "the token expired at 10:00"
    assert redact_text("postgresql://db.example/db") == "postgresql://db.example/db"
    assert redact_text("kafka://u:***@h") == "kafka://u:***@h"


def test_a_nested_password_in_a_json_string_value_is_masked_in_a_preview():
    # what a dead letter's preview shows: an envelope whose extra is Avro JSON text
    shown = preview({"extra": json.dumps({"db": {"password": "pw-deep"}, "cookie": "c"}), "rows": 1})
    assert "pw-deep" not in shown and '"cookie": \\"***\\"' not in shown and "rows" in shown
    assert json.loads(json.loads(shown)["extra"]) == {"cookie": MASK, "db": {"password": MASK}}


@pytest.mark.parametrize("name", ["cookie", "Set-Cookie", "passphrase", "session_id", "proxy-authorization"])
def test_header_and_key_names_that_hold_secrets(name):
    assert is_secret_name(name)


def test_every_name_airflow_s_masker_hides_by_default_is_a_secret_name_here():
    from airflow._shared.secrets_masker.secrets_masker import DEFAULT_SENSITIVE_FIELDS

    assert [name for name in sorted(DEFAULT_SENSITIVE_FIELDS) if not is_secret_name(name)] == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("prefix", ['token:"', 'password=\\"', "{'secret': '"])
def test_an_unclosed_quote_after_a_run_of_backslashes_is_masked_in_one_pass(prefix):
    # a quoted value that never closes after n backslashes took exponential time (n=60: days) and held
    # the GIL, stalling the whole api-server; the alternatives inside the quotes now never overlap
    shown = redact_text(prefix + "\\" * 10_000)
    assert MASK in shown


def test_a_structure_nested_deeper_than_the_limit_is_masked_not_a_recursion_error():
    from airflow_kafka_events.ui.inspection.redact import MAX_DEPTH

    deep: object = {"password": "pw-bottom"}
    for _ in range(5_000):
        deep = {"a": deep}
    shown = preview(deep)
    assert "pw-bottom" not in shown and MASK in shown
    text = '{"a":' * 600 + '{"password": "pw-text-bottom"}' + "}" * 600
    assert "pw-text-bottom" not in redact_text(text)
    assert redact([[[["x"]]]]) == [[[["x"]]]] and MAX_DEPTH >= 4
