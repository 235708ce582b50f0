"""How the view previews a dead letter's payload: ``extra`` decoded once."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, TriggerEventEnvelope
from airflow_kafka_events.ui.inspection.dead_letters import payload_preview

pytestmark = pytest.mark.unit


def test_a_dead_letter_preview_shows_extra_and_payload_decoded_once():
    event = AssetEventEnvelope(asset=AssetRef("t", "s3://b/t"), extra={"rows": 3, "meta": {"ok": True}})
    kind, text = payload_preview(ASSET_EVENT_CODEC.encode(event))
    assert kind == "asset-event"
    assert json.loads(text)["extra"] == {"rows": 3, "meta": {"ok": True}}, text
    page = TriggerEventEnvelope(
        trigger_run_id="d/t/-1/r", sequence_index=0, is_last=False, payload={"n": [1]}
    )
    kind, text = payload_preview(TRIGGER_EVENT_CODEC.encode(page))
    assert kind == "trigger-event" and json.loads(text)["payload"] == {"n": [1]}, text
