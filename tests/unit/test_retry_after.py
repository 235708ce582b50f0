"""The one ``Retry-After`` parser, on exact header values, and the two clients that use it."""

from __future__ import annotations

import email.utils
import math
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_events.retry import parse_retry_after

pytestmark = pytest.mark.unit

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
LAST_DATE = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


@pytest.mark.parametrize("value", [None, "", "   ", "\t"])
def test_a_missing_or_blank_header_is_none(value):
    assert parse_retry_after(value, NOW) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("0", 0.0), ("1", 1.0), ("120", 120.0), (" 120 ", 120.0), ("007", 7.0), ("1.5", 1.5), (" 1.5 ", 1.5)],
)
def test_delay_seconds(value, seconds):
    assert parse_retry_after(value, NOW) == seconds


@pytest.mark.parametrize("value", ["-1", "-3", "-0.5"])
def test_a_negative_delay_is_not_delay_seconds(value):
    assert parse_retry_after(value, NOW) is None


@pytest.mark.parametrize(
    "value",
    ["soon", "nan", "NaN", "inf", "-inf", "infinity", "+3", "1e3", "0x10", "1_000", "1.", ".5", "120, 120",
     "١٢٠", "12 seconds", "Wed, 32 Foo 2015 07:28:30 GMT"],
)  # fmt: skip
def test_garbage_is_none(value):
    assert parse_retry_after(value, NOW) is None


def test_huge_delays_stay_huge_for_the_caller_to_cap():
    assert parse_retry_after("99999999999999999999", NOW) == 1e20
    assert parse_retry_after("9" * 400, NOW) == math.inf  # beyond a float: not refused, not negative
    assert min(parse_retry_after("9" * 400, NOW), 300.0) == 300.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("Sat, 01 Mar 2025 12:00:30 GMT", 30.0),  # IMF-fixdate
        ("Saturday, 01-Mar-25 12:00:30 GMT", 30.0),  # obsolete RFC 850 form
        ("Sat Mar  1 12:00:30 2025", 30.0),  # obsolete asctime form, no zone: GMT
        ("Sat, 01 Mar 2025 12:00:30 -0000", 30.0),  # no zone: GMT, not the local time
        ("Sat, 01 Mar 2025 14:00:30 +0200", 30.0),  # an explicit offset is honoured
        ("Sat, 01 Mar 2025 12:00:00 GMT", 0.0),  # now
        ("Sat, 01 Mar 2025 11:00:00 GMT", 0.0),  # in the past: at once, never negative
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("Fri, 31 Dec 9999 23:59:59 GMT", (LAST_DATE - NOW) / S),
    ],
)  # fmt: skip
def test_http_dates(value, seconds):
    assert parse_retry_after(value, NOW) == seconds


def test_a_date_built_from_now_and_a_naive_now():
    assert parse_retry_after(email.utils.format_datetime(NOW + timedelta(seconds=5), usegmt=True), NOW) == 5.0
    assert parse_retry_after("Sat, 01 Mar 2025 12:00:30 GMT", now=NOW.replace(tzinfo=None)) == 30.0


def test_without_now_a_date_counts_from_the_current_time():
    when = datetime(2999, 1, 1, tzinfo=timezone.utc)
    before = datetime.now(timezone.utc)
    seconds = parse_retry_after(email.utils.format_datetime(when, usegmt=True))
    after = datetime.now(timezone.utc)
    assert seconds is not None and (when - after) / S <= seconds <= (when - before) / S


def test_the_paginator_and_the_bridge_use_this_parser():
    from airflow_kafka_events.assets import airflow_api
    from airflow_kafka_events.http import trigger as http

    assert http.parse_retry_after is parse_retry_after
    assert airflow_api.parse_retry_after is parse_retry_after
