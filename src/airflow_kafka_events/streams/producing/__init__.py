"""Writing a stream: the triggers, the writer, the operator."""

from __future__ import annotations
