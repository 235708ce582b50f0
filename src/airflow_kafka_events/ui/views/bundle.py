"""The view's React page: the JavaScript module Airflow's UI imports (``react_apps`` ``bundle_url``).

Built from ``ui/src`` by ``ui/build.mjs`` into ``plugin/static/kafka-events.js`` (committed, so
the wheel ships it; a test checks it matches a fresh build).  Served like every route of the view:
to a signed-in user only (the browser's import of a same-origin module sends the session cookie).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

__all__ = ["BUNDLE", "BUNDLE_PATH", "router"]

BUNDLE = Path(__file__).resolve().parent.parent / "static" / "kafka-events.js"
#: Where the app serves it (under the app's mount point).
BUNDLE_PATH = "/static/kafka-events.js"

router = APIRouter()


@router.get(BUNDLE_PATH)
def bundle() -> FileResponse:
    # revalidated on each load (ETag / Last-Modified): a new version of the package is picked up
    return FileResponse(BUNDLE, media_type="text/javascript", headers={"Cache-Control": "no-cache"})
