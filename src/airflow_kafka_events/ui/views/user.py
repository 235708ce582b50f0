"""The signed-in user as the view's React page needs it: their name and whether they may replay."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from airflow_kafka_events.ui.rendering import render_json
from airflow_kafka_events.ui.views.common import PageRequestDep

__all__ = [
    "router",
]

router = APIRouter()


@router.get("/api/user")
def user_page(page: PageRequestDep) -> Response:
    return render_json({"username": page.username, "may_replay": page.may_replay})
