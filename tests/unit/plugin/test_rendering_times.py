"""How the view shows times and previews: one ``when`` filter for every template, ``extra`` decoded once."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, TriggerEventEnvelope
from airflow_kafka_events.ui.inspection.dead_letters import payload_preview
from airflow_kafka_events.ui.rendering import TEMPLATES_DIR, environment

pytestmark = pytest.mark.unit

MICROSECONDS = re.compile(r"\d{2}:\d{2}:\d{2}\.\d{6}")


def _render(source: str, **values: object) -> str:
    return environment().from_string(source).render(**values)


def test_when_shows_a_time_for_people_with_the_exact_value_on_hover():
    stamp = datetime.now(timezone.utc).replace(microsecond=123456) - timedelta(minutes=3)
    ago = _render("{{ t | when }}", t=stamp)
    assert ">3 min ago</time>" in ago and f'title="{stamp.isoformat()}"' in ago
    utc = _render('{{ t | when("utc") }}', t=stamp)
    assert f">{stamp:%Y-%m-%d %H:%M:%S} UTC</time>" in utc and f'datetime="{stamp.isoformat()}"' in utc
    # ISO text (a JSON payload's) is read as a time; none is "-"
    assert _render('{{ t | when("utc") }}', t=stamp.isoformat()) == utc
    assert _render("{{ t | when }}", t=None) == "-"
    for shown in (ago, utc):  # the microseconds only in the attributes
        assert not MICROSECONDS.search(re.sub(r'"[^"]*"', '""', shown)), shown


def test_every_template_shows_times_through_when_only():
    env = environment()
    assert "when" in env.filters and not {"ago", "ts"} & set(env.filters)
    for path in sorted(TEMPLATES_DIR.glob("*.html")):
        env.get_template(path.name)  # a template using a filter that is gone does not compile


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
