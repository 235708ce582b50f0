"""Who may see the Kafka Events view, who may replay a dead letter, and from where.

A FastAPI app mounted by a plugin is *not* protected by Airflow: each route must ask.  These are
Airflow's own dependencies (:mod:`airflow.api_fastapi.core_api.security`), which resolve the user
from the ``Authorization: Bearer`` header or, for a page opened in the browser, the ``_token``
cookie the UI's login sets (path ``/``, so the iframe of an external view sends it too):

* :data:`VIEW` -- every route: an authenticated user allowed to see plugin views
  (``AccessView.PLUGINS``; the simple auth manager's viewer role and up);
* :data:`REPLAY` -- replaying a dead letter writes to an asset's topic: an asset *write*
  (``requires_access_asset("POST")``, the simple auth manager's op and admin roles).  A view check
  would not do: the simple auth manager ignores the method for views.

:func:`can_replay` asks the same question without raising (to show or disable the button).

Cross-site requests: a browser sends the ``_token`` cookie with a request another site's page makes
(a form, a sandboxed iframe or a popup posting to the top window), and Airflow 3.3 has no CSRF
protection to reuse.  :func:`refuse_cross_site` guards every state-changing route of the view: a
request authenticated by the *cookie* must name this site in its ``Origin`` (a missing Origin and
``Origin: null``, which sandboxed frames send, are refused) and carry the CSRF token of its
signed-in user (:func:`csrf_token`: an HMAC with ``[api] secret_key`` over the user and the time it
was issued, valid :data:`CSRF_TTL_SECONDS`), which only a page of this view can read (the
confirmation form holds it); it is also bound to the sign-in (:func:`session_of`), so it dies
with a sign-out.  A request with an ``Authorization: Bearer`` header is authenticated by
that header, never by the cookie (Airflow's ``get_user``), and no other site can make a browser
send one: it needs no token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, AssetDetails
from airflow.api_fastapi.core_api.security import (
    GetUserDep,
    bearer_scheme,
    requires_access_asset,
    requires_access_view,
)
from fastapi import Depends, Form, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "CSRF_FIELD",
    "CSRF_TTL_SECONDS",
    "REPLAY",
    "VIEW",
    "GetUserDep",
    "can_replay",
    "csrf_token",
    "origin_of",
    "own_origins",
    "refuse_cross_site",
    "session_of",
    "user_name",
    "valid_csrf_token",
]

VIEW = Depends(requires_access_view(AccessView.PLUGINS))
REPLAY = Depends(requires_access_asset("POST"))

#: The form field of the CSRF token.
CSRF_FIELD = "csrf_token"
#: How long a CSRF token is good for (a confirmation page left open longer is opened again).
CSRF_TTL_SECONDS = 4 * 3600
#: A token issued this far in the future is still accepted (api-servers' clocks differ a little).
_CLOCK_SKEW_SECONDS = 60
_CSRF_PURPOSE = "airflow-kafka-events csrf v2"


def can_replay(user: Any) -> bool:
    """Whether ``user`` passes :data:`REPLAY` (an asset write)."""
    from airflow.api_fastapi.app import get_auth_manager

    return bool(get_auth_manager().is_authorized_asset(method="POST", details=AssetDetails(), user=user))


def user_name(user: Any) -> str:
    getter = getattr(user, "get_name", None)
    return str(getter() if callable(getter) else getattr(user, "username", "?"))


def _user_id(user: Any) -> tuple[str, str]:
    getter = getattr(user, "get_id", None)
    return str(getter() if callable(getter) else "?"), user_name(user)


def session_of(request: Request) -> str:
    """The id (``jti``) of the sign-in that authenticates ``request`` ("" without one): its
    ``Authorization: Bearer`` token, else the browser's ``_token`` cookie (Airflow's ``get_user``
    takes them in that order).

    Read without checking the signature: it only selects which CSRF tokens are valid, and the
    request it is read from is authenticated by that same token.  Signing out revokes it and
    signing in again makes another, so a CSRF token dies with its sign-in.
    """
    import jwt
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    token = credentials.strip() if scheme.lower() == "bearer" else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        return ""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return ""
    return str(claims.get("jti") or "") if isinstance(claims, dict) else ""


#: ``<issued unix time>.<HMAC-SHA256 hex>``, ASCII only
_TOKEN_FORM = re.compile(r"[0-9]{1,12}\.[0-9a-f]{64}")


def _secret_key() -> bytes:
    from airflow.configuration import conf

    key = conf.get("api", "secret_key", fallback="")
    if not key:
        raise ConfigurationError(
            "the Kafka Events view signs its CSRF tokens with [api] secret_key, which is empty; set it "
            "(the same value on every api-server)"
        )
    return str(key).encode("utf-8")


def _mac(user: Any, session: str, issued: int) -> str:
    # a JSON array: no user id, name or session can be made to read as another's
    message = json.dumps([_CSRF_PURPOSE, *_user_id(user), session, issued]).encode("utf-8")
    return hmac.new(_secret_key(), message, hashlib.sha256).hexdigest()


def csrf_token(user: Any, session: str, now: float | None = None) -> str:
    """A CSRF token of ``user`` in the sign-in ``session`` (:func:`session_of`):
    ``<issued unix time>.<HMAC-SHA256 hex>``."""
    issued = int(time.time() if now is None else now)
    return f"{issued}.{_mac(user, session, issued)}"


def valid_csrf_token(token: str, user: Any, session: str, now: float | None = None) -> bool:
    """Whether ``token`` was issued to ``user`` in the sign-in ``session`` by an api-server with this
    secret key, and is fresh."""
    if not _TOKEN_FORM.fullmatch(token):
        return False  # not a token this module issued (and nothing int() or compare_digest may choke on)
    issued_text, _, mac = token.partition(".")
    issued, current = int(issued_text), time.time() if now is None else now
    if not current - CSRF_TTL_SECONDS <= issued <= current + _CLOCK_SKEW_SECONDS:
        return False
    return hmac.compare_digest(mac, _mac(user, session, issued))


#: The port a scheme means when an origin names none.
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str, *, bare: bool = False) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of a URL, the port made explicit; ``None`` for anything that is not an
    http(s) URL (``null``, another scheme, userinfo, a bad port).  ``bare``: an ``Origin`` header's
    value, which is ``scheme://host[:port]`` and nothing else (a path, query or fragment: ``None``)."""
    try:
        parts = urlsplit(url if bare else url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return None
    if bare and (parts.path or parts.query or parts.fragment or url != url.strip()):
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def own_origins(request_url: str, base_url: str | None) -> set[tuple[str, str, int]]:
    """The origins of this api-server: its ``[api] base_url``'s when set (what browsers are told to
    open), and the request's own (its scheme and ``Host``)."""
    origins = {origin_of(url) for url in (request_url, base_url or "") if url}
    return {origin for origin in origins if origin is not None}


def _origin_refusal(origin: str | None, request: Request) -> str | None:
    """Why a cookie-authenticated request with this ``Origin`` is refused, or ``None``: same origin."""
    from airflow.configuration import conf

    if not origin or origin == "null":
        return (
            "a request signed in by the browser's cookie must come from a page of this site (its Origin "
            f"header is {'missing' if not origin else 'null'}: another site, or a sandboxed frame, sent it)"
        )
    ours = own_origins(str(request.url), conf.get("api", "base_url", fallback="") or "")
    if origin_of(origin, bare=True) not in ours:
        return (
            f"cross-origin request refused: Origin {origin!r} is not this api-server's "
            f"({', '.join(sorted(f'{s}://{h}:{p}' for s, h, p in ours))}; scheme, host and port must match, "
            "fix: open Airflow at its [api] base_url)"
        )
    return None


def _refused(why: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, f"{why}; nothing was done")


def refuse_cross_site(
    request: Request,
    user: GetUserDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    csrf_token: Annotated[str | None, Form(description="the CSRF token of the confirmation form")] = None,
) -> None:
    """Refuse a state-changing request another site may have made (see the module doc): 403."""
    if bearer is not None and bearer.scheme.lower() == "bearer":
        return  # authenticated by the header (Airflow's get_user), which no other site can set
    why = _origin_refusal(request.headers.get("origin"), request)
    if why is not None:
        raise _refused(why)
    if not csrf_token or not valid_csrf_token(csrf_token, user, session_of(request)):
        raise _refused(
            "the CSRF token is missing, expired or not this user's sign-in: open the confirmation page "
            "again and confirm there"
        )
