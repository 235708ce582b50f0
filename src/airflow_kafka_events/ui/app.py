"""The Kafka Events view's FastAPI app, mounted by the plugin on the api-server at :data:`URL_PREFIX`.

It serves the view's JSON API (``/api/...``) and the React page's bundle; the addresses of pages
outside ``/api`` redirect to the React view in Airflow's UI
(:mod:`~airflow_kafka_events.ui.views.redirects`).  Every route of the app depends on
:data:`~airflow_kafka_events.ui.security.VIEW` (set on the app, so a route added later cannot
forget it): without a valid session it answers 401, without the permission 403 (JSON, FastAPI's
``{"detail": ...}``); there is no OpenAPI or docs route.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from airflow_kafka_events.ui.inspection.index_reader import IndexCache
from airflow_kafka_events.ui.security import VIEW
from airflow_kafka_events.ui.settings import ViewSettings
from airflow_kafka_events.ui.views import asset_events, bundle, dead_letters, health, redirects, streams, user

__all__ = [
    "URL_PREFIX",
    "create_app",
    "get_app",
]

#: Where the app is mounted on the api-server.
URL_PREFIX = "/kafka-events"


#: Headers of every answer of the view:
#:
#: * framed by pages of this site only: the app serves no page (Airflow's UI imports the React
#:   bundle into its own), and no answer of it is to be shown in another site's frame;
#: * ``nosniff``: a JSON answer holding a record's markup is never read as HTML or script;
#: * not stored by caches (answers hold record data, the replay confirmation a CSRF token), and no
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
    app.middleware("http")(_security_headers)
    for module in (streams, asset_events, dead_letters, health, user, bundle, redirects):
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
