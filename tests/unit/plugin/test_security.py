"""The view's CSRF tokens and Origin check, as pure logic (the browser tests attack the real stack)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from fastapi import HTTPException
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import Request

from airflow_kafka_events.ui.security import (
    CSRF_TTL_SECONDS,
    csrf_token,
    origin_of,
    own_origins,
    refuse_cross_site,
    session_of,
    valid_csrf_token,
)

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


SESSION = "jti-of-the-sign-in"


def test_a_token_is_good_for_its_user_and_sign_in_within_its_time_window_only():
    admin, viewer = User("admin", "admin"), User("viewer", "viewer")
    token = csrf_token(admin, SESSION, now=NOW)
    assert valid_csrf_token(token, admin, SESSION, now=NOW)
    assert valid_csrf_token(token, admin, SESSION, now=NOW + CSRF_TTL_SECONDS)
    assert not valid_csrf_token(token, admin, SESSION, now=NOW + CSRF_TTL_SECONDS + 1)
    assert not valid_csrf_token(token, admin, SESSION, now=NOW - 3600)  # issued in the future
    assert not valid_csrf_token(token, viewer, SESSION, now=NOW)  # user A's token for user B
    assert not valid_csrf_token(token, User("admin", "other"), SESSION, now=NOW)
    assert not valid_csrf_token(token, admin, "jti-after-signing-in-again", now=NOW)  # after a sign-out
    assert not valid_csrf_token(token, admin, "", now=NOW)
    # the fields cannot be shifted into one another (id "a", name "b\0c" vs id "a\0b", name "c")
    shifted = csrf_token(User("a", "b\0c"), SESSION, now=NOW)
    assert not valid_csrf_token(shifted, User("a\0b", "c"), SESSION, now=NOW)
    issued, mac = token.split(".")
    assert not valid_csrf_token(f"{int(issued) + 1}.{mac}", admin, SESSION, now=NOW)  # the time is signed
    for forged in (
        "",
        "x",
        f"{issued}.",
        f".{mac}",
        f"{issued}.{'0' * 64}",
        "null",
        f"{issued}.{mac.upper()}",
    ):
        assert not valid_csrf_token(forged, admin, SESSION, now=NOW)
    # forms int() or compare_digest choke on: refused (403), never an error (500)
    for odd in (f"\u00b2{issued[1:]}.{mac}", f"{'9' * 5000}.{mac}", f"{issued}.{mac[:-1]}\u00e9"):
        assert not valid_csrf_token(odd, admin, SESSION, now=NOW)


def test_the_mac_is_compared_in_constant_time(monkeypatch):
    import hmac as hmac_module

    from airflow_kafka_events.ui import security

    compared: list[tuple[str, str]] = []
    real = hmac_module.compare_digest
    monkeypatch.setattr(security.hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    admin = User("admin", "admin")
    token = csrf_token(admin, SESSION, now=NOW)
    assert valid_csrf_token(token, admin, SESSION, now=NOW)
    assert compared and compared[-1][0] == token.split(".")[1]


def test_a_token_depends_on_the_api_server_s_secret_key(monkeypatch):
    admin = User("admin", "admin")
    token = csrf_token(admin, SESSION, now=NOW)
    monkeypatch.setenv("AIRFLOW__API__SECRET_KEY", "another-key")
    assert not valid_csrf_token(token, admin, SESSION, now=NOW)


def test_the_sign_in_is_the_jti_of_the_bearer_token_else_of_the_token_cookie():
    import jwt

    cookie = jwt.encode({"sub": "1", "jti": "abc123"}, "k" * 32, algorithm="HS256")
    request = _request("localhost:8080", None, cookie=cookie)
    assert session_of(request) == "abc123"
    assert session_of(_request("localhost:8080", None)) == ""
    assert session_of(_request("localhost:8080", None, cookie="not-a-jwt")) == ""
    other = jwt.encode({"sub": "1", "jti": "bearer-jti"}, "k" * 32, algorithm="HS256")
    both = _request("localhost:8080", None, cookie=cookie)
    both.scope["headers"].append((b"authorization", f"Bearer {other}".encode()))
    assert session_of(both) == "bearer-jti"  # the credential get_user takes first


def test_every_state_changing_route_refuses_cross_site_requests():
    from fastapi.routing import APIRoute

    from airflow_kafka_events.ui.app import create_app
    from airflow_kafka_events.ui.security import refuse_cross_site

    changing = [
        route
        for route in create_app().routes
        if isinstance(route, APIRoute) and route.methods - {"GET", "HEAD", "OPTIONS"}
    ]
    assert changing
    for route in changing:
        assert any(d.dependency is refuse_cross_site for d in route.dependencies), route.path


def _request(host: str, origin: str | None, *, scheme: str = "http", cookie: str | None = None) -> Request:
    headers = [(b"host", host.encode())]
    if cookie is not None:
        headers.append((b"cookie", f"_token={cookie}".encode()))
    if origin is not None:
        headers.append((b"origin", origin.encode("latin-1")))
    return Request(
        {
            "type": "http",
            "method": "POST",
            "scheme": scheme,
            "server": None,
            "path": "/kafka-events/dead-letters/0/1/replay",
            "root_path": "",
            "query_string": b"",
            "headers": headers,
        }
    )


def _refusal(
    host: str, origin: str | None, *, scheme: str = "http", token: str | None = "fresh"
) -> str | None:
    """The 403's detail of a cookie-authenticated POST (``None``: accepted)."""
    admin = User("admin", "admin")
    if token == "fresh":
        token = csrf_token(admin, "")
    try:
        refuse_cross_site(_request(host, origin, scheme=scheme), admin, None, token)
    except HTTPException as exc:
        assert exc.status_code == 403
        return str(exc.detail)
    return None


def test_an_origin_is_its_scheme_host_and_port():
    assert origin_of("http://LocalHost:8080", bare=True) == ("http", "localhost", 8080)
    assert origin_of("https://airflow.example.com", bare=True) == ("https", "airflow.example.com", 443)
    assert origin_of("http://[::1]:8080", bare=True) == ("http", "::1", 8080)
    assert origin_of("https://airflow.example.com/airflow/") == ("https", "airflow.example.com", 443)
    for not_an_origin in (
        "null",
        "",
        "file://",
        "ftp://airflow.example.com",
        "http://user:pw@localhost:8080",
        "http://localhost:99999",
        "http://localhost:8080/path",
        "http://localhost:8080?q",
        " http://localhost:8080",
        "http://localhost:8080 ",
        "http://",
    ):
        assert origin_of(not_an_origin, bare=True) is None, not_an_origin
    assert own_origins("http://10.0.0.5:8080/kafka-events/x", "https://airflow.example.com/") == {
        ("http", "10.0.0.5", 8080),
        ("https", "airflow.example.com", 443),
    }


def test_a_cookie_post_from_this_api_server_s_own_origin_is_accepted(monkeypatch):
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    assert _refusal("localhost:8080", "http://localhost:8080") is None
    assert _refusal("LOCALHOST:8080", "http://localhost:8080") is None
    assert _refusal("airflow.test", "http://airflow.test:80") is None  # the default port, spelled out
    assert _refusal("airflow.test:443", "https://airflow.test", scheme="https") is None


@pytest.mark.parametrize(
    ("origin", "why"),
    [
        (None, "Origin header is missing"),
        ("null", "Origin header is null"),
        ("https://localhost:8080", "not this api-server's"),  # another scheme
        ("http://localhost:8081", "not this api-server's"),  # another port
        ("http://localhost", "not this api-server's"),  # port 80, not 8080
        ("http://127.0.0.1:8080", "not this api-server's"),  # another host (same machine)
        ("http://localhost:8080.attacker.test", "not this api-server's"),
        ("http://attacker.test/?localhost:8080", "not this api-server's"),
        ("http://localhost:8080@attacker.test", "not this api-server's"),
        ("http://attacker.test#localhost:8080", "not this api-server's"),
        ("chrome-extension://abcdef", "not this api-server's"),
    ],
)
def test_a_cookie_post_from_another_origin_is_refused(monkeypatch, origin, why):
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    detail = _refusal("localhost:8080", origin)
    assert detail is not None and why in detail and "nothing was done" in detail


def test_behind_a_tls_proxy_the_base_url_is_this_api_server_s_origin(monkeypatch):
    """The api-server sees http://10.0.0.5:8080; browsers open https://airflow.example.com."""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    assert _refusal("10.0.0.5:8080", "https://airflow.example.com") is None
    for other in ("http://airflow.example.com", "https://airflow.example.com:8443", "https://example.com"):
        detail = _refusal("10.0.0.5:8080", other)
        assert detail is not None and "https://airflow.example.com:443" in detail, other


def test_the_token_is_checked_after_the_origin(monkeypatch):
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    other_user = csrf_token(User("viewer", "viewer"), "")
    expired = csrf_token(User("admin", "admin"), "", now=time.time() - CSRF_TTL_SECONDS - 5)
    other_sign_in = csrf_token(User("admin", "admin"), "jti-of-a-sign-in-since-signed-out")
    for token in (None, "", other_user, expired, other_sign_in, "1.2"):
        detail = _refusal("localhost:8080", "http://localhost:8080", token=token)
        assert detail is not None and "CSRF token is missing, expired or not this user's sign-in" in detail


def test_a_bearer_request_needs_neither_origin_nor_token():
    """Airflow's get_user authenticates it by the header, which no other site can make a browser send."""
    bearer = HTTPAuthorizationCredentials(scheme="Bearer", credentials="jwt")
    refuse_cross_site(_request("localhost:8080", None), User("admin", "admin"), bearer, None)
