"""Dead letters: the refused record, unchanged, with headers that say why."""

from __future__ import annotations
