"""Reading a stream back: in order, in batches, resumable; the consumer operator."""

from __future__ import annotations
