"""Redaction attacked: secrets written the ways a record can spell them, and records built to break it."""

from __future__ import annotations

import base64
import json

import pytest

from airflow_kafka_events.ui.inspection.redact import MASK, MAX_DEPTH, preview, redact, redact_text

pytestmark = pytest.mark.unit

SECRET = "S3CR3T-value-123"
BASIC = base64.b64encode(f"svc:{SECRET}".encode()).decode()


def shown(obj) -> str:
    return json.dumps(redact(obj), default=str)


@pytest.mark.parametrize(
    "obj",
    [
        {"PASSWORD": SECRET},
        {"Pass-Word": SECRET},
        {"pass": {"word": SECRET}},
        {"\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44": SECRET},  # full-width: NFKC "password"
        {"pass\u200bword": SECRET},
        {"headers": [["trace", "t"], ["Authorization", f"Bearer {SECRET}"]]},
        {"headers": [[[["authorization", SECRET]]]]},
        {"headers": [{"name": "Authorization", "value": SECRET}]},
        {"headers": [{"key": "Cookie", "value": SECRET}]},
        {"headers": [{"header": "X-Api-Key", "values": [SECRET]}]},
        {b"password": SECRET},
        {("password",): SECRET},
        {"v": f"(('password', '{SECRET}'),)"},  # a Python repr of a header list, as a whole string
        {"v": f"refused: headers=[('cookie', b'session={SECRET}'), ('trace', b'x')]"},
        {"v": f"user[password]={SECRET}&user[name]=bob"},
        {"v": f"Basic {BASIC}"},
        {"v": f"postgresql://u%3Aa:{SECRET}@host/db"},
        {"v": f"HTTPS://u:{SECRET}@h/x"},
        {"v": json.dumps(json.dumps({"password": SECRET}))},
        {"v": f"export DB_PASSWORD={SECRET}"},
        {"v": f"https://h/x?access_token={SECRET}&a=1"},
    ],
    ids=lambda obj: repr(obj)[:40],
)
def test_a_secret_spelled_another_way_is_masked(obj):
    text = shown(obj)
    assert SECRET not in text and BASIC not in text, text


def test_the_name_of_a_secret_header_stays_readable():
    assert redact([{"name": "Cookie", "value": SECRET}]) == [{"name": "Cookie", "value": MASK}]
    assert redact({"key": SECRET}) == {"key": MASK}  # a field named "key" is a secret itself
    assert redact_text("basic setup, basic configuration") == "basic setup, basic configuration"


@pytest.mark.parametrize(
    "text",
    ["{('password',): 'x'}", "{b'password': 'x'}", "{1: 'a', 'b': 2}", "{None: 1, 'a': 2}", "{'a': {1j: 2}}"],
)
def test_a_python_literal_with_keys_json_has_not_does_not_break_a_page(text):
    """Before: TypeError out of json.dumps (a 500 for every page listing such a dead letter)."""
    out = redact_text(text)
    assert isinstance(json.loads(out), dict) and "'x'" not in out
    assert preview({"error": text})


def test_nesting_at_and_past_the_limit():
    at_limit: object = {"password": SECRET}
    for _ in range(MAX_DEPTH - 1):
        at_limit = {"x": at_limit}
    assert SECRET not in shown(at_limit) and MASK in shown(at_limit)
    past: object = [["authorization", SECRET]]
    for _ in range(MAX_DEPTH + 2):
        past = [past]
    assert SECRET not in shown(past)
    text = "[" * 1000 + json.dumps({"password": SECRET}) + "]" * 1000
    assert SECRET not in redact_text(text)  # json.loads and literal_eval give up: the text rules mask it


@pytest.mark.parametrize(
    "text",
    [
        "password=" + "a" * 1_000_000,
        '{"a":' * 100_000 + '"x"' + "}" * 100_000,
        "password" + " " * 100_000 + "x",
        "a://" * 100_000,
        "a://" + "x:" * 100_000 + "@",
        "eyJ" + "a" * 10 + "." * 100_000,
        "-----BEGIN PRIVATE KEY-----" * 40_000,
        "a.b" * 100_000 + "=x",
        "('password', '" + "\\" * 100_000,
        "basic " + "A" * 500_000,
    ],
    ids=lambda t: f"{t[:12]!r}x{len(t)}",
)
@pytest.mark.timeout(60)
def test_a_huge_record_is_redacted_in_one_pass(text):
    """About a megabyte each: a pattern that rescans (BEGIN lines without END took 16 s for 270 KB,
    minutes for this one) would hold the api-server's GIL that long."""
    assert isinstance(redact_text(text), str)
