"""The Kafka Events view's wiring: its UI entries, its app's dependencies, settings and masking."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fastapi.routing import APIRoute

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.ui.plugin import REACT_APPS, URL_PREFIX, KafkaEventsPlugin
from airflow_kafka_events.ui.rendering import mask, secrets_of
from airflow_kafka_events.ui.settings import DEFAULT_BRIDGE_GROUP, ViewSettings

pytestmark = pytest.mark.unit


def test_react_apps_are_valid_for_airflow_each_with_a_bundle_url_of_its_own():
    from airflow.api_fastapi.core_api.datamodels.plugins import ReactAppResponse

    from airflow_kafka_events.ui.views.bundle import BUNDLE, BUNDLE_PATH

    apps = [ReactAppResponse.model_validate(a) for a in REACT_APPS]
    assert {a.destination for a in apps} == {"nav", "dag", "dag_run", "task_instance"}
    assert len({a.url_route for a in apps}) == len(apps)
    # one URL per entry: the UI reads globalThis.AirflowPlugin after importing it, which a module
    # already imported under that URL would not set again
    assert len({a.bundle_url for a in apps}) == len(apps)
    assert all(a.bundle_url.startswith(f"{URL_PREFIX}{BUNDLE_PATH}?") for a in apps)
    assert BUNDLE.is_file()
    assert not KafkaEventsPlugin.external_views


def test_importing_the_plugin_builds_no_app():
    code = (
        "import sys, airflow_kafka_events.ui.plugin as p\n"
        "assert 'airflow_kafka_events.ui.app' not in sys.modules\n"
        "apps = p.KafkaEventsPlugin().fastapi_apps\n"
        "assert apps[0]['url_prefix'] == '/kafka-events'\n"
        "assert apps[0]['app'] is p.KafkaEventsPlugin().fastapi_apps[0]['app']\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_route_requires_a_viewer_and_replay_an_asset_write():
    from airflow_kafka_events.ui.app import create_app
    from airflow_kafka_events.ui.security import REPLAY, VIEW

    app = create_app()
    assert VIEW in app.router.dependencies
    assert app.openapi_url is None and app.docs_url is None and app.redoc_url is None
    replay = [r for r in app.routes if isinstance(r, APIRoute) and r.path.endswith("/replay")]
    assert {(m, r.path) for r in replay for m in r.methods} == {
        ("GET", "/dead-letters/{partition}/{offset}/replay"),
        ("GET", "/api/dead-letters/{partition}/{offset}/replay"),
        ("POST", "/dead-letters/{partition}/{offset}/replay"),
        ("POST", "/api/dead-letters/{partition}/{offset}/replay"),
    }
    for route in replay:
        assert REPLAY in route.dependencies, route.path
    others = [r for r in app.routes if isinstance(r, APIRoute) and r not in replay]
    assert all(m in {"GET", "HEAD"} for r in others for m in r.methods), "a writing route without REPLAY"


def test_settings_defaults_and_bad_values():
    from airflow_kafka_events.bridge.config import DEFAULT_GROUP

    settings = ViewSettings.from_options({})
    assert DEFAULT_BRIDGE_GROUP == DEFAULT_GROUP
    assert settings.bridge_group_ids == (DEFAULT_GROUP,)
    assert (settings.asset_events_topic, settings.dlq_topic) == (
        "airflow.asset-events",
        "airflow.kafka-events.dlq",
    )
    assert settings.window.max_records == 1000
    narrowed = settings.window.narrowed(5, 10)
    assert (narrowed.minutes, narrowed.max_records) == (5, 10)
    with pytest.raises(ConfigurationError, match="ui_max_records"):
        ViewSettings.from_options({"ui_max_records": "many"})
    with pytest.raises(ConfigurationError, match="between"):
        ViewSettings.from_options({"ui_window_minutes": "0"})


def test_mask_hides_the_connection_secrets_wherever_they_appear():
    config = {"bootstrap.servers": "b:9092", "sasl.password": "s3cr3t-value", "sasl.username": "alice"}
    secrets = secrets_of(config, ["conn-password-1"])
    assert secrets == ["conn-password-1", "s3cr3t-value"]
    text = mask('{"note": "s3cr3t-value and conn-password-1", "user": "alice"}', secrets)
    assert "s3cr3t-value" not in text and "conn-password-1" not in text and "alice" in text


def test_plugin_class_keeps_its_name():
    assert KafkaEventsPlugin.name == "airflow_kafka_events"


@pytest.mark.parametrize("form", ["html", "json", "json-in-html"])
def test_mask_hides_a_secret_that_an_answer_wrote_escaped(form):
    import json

    import markupsafe

    secret = "p&ss\"w\\ord<ö>'1"
    written = {
        "html": str(markupsafe.escape(secret)),
        "json": json.dumps({"sasl.password": secret}),
        "json-in-html": str(markupsafe.escape(json.dumps(secret))),
    }[form]
    expected = {"html": "***", "json": '{"sasl.password": "***"}', "json-in-html": "&#34;***&#34;"}[form]
    assert mask(f"before {written} after", [secret]) == f"before {expected} after"


def test_every_answer_may_be_framed_by_this_site_only_is_never_sniffed_nor_stored():
    # clickjacking: another page of the same site framing the replay confirmation; a JSON answer
    # holding a record's markup read as HTML; a confirmation (its CSRF token) kept by a cache
    from fastapi.testclient import TestClient

    from airflow_kafka_events.ui.app import SECURITY_HEADERS, create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        for method, path in (
            ("GET", "/streams"),
            ("GET", "/dead-letters/0/1/replay"),
            ("GET", "/api/dead-letters/0/1/replay"),
            ("POST", "/api/dead-letters/0/1/replay"),
            ("GET", "/no-such-page"),
        ):
            answer = client.request(method, path)
            assert answer.status_code >= 400, path  # not signed in
            assert answer.headers["content-security-policy"] == "frame-ancestors 'self'", path
            assert answer.headers["x-frame-options"] == "SAMEORIGIN", path
            assert answer.headers["x-content-type-options"] == "nosniff", path
            assert answer.headers["cache-control"] == "no-store", path
    assert SECURITY_HEADERS["X-Frame-Options"] == "SAMEORIGIN"


def test_a_method_other_than_get_and_post_changes_nothing():
    """No route answers PUT, PATCH or DELETE, and a method override in the query or a header is no
    method: the replay's path answers them 405 before any dependency runs."""
    from fastapi.testclient import TestClient

    from airflow_kafka_events.ui.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        for method in ("PUT", "PATCH", "DELETE"):
            answer = client.request(method, "/dead-letters/0/1/replay")
            assert answer.status_code == 405, method
        overridden = client.request(
            "PUT", "/dead-letters/0/1/replay?_method=POST", headers={"X-HTTP-Method-Override": "POST"}
        )
        assert overridden.status_code == 405


def test_a_json_answer_holds_no_markup_character_and_reads_back_the_same():
    import json

    from airflow_kafka_events.ui.rendering import render_json

    record = {"error": "</script><script>alert(1)</script>", "note": "a & b > c", "literal": "\\u003c"}
    answer = render_json(record)
    body = answer.body.decode()
    assert not {"<", ">", "&"} & set(body), body
    assert json.loads(body) == record
    assert answer.media_type == "application/json"
