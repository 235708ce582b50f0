"""The HTTP paginator's arguments, checked when the trigger is built (bad ones: ``ConfigurationError``).

This module imports no Airflow module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "METHODS",
    "check_number",
    "check_paging",
    "check_request",
]

#: The HTTP methods of a first request.
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def check_number(name: str, value: Any, *, low: float, strict: bool = False, integer: bool = False) -> None:
    ok = False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (integer and isinstance(value, float)) and math.isfinite(value):
            ok = value > low if strict else value >= low
    if not ok:
        kind = "an int" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind} {'>' if strict else '>='} {low:g}, got {value!r}")


def check_request(
    owner: str, endpoint: Any, http_conn_id: Any, method: Any, params: Any, headers: Any, data: Any
) -> None:
    if not isinstance(endpoint, str):
        raise ConfigurationError(f"{owner}: endpoint must be a str, got {type(endpoint).__qualname__}")
    if not isinstance(http_conn_id, str) or not http_conn_id:
        raise ConfigurationError(f"{owner}: http_conn_id must be a non-empty str, got {http_conn_id!r}")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise ConfigurationError(f"{owner}: method must be one of {', '.join(METHODS)}, got {method!r}")
    if params is not None:
        _check_params(owner, params)
    if headers is not None and (
        not isinstance(headers, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise ConfigurationError(f"{owner}: headers must be a dict of str to str or None")
    if data is not None:
        try:
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{owner}: data must be JSON-serializable: {exc}") from exc


def _check_params(owner: str, params: Any) -> None:
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ConfigurationError(f"{owner}: params must be a dict with str keys or None")
    for name, value in params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if not all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
            raise ConfigurationError(
                f"{owner}: params[{name!r}] must be a str, number, bool, None or a list of those"
            )


def check_paging(owner: str, cursor_path: Any, cursor_param: Any, next_link_header: Any) -> None:
    if not isinstance(next_link_header, bool):
        raise ConfigurationError(f"{owner}: next_link_header must be a bool, got {next_link_header!r}")
    if next_link_header and cursor_path is not None:
        raise ConfigurationError(f"{owner}: give cursor_path or next_link_header, not both")
    if cursor_param is not None:
        if not isinstance(cursor_param, str) or not cursor_param:
            raise ConfigurationError(f"{owner}: cursor_param must be a non-empty str or None")
        if cursor_path is None:
            raise ConfigurationError(f"{owner}: cursor_param needs cursor_path (where the token is)")
