"""Idempotency keys of asset events, and a bounded memory of keys already seen.

Default key (recipe ``v1``): the lower-case hex SHA-256 of the UTF-8 canonical JSON
(sorted keys, no whitespace, non-ASCII kept, no NaN) of::

    ["airflow-kafka-events/asset-event/v1",
     <asset uri>,
     <partition_key or null>,
     <partition_date as UTC ISO-8601 with microseconds, e.g. "2026-01-02T03:04:05.000000+00:00", or null>,
     <extra as published, i.e. after redaction>,
     {"kind": <source kind>, "dag_id": ..., "run_id": ..., "task_id": ..., "map_index": ...}]

``try_number`` is left out on purpose, so a retried task that re-emits the same event gets the
same key; so is the ``producer`` name.  An external producer has no dag/run/task identity: its
key depends on the content only, so two identical events from one (or two) external producers
share a key — a producer that means two identical events must pass distinct keys.  Anything
that varies between attempts (a timestamp in ``extra``) changes the key.

Dropping repeats is the consumers' job; :class:`SeenKeys` is a small helper for them.

This module imports no Airflow module.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_events.envelopes.model import EventSource, SourceKind

__all__ = [
    "IDEMPOTENCY_RECIPE",
    "SeenKeys",
    "canonical_json",
    "default_idempotency_key",
    "source_identity",
]

#: First element of the hashed array; names the recipe so that a later one cannot collide.
IDEMPOTENCY_RECIPE = "airflow-kafka-events/asset-event/v1"


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact separators, UTF-8 characters kept, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _utc_text(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def source_identity(source: EventSource | None) -> dict[str, Any]:
    """The part of a source that identifies the producer across retries (no try_number, no producer)."""
    if source is None:
        source = EventSource(SourceKind.EXTERNAL)
    return {
        "kind": source.kind.value,
        "dag_id": source.dag_id,
        "run_id": source.run_id,
        "task_id": source.task_id,
        "map_index": source.map_index,
    }


def default_idempotency_key(
    *,
    asset_uri: str,
    partition_key: str | None,
    partition_date: datetime | None,
    extra: Mapping[str, Any],
    source: EventSource | None,
) -> str:
    """The recipe-v1 key (64 hex characters) described in this module's docstring."""
    material = [
        IDEMPOTENCY_RECIPE,
        asset_uri,
        partition_key,
        _utc_text(partition_date),
        dict(extra),
        source_identity(source),
    ]
    return hashlib.sha256(canonical_json(material).encode("utf-8")).hexdigest()


class SeenKeys:
    """A thread-safe, bounded memory of idempotency keys: LRU eviction plus a time to live.

    ``add(key)`` returns ``True`` the first time a key is seen (within ``ttl`` seconds of its
    first sighting) and ``False`` for a repeat.  A repeat refreshes the key's LRU position but
    not its expiry: the deduplication window runs from the first sighting.  At most
    ``max_size`` keys are kept; the least recently seen go first.  ``ttl=None`` keeps keys until
    evicted.  The memory is per process: a consumer that restarts forgets (pair it with
    committed offsets or a durable store when repeats across restarts matter).
    """

    def __init__(
        self,
        max_size: int = 100_000,
        ttl: float | None = 24 * 3600.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size <= 0:
            raise ValueError(f"max_size must be a positive int, got {max_size!r}")
        if ttl is not None and not ttl > 0:
            raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        self.max_size = max_size
        self.ttl = ttl
        self._clock = clock
        # key -> expiry in LRU order (a repeat moves it to the end) ...
        self._lru: OrderedDict[str, float] = OrderedDict()
        # ... and in first-sighting order, which with one ttl is expiry order (never reordered)
        self._by_expiry: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def _purge(self, now: float) -> None:
        while self._by_expiry:
            key, expiry = next(iter(self._by_expiry.items()))
            if expiry > now:
                return
            del self._by_expiry[key]
            del self._lru[key]

    def add(self, key: str) -> bool:
        """Record ``key``; ``True`` if it is new, ``False`` if it was seen within the window."""
        with self._lock:
            now = self._clock()
            self._purge(now)
            if key in self._lru:
                self._lru.move_to_end(key)
                return False
            expiry = now + self.ttl if self.ttl is not None else float("inf")
            self._lru[key] = expiry
            self._by_expiry[key] = expiry
            while len(self._lru) > self.max_size:
                oldest, _ = self._lru.popitem(last=False)
                del self._by_expiry[oldest]
            return True

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` was seen within the window (does not record it)."""
        with self._lock:
            self._purge(self._clock())
            return key in self._lru

    def discard(self, key: str) -> None:
        """Forget ``key`` (e.g. when handling its event failed and a repeat must be processed)."""
        with self._lock:
            self._lru.pop(key, None)
            self._by_expiry.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self._by_expiry.clear()

    def __len__(self) -> int:
        """Keys remembered and not expired."""
        with self._lock:
            self._purge(self._clock())
            return len(self._lru)
