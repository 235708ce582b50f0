"""The view's CSRF tokens and replay targets, as pure logic (the browser tests attack the real stack)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_kafka_events.inspection.errors import ReplayTargetRefusedError
from airflow_kafka_events.plugin.security import (
    CSRF_TTL_SECONDS,
    check_replay_target,
    csrf_token,
    valid_csrf_token,
)
from airflow_kafka_events.plugin.settings import ViewSettings

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0


@dataclass
class User:
    id: str
    name: str

    def get_id(self) -> str:
        return self.id

    def get_name(self) -> str:
        return self.name


@pytest.fixture(autouse=True)
def secret_key(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__SECRET_KEY", "unit-test-secret-key")


def test_a_token_is_good_for_its_user_within_its_time_window_only():
    admin, viewer = User("admin", "admin"), User("viewer", "viewer")
    token = csrf_token(admin, now=NOW)
    assert valid_csrf_token(token, admin, now=NOW)
    assert valid_csrf_token(token, admin, now=NOW + CSRF_TTL_SECONDS)
    assert not valid_csrf_token(token, admin, now=NOW + CSRF_TTL_SECONDS + 1)
    assert not valid_csrf_token(token, admin, now=NOW - 3600)  # issued in the future
    assert not valid_csrf_token(token, viewer, now=NOW)
    assert not valid_csrf_token(token, User("admin", "other"), now=NOW)
    issued, mac = token.split(".")
    assert not valid_csrf_token(f"{int(issued) + 1}.{mac}", admin, now=NOW)  # the time is signed
    for forged in ("", "x", f"{issued}.", f".{mac}", f"{issued}.{'0' * 64}", "null"):
        assert not valid_csrf_token(forged, admin, now=NOW)
    # forms int() or compare_digest choke on: refused (403), never an error (500)
    for odd in (f"\u00b2{issued[1:]}.{mac}", f"{'9' * 5000}.{mac}", f"{issued}.{mac[:-1]}\u00e9"):
        assert not valid_csrf_token(odd, admin, now=NOW)


def test_a_token_depends_on_the_api_server_s_secret_key(monkeypatch):
    admin = User("admin", "admin")
    token = csrf_token(admin, now=NOW)
    monkeypatch.setenv("AIRFLOW__API__SECRET_KEY", "another-key")
    assert not valid_csrf_token(token, admin, now=NOW)


def test_a_replay_goes_to_the_source_topic_or_a_configured_one():
    check_replay_target("orders", "orders", frozenset())
    check_replay_target("orders", "orders.retry", frozenset({"orders.retry"}))
    with pytest.raises(ReplayTargetRefusedError, match="nothing was published") as refused:
        check_replay_target("orders", "airflow.trigger-events", frozenset({"orders.retry"}))
    assert "replay_extra_target_topics" in str(refused.value)


def test_extra_replay_targets_are_read_from_the_configuration():
    settings = ViewSettings.from_options({"replay_extra_target_topics": " a.retry, b ,,"})
    assert settings.replay_extra_target_topics == frozenset({"a.retry", "b"})
    assert ViewSettings.from_options({}).replay_extra_target_topics == frozenset()


def test_every_state_changing_route_refuses_cross_site_requests():
    from fastapi.routing import APIRoute

    from airflow_kafka_events.plugin.app import create_app
    from airflow_kafka_events.plugin.security import refuse_cross_site

    changing = [
        route
        for route in create_app().routes
        if isinstance(route, APIRoute) and route.methods - {"GET", "HEAD", "OPTIONS"}
    ]
    assert changing
    for route in changing:
        assert any(d.dependency is refuse_cross_site for d in route.dependencies), route.path
