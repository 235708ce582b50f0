"""Why a paginated HTTP stream ended in failure.

All derive from :class:`~airflow_kafka_events.errors.AirflowKafkaEventsError`.  A stream that
ends in failure records its error's qualified type name (``StreamError.type``), e.g.
``airflow_kafka_events.http.errors.HttpStatusError``.  This module imports no Airflow module.
"""

from __future__ import annotations

from airflow_kafka_events.errors import AirflowKafkaEventsError

__all__ = [
    "HttpPaginationError",
    "HttpRetriesExhaustedError",
    "HttpStatusError",
    "NextLinkError",
    "ResponseFormatError",
]


class HttpPaginationError(AirflowKafkaEventsError):
    """Why a paginated HTTP stream ended in failure.

    ``method``, ``url`` (redacted, see :func:`redact_url`) and ``status`` (``None`` for
    connection errors and timeouts) describe the request that failed.
    """

    def __init__(self, message: str, *, method: str, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.method = method
        self.url = url
        self.status = status


class HttpStatusError(HttpPaginationError):
    """The API answered a status that is not retried (``4xx`` other than ``429``, ``3xx``)."""


class HttpRetriesExhaustedError(HttpPaginationError):
    """``429``/``5xx`` answers or connection errors persisted through ``max_retries`` retries."""


class ResponseFormatError(HttpPaginationError):
    """A successful answer that cannot be a page: not JSON, no ``items_path``, a bad cursor."""


class NextLinkError(HttpPaginationError):
    """A next link that is not followed: another origin, not http(s), a loop, a credential in it."""
