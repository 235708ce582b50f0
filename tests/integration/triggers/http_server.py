"""A local paginated JSON API for the HTTP trigger tests: threaded, on 127.0.0.1, a free port.

:class:`PagedApi` serves ``pages`` pages of items (``pages=0``: ONE page without items) in the
pagination styles the triggers know, all over the same data (page ``i`` has the items
:func:`page_items` ``(i, per_page)``):

==========================  ===========================================================
``GET /api/items?page=i``   ``{"items": [...], "paging": {"next": <URL or null>}}``
                            (absolute next URLs; relative ones with ``relative_links``;
                            with ``keep_query`` they repeat the request's query)
``POST /api/search``        token cursors: ``?cursor=c<i>``; ``{"data": [...], "meta":
                            {"next_cursor": "c<i+1>" or null}}``; JSON request body kept
``GET /api/linked?page=i``  a JSON list of items and ``Link: <...>; rel="next"``
``GET /v1.0/users``         Graph style: ``{"value": [...], "@odata.nextLink": ...}`` with
                            ``$skiptoken=<i>``
``GET /api/foreign?page=i`` like ``/api/items`` but the next link goes to another origin
==========================  ===========================================================

Injectable behaviours, per page index (whatever the route):

* :meth:`PagedApi.fail` ``(page, status, times=1, headers=None)``: the next ``times``
  requests of the page answer ``status`` (``times=None``: every request), e.g. ``429`` with
  ``{"Retry-After": "1"}``, ``503``, ``404``; a header value may be a function, called when the
  answer is served (e.g. an HTTP date relative to that moment);
* :meth:`PagedApi.hold` ``(page)`` -> :class:`Gate`: requests of the page wait while the gate
  is closed.  A waiting request whose client disconnects (the client was cancelled or
  killed) is *abandoned*: it is never answered.  :meth:`Gate.release` answers the requests
  still waiting, and later ones at once.

Every request is recorded as a :class:`Hit`.  :meth:`PagedApi.served` counts the complete
``2xx`` answers of a page (what "the page was served" means in the tests;
:meth:`PagedApi.served_counts`: of every page); :meth:`PagedApi.statuses` lists the
statuses a page answered; :meth:`PagedApi.arrived` / :meth:`PagedApi.abandoned` count
requests received / abandoned.  :meth:`PagedApi.wait_for` waits (on a condition variable,
no polling sleeps) until a predicate over the server holds.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

__all__ = ["Gate", "Hit", "PagedApi", "page_items"]


def page_items(index: int, per_page: int) -> list[dict[str, Any]]:
    """The items of page ``index``."""
    first = index * per_page
    return [{"id": first + j, "name": f"item-{first + j}"} for j in range(per_page)]


@dataclass
class Hit:
    """One request: route, page, method, query, headers, JSON body; then its outcome."""

    route: str
    page: int
    method: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    arrived_at: float
    status: int | None = None  # the status answered (None: not answered)
    outcome: str = "pending"  # pending | held | answered | abandoned | broken


@dataclass
class _Failure:
    status: int
    times: int | None
    headers: dict[str, str | Callable[[], str]] = field(default_factory=dict)

    def served_headers(self) -> dict[str, str]:
        """The headers as sent now (a function value is called at this moment)."""
        return {name: value() if callable(value) else value for name, value in self.headers.items()}


class Gate:
    """Holds the requests of one page until :meth:`release`."""

    def __init__(self, api: PagedApi, page: int) -> None:
        self.api = api
        self.page = page
        self.event = threading.Event()

    def release(self) -> None:
        self.event.set()
        self.api._changed()

    @property
    def released(self) -> bool:
        return self.event.is_set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # no stderr noise
        pass

    def do_GET(self) -> None:
        self.server.api._handle(self)

    def do_POST(self) -> None:
        self.server.api._handle(self)

    # ------------------------------------------------------------------ helpers
    def client_gone(self) -> bool:
        """The client closed the connection (EOF or reset) while its request waits."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def send(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> bool:
        """Write a complete answer; ``False`` if the client was gone."""
        data = b"" if body is None else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return False
        return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: PagedApi


class PagedApi:
    """The local API (see the module doc); a context manager that starts and stops it."""

    def __init__(
        self, pages: int = 3, per_page: int = 2, *, relative_links: bool = False, keep_query: bool = False
    ) -> None:
        self.pages = pages
        self.per_page = per_page
        self.relative_links = relative_links
        self.keep_query = keep_query
        self.hits: list[Hit] = []
        self._failures: dict[int, list[_Failure]] = {}
        self._gates: dict[int, Gate] = {}
        self._cond = threading.Condition()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.api = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PagedApi:
        self._thread = threading.Thread(target=self._server.serve_forever, name="paged-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        for gate in list(self._gates.values()):
            gate.release()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> PagedApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def connection(self, **extra: Any) -> str:
        """``AIRFLOW_CONN_*`` JSON of an HTTP connection to this server (``extra`` merged in)."""
        conn: dict[str, Any] = {"conn_type": "http", "host": "127.0.0.1", "port": self.port, "schema": "http"}
        conn.update(extra)
        return json.dumps(conn)

    # ------------------------------------------------------------------ behaviours
    def fail(
        self,
        page: int,
        status: int,
        times: int | None = 1,
        headers: Mapping[str, str | Callable[[], str]] | None = None,
    ) -> None:
        """The next ``times`` requests of ``page`` (``None``: all) answer ``status``."""
        with self._cond:
            self._failures.setdefault(page, []).append(_Failure(status, times, dict(headers or {})))

    def hold(self, page: int) -> Gate:
        """Requests of ``page`` wait until the returned gate is released."""
        with self._cond:
            gate = self._gates[page] = Gate(self, page)
        return gate

    # ------------------------------------------------------------------ observations
    def _select(self, page: int | None, route: str | None) -> list[Hit]:
        with self._cond:
            return [
                h
                for h in self.hits
                if (page is None or h.page == page) and (route is None or h.route == route)
            ]

    def served(self, page: int) -> int:
        """Complete 2xx answers of ``page``."""
        return sum(1 for h in self._select(page, None) if h.outcome == "answered" and _ok(h.status))

    def served_counts(self) -> dict[int, int]:
        """``{page: complete 2xx answers}`` of every page that had one."""
        counts: dict[int, int] = {}
        for h in self._select(None, None):
            if h.outcome == "answered" and _ok(h.status):
                counts[h.page] = counts.get(h.page, 0) + 1
        return dict(sorted(counts.items()))

    def statuses(self, page: int) -> list[int | None]:
        """Statuses of the answered requests of ``page``, in arrival order."""
        return [h.status for h in self._select(page, None) if h.outcome == "answered"]

    def arrived(self, page: int) -> int:
        return len(self._select(page, None))

    def abandoned(self, page: int) -> int:
        return sum(1 for h in self._select(page, None) if h.outcome == "abandoned")

    def held(self, page: int) -> int:
        """Requests of ``page`` waiting at its gate now."""
        return sum(1 for h in self._select(page, None) if h.outcome == "held")

    def wait_for(self, predicate: Callable[[PagedApi], bool], timeout: float, what: str) -> None:
        """Block until ``predicate(self)`` holds (re-checked on every request event)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what} did not happen within {timeout}s; hits: {self._summary()}")
                self._cond.wait(min(left, 1.0))

    def _summary(self) -> str:
        return ", ".join(f"{h.route}#{h.page}:{h.outcome}/{h.status}" for h in self.hits)

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------ serving
    def _handle(self, handler: _Handler) -> None:
        parts = urlsplit(handler.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        route = parts.path
        page = self._page_of(route, query)
        hit = Hit(
            route=route,
            page=-1 if page is None else page,
            method=handler.command,
            query=query,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            arrived_at=time.monotonic(),
        )
        with self._cond:
            self.hits.append(hit)
            self._cond.notify_all()
        if page is None:
            self._answer(handler, hit, 404, {"error": f"no route {route}"})
            return
        gate = self._gates.get(page)
        if gate is not None and not gate.released:
            with self._cond:
                hit.outcome = "held"
                self._cond.notify_all()
            while not gate.event.wait(0.02):
                if handler.client_gone():
                    with self._cond:
                        hit.outcome = "abandoned"
                        self._cond.notify_all()
                    handler.close_connection = True
                    return
        failure = self._next_failure(page)
        if failure is not None:
            self._answer(handler, hit, failure.status, {"error": failure.status}, failure.served_headers())
            return
        if not 0 <= page < max(self.pages, 1):
            self._answer(handler, hit, 404, {"error": f"no page {page}"})
            return
        status, payload, headers = self._page(route, page, query)
        self._answer(handler, hit, status, payload, headers)

    def _answer(
        self,
        handler: _Handler,
        hit: Hit,
        status: int,
        body: Any,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        complete = handler.send(status, body, headers)
        with self._cond:
            hit.status = status
            hit.outcome = "answered" if complete else "broken"
            self._cond.notify_all()

    def _next_failure(self, page: int) -> _Failure | None:
        with self._cond:
            queue = self._failures.get(page) or []
            if not queue:
                return None
            failure = queue[0]
            if failure.times is not None:
                failure.times -= 1
                if failure.times <= 0:
                    queue.pop(0)
            return failure

    @staticmethod
    def _page_of(route: str, query: dict[str, list[str]]) -> int | None:
        def number(name: str, prefix: str = "") -> int | None:
            value = (query.get(name) or [f"{prefix}0"])[0]
            if not value.startswith(prefix) or not value[len(prefix) :].isdigit():
                return 10**6  # an unknown page: 404
            return int(value[len(prefix) :])

        if route in ("/api/items", "/api/linked", "/api/foreign"):
            return number("page")
        if route == "/api/search":
            return number("cursor", "c")
        if route == "/v1.0/users":
            return number("$skiptoken")
        return None

    def _link(self, route: str, params: Mapping[str, Any]) -> str:
        path = f"{route}?{urlencode(params)}"
        return path if self.relative_links else f"{self.url}{path}"

    def _page(self, route: str, page: int, query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
        items = page_items(page, self.per_page) if self.pages else []
        has_next = page + 1 < self.pages
        if route == "/api/items":
            kept = {k: v[0] for k, v in query.items() if k != "page"} if self.keep_query else {}
            following = self._link(route, {**kept, "page": page + 1}) if has_next else None
            return 200, {"items": items, "paging": {"page": page, "next": following}}, {}
        if route == "/api/foreign":
            following = f"http://localhost:{self.port}/api/foreign?page={page + 1}" if has_next else None
            return 200, {"items": items, "paging": {"next": following}}, {}
        if route == "/api/search":
            cursor = f"c{page + 1}" if has_next else None
            return 200, {"data": items, "meta": {"next_cursor": cursor}}, {}
        if route == "/api/linked":
            links = []
            if has_next:
                links.append(f'<{self._link(route, {"page": page + 1})}>; rel="next"')
            links.append(f'<{self._link(route, {"page": max(self.pages - 1, 0)})}>; rel="last"')
            return 200, items, {"Link": ", ".join(links)}
        # Graph style
        top = (query.get("$top") or [str(self.per_page)])[0]
        body: dict[str, Any] = {"@odata.context": f"{self.url}/v1.0/$metadata#users", "value": items}
        if has_next:
            body["@odata.nextLink"] = f"{self.url}/v1.0/users?$top={top}&$skiptoken={page + 1}"
        return 200, body, {}


def _ok(status: int | None) -> bool:
    return status is not None and 200 <= status < 300
