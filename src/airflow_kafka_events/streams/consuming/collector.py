"""Python's cyclic collector while a consumer task reads a stream.

A consumer holds a batch of decoded pages (up to ``max_events``, each page's JSON a few dozen
dicts and lists) until its handler returns.  Python starts a young collection every 700
container allocations (its default first threshold), so a batch being built is collected
several times over: its pages survive into the older generations, and the oldest one's
collections walk every object of the process (an Airflow task process holds hundreds of
thousands).  B11 measured this at a third to a half of a consumer's CPU per page.  With the
first threshold above what one batch allocates, a batch's pages die young, freed by reference
counting before any collection sees them.

:func:`young_collections_every` raises the threshold for the duration of a read (never lowers
it, leaves a collector that was turned off alone, and puts back what it found); a consumer task
runs one task in its process, so the process's setting is the task's to choose while it reads.
``[kafka_events] stream_read_gc_threshold`` sets the value; 0 keeps Python's.

:func:`collections_paused` holds collections off while a reader decodes one batch (any reader,
inside a task or not): the batch's pages then meet one young collection, not one every 700
allocations that moves them up to the older generations.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "DEFAULT_GC_THRESHOLD",
    "collections_paused",
    "resolve_gc_threshold",
    "young_collections_every",
]

#: Allocations between two young collections while a consumer reads: above what a batch of 1,000
#: pages of 1 KB JSON allocates (about 26,000 containers), still a bound on uncollected cycles.
DEFAULT_GC_THRESHOLD = 50_000


def resolve_gc_threshold(value: Any = None) -> int:
    """``value``, else ``[kafka_events] stream_read_gc_threshold``, else 50,000; an integer >= 0."""
    if value is None:
        from airflow.configuration import conf

        value = conf.get("kafka_events", "stream_read_gc_threshold", fallback=str(DEFAULT_GC_THRESHOLD))
    if isinstance(value, bool):
        raise ConfigurationError(f"stream_read_gc_threshold must be a whole number >= 0, got {value!r}")
    try:
        allocations = int(str(value).strip())
    except ValueError:
        raise ConfigurationError(
            f"stream_read_gc_threshold must be a whole number >= 0 (0: Python's own), got {value!r}"
        ) from None
    if allocations < 0:
        raise ConfigurationError(f"stream_read_gc_threshold must be >= 0 (0: Python's own), got {value!r}")
    return allocations


@contextmanager
def young_collections_every(allocations: int) -> Iterator[None]:
    """Inside the block, Python's first collector threshold is at least ``allocations``.

    Unchanged when ``allocations`` is 0, when the threshold is already as high, or when the
    collector is off (``gc.disable()`` or a first threshold of 0).  On the way out the threshold
    found on the way in is put back, unless something inside the block set another one.
    """
    before = gc.get_threshold()
    if allocations <= 0 or not gc.isenabled() or before[0] == 0 or before[0] >= allocations:
        yield
        return
    raised = (allocations, *before[1:])
    gc.set_threshold(*raised)
    try:
        yield
    finally:
        if gc.get_threshold() == raised:
            gc.set_threshold(*before)


@contextmanager
def collections_paused() -> Iterator[None]:
    """Inside the block Python's cyclic collector starts no collection; after it, as before.

    A :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` decodes each batch
    inside one.  The decoded pages are alive until the caller drops the batch, so every young collection
    started while they are built only moves them up a generation, where the older collections walk
    them again; paused, the batch meets one young collection after the block instead of one every
    700 allocations.  The allocations still count: the first one after the block starts the
    collection that was due, so no collection is skipped, only started later (by the length of
    one batch's decode).

    When the collector is already off (``gc.disable()``, or another thread's pause), nothing is
    changed: only a collector this block turned off is turned back on, in a ``finally``.  Threads:
    ``gc.disable()`` / ``gc.enable()`` act on the whole process.  Pauses in several threads
    overlapping end with the collector on (each one that turned it off turns it on, and one that
    found it off touches nothing); the only cost is a pause ending early for the other thread.
    Other threads allocate without collections while a pause lasts (their cyclic garbage waits for
    the collection after it).  A thread that calls ``gc.disable()`` while another thread's pause is
    open finds the collector on again when that pause ends: the pause cannot tell that call from
    its own.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
