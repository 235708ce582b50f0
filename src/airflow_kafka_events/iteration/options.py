"""Checks of the runner's options: a bad value is a :class:`~airflow_kafka_events.errors.ConfigurationError`.

This module imports no Airflow module.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "count_option",
    "number_option",
]


def number_option(name: str, value: Any, *, allow_zero: bool = False, optional: bool = False) -> float | None:
    """``value`` as a float ``> 0`` (``>= 0`` with ``allow_zero``; ``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        raise ConfigurationError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def count_option(name: str, value: Any, *, low: int) -> int:
    """``value``, an int ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
    return value
