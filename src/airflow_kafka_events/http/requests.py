"""The HTTP walk's requests and answers: URLs (joined, redacted, compared by origin), query items, headers.

RFC 8288 ``Link`` headers are parsed here (``Retry-After`` by
:mod:`airflow_kafka_events.retry`, importable from here too); URLs in logs and errors go
through :func:`redact_url`.  This module imports no Airflow module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from airflow_kafka_events.http.errors import HttpPaginationError

__all__ = [
    "SENSITIVE_NAME",
    "Answer",
    "Request",
    "is_encoded",
    "origin",
    "parse_link_header",
    "query_items",
    "redact_url",
    "url_from_endpoint",
]

E = TypeVar("E", bound=HttpPaginationError)

#: Header and query parameter names whose values are credentials.
SENSITIVE_NAME = re.compile(
    r"key|token|secret|passw|pwd|auth|sig|credential|session|cookie|code", re.IGNORECASE
)


def redact_url(url: str) -> str:
    """``url`` for logs and errors: no userinfo; credential-like query values become ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(name, "***" if SENSITIVE_NAME.search(name) else value) for name, value in pairs], safe="*$/:"
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


_LINK = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,=\"\s]+\s*(?:=\s*(?:\"[^\"]*\"|[^;,]*))?)*)")
_LINK_PARAM = re.compile(r";\s*([^;=,\s]+)\s*(?:=\s*(\"[^\"]*\"|[^;,]*))?")


def parse_link_header(values: str | Iterable[str]) -> dict[str, str]:
    """``{rel: target}`` of RFC 8288 ``Link`` header value(s); the first target of a rel wins.

    ``rel`` values are lower-cased and split on whitespace (``rel="next last"`` names both);
    targets are returned as written (resolve relative ones against the response's URL).
    """
    text = values if isinstance(values, str) else ",".join(values)
    links: dict[str, str] = {}
    for match in _LINK.finditer(text):
        target, params = match.group(1).strip(), match.group(2)
        for name, raw in _LINK_PARAM.findall(params):
            if name.lower() != "rel":
                continue
            rel = raw.strip()
            if len(rel) >= 2 and rel[0] == rel[-1] == '"':
                rel = rel[1:-1]
            for token in rel.lower().split():
                links.setdefault(token, target)
    return links


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def url_from_endpoint(base_url: str, endpoint: str) -> str:
    """The http provider's joining rule: ``base_url`` + ``/`` + ``endpoint`` (absolute endpoints kept)."""
    if urlsplit(endpoint).scheme in ("http", "https"):
        return endpoint
    if base_url and not base_url.endswith("/") and endpoint and not endpoint.startswith("/"):
        return f"{base_url}/{endpoint}"
    return base_url + endpoint


def is_encoded(url: str) -> bool:
    """``url`` has only characters a percent-encoded URL may have (then it is sent as is)."""
    return all(33 <= ord(char) < 127 for char in url)


def query_items(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for name, value in params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if item is None:
                continue
            if isinstance(item, bool):
                items.append((name, "true" if item else "false"))
            else:
                items.append((name, str(item)))
    return items


@dataclass(slots=True)
class Request:
    """One request of the walk: where it goes and what it sends.

    ``exact``: ``url`` is a next link, sent byte for byte (already percent-encoded).
    """

    method: str
    url: str
    query: list[tuple[str, str]] | None
    json_body: Any
    exact: bool = field(default=False, kw_only=True)

    def display(self) -> str:
        url = self.url
        if self.query:
            url = f"{url}{'&' if urlsplit(url).query else '?'}{urlencode(self.query)}"
        return f"{self.method} {redact_url(url)}"

    def failure(self, error: type[E], message: str, *, status: int | None = None) -> E:
        """``error`` of ``message`` naming this request's method and URL (redacted)."""
        return error(message, method=self.method, url=redact_url(self.url), status=status)


class Answer(NamedTuple):
    """A successful answer: decoded JSON body, ``Link`` targets by rel (absolute), final URL."""

    body: Any
    links: dict[str, str]
    url: str
