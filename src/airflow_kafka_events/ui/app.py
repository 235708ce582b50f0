"""The Kafka Events view's FastAPI app, mounted by the plugin on the api-server at :data:`URL_PREFIX`.

Every route of the app depends on :data:`~airflow_kafka_events.ui.security.VIEW` (set on the
app, so a route added later cannot forget it); there is no OpenAPI or docs route.  A page opened
without a valid session answers 401/403 with a short page that links to Airflow's login.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse, Response

from airflow_kafka_events.ui.inspection.index_reader import IndexCache
from airflow_kafka_events.ui.rendering import render_html
from airflow_kafka_events.ui.security import VIEW
from airflow_kafka_events.ui.settings import ViewSettings
from airflow_kafka_events.ui.views import asset_events, bundle, dead_letters, health, streams, user

__all__ = [
    "URL_PREFIX",
    "create_app",
    "get_app",
]

#: Where the app is mounted on the api-server.
URL_PREFIX = "/kafka-events"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    wants_html = "text/html" in request.headers.get("accept", "") and "/api/" not in request.url.path
    if not wants_html or exc.status_code not in (400, 401, 403):
        return await http_exception_handler(request, exc)
    context = {"status": exc.status_code, "detail": exc.detail}
    return render_html(request, "refused.html", context, status=exc.status_code)


#: Headers of every answer of the view:
#:
#: * framed by pages of this site only (Airflow's UI frames it): another page of the same site
#:   (another port, a sibling host) framing the replay confirmation could make the user's click post
#:   it with this site's Origin and a valid token (clickjacking);
#: * ``nosniff``: a JSON answer holding a record's markup is never read as HTML or script;
#: * not stored by caches (pages hold record data and the confirmation a CSRF token), and no
#:   ``Referer`` to other sites (a URL's query names topics and filters).
SECURITY_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'self'",
    "X-Frame-Options": "SAMEORIGIN",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}


async def _security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response


def create_app() -> FastAPI:
    """A new instance of the view's app."""
    app = FastAPI(
        title="Kafka Events",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[VIEW, Depends(freeze_startup_heap)],
    )
    app.state.stream_index = IndexCache()
    app.add_exception_handler(HTTPException, _http_error)
    app.middleware("http")(_security_headers)

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> RedirectResponse:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/streams", status_code=307)

    for module in (streams, asset_events, dead_letters, health, user, bundle):
        app.include_router(module.router)
    return app


_frozen = threading.Event()


async def freeze_startup_heap() -> None:
    """At the first request the view answers: leave every object the api-server has made so far out
    of all later garbage collections (a dependency of the app).

    A started api-server holds ~700,000 objects the collector tracks (Airflow, FastAPI, SQLAlchemy,
    the providers), nearly all alive as long as the process.  CPython's full (oldest generation)
    collection walks every one of them whenever a quarter as many again have survived into that
    generation: 0.4-1.6 s on a busy 2-core machine, added to whichever request pushes it over -- a
    page of the view, which holds its window's records while it works, more often than most.
    Frozen (``gc.freeze``, as Airflow's DAG processor manager and LocalExecutor do before they
    fork), they are never walked again and a full collection takes milliseconds.  Not when the
    plugin's app is built: the api-server builds half of its objects after that.

    Garbage is collected first, so none is frozen with them; what dies later among the frozen
    objects in a reference cycle is not reclaimed (a bounded amount: only what existed at that
    first request).  ``[kafka_events] ui_freeze_heap = false`` leaves the api-server's collector as
    it is (its full collections then land in some requests, the view's and Airflow's own).
    """
    if _frozen.is_set():
        return
    _frozen.set()  # decided once, at the first request: frozen or left alone
    if ViewSettings.from_airflow().freeze_heap:
        gc.collect()
        gc.freeze()


@functools.cache
def get_app() -> FastAPI:
    """The app the plugin mounts (built on first use: importing the plugin builds nothing)."""
    return create_app()
