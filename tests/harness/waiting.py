"""Waiting in a test's event loop for a condition, with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> None:
    """Wait until ``condition()`` is true, looking every ``interval`` seconds; fail naming ``what``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
