"""The addresses of the view's pages outside ``/api`` (bookmarks, links pasted in tickets) lead to
the same page of the React view in Airflow's UI: ``/kafka-events/streams/<id>?offset=3`` answers
307 to ``/plugin/kafka-events/streams/<id>?offset=3``.

The app serves no HTML page: these routes only redirect, to GET, and need a viewer like every
route of the app (the app's dependency).  The target is built here, never taken from the request:
Airflow's own root path (``[api] base_url``'s path), the view's route, the page's fixed path and
its numbers or stream id (quoted: one path segment, no ``/``, ``\\`` or scheme can come out of it),
then the request's query string unchanged after ``?`` -- it cannot name another host
(no open redirect).  A replay confirmation's address leads to its dead letter's page, where the
Replay button opens the confirmation; a POST to it is answered 405 (Method Not Allowed) and
replays nothing.  Any other address is 404.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

__all__ = ["VIEW_ROUTE", "router", "view_url"]

#: The React view's page in Airflow's UI (``plugin/`` + the nav entry's ``url_route``).
VIEW_ROUTE = "plugin/kafka-events"

router = APIRouter()


def view_url(request: Request, page: str) -> str:
    """The address of ``page`` of the React view in Airflow's UI, with ``request``'s query."""
    from airflow.api_fastapi.app import API_ROOT_PATH

    query = request.url.query
    return f"{API_ROOT_PATH.rstrip('/')}/{VIEW_ROUTE}/{page}" + (f"?{query}" if query else "")


def _to(request: Request, page: str) -> RedirectResponse:
    return RedirectResponse(view_url(request, page), status_code=307)


@router.get("/", include_in_schema=False)
def index(request: Request) -> RedirectResponse:
    return _to(request, "streams")


@router.get("/streams", include_in_schema=False)
@router.get("/asset-events", include_in_schema=False)
@router.get("/dead-letters", include_in_schema=False)
@router.get("/health", include_in_schema=False)
def listing(request: Request) -> RedirectResponse:
    return _to(request, request.scope["route"].path.lstrip("/"))  # the route's own path


@router.get("/streams/{trigger_run_id:path}", include_in_schema=False)
def stream(request: Request, trigger_run_id: str) -> RedirectResponse:
    return _to(request, f"streams/{quote(trigger_run_id, safe='')}")


@router.get("/dead-letters/{partition}/{offset}", include_in_schema=False)
@router.get("/dead-letters/{partition}/{offset}/replay", include_in_schema=False)
def dead_letter(request: Request, partition: int, offset: int) -> RedirectResponse:
    return _to(request, f"dead-letters/{partition}/{offset}")
