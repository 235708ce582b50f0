"""Dead-letter claims: where a record's claims go, and which record of the topic is a claim of it."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_events.watcher.dead_letter_claims import CLAIM_PREFIX, _claimer_of, claim_partition

pytestmark = pytest.mark.unit

RECORD = ["dlq", "events", 2, 41]


def test_every_claim_of_a_record_goes_to_one_partition_whoever_claims():
    assert claim_partition(list(RECORD), 3) == claim_partition(["dlq", "events", 2, 41], 3)
    assert 0 <= claim_partition(RECORD, 3) < 3
    assert {claim_partition(["dlq", "events", 2, n], 3) for n in range(50)} == {0, 1, 2}


def test_only_a_claim_of_the_same_record_names_its_claimer():
    claim = json.dumps({"claim": RECORD, "by": "watcher-a"}).encode()
    assert _claimer_of(CLAIM_PREFIX + b"[...]", claim, RECORD) == "watcher-a"
    assert _claimer_of(CLAIM_PREFIX + b"[...]", claim, ["dlq", "events", 2, 42]) is None  # another record
    assert _claimer_of(CLAIM_PREFIX + b"[...]", claim, ["other-dlq", "events", 2, 41]) is None
    assert _claimer_of(b'["conn","uri",null]', claim, RECORD) is None  # a clean-stop mark's key
    assert _claimer_of(CLAIM_PREFIX, b"not json", RECORD) is None
    assert _claimer_of(None, None, RECORD) is None
