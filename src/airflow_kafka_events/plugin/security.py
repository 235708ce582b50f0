"""Who may see the Kafka Events view, and who may replay a dead letter.

A FastAPI app mounted by a plugin is *not* protected by Airflow: each route must ask.  These are
Airflow's own dependencies (:mod:`airflow.api_fastapi.core_api.security`), which resolve the user
from the ``Authorization: Bearer`` header or, for a page opened in the browser, the ``_token``
cookie the UI's login sets (path ``/``, so the iframe of an external view sends it too):

* :data:`VIEW` -- every route: an authenticated user allowed to see plugin views
  (``AccessView.PLUGINS``; the simple auth manager's viewer role and up);
* :data:`REPLAY` -- replaying a dead letter writes to an asset's topic: an asset *write*
  (``requires_access_asset("POST")``, the simple auth manager's op and admin roles).  A view check
  would not do: the simple auth manager ignores the method for views.

:func:`can_replay` asks the same question without raising (to show or disable the button), and
:func:`same_origin` refuses a state-changing request sent from another site.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, AssetDetails
from airflow.api_fastapi.core_api.security import (
    GetUserDep,
    requires_access_asset,
    requires_access_view,
)
from fastapi import Depends, HTTPException, Request, status

__all__ = ["REPLAY", "VIEW", "GetUserDep", "can_replay", "same_origin", "user_name"]

VIEW = Depends(requires_access_view(AccessView.PLUGINS))
REPLAY = Depends(requires_access_asset("POST"))


def can_replay(user: Any) -> bool:
    """Whether ``user`` passes :data:`REPLAY` (an asset write)."""
    from airflow.api_fastapi.app import get_auth_manager

    return bool(get_auth_manager().is_authorized_asset(method="POST", details=AssetDetails(), user=user))


def user_name(user: Any) -> str:
    getter = getattr(user, "get_name", None)
    return str(getter() if callable(getter) else getattr(user, "username", "?"))


def same_origin(request: Request) -> None:
    """Refuse a POST whose ``Origin`` (or ``Referer``) names another host than the request's."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or origin == "null":
        return  # a sandboxed iframe may send "null"; the SameSite=Lax cookie still stops other sites
    if urlsplit(origin).netloc != request.url.netloc:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-origin request refused")
