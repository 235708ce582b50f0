"""What every answer of the view's JSON API needs: the settings, the user, the Kafka config, the
window, errors as answers.

:class:`PageRequest` is built per request (a FastAPI dependency): the view's settings read from
``[kafka_events]``, the signed-in user and whether they may replay, the window asked for
(``?minutes=`` / ``?max_records=``, capped), and -- on first use -- the librdkafka config of the
view's connection together with the secrets to mask in the answer.  :meth:`PageRequest.answer` writes
a page's data as JSON.  An error of this package (a missing topic, brokers that do not answer, a
record not found) becomes an answer that names it (``error``, ``message``) with its status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, cast

from fastapi import Depends, Query, Request
from fastapi.responses import Response

from airflow_kafka_events.errors import AirflowKafkaEventsError, ConfigurationError, ValidationError
from airflow_kafka_events.ui.inspection.errors import RecordNotFoundError, StreamNotFoundError
from airflow_kafka_events.ui.inspection.index_reader import IndexCache
from airflow_kafka_events.ui.inspection.redact import redact_text
from airflow_kafka_events.ui.inspection.window import ScanWindow
from airflow_kafka_events.ui.kafka_access import client_config
from airflow_kafka_events.ui.rendering import render_json, secrets_of
from airflow_kafka_events.ui.security import GetUserDep, can_replay, user_name
from airflow_kafka_events.ui.settings import MAX_RECORDS_CAP, MAX_WINDOW_MINUTES, ViewSettings, WindowRequest

__all__ = [
    "LIST_PREVIEW",
    "PageRequest",
    "PageRequestDep",
    "error_status",
]

#: Rows a listing shows unless ``?limit=`` asks for another number (at most :data:`MAX_LIMIT`).
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: Characters of a preview in a listing (a record's own page shows the full bounded preview).
LIST_PREVIEW = 300


def error_status(exc: BaseException) -> int:
    if isinstance(exc, (RecordNotFoundError, StreamNotFoundError)):
        return 404
    if isinstance(exc, ValidationError):
        return 400
    if isinstance(exc, ConfigurationError):
        return 503  # the view is not set up (e.g. its connection is missing)
    return 502  # Kafka did not answer as needed


@dataclass
class PageRequest:
    request: Request
    settings: ViewSettings
    user: Any
    window_request: WindowRequest
    limit: int = DEFAULT_LIMIT
    _config: dict[str, Any] | None = field(default=None, repr=False)
    _secrets: list[str] = field(default_factory=list, repr=False)

    @property
    def username(self) -> str:
        return user_name(self.user)

    @property
    def may_replay(self) -> bool:
        return can_replay(self.user)

    def window(self) -> ScanWindow:
        return ScanWindow(since=self.window_request.since, max_records=self.window_request.max_records)

    def config(self) -> dict[str, Any]:
        """The view's librdkafka config (read from its Airflow connection on first use)."""
        if self._config is None:
            from airflow.exceptions import AirflowNotFoundException

            try:
                self._config, extra = client_config(self.settings.kafka_config_id)
            except AirflowNotFoundException as exc:
                raise ConfigurationError(
                    f"the Kafka Events view reads Kafka through the Airflow connection "
                    f"{self.settings.kafka_config_id!r}, which does not exist ({exc}); create it or set "
                    "[kafka_events] ui_kafka_config_id"
                ) from exc
            self._secrets = secrets_of(self._config, extra)
        return self._config

    def stream_index(self) -> IndexCache:
        """The app's stream index cache (one per app: a page reads only the index records new since)."""
        return cast(IndexCache, self.request.app.state.stream_index)  # set by create_app

    def answer(self, payload: Any) -> Response:
        """``payload`` as JSON, the secrets of the view's connection masked."""
        return render_json(payload, secrets=self._secrets)

    def failed(self, exc: AirflowKafkaEventsError) -> Response:
        """The answer for an error of this package: its type and message, which name the fix."""
        message = redact_text(str(exc))
        return render_json(
            {"error": type(exc).__name__, "message": message}, secrets=self._secrets, status=error_status(exc)
        )


def _page(
    request: Request,
    user: GetUserDep,
    minutes: Annotated[
        int | None, Query(ge=1, le=MAX_WINDOW_MINUTES, description="how far back to scan")
    ] = None,
    max_records: Annotated[
        int | None, Query(ge=1, le=MAX_RECORDS_CAP, description="records per partition, at most")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="rows a listing shows")] = DEFAULT_LIMIT,
) -> PageRequest:
    settings = ViewSettings.from_airflow()
    return PageRequest(
        request=request,
        settings=settings,
        user=user,
        window_request=settings.window.narrowed(minutes, max_records),
        limit=limit,
    )


PageRequestDep = Annotated[PageRequest, Depends(_page)]
