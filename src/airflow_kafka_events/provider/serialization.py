"""Parse-time check that trigger keyword arguments survive Airflow's serialization.

A deferred task hands its trigger to the triggerer as ``(classpath, kwargs)``; Airflow
stores the kwargs in the metadata DB with :mod:`airflow.sdk.serde` (``Trigger.encrypt_kwargs``:
``serde.serialize`` of the kwargs, JSON text, then ``serde.deserialize`` in the triggerer).
``start_from_trigger`` tasks go the same way from ``start_trigger_args.trigger_kwargs``.
A value that does not survive that round trip (a lambda, a local or module function, an
open file, an instance of a class the triggerer cannot import...) fails late and far from
its cause: when the task defers, or in the triggerer.

:func:`check_trigger_kwargs` runs the same round trip up front and raises
:class:`~airflow_kafka_events.errors.TriggerSerializationError` naming the argument, with
the path of the offending value inside it (``"options['transform']"``).  Operators call it
in ``__init__``, so a DAG file with such a value fails to *parse* and the DAG processor
reports the message as the file's import error.
"""

from __future__ import annotations

import inspect
import io
import json
from collections.abc import Mapping
from typing import Any

from airflow_kafka_events.errors import TriggerSerializationError

__all__ = [
    "check_trigger_kwargs",
    "roundtrip_trigger_kwargs",
]

_HINT = (
    "Trigger arguments are stored as JSON by Airflow and rebuilt in the triggerer: pass data "
    "(str, numbers, bool, None, lists, dicts, datetimes...) or the dotted path of an importable "
    "callable instead of a lambda, a function, an open file or another live object"
)


def _roundtrip(value: Any) -> Any:
    """``value`` after Airflow's trigger-kwargs serde round trip (raises on failure)."""
    from airflow.sdk.serde import deserialize, serialize
    from airflow.serialization.enums import stringify_encoding_keys

    encoded = serialize(stringify_encoding_keys(value))
    text = json.dumps(encoded)
    return deserialize(json.loads(text))


def _describe(value: Any) -> str:
    """A short description of a value that failed the round trip."""
    if inspect.isfunction(value) or inspect.ismethod(value):
        name = getattr(value, "__qualname__", getattr(value, "__name__", "?"))
        if getattr(value, "__name__", "") == "<lambda>":
            return "a lambda"
        if "<locals>" in name:
            return f"the local function {name!r}"
        return f"the function {getattr(value, '__module__', '?')}.{name}"
    if inspect.isbuiltin(value):
        return f"the built-in {getattr(value, '__name__', value)!r}"
    if isinstance(value, io.IOBase):
        return f"an open file ({getattr(value, 'name', type(value).__qualname__)!r})"
    if inspect.isclass(value):
        return f"the class {value.__module__}.{value.__qualname__}"
    if callable(value):
        return f"a callable {type(value).__qualname__} object"
    return f"a {type(value).__module__}.{type(value).__qualname__} object"


def _reason(exc: BaseException) -> str:
    """The first sentence of ``exc``'s message, prefixed with its type."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    first = text.split(". ", 1)[0].rstrip(".")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _children(value: Any) -> list[tuple[str, Any]]:
    """``(path suffix, child)`` pairs of a container value (empty for anything else)."""
    if isinstance(value, Mapping):
        return [(f"[{key!r}]", child) for key, child in value.items()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [(f"[{index}]", child) for index, child in enumerate(value)]
    return []


def _failure(path: str, value: Any) -> tuple[str, Any, Exception] | None:
    """The innermost ``(path, value, error)`` that fails the round trip, or ``None``."""
    try:
        _roundtrip(value)
        return None
    except Exception as exc:  # any failure of the round trip is the finding
        error = exc
    # outside the except block: the children's failures do not chain onto this one
    for suffix, child in _children(value):
        inner = _failure(f"{path}{suffix}", child)
        if inner is not None:
            return inner
    return path, value, error


def check_trigger_kwargs(kwargs: Mapping[str, Any] | None, *, owner: str) -> None:
    """Raise :class:`TriggerSerializationError` if a value of ``kwargs`` cannot reach a triggerer.

    Each argument goes through the serde round trip Airflow applies to stored trigger kwargs
    (:func:`roundtrip_trigger_kwargs`); the error names the argument and, for containers, the
    path of the innermost offending value, e.g.::

        MyOperator(task_id='fetch'): trigger argument 'options['transform']' cannot be
        serialized: a lambda (Cannot serialize object of type <class 'function'>...)

    ``owner`` says who passed the arguments (used at the start of the message).  ``None`` or
    an empty mapping passes.
    """
    if kwargs is None:
        return
    if not isinstance(kwargs, Mapping):
        raise TriggerSerializationError(
            f"{owner}: trigger kwargs must be a dict, got {type(kwargs).__qualname__}",
            owner=owner,
            argument="",
            reason="not a dict",
        )
    for name, value in kwargs.items():
        if not isinstance(name, str):
            raise TriggerSerializationError(
                f"{owner}: trigger argument names must be str, got {name!r}",
                owner=owner,
                argument=repr(name),
                reason="argument name is not a str",
            )
        found = _failure(name, value)
        if found is None:
            continue
        path, bad, exc = found
        reason = _reason(exc)
        raise TriggerSerializationError(
            f"{owner}: trigger argument {path!r} cannot be serialized: {_describe(bad)} ({reason}). {_HINT}",
            owner=owner,
            argument=path,
            reason=reason,
        ) from exc


def roundtrip_trigger_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` as the triggerer will see them (serde encode, JSON text, serde decode)."""
    result = _roundtrip(dict(kwargs))
    if not isinstance(result, dict):  # pragma: no cover - serde keeps dicts as dicts
        raise TypeError(f"trigger kwargs came back as {type(result).__qualname__}")
    return result
