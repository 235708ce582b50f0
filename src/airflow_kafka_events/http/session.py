"""An HTTP connection as the http provider's ``HttpAsyncHook`` resolves it, and an aiohttp session using it.

``host`` (with or without scheme), ``schema``, ``port``, ``login``/``password`` (basic auth, sent
as an ``Authorization`` header), extra fields as request headers; the extras ``timeout``,
``proxy``/``proxies``, ``verify``/``verify_ssl``, ``allow_redirects``, ``max_redirects`` and
``trust_env`` are honoured.  Resolved in the trigger's ``run()``, never at import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.http.requests import SENSITIVE_NAME, origin

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "DEFAULT_TIMEOUT",
    "HttpSession",
    "open_session",
]

DEFAULT_TIMEOUT = 60.0


class HttpSession:
    """The connection as the http provider resolves it, and an aiohttp session using it."""

    def __init__(self, base_url: str, headers: dict[str, str], auth: Any, options: dict[str, Any]) -> None:
        self.base_url = base_url
        self.headers = headers
        self.auth = auth
        self.options = options
        self.client: aiohttp.ClientSession | None = None
        self.origin: tuple[str, str, int | None] = origin(base_url)

    def secrets(self) -> list[str]:
        """Credential values of the connection (must never end up in a stored cursor)."""
        found: list[str] = []
        password = getattr(self.auth, "password", None)
        if isinstance(password, str) and len(password) >= 4:
            found.append(password)
        for name, value in self.headers.items():
            if SENSITIVE_NAME.search(name) and isinstance(value, str) and len(value) >= 4:
                found.append(value)
                found.extend(part for part in value.split() if len(part) >= 8)  # "Bearer <token>"
        return found


def _is_true(value: Any, *, default: str) -> bool:
    return str(value if value is not None else default).strip().lower() not in ("false", "0", "no")


def _request_headers(config: Any, overrides: Mapping[str, str] | None) -> dict[str, str]:
    import aiohttp

    headers = {str(k): str(v) for k, v in (config.headers or {}).items()}
    for name, value in (overrides or {}).items():  # the trigger's headers win, any case
        for existing in [k for k in headers if k.lower() == name.lower()]:
            del headers[existing]
        headers[name] = value
    auth = config.auth
    if auth is not None and not any(k.lower() == "authorization" for k in headers):
        # login/password as a header (aiohttp deprecates ``auth=``); an explicit
        # Authorization header of the connection or the trigger wins
        encode = getattr(aiohttp, "encode_basic_auth", None)
        headers["Authorization"] = (
            encode(auth.login, auth.password, auth.encoding) if encode is not None else auth.encode()
        )
    if not any(k.lower() == "accept" for k in headers):
        headers["Accept"] = "application/json"
    return headers


def _request_options(extra: Mapping[str, Any]) -> dict[str, Any]:
    """aiohttp request options from the connection's extras (proxy, TLS check, redirects)."""
    options: dict[str, Any] = {}
    proxy = extra.get("proxy")
    if isinstance(proxy, Mapping):  # requests-style {"https": "..."}
        proxy = proxy.get("https") or proxy.get("http")
    if isinstance(proxy, str) and proxy:
        options["proxy"] = proxy
    if extra.get("verify_ssl") is not None and not _is_true(extra["verify_ssl"], default="true"):
        options["ssl"] = False
    if "allow_redirects" in extra:
        options["allow_redirects"] = _is_true(extra["allow_redirects"], default="true")
    if "max_redirects" in extra:
        try:
            options["max_redirects"] = int(extra["max_redirects"])
        except (TypeError, ValueError):
            pass
    return options


def _total_timeout(request_timeout: float | None, extra: Mapping[str, Any]) -> float:
    if request_timeout is not None:
        return request_timeout
    try:
        timeout = float(extra["timeout"]) if extra.get("timeout") is not None else None
    except (TypeError, ValueError):
        timeout = None
    return timeout if timeout is not None and timeout > 0 else DEFAULT_TIMEOUT


async def open_session(
    http_conn_id: str,
    *,
    method: str,
    overrides: Mapping[str, str] | None,
    request_timeout: float | None,
    owner: str,
) -> HttpSession:
    """Resolve ``http_conn_id``; ``overrides`` (the trigger's headers) win over the connection's, any case."""
    import aiohttp
    from airflow.providers.http.hooks.http import HttpAsyncHook

    hook = HttpAsyncHook(method=method, http_conn_id=http_conn_id)
    config = await hook.config()
    if getattr(hook, "_srv_lookup_enabled", False):
        raise ConfigurationError(f"connection {http_conn_id!r}: srv_lookup is not supported by {owner}")
    extra = dict(config.extra_options or {})
    trust_env = str(extra.get("trust_env", "false")).strip().lower() in ("true", "1", "yes")
    session = HttpSession(
        config.base_url, _request_headers(config, overrides), config.auth, _request_options(extra)
    )
    session.client = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=_total_timeout(request_timeout, extra)),
        trust_env=trust_env,
        raise_for_status=False,
    )
    return session
