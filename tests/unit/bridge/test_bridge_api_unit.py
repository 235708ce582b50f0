"""The bridge's REST client: JWT expiry, renewal, status classification, asset ids, recent events."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

from airflow_kafka_events.assets.airflow_api import (
    AirflowApiClient,
    AssetIdCache,
    AuthenticationError,
    ForbiddenError,
    NotFoundError,
    RejectedError,
    TransientApiError,
    UnknownAssetError,
    classify_status,
    jwt_claims,
    matches_event,
    renewal_due,
    token_times,
)
from airflow_kafka_events.retry import parse_retry_after
from integration.bridge.fake_airflow import FakeAirflow, make_jwt

pytestmark = pytest.mark.unit

PASSWORD = "s3cr3t-bridge-pw"


def _client(fake: FakeAirflow, **kwargs: Any) -> AirflowApiClient:
    return AirflowApiClient("http://airflow.test", "bridge", PASSWORD, transport=fake.transport(), **kwargs)


@pytest.fixture
def fake() -> FakeAirflow:
    return FakeAirflow(users={"bridge": PASSWORD})


# --------------------------------------------------------------------------- JWT
def test_jwt_claims_are_read_without_verifying_the_signature():
    token = make_jwt({"sub": "bridge", "exp": 1_900_000_000, "iat": 1_899_996_400})
    header, payload, _ = token.split(".")
    forged = f"{header}.{payload}.not-a-signature"
    assert jwt_claims(forged) == {"sub": "bridge", "exp": 1_900_000_000, "iat": 1_899_996_400}
    assert token_times(forged) == (1_900_000_000.0, 1_899_996_400.0)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b",
        "a.!!!.c",
        "a." + base64.urlsafe_b64encode(b"[1, 2]").decode().rstrip("=") + ".c",
        "a." + base64.urlsafe_b64encode(b"not json").decode().rstrip("=") + ".c",
    ],
)
def test_malformed_tokens_raise_value_error_and_have_no_expiry(token):
    with pytest.raises(ValueError):
        jwt_claims(token)
    assert token_times(token) == (None, None)


def test_non_numeric_claims_are_ignored():
    token = make_jwt({"exp": "tomorrow", "iat": True})
    assert token_times(token) == (None, None)


@pytest.mark.parametrize(
    ("expires_at", "now", "margin", "issued_at", "due"),
    [
        (None, 10**10, 60, None, False),  # no exp: used until a 401
        (1000, 900, 60, None, False),
        (1000, 940, 60, None, True),  # inside the margin
        (1000, 1001, 60, None, True),  # expired
        (1000, 960, 60, None, True),
        (1000, 960, 60, 940, False),  # a 60 s token is renewed half-way (margin capped at 30 s) ...
        (1000, 969, 60, 940, False),
        (1000, 970, 60, 940, True),  # ... not on every call
        (1000, 999, 0, None, False),  # margin 0: only once expired
        (1000, 1000, 0, None, True),
    ],
)
def test_renewal_decision(expires_at, now, margin, issued_at, due):
    assert renewal_due(expires_at, now, margin, issued_at) is due


# --------------------------------------------------------------------------- statuses
@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, "ok"),
        (201, "ok"),
        (204, "ok"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (400, "reject"),
        (409, "reject"),
        (413, "reject"),
        (422, "reject"),
        (408, "retry"),
        (425, "retry"),
        (429, "retry"),
        (500, "retry"),
        (502, "retry"),
        (503, "retry"),
        (504, "retry"),
        (301, "unexpected"),
        (307, "unexpected"),
        (101, "unexpected"),
    ],
)
def test_classify_status(status, kind):
    assert classify_status(status) == kind


def test_retry_after_parsing():
    # the package's one parser (tests/unit/test_retry_after.py has every case)
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") is None  # not delay-seconds: the bridge's own backoff applies
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    when = parse_retry_after(
        "Wed, 21 Oct 2015 07:28:30 GMT", now=datetime.fromtimestamp(1445412480.0, timezone.utc)
    )
    assert when == 30.0


# --------------------------------------------------------------------------- login and token
def test_login_and_requests_carry_the_token(fake):
    fake.add_asset("a")
    client = _client(fake)
    assert client.assets_with_uri("a")[0]["name"] == "a"
    assert client.assets_with_uri("a")[0]["id"] == 1
    assert fake.logins == 1  # one token for both calls


def test_wrong_password_is_an_authentication_error_without_the_password(fake):
    client = AirflowApiClient("http://airflow.test", "bridge", "wrong-pw", transport=fake.transport())
    with pytest.raises(AuthenticationError) as info:
        client.login()
    assert info.value.status == 401
    assert "wrong-pw" not in str(info.value)
    assert "wrong-pw" not in repr(client)


def test_token_renewed_before_expiry(fake):
    now = [1_000_000.0]
    fake.token_ttl = 10**9  # the fake itself never expires it: renewal is the client's decision
    client = _client(fake, renew_margin=60, clock=lambda: now[0])
    fake.add_asset("a")
    client.assets_with_uri("a")
    assert fake.logins == 1
    exp, iat = token_times(client._token.value)  # type: ignore[union-attr]
    assert exp is not None and iat is not None
    now[0] = exp - 61
    client.assets_with_uri("a")
    assert fake.logins == 1
    now[0] = exp - 59
    client.assets_with_uri("a")
    assert fake.logins == 2


def test_401_renews_the_token_once_and_repeats_the_call(fake):
    fake.add_asset("a")
    client = _client(fake)
    client.login()
    fake.revoke_tokens()
    assert client.assets_with_uri("a")
    assert fake.logins == 2
    assert fake.count("GET", "/api/v2/assets") == 2


def test_401_with_a_fresh_token_is_fatal():
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": make_jwt({"exp": 4_000_000_000})})
        return httpx.Response(401, json={"detail": "Invalid JWT token"})

    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=httpx.MockTransport(handler))
    with pytest.raises(AuthenticationError):
        client.assets_with_uri("x")
    assert calls == ["/auth/token", "/api/v2/assets", "/auth/token", "/api/v2/assets"]


def _static(status: int, body: Any = None, headers: dict[str, str] | None = None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": make_jwt({"exp": 4_000_000_000})})
        return httpx.Response(status, json=body if body is not None else {"detail": "x"}, headers=headers)

    return httpx.MockTransport(handler)


def test_403_is_a_configuration_error():
    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=_static(403))
    with pytest.raises(ForbiddenError, match="op"):
        client.post_asset_event(1, partition_key="k", extra={})


def test_5xx_is_transient_and_ambiguous_only_for_a_post():
    client = AirflowApiClient(
        "http://a.test", "bridge", PASSWORD, transport=_static(503, headers={"Retry-After": "2"})
    )
    with pytest.raises(TransientApiError) as post:
        client.post_asset_event(1, partition_key="k", extra={})
    assert post.value.ambiguous and post.value.status == 503 and post.value.retry_after == 2.0
    with pytest.raises(TransientApiError) as get:
        client.assets_with_uri("x")
    assert not get.value.ambiguous


def test_the_500_of_the_events_lookup_says_what_airflow_3_3_means_by_it():
    """Airflow 3.3 answers GET /api/v2/assets/events with 500 while an event's DAG run is queued."""
    body = {"detail": "Internal Server Error"}
    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=_static(500, body))
    with pytest.raises(TransientApiError, match=r"answered 500.*DAG run is still queued") as lookup:
        client.find_recent_event(1, event_id="e", idempotency_key=None, limit=10)
    assert lookup.value.status == 500 and not lookup.value.ambiguous
    with pytest.raises(TransientApiError) as other:  # another call's 500 is not explained so
        client.assets_with_uri("x")
    assert "still queued" not in str(other.value)


def test_connection_refused_is_transient_and_not_ambiguous():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": make_jwt({"exp": 4_000_000_000})})
        raise httpx.ConnectError("connection refused", request=request)

    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=httpx.MockTransport(handler))
    with pytest.raises(TransientApiError) as info:
        client.post_asset_event(1, partition_key="k", extra={})
    assert not info.value.ambiguous


def test_read_timeout_of_a_post_is_ambiguous():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": make_jwt({"exp": 4_000_000_000})})
        raise httpx.ReadTimeout("timed out", request=request)

    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=httpx.MockTransport(handler))
    with pytest.raises(TransientApiError) as info:
        client.post_asset_event(1, partition_key="k", extra={})
    assert info.value.ambiguous


def test_422_is_a_rejection_with_airflows_detail():
    detail = [{"type": "string_pattern_mismatch", "loc": ["body", "partition_key"]}]
    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=_static(422, {"detail": detail}))
    with pytest.raises(RejectedError) as info:
        client.post_asset_event(1, partition_key=" ", extra={})
    assert info.value.status == 422
    assert "string_pattern_mismatch" in str(info.value)
    assert not isinstance(info.value, NotFoundError)


def test_transient_login_failure():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="bad gateway")

    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=httpx.MockTransport(handler))
    with pytest.raises(TransientApiError):
        client.login()


def test_base_url_with_a_path_prefix():
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path.endswith("/auth/token"):
            return httpx.Response(201, json={"access_token": make_jwt({"exp": 4_000_000_000})})
        return httpx.Response(200, json={"assets": [], "total_entries": 0})

    client = AirflowApiClient(
        "http://a.test/airflow/", "bridge", PASSWORD, transport=httpx.MockTransport(handler)
    )
    client.assets_with_uri("x")
    assert seen == ["/airflow/auth/token", "/airflow/api/v2/assets"]


# --------------------------------------------------------------------------- assets
def test_asset_resolution_is_exact_among_substring_and_wildcard_hits(fake):
    # uri_pattern is ILIKE '%term%' with | as "or" and _ / % as wildcards: all of these match
    fake.add_asset("s3://lake/orders_v2", "s3://lake/orders_v2")
    fake.add_asset("S3://LAKE/ORDERSXV2", "s3://lake/ordersxv2")
    fake.add_asset("other", "s3://lake/orders_v2/extra")
    wanted = fake.add_asset("orders", "s3://lake/orders_v2|x")
    fake.add_asset("x", "x")
    cache = AssetIdCache(_client(fake))
    assert cache.get("orders", "s3://lake/orders_v2|x") == wanted
    assert cache.get("s3://lake/orders_v2", "s3://lake/orders_v2") == 1


def test_asset_resolution_pages_through_every_hit_even_with_a_small_server_page(fake):
    fake.max_page = 3  # [api] maximum_page_limit lower than what the client asks for
    for i in range(10):
        fake.add_asset(f"near-{i}", f"file://data/batches/{i}")
    wanted = fake.add_asset("batches", "file://data/batches")
    cache = AssetIdCache(_client(fake))
    assert cache.get("batches", "file://data/batches") == wanted
    assert fake.count("GET", "/api/v2/assets") == 4


def test_asset_ids_are_cached_and_asked_again_on_a_miss(fake):
    fake.add_asset("a")
    cache = AssetIdCache(_client(fake))
    assert cache.get("a", "a") == 1
    assert cache.get("a", "a") == 1
    assert fake.count("GET", "/api/v2/assets") == 1
    with pytest.raises(UnknownAssetError):
        cache.get("b", "b")
    b = fake.add_asset("b")
    assert cache.get("b", "b") == b  # a miss asks again: the asset exists now
    assert fake.count("GET", "/api/v2/assets") == 3
    fake.remove_asset(1)
    a2 = fake.add_asset("a")
    assert cache.get("a", "a") == 1  # stale until invalidated (a 404 on POST does that)
    cache.invalidate("a", "a")
    assert cache.get("a", "a") == a2


def test_unknown_asset_names_the_asset_with_the_same_uri(fake):
    fake.add_asset("orders", "s3://lake/orders")
    cache = AssetIdCache(_client(fake))
    with pytest.raises(UnknownAssetError) as info:
        cache.get("s3://lake/orders", "s3://lake/orders")
    assert "'orders'" in str(info.value)
    assert info.value.status == 404


def test_cache_is_bounded(fake):
    for name in "abc":
        fake.add_asset(name)
    cache = AssetIdCache(_client(fake), max_size=2)
    for name in "abc":
        cache.get(name, name)
    assert len(cache) == 2


# --------------------------------------------------------------------------- events
def _event(asset_id: int, event_id: str | None, key: str | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if event_id is not None:
        extra["airflow_kafka_events"] = {"event_id": event_id, "idempotency_key": key}
    return {"asset_id": asset_id, "extra": extra}


def test_matches_event_by_event_id_or_idempotency_key():
    assert matches_event(_event(1, "e1", "k1"), "e1", None)
    assert matches_event(_event(1, "e9", "k1"), "e1", "k1")
    assert not matches_event(_event(1, "e9", "k9"), "e1", "k1")
    assert not matches_event(_event(1, "e9", None), "e1", None)
    assert not matches_event(_event(1, None), "e1", "k1")
    assert not matches_event({"extra": None}, "e1", "k1")
    assert not matches_event({"extra": {"airflow_kafka_events": "e1"}}, "e1", "k1")


def test_find_recent_event_looks_at_the_newest_events_of_that_asset_only(fake):
    a = fake.add_asset("a")
    b = fake.add_asset("b")
    client = _client(fake)
    client.post_asset_event(a, partition_key="k", extra={"airflow_kafka_events": {"event_id": "old"}})
    for i in range(5):
        client.post_asset_event(a, partition_key="k", extra={"airflow_kafka_events": {"event_id": f"e{i}"}})
    client.post_asset_event(b, partition_key="k", extra={"airflow_kafka_events": {"event_id": "on-b"}})
    assert client.find_recent_event(a, event_id="e4", idempotency_key=None, limit=1)["id"] == 6
    assert client.find_recent_event(a, event_id="old", idempotency_key=None, limit=5) is None
    assert client.find_recent_event(a, event_id="old", idempotency_key=None, limit=6)["id"] == 1
    assert client.find_recent_event(a, event_id="on-b", idempotency_key=None, limit=100) is None


def test_find_recent_event_pages_with_a_small_server_page(fake):
    fake.max_page = 2
    a = fake.add_asset("a")
    client = _client(fake)
    for i in range(7):
        client.post_asset_event(a, partition_key=None, extra={"airflow_kafka_events": {"event_id": f"e{i}"}})
    before = fake.count("GET", "/api/v2/assets/events")
    assert client.find_recent_event(a, event_id="e0", idempotency_key=None, limit=7) is not None
    assert fake.count("GET", "/api/v2/assets/events") - before == 4


def test_post_body_has_asset_id_partition_key_and_extra_only(fake):
    bodies: list[Any] = []
    inner = fake.transport()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/api/v2/assets/events":
            bodies.append(json.loads(request.content))
        return inner.handle_request(request)

    a = fake.add_asset("a")
    client = AirflowApiClient("http://a.test", "bridge", PASSWORD, transport=httpx.MockTransport(handler))
    created = client.post_asset_event(a, partition_key="batch-41", extra={"rows": 3})
    client.post_asset_event(a, partition_key=None, extra={})
    assert bodies == [
        {"asset_id": a, "partition_key": "batch-41", "extra": {"rows": 3}},
        {"asset_id": a, "extra": {}},
    ]
    assert created["partition_key"] == "batch-41"
    assert created["extra"] == {"rows": 3, "from_rest_api": True}


def test_post_to_a_missing_asset_is_not_found(fake):
    with pytest.raises(NotFoundError):
        _client(fake).post_asset_event(99, partition_key="k", extra={})
