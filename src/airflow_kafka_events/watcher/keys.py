"""The idempotency keys a watcher keeps: those of the asset events it fired, stored with its position
so that a repeat published later (or read again after a restart) is dropped, not fired twice."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from airflow_kafka_events.envelopes.model import AssetEventEnvelope

__all__ = [
    "DURABLE_KEYS",
    "DurableKeys",
    "durable_key",
    "durable_key_of",
]

#: Idempotency keys kept in the store with the position.
DURABLE_KEYS = 1000


def durable_key_of(idempotency_key: str | None, event_id: str) -> str:
    """The key a watcher keeps for an event it fired: its idempotency key, else its event id."""
    return idempotency_key or f"event_id:{event_id}"


def durable_key(envelope: AssetEventEnvelope) -> str:
    """The key a watcher stores for an event it turned into an asset event (per asset)."""
    return durable_key_of(envelope.idempotency_key, envelope.event_id)


class DurableKeys:
    """Idempotency keys of persisted asset events: the most recent ones, each for ``ttl`` seconds."""

    def __init__(self, stored: Any, *, ttl: float | None, max_size: int = DURABLE_KEYS) -> None:
        self.ttl = ttl
        self.max_size = max_size
        self._keys: OrderedDict[str, float] = OrderedDict()
        if isinstance(stored, Mapping):
            for key, seen_at in sorted(stored.items(), key=lambda kv: kv[1]):
                if isinstance(key, str) and isinstance(seen_at, (int, float)):
                    self._keys[key] = float(seen_at)
        self._expire()
        self.dirty = False

    def _expire(self) -> None:
        if self.ttl is not None:
            cutoff = time.time() - self.ttl
            for key in [k for k, at in self._keys.items() if at < cutoff]:
                del self._keys[key]
        while len(self._keys) > self.max_size:
            self._keys.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        seen_at = self._keys.get(key)
        return seen_at is not None and (self.ttl is None or seen_at >= time.time() - self.ttl)

    def add(self, key: str) -> None:
        self._keys.setdefault(key, time.time())
        self._expire()
        self.dirty = True

    def add_all(self, keys: Mapping[str, float]) -> None:
        """Keys with when each was first seen (epoch seconds): kept for ``ttl`` from then."""
        for key, seen_at in keys.items():
            self._keys[key] = min(seen_at, self._keys.get(key, seen_at))
        self._keys = OrderedDict(sorted(self._keys.items(), key=lambda kv: kv[1]))
        self._expire()
        self.dirty = True

    def to_json(self) -> dict[str, float]:
        return dict(self._keys)
