"""A demo streaming trigger: numbered pages, optionally paced, optionally gated by a file.

:class:`CountingPagesTrigger` needs no external system, so it is handy for trying the
streaming operators out, for examples and for end-to-end tests: a triggerer imports
triggers by classpath from installed packages (it does not put the DAGs folder on
``sys.path``), and this one ships with the package.

Page ``i`` (0-based) has the payload ``{"page": i, "pages": pages, **extra}`` and the
cursor ``str(i + 1)``, so a restarted trigger continues after the last page in Kafka.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_events.errors import AirflowKafkaEventsError, ConfigurationError
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger

__all__ = [
    "CountingPagesTrigger",
    "GateTimeoutError",
    "OnePageTrigger",
]


class CountingPagesTrigger(StreamingTrigger):
    """Streams ``pages`` numbered pages, ``delay`` seconds apart.

    :param pages: number of data pages (``0``: an empty stream).
    :param delay: seconds to sleep before each page.
    :param extra: JSON object merged into every page payload.
    :param gate_path: when set, page ``gate_page`` is not fetched before a file exists at
        this path; after ``gate_timeout`` seconds the stream ends with
        :class:`GateTimeoutError` (so the task fails).  Lets a test make a consumer act
        before the producer finishes without relying on timing.
    :param gate_page: the page that waits for ``gate_path``.
    :param gate_timeout: seconds to wait for ``gate_path``.

    Stream keyword arguments as in :class:`StreamingTrigger`.
    """

    def __init__(
        self,
        *,
        pages: int,
        delay: float = 0.0,
        extra: Mapping[str, Any] | None = None,
        gate_path: str | None = None,
        gate_page: int = 0,
        gate_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 0:
            raise ConfigurationError(f"pages must be an int >= 0, got {pages!r}")
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or delay < 0:
            raise ConfigurationError(f"delay must be >= 0 seconds, got {delay!r}")
        if extra is not None and not isinstance(extra, Mapping):
            raise ConfigurationError(f"extra must be a dict or None, got {type(extra).__qualname__}")
        if gate_path is not None and (not isinstance(gate_path, str) or not gate_path):
            raise ConfigurationError(f"gate_path must be a non-empty str or None, got {gate_path!r}")
        if isinstance(gate_page, bool) or not isinstance(gate_page, int) or gate_page < 0:
            raise ConfigurationError(f"gate_page must be an int >= 0, got {gate_page!r}")
        if not isinstance(gate_timeout, (int, float)) or isinstance(gate_timeout, bool) or gate_timeout <= 0:
            raise ConfigurationError(f"gate_timeout must be > 0 seconds, got {gate_timeout!r}")
        self.pages_total = pages
        self.delay = float(delay)
        self.extra: dict[str, Any] = dict(extra or {})
        self.gate_path = gate_path
        self.gate_page = gate_page
        self.gate_timeout = float(gate_timeout)

    def trigger_kwargs(self) -> dict[str, Any]:
        return {
            "pages": self.pages_total,
            "delay": self.delay,
            "extra": dict(self.extra),
            "gate_path": self.gate_path,
            "gate_page": self.gate_page,
            "gate_timeout": self.gate_timeout,
        }

    async def _wait_for_gate(self) -> None:
        assert self.gate_path is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gate_timeout
        self.log.info("page %d waits for %s (at most %gs)", self.gate_page, self.gate_path, self.gate_timeout)
        while not os.path.exists(self.gate_path):
            if loop.time() >= deadline:
                raise GateTimeoutError(
                    f"{self.gate_path} did not appear within {self.gate_timeout:g}s "
                    f"(page {self.gate_page} waits for it)"
                )
            await asyncio.sleep(0.1)

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        start = int(cursor) if cursor else 0
        for index in range(start, self.pages_total):
            if self.gate_path is not None and index == self.gate_page:
                await self._wait_for_gate()
            if self.delay:
                await asyncio.sleep(self.delay)
            yield Page(
                payload={**self.extra, "page": index, "pages": self.pages_total}, cursor=str(index + 1)
            )


class OnePageTrigger(BaseTrigger):
    """A classic (non-streaming) trigger: fetches ONE page and resumes its task with it.

    The baseline of the paginated-deferral benchmark: an operator defers to it once per page
    (the pattern :class:`CountingPagesTrigger` replaces).  After sleeping ``delay`` seconds it
    yields ``TriggerEvent({"page": page, "next": page + 1})``, with ``"next": None`` for the
    last of ``pages`` pages.

    :param page: the page to fetch (0-based).
    :param pages: number of pages of the source.
    :param delay: seconds to sleep before the page is "fetched".
    """

    def __init__(self, *, page: int, pages: int, delay: float = 0.0) -> None:
        super().__init__()
        for name, value in (("page", page), ("pages", pages)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name} must be an int >= 0, got {value!r}")
        if page >= pages:
            raise ConfigurationError(f"page must be < pages, got page={page!r}, pages={pages!r}")
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or delay < 0:
            raise ConfigurationError(f"delay must be >= 0 seconds, got {delay!r}")
        self.page = page
        self.pages = pages
        self.delay = float(delay)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"page": self.page, "pages": self.pages, "delay": self.delay},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.delay:
            await asyncio.sleep(self.delay)
        following = self.page + 1
        yield TriggerEvent({"page": self.page, "next": following if following < self.pages else None})


class GateTimeoutError(AirflowKafkaEventsError, TimeoutError):
    """The gate file of a demo trigger did not appear in time (also a :class:`TimeoutError`).

    See :class:`~airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger`.
    """
