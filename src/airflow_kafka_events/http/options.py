"""The keyword options of the HTTP paginators: their names for type checkers, and a misspelt one refused.

:class:`GraphPaginationOptions` is what ``GraphPaginationTrigger(**options)`` takes besides
``endpoint`` and ``http_conn_id``: every option of ``HttpPaginationTrigger`` but the paging ones
Graph fixes, and the stream options of ``StreamingTrigger``.  :func:`refuse_unknown_options`
turns an option neither trigger knows (``max_page=3``) into a ``ConfigurationError`` naming the
closest known one, instead of Airflow's ``BaseTrigger`` taking it silently.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, TypedDict

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "GraphPaginationOptions",
    "refuse_unknown_options",
]


class GraphPaginationOptions(TypedDict, total=False):
    """The options of ``GraphPaginationTrigger`` after ``endpoint`` and ``http_conn_id``."""

    method: str
    params: Mapping[str, Any] | None
    headers: Mapping[str, str] | None
    data: Any
    max_pages: int | None
    max_retries: int
    retry_backoff: float
    max_backoff: float
    max_retry_after: float
    request_timeout: float | None
    allow_foreign_next_links: bool
    # StreamingTrigger's
    trigger_run_id: str | None
    topic: str
    kafka_config_id: str
    finish_task: bool
    generation: int | None
    not_before: str | datetime | None
    producer_identity: Mapping[str, Any] | None


def refuse_unknown_options(owner: str, given: Collection[str], known: Collection[str]) -> None:
    """``ConfigurationError`` if ``given`` holds a name not in ``known``, naming the closest known one."""
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    raise ConfigurationError(
        f"{owner} has no option {', '.join(hints)}; fix: use one of its options: {', '.join(sorted(known))}"
    )
