"""A stand-in for the few Airflow 3.3 REST routes the partition bridge calls, on 127.0.0.1.

It mirrors what the bridge relies on in Airflow 3.3.2:

* ``POST /auth/token`` answers 201 ``{"access_token": <JWT>}`` (HS256, ``exp``/``iat`` claims) or
  401 for a wrong password; ``/api/v2/*`` needs ``Authorization: Bearer`` with a token that is
  known, not expired and not revoked (else 401);
* ``GET /api/v2/assets?uri_pattern=`` is a case-insensitive substring search where ``|`` separates
  alternatives and ``%``/``_`` are wildcards (``ILIKE '%term%'``); ``limit`` is capped at
  ``max_page`` (Airflow's ``[api] maximum_page_limit``); answers ``{"assets", "total_entries"}``;
* ``GET /api/v2/assets/events?asset_id=&order_by=-timestamp&limit=&offset=``;
* ``POST /api/v2/assets/events`` with ``asset_id``, ``partition_key``, ``extra`` (extra fields are
  refused with 422 like the real ``StrictBaseModel``); adds ``from_rest_api: true``; 404 for an
  unknown asset id; 422 for a blank partition key.

Faults are scripted, never timed: :meth:`FakeAirflow.fail_posts` answers the next POSTs with a
status without storing them, :meth:`FakeAirflow.fail_after_apply` stores the event and then
answers 5xx (the acknowledgement is lost), :meth:`FakeAirflow.reject_partition_key` answers 422,
:meth:`FakeAirflow.revoke_tokens` makes every issued token answer 401.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

_SECRET = b"fake-airflow-secret"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(claims: dict[str, Any]) -> str:
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64(json.dumps(claims).encode())
    signature = hmac.new(_SECRET, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


def _ilike(value: str, term: str) -> bool:
    pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in term)
    return re.search(pattern, value, flags=re.IGNORECASE | re.DOTALL) is not None


def _search(value: str, term: str) -> bool:
    if "|" in term:
        terms = [t.strip() for t in term.split("|") if t.strip()]
        if terms:
            return any(_ilike(value, t) for t in terms)
    return _ilike(value, term)


class FakeAirflow:
    """Thread-safe fake; use as a context manager (``with FakeAirflow(...) as api:``)."""

    def __init__(
        self,
        *,
        users: dict[str, str] | None = None,
        token_ttl: float = 3600.0,
        max_page: int = 100,
    ) -> None:
        self.users = dict(users or {"bridge": "bridge-password"})
        self.token_ttl = token_ttl
        self.max_page = max_page
        self.lock = threading.Lock()
        self.assets: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) in arrival order
        self.logins = 0
        self._tokens: dict[str, float] = {}
        self._ids = itertools.count(1)
        self._event_ids = itertools.count(1)
        self._post_failures: deque[int] = deque()
        self._after_apply_failures: deque[int] = deque()
        self._rejected_keys: set[str] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._changed = threading.Condition(self.lock)

    # ------------------------------------------------------------------ setup
    def add_asset(self, name: str, uri: str | None = None) -> int:
        with self.lock:
            asset_id = next(self._ids)
            self.assets[asset_id] = {"id": asset_id, "name": name, "uri": uri or name, "group": "asset"}
            return asset_id

    def remove_asset(self, asset_id: int) -> None:
        with self.lock:
            self.assets.pop(asset_id, None)

    def fail_posts(self, *statuses: int) -> None:
        """Answer the next POSTs of asset events with these statuses, storing nothing."""
        with self.lock:
            self._post_failures.extend(statuses)

    def fail_after_apply(self, *statuses: int) -> None:
        """Store the next posted events, then answer with these statuses (a lost acknowledgement)."""
        with self.lock:
            self._after_apply_failures.extend(statuses)

    def reject_partition_key(self, key: str) -> None:
        with self.lock:
            self._rejected_keys.add(key)

    def revoke_tokens(self) -> None:
        with self.lock:
            self._tokens.clear()

    # ------------------------------------------------------------------ inspection
    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def events_of(self, asset_id: int) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self.events if e["asset_id"] == asset_id]

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return sum(1 for m, p in self.requests if m == method and p == path)

    def wait_for(self, condition: Callable[[FakeAirflow], bool], timeout: float, what: str) -> None:
        """Wait until ``condition(self)`` holds (checked again after every request)."""
        deadline = time.monotonic() + timeout
        while not condition(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            with self._changed:
                self._changed.wait(0.1)

    # ------------------------------------------------------------------ in-process transport
    def transport(self) -> httpx.MockTransport:
        """The same routes without a socket: for ``httpx.Client(transport=...)`` in unit tests."""

        def handler(request: httpx.Request) -> httpx.Response:
            query = dict(request.url.params.items())
            body = json.loads(request.content) if request.content else None
            with self._changed:
                self.requests.append((request.method, request.url.path))
                status, answer, headers = self._route(
                    request.method, request.url.path, query, body, request.headers
                )
                self._changed.notify_all()
            return httpx.Response(status, json=answer, headers=headers)

        return httpx.MockTransport(handler)

    # ------------------------------------------------------------------ server
    def __enter__(self) -> FakeAirflow:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                return json.loads(raw) if raw else None

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                body = self._body() if method == "POST" else None
                with fake._changed:
                    fake.requests.append((method, url.path))
                    status, answer, headers = fake._route(method, url.path, query, body, self.headers)
                    fake._changed.notify_all()
                self._send(status, answer, headers)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-airflow", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # ------------------------------------------------------------------ routes (lock held)
    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: Any
    ) -> tuple[int, Any, dict[str, str] | None]:
        if method == "POST" and path == "/auth/token":
            return self._login(body)
        if not path.startswith("/api/v2/"):
            return 404, {"detail": "Not Found"}, None
        auth = headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        expiry = self._tokens.get(token)
        if expiry is None or expiry <= time.time():
            return 401, {"detail": "Invalid JWT token"}, None
        if method == "GET" and path == "/api/v2/assets":
            return self._get_assets(query)
        if method == "GET" and path == "/api/v2/assets/events":
            return self._get_events(query)
        if method == "POST" and path == "/api/v2/assets/events":
            return self._post_event(body)
        return 404, {"detail": "Not Found"}, None

    def _login(self, body: Any) -> tuple[int, Any, dict[str, str] | None]:
        if not isinstance(body, dict) or self.users.get(body.get("username")) != body.get("password"):
            return 401, {"detail": "Invalid credentials"}, None
        now = time.time()
        token = make_jwt({"sub": body["username"], "iat": int(now), "exp": now + self.token_ttl})
        self._tokens[token] = now + self.token_ttl
        self.logins += 1
        return 201, {"access_token": token}, None

    def _page(self, query: dict[str, str]) -> tuple[int, int]:
        limit = min(int(query.get("limit", 50)), self.max_page)
        return limit, int(query.get("offset", 0))

    def _get_assets(self, query: dict[str, str]) -> tuple[int, Any, dict[str, str] | None]:
        assets = sorted(self.assets.values(), key=lambda a: a["id"])
        if "uri_pattern" in query:
            assets = [a for a in assets if _search(a["uri"], query["uri_pattern"])]
        if "name_pattern" in query:
            assets = [a for a in assets if _search(a["name"], query["name_pattern"])]
        limit, offset = self._page(query)
        return 200, {"assets": assets[offset : offset + limit], "total_entries": len(assets)}, None

    def _get_events(self, query: dict[str, str]) -> tuple[int, Any, dict[str, str] | None]:
        events = list(self.events)
        if "asset_id" in query:
            events = [e for e in events if e["asset_id"] == int(query["asset_id"])]
        order = query.get("order_by", "timestamp")
        events.sort(key=lambda e: (e["timestamp"], e["id"]), reverse=order.startswith("-"))
        limit, offset = self._page(query)
        return 200, {"asset_events": events[offset : offset + limit], "total_entries": len(events)}, None

    def _post_event(self, body: Any) -> tuple[int, Any, dict[str, str] | None]:
        if self._post_failures:
            status = self._post_failures.popleft()
            return status, {"detail": f"scripted failure {status}"}, None
        if not isinstance(body, dict) or set(body) - {"asset_id", "partition_key", "extra", "access_control"}:
            detail = [{"type": "extra_forbidden", "msg": "Extra inputs are not permitted"}]
            return 422, {"detail": detail}, None
        asset = self.assets.get(body.get("asset_id"))  # type: ignore[arg-type]
        if asset is None:
            return 404, {"detail": f"Asset with ID: `{body.get('asset_id')}` was not found"}, None
        key = body.get("partition_key")
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 250):
            detail = [{"type": "string_pattern_mismatch", "loc": ["body", "partition_key"]}]
            return 422, {"detail": detail}, None
        if key in self._rejected_keys:
            return 422, {"detail": [{"type": "value_error", "msg": f"partition key {key} refused"}]}, None
        extra = dict(body.get("extra") or {})
        extra["from_rest_api"] = True
        event = {
            "id": next(self._event_ids),
            "asset_id": asset["id"],
            "uri": asset["uri"],
            "name": asset["name"],
            "group": asset["group"],
            "extra": extra,
            "source_task_id": None,
            "source_dag_id": None,
            "source_run_id": None,
            "source_map_index": -1,
            "created_dagruns": [],
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "partition_key": key,
        }
        self.events.append(event)
        if self._after_apply_failures:
            status = self._after_apply_failures.popleft()
            return status, {"detail": f"scripted failure {status} after storing the event"}, None
        return 200, event, None
