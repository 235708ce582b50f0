"""Masking secrets in what is shown to people: previews of payloads, ``extra`` and headers.

:func:`redact` returns a copy of a JSON-like value (mappings, sequences, scalars) in which the
value of every *secret-looking* key is ``"***"`` and ``password=...``-like fragments of strings are
masked; :func:`preview` turns a value into bounded text for a page or a terminal.  A key is
secret-looking when its name contains ``password``, ``passwd``, ``secret``, ``token``,
``signature``, ``authorization``, ``credential``, ``private`` or ``api_key`` (any spelling of the
separator), or is ``key`` / ends with ``_key``, ``-key`` or ``.key`` -- except the names this
package uses for non-secrets (``partition_key``, ``idempotency_key``).

This module imports no Airflow module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "PREVIEW_LIMIT", "is_secret_name", "preview", "redact", "redact_text"]

MASK = "***"
#: Characters of a preview (payloads, ``extra``), unless the caller asks for another bound.
PREVIEW_LIMIT = 2048

_SECRET_PARTS = re.compile(
    r"pass(?:word|wd)|secret|token|signature|authori[sz]ation|credential|private|api[-_.]?key",
    re.IGNORECASE,
)
_KEY_NAME = re.compile(r"(?:^|[-_.])key$", re.IGNORECASE)
_NOT_SECRET = frozenset(
    {"partition_key", "idempotency_key", "idempotency-key", "x-idempotency-key", "partition-key"}
)
_IN_TEXT = re.compile(
    r"(?P<name>pass(?:word|wd)|secret|token|api[-_.]?key|authori[sz]ation)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>(?:bearer\s+|basic\s+)?[^\s,;&\"']+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether a key or header named ``name`` holds a secret (see the module doc)."""
    lowered = name.strip().lower()
    if lowered in _NOT_SECRET:
        return False
    return bool(_SECRET_PARTS.search(lowered) or _KEY_NAME.search(lowered))


def redact_text(text: str) -> str:
    """``text`` with ``password=...``, ``token: ...``, ``authorization=Bearer ...`` values masked."""
    return _IN_TEXT.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", text)


def redact(obj: Any) -> Any:
    """A copy of ``obj`` with secret-looking keys' values masked (recursively; ``None`` stays ``None``);
    bytes become their size."""
    if isinstance(obj, Mapping):
        return {
            key: (
                MASK if value is not None and isinstance(key, str) and is_secret_name(key) else redact(value)
            )
            for key, value in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(item) for item in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def preview(obj: Any, limit: int = PREVIEW_LIMIT) -> str:
    """Redacted text of ``obj`` (JSON for structures) of at most ``limit`` characters.

    A cut preview ends with ``"... (N more characters)"`` (within the bound).
    """
    value = redact(obj)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return clip(text, limit)


def clip(text: str, limit: int = PREVIEW_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    suffix = f"... ({len(text)} characters in all)"
    return (text[: max(0, limit - len(suffix))] + suffix)[:limit]
