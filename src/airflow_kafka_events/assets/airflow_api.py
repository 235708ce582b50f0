"""A small client of Airflow 3.3's public REST API: exactly what the partition bridge needs.

* ``POST /auth/token`` (simple auth manager, or any auth manager serving that route) for a JWT,
  renewed before it expires (its ``exp`` claim is read without verifying the signature: the
  client only needs to know when to ask for a new one) and once on a ``401``;
* ``GET /api/v2/assets?uri_pattern=...`` to turn an asset's (name, URI) into its id — the pattern
  is a case-insensitive substring search (``%``, ``_`` and ``|`` act as wildcards / "or"), so
  the client pages through every hit and keeps the exact match; :class:`AssetIdCache` remembers
  ids and asks again on a miss;
* ``GET /api/v2/assets/events?asset_id=...&order_by=-timestamp`` to find whether an event with a
  given ``event_id`` / ``idempotency_key`` (in ``extra["airflow_kafka_events"]``) already exists;
* ``POST /api/v2/assets/events`` with ``asset_id``, ``partition_key`` and ``extra`` (Airflow adds
  ``"from_rest_api": true`` to ``extra``; the body has no ``partition_date`` field).

Failures are typed: :class:`TransientApiError` (connection errors, timeouts, ``5xx``, ``408``,
``425``, ``429``; retry them; ``ambiguous`` when a POST may have been applied),
:class:`RejectedError` / :class:`NotFoundError` (a ``4xx`` about the request itself: dead-letter
it), :class:`AuthenticationError` (bad credentials, or ``401`` with a fresh token) and
:class:`ForbiddenError` (``403``: the user's role may not do this) — the last two are
configuration errors.  Neither the password nor a token is ever put in a message.

This module imports no Airflow module.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from airflow_kafka_events.__about__ import __version__
from airflow_kafka_events.assets.publish import PROVENANCE_EXTRA_KEY
from airflow_kafka_events.errors import AirflowKafkaEventsError
from airflow_kafka_events.retry import Exhausted, OnRetry, RetryPolicy, parse_retry_after, retry_call

log = logging.getLogger(__name__)

__all__ = [
    "API_PAGE_LIMIT",
    "AirflowApiClient",
    "AirflowApiError",
    "AssetIdCache",
    "AuthenticationError",
    "ForbiddenError",
    "NotFoundError",
    "RejectedError",
    "TransientApiError",
    "UnknownAssetError",
    "classify_status",
    "jwt_claims",
    "renewal_due",
    "retry_api_call",
]

T = TypeVar("T")


#: Largest page Airflow's REST API returns with the default ``[api] maximum_page_limit``.
API_PAGE_LIMIT = 100


class AirflowApiError(AirflowKafkaEventsError):
    """A call to Airflow's REST API failed; ``status`` is the HTTP status (``None``: no answer)."""

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class TransientApiError(AirflowApiError):
    """Worth retrying.  ``ambiguous``: a POST may have been applied although no 2xx came back."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        detail: str | None = None,
        ambiguous: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, detail=detail)
        self.ambiguous = ambiguous
        self.retry_after = retry_after


def retry_api_call(
    call: Callable[[], T],
    policy: RetryPolicy,
    *,
    exhausted: Exhausted,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()`` tried again after a :class:`TransientApiError`, up to ``policy.max_attempts``.

    The waits are ``policy``'s backoff, or the ``Retry-After`` Airflow answered; ``exhausted``
    builds the error raised after the last attempt, ``sleep`` may raise to stop waiting.
    """
    return retry_call(
        call,
        retry_on=lambda exc: isinstance(exc, TransientApiError),
        attempts=policy.max_attempts,
        delay=lambda failures, exc: policy.delay(failures, getattr(exc, "retry_after", None)),
        exhausted=exhausted,
        on_retry=on_retry,
        sleep=sleep,
    )


class RejectedError(AirflowApiError):
    """A 4xx about the request itself (validation, unknown asset ...): retrying cannot help."""


class NotFoundError(RejectedError):
    """404: the asset (or route) does not exist."""


class AuthenticationError(AirflowApiError):
    """The credentials were refused, or a fresh token was refused."""


class ForbiddenError(AirflowApiError):
    """403: the user is authenticated but its role may not do this (the bridge needs role ``op``)."""


class UnknownAssetError(RejectedError):
    """No active Airflow asset has the event's exact name and URI."""


TOKEN_PATH = "auth/token"
ASSETS_PATH = "api/v2/assets"
ASSET_EVENTS_PATH = "api/v2/assets/events"


# --------------------------------------------------------------------------- pure helpers
def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, decoded WITHOUT verifying its signature; ``ValueError`` if malformed."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("a JWT has three dot-separated parts")
    payload = parts[1]
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"the JWT payload is not base64url JSON: {type(exc).__name__}") from None
    if not isinstance(claims, dict):
        raise ValueError("the JWT payload is not a JSON object")
    return claims


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def token_times(token: str) -> tuple[float | None, float | None]:
    """``(exp, iat)`` of a JWT in epoch seconds; ``None`` for what it does not say (or a bad token)."""
    try:
        claims = jwt_claims(token)
    except ValueError:
        return None, None
    return _number(claims.get("exp")), _number(claims.get("iat"))


def renewal_due(expires_at: float | None, now: float, margin: float, issued_at: float | None = None) -> bool:
    """Whether a token expiring at ``expires_at`` should be renewed at ``now``.

    Renew ``margin`` seconds before expiry, but never earlier than half-way through the token's
    life (so a short-lived token is not renewed on every call).  A token without ``exp`` is used
    until the server answers 401.
    """
    if expires_at is None:
        return False
    if issued_at is not None and expires_at > issued_at:
        margin = min(margin, (expires_at - issued_at) / 2)
    return now >= expires_at - margin


def classify_status(status: int) -> str:
    """What an HTTP status means to the bridge.

    ``ok`` (2xx); ``unauthorized`` (401: renew the token once); ``forbidden`` (403: configuration
    error, stop); ``retry`` (408, 425, 429, 5xx); ``not_found`` (404: refresh the asset id, then
    dead-letter); ``reject`` (any other 4xx: dead-letter); ``unexpected`` (1xx/3xx: stop).
    """
    if 200 <= status < 300:
        return "ok"
    if status == 401:
        return "unauthorized"
    if status == 403:
        return "forbidden"
    if status in (408, 425, 429) or 500 <= status < 600:
        return "retry"
    if status == 404:
        return "not_found"
    if 400 <= status < 500:
        return "reject"
    return "unexpected"


#: Why Airflow 3.3 answers ``GET /api/v2/assets/events`` with 500 (its response model wants each event's
#: DAG runs' ``start_date``, which a queued run does not have yet; Airflow 3.4 fixes the model).
QUEUED_RUN_500 = "Airflow 3.3 answers 500 here while an event's DAG run is still queued"


def _api_error(kind: str, where: str, response: httpx.Response, *, may_apply: bool) -> AirflowApiError:
    """The typed error of a non-2xx answer classified as ``kind`` (see :func:`classify_status`)."""
    detail = _detail(response)
    status = response.status_code
    message = f"{where} answered {status}: {detail}"
    if status == 500 and where.startswith(f"GET /{ASSET_EVENTS_PATH}"):
        message += f" ({QUEUED_RUN_500})"
    if kind == "unauthorized":
        return AuthenticationError(message, status=status, detail=detail)
    if kind == "forbidden":
        return ForbiddenError(
            f"{message} (the bridge's user needs a role that may read assets and create asset "
            "events, e.g. op)",
            status=status,
            detail=detail,
        )
    if kind == "retry":
        return TransientApiError(
            message,
            status=status,
            detail=detail,
            ambiguous=may_apply,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )
    errors: dict[str, type[AirflowApiError]] = {"not_found": NotFoundError, "reject": RejectedError}
    return errors.get(kind, AirflowApiError)(message, status=status, detail=detail)


def _detail(response: httpx.Response, limit: int = 500) -> str:
    try:
        body = response.json()
    except ValueError:
        text = response.text
    else:
        value = body.get("detail", body) if isinstance(body, dict) else body
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def provenance_of(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """``extra["airflow_kafka_events"]`` of an Airflow asset event (``{}`` when absent)."""
    extra = event.get("extra")
    if not isinstance(extra, Mapping):
        return {}
    info = extra.get(PROVENANCE_EXTRA_KEY)
    return info if isinstance(info, Mapping) else {}


def matches_event(event: Mapping[str, Any], event_id: str, idempotency_key: str | None) -> bool:
    """Whether an Airflow asset event was made from the envelope ``event_id`` (or one with its key)."""
    info = provenance_of(event)
    if info.get("event_id") == event_id:
        return True
    return idempotency_key is not None and info.get("idempotency_key") == idempotency_key


# --------------------------------------------------------------------------- client
@dataclass(frozen=True)
class _Token:
    value: str = field(repr=False)
    expires_at: float | None
    issued_at: float | None


class AirflowApiClient:
    """Airflow REST calls with a bearer token that is renewed before expiry and on a 401.

    Each method makes one attempt (plus one repeat after a 401) and raises the typed errors of
    this module; retrying is the caller's policy.  Thread-safe.
    """

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        timeout: float = 10.0,
        renew_margin: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._password = password
        self._renew_margin = renew_margin
        self._clock = clock
        self._token: _Token | None = None
        self._lock = threading.RLock()
        self.logins = 0
        self._http = httpx.Client(
            base_url=self.base_url + "/",
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            headers={
                "Accept": "application/json",
                "User-Agent": f"airflow-kafka-events-bridge/{__version__}",
            },
        )

    def __repr__(self) -> str:  # never shows the password or the token
        return f"AirflowApiClient(base_url={self.base_url!r}, username={self.username!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AirflowApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ token
    def login(self) -> None:
        """Get a new token (``POST /auth/token``)."""
        with self._lock:
            try:
                response = self._http.post(
                    TOKEN_PATH, json={"username": self.username, "password": self._password}
                )
            except httpx.HTTPError as exc:
                raise TransientApiError(f"POST /{TOKEN_PATH} failed: {type(exc).__name__}: {exc}") from None
            kind = classify_status(response.status_code)
            if kind == "ok":
                try:
                    value = response.json()["access_token"]
                except (ValueError, KeyError, TypeError):
                    raise AirflowApiError(
                        f"POST /{TOKEN_PATH} answered {response.status_code} without an access_token",
                        status=response.status_code,
                    ) from None
                if not isinstance(value, str) or not value:
                    raise AirflowApiError(f"POST /{TOKEN_PATH} returned an empty access_token")
                expires_at, issued_at = token_times(value)
                self._token = _Token(value, expires_at, issued_at)
                self.logins += 1
                log.info(
                    "obtained an Airflow API token for user %r (expires %s)",
                    self.username,
                    "unknown"
                    if expires_at is None
                    else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at)),
                )
                return
            if kind == "retry":
                raise TransientApiError(
                    f"POST /{TOKEN_PATH} answered {response.status_code}",
                    status=response.status_code,
                    retry_after=parse_retry_after(response.headers.get("Retry-After")),
                )
            raise AuthenticationError(
                f"Airflow refused the credentials of user {self.username!r} "
                f"(POST /{TOKEN_PATH} answered {response.status_code}: {_detail(response, 200)})",
                status=response.status_code,
            )

    def _current_token(self) -> str:
        with self._lock:
            token = self._token
            if token is None or renewal_due(
                token.expires_at, self._clock(), self._renew_margin, token.issued_at
            ):
                self.login()
                token = self._token
            assert token is not None
            return token.value

    def invalidate_token(self) -> None:
        with self._lock:
            self._token = None

    # ------------------------------------------------------------------ requests
    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        may_apply: bool = False,
    ) -> httpx.Response:
        """One authenticated call; a 2xx response, else a typed error.

        ``may_apply``: the request changes state, so a failure after it was sent is ambiguous.
        """
        where = f"{method} /{path}"
        for attempt in (0, 1):
            headers = {"Authorization": f"Bearer {self._current_token()}"}
            try:
                response = self._http.request(method, path, params=params, json=json_body, headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
                raise TransientApiError(f"{where} failed: {type(exc).__name__}: {exc}") from None
            except httpx.HTTPError as exc:
                raise TransientApiError(
                    f"{where} failed: {type(exc).__name__}: {exc}", ambiguous=may_apply
                ) from None
            kind = classify_status(response.status_code)
            if kind == "ok":
                return response
            if kind == "unauthorized" and attempt == 0:
                log.info("%s answered 401: renewing the token", where)
                self.invalidate_token()
                continue
            raise _api_error(kind, where, response, may_apply=may_apply)
        raise AssertionError("unreachable")  # pragma: no cover

    def _json(self, response: httpx.Response, where: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise TransientApiError(
                f"{where} answered {response.status_code} with a body that is not JSON"
            ) from None

    def _pages(
        self, path: str, params: Mapping[str, Any], items_key: str, *, max_items: int | None = None
    ) -> list[dict[str, Any]]:
        """Every item of a paginated collection (``limit``/``offset``/``total_entries``)."""
        items: list[dict[str, Any]] = []
        offset = 0
        while max_items is None or len(items) < max_items:
            limit = API_PAGE_LIMIT if max_items is None else min(API_PAGE_LIMIT, max_items - len(items))
            page = self._json(
                self.request("GET", path, params={**params, "limit": limit, "offset": offset}), f"GET /{path}"
            )
            if not isinstance(page, dict) or not isinstance(page.get(items_key), list):
                raise TransientApiError(f"GET /{path} answered without a {items_key!r} list")
            batch = [item for item in page[items_key] if isinstance(item, dict)]
            items.extend(batch)
            offset += len(page[items_key])
            total = page.get("total_entries")
            if not page[items_key] or (isinstance(total, int) and offset >= total):
                break
        return items if max_items is None else items[:max_items]

    # ------------------------------------------------------------------ assets
    def assets_with_uri(self, uri: str) -> list[dict[str, Any]]:
        """Active assets whose URI is exactly ``uri`` (at most one in Airflow 3.3)."""
        found = self._pages(ASSETS_PATH, {"uri_pattern": uri, "order_by": "id"}, "assets")
        return [a for a in found if a.get("uri") == uri]

    def recent_events(self, asset_id: int, *, limit: int) -> list[dict[str, Any]]:
        """The asset's ``limit`` most recent events, newest first."""
        return self._pages(
            ASSET_EVENTS_PATH,
            {"asset_id": asset_id, "order_by": "-timestamp"},
            "asset_events",
            max_items=limit,
        )

    def assets_named(self, name: str) -> list[dict[str, Any]]:
        """Active assets whose name is exactly ``name``."""
        found = self._pages(ASSETS_PATH, {"name_pattern": name, "order_by": "id"}, "assets")
        return [a for a in found if a.get("name") == name]

    def find_recent_event(
        self, asset_id: int, *, event_id: str, idempotency_key: str | None, limit: int
    ) -> dict[str, Any] | None:
        """The newest of the asset's ``limit`` most recent events made from ``event_id`` (or its key)."""
        for event in self.recent_events(asset_id, limit=limit):
            if matches_event(event, event_id, idempotency_key):
                return event
        return None

    def post_asset_event(
        self, asset_id: int, *, partition_key: str | None, extra: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Create one asset event; the created event (``{}`` if the 2xx body is not JSON)."""
        body: dict[str, Any] = {"asset_id": asset_id, "extra": dict(extra)}
        if partition_key is not None:
            body["partition_key"] = partition_key
        response = self.request("POST", ASSET_EVENTS_PATH, json_body=body, may_apply=True)
        try:
            created = response.json()
        except ValueError:
            return {}
        return created if isinstance(created, dict) else {}


# --------------------------------------------------------------------------- asset ids
class AssetIdCache:
    """(name, URI) -> Airflow asset id, asked from the API on a miss; bounded (LRU)."""

    def __init__(self, client: AirflowApiClient, max_size: int = 10_000) -> None:
        self._client = client
        self._ids: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._max_size = max_size
        self._lock = threading.Lock()
        self.lookups = 0

    def get(self, name: str, uri: str) -> int:
        """The id of the active asset named ``name`` with URI ``uri``; :class:`UnknownAssetError` if none."""
        key = (name, uri)
        with self._lock:
            if key in self._ids:
                self._ids.move_to_end(key)
                return self._ids[key]
        self.lookups += 1
        candidates = self._client.assets_with_uri(uri)
        for asset in candidates:
            if asset.get("name") == name and isinstance(asset.get("id"), int):
                asset_id: int = asset["id"]
                with self._lock:
                    self._ids[key] = asset_id
                    while len(self._ids) > self._max_size:
                        self._ids.popitem(last=False)
                return asset_id
        others = sorted(str(a.get("name")) for a in candidates)
        hint = f" (the asset with this URI is named {', '.join(map(repr, others))})" if others else ""
        raise UnknownAssetError(
            f"Airflow has no active asset named {name!r} with URI {uri!r}{hint}; an asset becomes active "
            "when a parsed DAG uses it",
            status=404,
        )

    def invalidate(self, name: str, uri: str) -> None:
        with self._lock:
            self._ids.pop((name, uri), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)
