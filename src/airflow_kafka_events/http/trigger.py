"""Paginated HTTP APIs as streaming triggers: every page of the API becomes one Kafka envelope.

:class:`HttpPaginationTrigger` walks a paginated JSON API inside the triggerer and writes each
response (or the part of it named by ``items_path``) as one page of its stream; the task
resumes ONCE, when the last page is in Kafka.  :class:`GraphPaginationTrigger` is the same for
Microsoft-Graph-style APIs (``@odata.nextLink`` and ``value``).

Connection
    ``http_conn_id`` is an Airflow HTTP connection, resolved in ``run()`` (never in
    ``__init__``) by the http provider's :class:`~airflow.providers.http.hooks.http.HttpAsyncHook`:
    ``host`` (with or without scheme), ``schema`` (scheme, default ``http``), ``port``,
    ``login``/``password`` (basic auth), and extra fields as request headers.  The extras
    ``timeout``, ``proxy``/``proxies``, ``verify``/``verify_ssl``, ``allow_redirects``,
    ``max_redirects`` and ``trust_env`` are honoured; ``srv_lookup``, ``stream`` and ``cert``
    are not supported here.  Headers given to the trigger override the connection's.

Where the next page is
    * ``cursor_path``: a path into the JSON body (dotted ``"paging.next"``, or a list of keys
      and list indices such as ``["@odata.nextLink"]`` for keys that contain dots).  Without
      ``cursor_param`` its value is a *next link*: a URL (absolute, or relative to the
      response's URL), fetched with ``GET`` and without ``params``/``data`` (a next link
      carries its own query).  With ``cursor_param`` the value is an opaque *token*: the next
      request is the first one (``method``, ``params``, ``data``) with the query parameter
      ``cursor_param=<token>`` added.
    * ``next_link_header=True``: the ``rel="next"`` target of the RFC 8288 (RFC 5988)
      ``Link`` response header is the next link.
    * neither: the API has a single page.

    A missing, ``null`` or empty cursor value ends the stream after that page.  Next links must
    have the origin (scheme, host, port) of the first request (the connection's, unless
    ``endpoint`` is an absolute URL), so the connection's credentials are never sent elsewhere,
    unless ``allow_foreign_next_links=True``; a next link that repeats an earlier one of the
    run, or that contains a credential of the connection, ends the stream with an error.

Pages
    Every successful response is one page (``payload`` = the decoded JSON body, or its
    ``items_path`` value; an empty body is ``None``), so an API without data is ONE page with
    no items, not an empty stream.  ``Page.cursor`` is where the next request goes (the
    absolute next URL, or the token); on the API's last page it is :data:`END_CURSOR` (``""``),
    not ``None``, so that even a trigger interrupted right after the last page resumes instead
    of starting a new attempt.  A trigger restarted by the triggerer continues from the last
    written page's cursor: no page already in Kafka is requested again.  ``max_pages`` bounds
    the pages of the stream (counted across restarts).

Failures
    ``429 Too Many Requests`` and ``5xx`` answers, connection errors and timeouts
    (``request_timeout``) are retried, ``max_retries`` times per request, after the answer's
    ``Retry-After`` (delay-seconds or an HTTP date, at most ``max_retry_after`` seconds) or,
    without one, an exponential backoff (``retry_backoff * 2**(retry - 1)``, at most
    ``max_backoff`` seconds); then the stream ends with a :class:`HttpRetriesExhaustedError`.
    Any other non-2xx answer (``4xx``, an unfollowed redirect) ends it at once with an
    :class:`HttpStatusError`.  Error messages name the page, the method, the status and the
    URL (with userinfo removed and the values of credential-like query parameters replaced by
    ``***``).  Request headers, credentials and the bodies of error answers are never logged
    nor written to Kafka.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Unpack
from urllib.parse import urljoin, urlsplit

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.http.arguments import check_number, check_paging, check_request
from airflow_kafka_events.http.errors import (
    HttpPaginationError,
    HttpRetriesExhaustedError,
    HttpStatusError,
    NextLinkError,
    ResponseFormatError,
)
from airflow_kafka_events.http.json_paths import lookup, parse_path, path_text
from airflow_kafka_events.http.options import GraphPaginationOptions, refuse_unknown_options
from airflow_kafka_events.http.requests import (
    Answer,
    Request,
    is_encoded,
    origin,
    parse_link_header,
    query_items,
    redact_url,
    url_from_endpoint,
)
from airflow_kafka_events.http.session import HttpSession, open_session
from airflow_kafka_events.retry import exponential_backoff, parse_retry_after, retry_call_async
from airflow_kafka_events.streams.index.publisher import StreamIndexWriter
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger

__all__ = [
    "END_CURSOR",
    "GraphPaginationTrigger",
    "HttpPaginationTrigger",
]

#: ``Page.cursor`` of the API's last page: nothing comes after it.  (A ``None`` cursor would
#: make a trigger interrupted right after that page start a new attempt and fetch every page
#: again; with this one it only writes the terminal marker.)
END_CURSOR = ""


def _keyword_only(function: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``function``'s keyword-only parameters, in order."""
    parameters = inspect.signature(function).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


#: The stream options ``StreamingTrigger.__init__`` takes (the rest of an HTTP trigger's ``**kwargs``).
_STREAM_OPTIONS = _keyword_only(StreamingTrigger.__init__)


class _Retry(Exception):
    """A transient failure of one request (``429``/``5xx``, connection error, timeout): try again.

    ``delay``: the answer's ``Retry-After`` (capped), else ``None`` for the backoff.  Never
    leaves :meth:`HttpPaginationTrigger.fetch`: once the retries are spent it becomes the
    cause of an :class:`HttpRetriesExhaustedError`.
    """

    def __init__(self, failure: str, *, status: int | None = None, delay: float | None = None) -> None:
        super().__init__(failure)
        self.failure = failure
        self.status = status
        self.delay = delay

    @classmethod
    def of_client_error(cls, exc: BaseException, session: HttpSession) -> _Retry:
        import aiohttp

        status = None
        if isinstance(exc, aiohttp.ClientResponseError):  # its str() has the full URL
            status = exc.status
            detail = f"{exc.status} {exc.message}".strip()
        elif isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            assert session.client is not None
            detail = str(exc) or f"no answer within {session.client.timeout.total:g}s"
        else:
            detail = str(exc)
        return cls(f"failed: {type(exc).__name__}{f': {detail}' if detail else ''}", status=status)


# ====================================================================== the trigger
class HttpPaginationTrigger(StreamingTrigger):
    """Streams the pages of a paginated JSON API through Kafka (see the module doc).

    :param endpoint: path (or absolute URL) of the first request, joined to the connection's
        base URL like the http provider does.
    :param http_conn_id: Airflow HTTP connection (resolved in ``run()``).
    :param method: HTTP method of the first request (and of token-cursor requests).
    :param params: query parameters of the first request (values: str, number, bool, list).
    :param headers: request headers, over the connection's (keep credentials in the connection).
    :param data: JSON body of the first request (and of token-cursor requests).
    :param cursor_path: where the next link / cursor is in the JSON body.
    :param cursor_param: send the ``cursor_path`` value as this query parameter (token cursors).
    :param next_link_header: follow the ``Link: <...>; rel="next"`` response header.
    :param items_path: the page payload is this part of the body instead of the whole body.
    :param max_pages: most pages of the stream (``None``: until the API's last page).
    :param max_retries: retries of one request after ``429``/``5xx``/connection errors.
    :param retry_backoff: first backoff in seconds; doubled on every further retry.
    :param max_backoff: cap of the backoff in seconds.
    :param max_retry_after: longest ``Retry-After`` honoured, in seconds.
    :param request_timeout: seconds for one request (default: the connection's ``timeout``
        extra, else 60).
    :param allow_foreign_next_links: follow next links to another origin than the connection's
        (the connection's credentials then go there too).

    Stream keyword arguments (``trigger_run_id``, ``topic``, ``kafka_config_id``, ...) as in
    :class:`~airflow_kafka_events.streams.producing.trigger.StreamingTrigger`.
    """

    def __init__(
        self,
        *,
        endpoint: str,
        http_conn_id: str = "http_default",
        method: str = "GET",
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        data: Any = None,
        cursor_path: str | Sequence[str | int] | None = None,
        cursor_param: str | None = None,
        next_link_header: bool = False,
        items_path: str | Sequence[str | int] | None = None,
        max_pages: int | None = None,
        max_retries: int = 5,
        retry_backoff: float = 1.0,
        max_backoff: float = 60.0,
        max_retry_after: float = 300.0,
        request_timeout: float | None = None,
        allow_foreign_next_links: bool = False,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__qualname__
        refuse_unknown_options(owner, kwargs, (*type(self)._own_kwargs, *_STREAM_OPTIONS))
        super().__init__(**kwargs)
        check_request(owner, endpoint, http_conn_id, method, params, headers, data)
        self._cursor_path = parse_path(cursor_path, f"{owner}: cursor_path")
        self._items_path = parse_path(items_path, f"{owner}: items_path")
        check_paging(owner, cursor_path, cursor_param, next_link_header)
        if max_pages is not None:
            check_number(f"{owner}: max_pages", max_pages, low=1, integer=True)
        check_number(f"{owner}: max_retries", max_retries, low=0, integer=True)
        for name, value in (
            ("retry_backoff", retry_backoff),
            ("max_backoff", max_backoff),
            ("max_retry_after", max_retry_after),
        ):
            check_number(f"{owner}: {name}", value, low=0)
        if request_timeout is not None:
            check_number(f"{owner}: request_timeout", request_timeout, low=0, strict=True)
        if not isinstance(allow_foreign_next_links, bool):
            raise ConfigurationError(f"{owner}: allow_foreign_next_links must be a bool")
        self.endpoint = endpoint
        self.http_conn_id = http_conn_id
        self.method = method.upper()
        self.params: dict[str, Any] | None = (
            None
            if params is None
            else {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in params.items()}
        )
        self.headers: dict[str, str] | None = None if headers is None else dict(headers)
        self.data = data
        self.cursor_path: str | list[str | int] | None = (
            cursor_path if cursor_path is None or isinstance(cursor_path, str) else list(cursor_path)
        )
        self.cursor_param = cursor_param
        self.next_link_header = next_link_header
        self.items_path: str | list[str | int] | None = (
            items_path if items_path is None or isinstance(items_path, str) else list(items_path)
        )
        self.max_pages = max_pages
        self.max_retries = max_retries
        self.retry_backoff = float(retry_backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        self.request_timeout = None if request_timeout is None else float(request_timeout)
        self.allow_foreign_next_links = allow_foreign_next_links
        self._first_index = 0

    #: ``__init__`` keyword arguments of this class, in :meth:`trigger_kwargs` order.
    _own_kwargs = _keyword_only(__init__)

    # ------------------------------------------------------------------ serialization
    def trigger_kwargs(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in self._own_kwargs}
        for name in ("params", "headers", "cursor_path", "items_path"):
            value = values.get(name)
            if isinstance(value, dict):
                values[name] = {k: list(v) if isinstance(v, list) else v for k, v in value.items()}
            elif isinstance(value, list):
                values[name] = list(value)
        return values

    # ------------------------------------------------------------------ stream position
    async def _write_pages(self, writer: Any, cursor: str | None, index: StreamIndexWriter) -> Any:
        # The stream's next sequence index: ``pages()`` numbers pages (logs, ``max_pages``)
        # from where a restarted trigger continues.
        self._first_index = int(getattr(writer, "next_seq", 0) or 0)
        return await super()._write_pages(writer, cursor, index)

    # ------------------------------------------------------------------ connection
    async def open_session(self) -> HttpSession:
        """Resolve ``http_conn_id`` with the http provider's ``HttpAsyncHook``; open an aiohttp session."""
        return await open_session(
            self.http_conn_id,
            method=self.method,
            overrides=self.headers,
            request_timeout=self.request_timeout,
            owner=type(self).__qualname__,
        )

    # ------------------------------------------------------------------ requests
    def first_request(self, base_url: str) -> Request:
        query = query_items(self.params or {})
        return Request(self.method, url_from_endpoint(base_url, self.endpoint), query or None, self.data)

    def request_for(self, cursor: str, base_url: str) -> Request:
        """The request of the page after ``cursor`` (a next URL, or a token with ``cursor_param``)."""
        if self.cursor_param is not None:
            request = self.first_request(base_url)
            query = [(k, v) for k, v in (request.query or []) if k != self.cursor_param]
            query.append((self.cursor_param, cursor))
            request.query = query
            return request
        return Request("GET", cursor, None, None, exact=is_encoded(cursor))

    def backoff(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (1-based) without ``Retry-After``."""
        return exponential_backoff(retry, initial=self.retry_backoff, maximum=self.max_backoff)

    async def fetch(self, session: HttpSession, request: Request, index: int) -> Answer:
        """The successful answer to ``request`` (page ``index``), retrying as documented."""

        def exhausted(attempts: int, exc: BaseException) -> BaseException:
            assert isinstance(exc, _Retry)
            return request.failure(
                HttpRetriesExhaustedError,
                f"page {index}: {request.display()} {exc.failure}; gave up after {attempts} attempt(s) "
                f"(max_retries={self.max_retries})",
                status=exc.status,
            )

        def on_retry(failures: int, exc: BaseException, delay: float) -> None:
            assert isinstance(exc, _Retry)
            self.log.warning(
                "page %d: %s %s; retry %d of %d in %.2fs",
                index,
                request.display(),
                exc.failure,
                failures,
                self.max_retries,
                delay,
            )

        return await retry_call_async(
            lambda: self._fetch_once(session, request, index),
            retry_on=lambda exc: isinstance(exc, _Retry),
            attempts=self.max_retries + 1,
            delay=self._retry_delay,
            exhausted=exhausted,
            on_retry=on_retry,
        )

    def _retry_delay(self, failures: int, exc: BaseException) -> float:
        """The answer's ``Retry-After`` (capped at ``max_retry_after``), else :meth:`backoff`."""
        delay = exc.delay if isinstance(exc, _Retry) else None
        return self.backoff(failures) if delay is None else delay

    async def _fetch_once(self, session: HttpSession, request: Request, index: int) -> Answer:
        """One attempt: the answer, :class:`_Retry` (transient), or the error that ends the stream."""
        import aiohttp
        from yarl import URL

        assert session.client is not None
        url = URL(request.url, encoded=True) if request.exact else URL(request.url)
        try:
            async with session.client.request(
                request.method,
                url,
                params=request.query,
                json=request.json_body,
                headers=session.headers,
                **session.options,
            ) as response:
                if 200 <= response.status < 300:
                    return await self._answer(response, request)
                raise self._refusal(response, request, index)
        except aiohttp.InvalidURL:
            raise request.failure(
                HttpPaginationError,
                f"page {index}: {request.display()}: not a valid URL",
            ) from None
        except aiohttp.TooManyRedirects as exc:
            raise request.failure(
                HttpStatusError,
                f"page {index}: {request.display()} was redirected too many times (last status {exc.status})",
                status=exc.status,
            ) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError) as exc:
            raise _Retry.of_client_error(exc, session) from None

    async def _answer(self, response: Any, request: Request) -> Answer:
        body = await response.read()
        links = parse_link_header(response.headers.getall("Link", []))
        final_url = str(response.url)  # after redirects
        return Answer(
            body=self._decode(body, request),
            links={rel: urljoin(final_url, target) for rel, target in links.items()},
            url=final_url,
        )

    def _refusal(self, response: Any, request: Request, index: int) -> Exception:
        """A non-2xx answer: :class:`_Retry` for ``429``/``5xx``, else the :class:`HttpStatusError`."""
        status = response.status
        failure = f"answered {status} {response.reason or ''}".rstrip()
        if status == 429 or status >= 500:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            delay = None if retry_after is None else min(retry_after, self.max_retry_after)
            return _Retry(failure, status=status, delay=delay)
        return request.failure(HttpStatusError, f"page {index}: {request.display()} {failure}", status=status)

    def _decode(self, body: bytes, request: Request) -> Any:
        if not body.strip():
            return None
        try:
            return json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise request.failure(
                ResponseFormatError,
                f"{request.display()} answered a body that is not JSON ({type(exc).__name__})",
            ) from None

    # ------------------------------------------------------------------ page content
    def page_payload(self, body: Any, request: Request) -> Any:
        """The page's payload: ``body``, or its ``items_path`` value."""
        if self._items_path is None:
            return body
        found, value = lookup(body, self._items_path)
        if not found:
            raise request.failure(
                ResponseFormatError,
                f"{request.display()} answered a body without items_path {path_text(self._items_path)!r}",
            )
        return value

    def next_cursor(self, answer: Answer, request: Request, session: HttpSession) -> str | None:
        """Where the page after this answer is (``None``: this was the last page)."""
        if self.next_link_header:
            value: Any = answer.links.get("next")
        elif self._cursor_path is not None:
            _found, value = lookup(answer.body, self._cursor_path)
        else:
            return None
        if value is None or value == "":
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise request.failure(
                ResponseFormatError,
                f"{request.display()}: the cursor at {path_text(self._cursor_path or ())!r} is a "
                f"{type(value).__qualname__}, not a str or number",
            )
        cursor = value if isinstance(value, str) else json.dumps(value)
        if self.cursor_param is None:
            cursor = self._check_next_link(urljoin(answer.url, cursor), request, session)
        for secret in session.secrets():
            if secret in cursor:
                raise request.failure(
                    NextLinkError,
                    f"{request.display()}: the next cursor contains a credential of connection "
                    f"{self.http_conn_id!r}; it is not stored",
                )
        return cursor

    def _check_next_link(self, link: str, request: Request, session: HttpSession) -> str:
        scheme = urlsplit(link).scheme.lower()
        if scheme not in ("http", "https"):
            raise request.failure(
                NextLinkError,
                f"{request.display()}: the next link is not an http(s) URL ({scheme or 'no scheme'})",
            )
        if not self.allow_foreign_next_links and origin(link) != session.origin:
            raise request.failure(
                NextLinkError,
                f"{request.display()}: the next link {redact_url(link)} leaves the origin "
                f"{session.origin[0]}://{session.origin[1]}:{session.origin[2]} of the first request "
                f"(connection {self.http_conn_id!r}); pass allow_foreign_next_links=True to follow it",
            )
        return link

    # ------------------------------------------------------------------ the walk
    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        if cursor == END_CURSOR:
            return  # the last written page was the API's last page
        index = self._first_index if cursor is not None else 0
        if self.max_pages is not None and index >= self.max_pages:
            return
        session = await self.open_session()
        try:
            first = self.first_request(session.base_url)
            session.origin = origin(first.url)
            request = first if cursor is None else self.request_for(cursor, session.base_url)
            seen: set[str] = set() if cursor is None else {cursor}
            self.log.info(
                "connection %s: %s with %s",
                self.http_conn_id,
                "starting" if cursor is None else f"resuming at page {index}",
                request.display(),
            )
            while True:
                answer = await self.fetch(session, request, index)
                payload = self.page_payload(answer.body, request)
                following = self.next_cursor(answer, request, session)
                if following is not None and following in seen:
                    raise request.failure(
                        NextLinkError,
                        f"page {index}: {request.display()} points back to an earlier page; stopping a loop",
                    )
                capped = self.max_pages is not None and index + 1 >= self.max_pages
                self.log.info(
                    "page %d: %s%s",
                    index,
                    request.display(),
                    " (the API's last page)"
                    if following is None
                    else (f" (max_pages={self.max_pages} reached)" if capped else ""),
                )
                yield Page(payload=payload, cursor=END_CURSOR if following is None else following)
                if following is None or capped:
                    return
                seen.add(following)
                request = self.request_for(following, session.base_url)
                index += 1
        finally:
            if session.client is not None:
                await session.client.close()


#: What :class:`GraphPaginationTrigger` fixes (not among its ``__init__`` arguments).
_GRAPH_FIXED = ("cursor_path", "cursor_param", "next_link_header", "items_path")


class GraphPaginationTrigger(HttpPaginationTrigger):
    """:class:`HttpPaginationTrigger` for Microsoft-Graph-style APIs.

    The next page is the absolute ``@odata.nextLink`` of the body (fetched with ``GET``), the
    page payload the body's ``value`` list.  ``http_conn_id`` (default ``msgraph``) is an HTTP
    connection to the Graph root, e.g. host ``https://graph.microsoft.com``; put the
    ``Authorization`` header in its extras.  ``endpoint`` is e.g. ``"v1.0/users"``; OData
    options go to ``params`` (``{"$top": 100, "$select": "id,displayName"}``).  Graph's
    throttling answers (``429`` with ``Retry-After``) are waited out.
    """

    _own_kwargs = tuple(name for name in HttpPaginationTrigger._own_kwargs if name not in _GRAPH_FIXED)

    def __init__(
        self, *, endpoint: str, http_conn_id: str = "msgraph", **kwargs: Unpack[GraphPaginationOptions]
    ) -> None:
        """Every argument of :class:`HttpPaginationTrigger` but the paging ones, which Graph fixes."""
        fixed = sorted(set(kwargs) & set(_GRAPH_FIXED))
        if fixed:
            raise ConfigurationError(
                f"GraphPaginationTrigger fixes {', '.join(fixed)} (the next link is the body's "
                "@odata.nextLink, the items its value list); fix: leave out "
                f"{', '.join(fixed)}, or use HttpPaginationTrigger to choose them"
            )
        super().__init__(
            endpoint=endpoint,
            http_conn_id=http_conn_id,
            cursor_path=["@odata.nextLink"],
            items_path="value",
            **kwargs,
        )
