"""A trigger that reports the garbage collector's state of the process it runs in (a triggerer's
runner), for the e2e test of the runner's heap freeze."""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class HeapProbeTrigger(BaseTrigger):
    """Fires at once with ``{"frozen": gc.get_freeze_count(), "pid": os.getpid()}``."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield TriggerEvent({"frozen": gc.get_freeze_count(), "pid": os.getpid()})
