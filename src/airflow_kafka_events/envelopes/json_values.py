"""JSON values inside the envelopes: strict rules, exact text, fast where it is safe.

A payload or an ``extra`` value is JSON: ``None``, ``bool``, ``int`` (any size), finite ``float``,
``str``, ``list``/``tuple`` and ``dict`` with ``str`` keys.  :func:`json_to_text` writes it as
compact JSON text (refusing anything else with :class:`EnvelopeEncodeError`, naming the path),
:func:`json_from_text` reads it back (big integers and ``1`` vs ``1.0`` kept).

The fast paths (json's C encoder, msgspec's decoder) are used only where they are proven to give
the reference's result; a value they cannot vouch for goes the reference way (the walk and
``json.dumps`` / ``json.loads``), so the rules and the error messages are the reference's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

try:  # the fast paths' parts; without them only the reference paths run
    from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - CPython has them
    c_encode_basestring = c_make_encoder = None
try:
    import msgspec.json

    _fast_json_decode: Any = msgspec.json.Decoder().decode
except ImportError:  # pragma: no cover - msgspec comes with Airflow
    _fast_json_decode = None

from airflow_kafka_events.errors import EnvelopeDecodeError, EnvelopeEncodeError

__all__ = [
    "json_from_text",
    "json_to_text",
    "payload_from_avro",
    "payload_to_avro",
]

_JSON_TYPES_HINT = "None, bool, int, float (finite), str, list, tuple or dict with str keys"


def _check_json(value: Any, path: str, what: str, active: set[int]) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EnvelopeEncodeError(
                f"{what} value at {path} is {value!r}: strict JSON has no NaN or Infinity"
            )
        return
    if isinstance(value, (list, tuple, dict)):
        marker = id(value)
        if marker in active:
            raise EnvelopeEncodeError(f"{what} value at {path} contains itself (circular reference)")
        active.add(marker)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise EnvelopeEncodeError(
                        f"{what} value at {path} has a key of type {type(key).__qualname__!r} ({key!r}): "
                        "JSON object keys must be str"
                    )
                _check_json(item, f"{path}[{key!r}]", what, active)
        else:
            for index, item in enumerate(value):
                _check_json(item, f"{path}[{index}]", what, active)
        active.discard(marker)
        return
    raise EnvelopeEncodeError(
        f"{what} value at {path} has type {type(value).__qualname__!r}, which is not JSON; "
        f"use {_JSON_TYPES_HINT}, or bytes for a raw payload"
    )


def _reference_json_text(value: Any, what: str) -> str:
    try:  # the walk names the first offending value
        _check_json(value, "$", what, set())
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except EnvelopeEncodeError:
        raise
    except RecursionError as exc:
        raise EnvelopeEncodeError(f"{what} value is nested too deeply to encode") from exc
    except (TypeError, ValueError) as exc:
        # e.g. an int with more digits than sys.get_int_max_str_digits() allows
        raise EnvelopeEncodeError(f"{what} value cannot be written as JSON: {exc}") from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text


def _not_json(value: Any) -> Any:
    raise TypeError(type(value).__qualname__)


# The fast path: json's C encoder built once with the reference's settings and no hook
# for other types.  It accepts what the walk accepts but for dict keys: it writes int,
# float, bool and None keys as text, seen in its output as {"K": or ,"K": with K the
# repr of an int or a finite float, true, false or null, which one regex pass (over the
# reversed text, led by the literal :") finds; a loose pass first, as it is three times
# quicker and its matches include the exact one's.  A refusal or a suspect takes the reference.
_MARKERS: dict[int, Any] = {}  # its circular check (a clash between threads only refuses)
_FAST_ENCODER = c_make_encoder and c_make_encoder(
    _MARKERS, _not_json, c_encode_basestring, None, ":", ",", False, False, False
)
_LOOSE_KEY_REVERSED = re.compile(r':"(?:[0-9][0-9.e+-]*|eurt|eslaf|llun)"[{,]')
_SUSPECT_KEY_REVERSED = re.compile(
    r':"(?:(?:0|[0-9]*[1-9]|[0-9]+\.[0-9]+|[0-9]+[+-]e(?:[0-9]+\.)?[0-9])-?|eurt|eslaf|llun)"[{,]'
)


def _fast_json_text(value: Any) -> str | None:
    try:
        text = "".join(_FAST_ENCODER(value, 0))
    except Exception:  # any refusal is worded by the reference path
        _MARKERS.clear()  # an aborted run leaves its open containers behind
        return None
    backwards = text[::-1]
    if _LOOSE_KEY_REVERSED.search(backwards) and _SUSPECT_KEY_REVERSED.search(backwards):
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: the reference escapes them
            return None
    return text


def json_to_text(value: Any, *, what: str = "payload") -> str:
    """Strict, compact JSON text of ``value``; ``EnvelopeEncodeError`` if it is not JSON.

    Non-ASCII text is kept as is; strings holding lone surrogates (not valid Unicode)
    fall back to ``\\uXXXX`` escapes so that they still round-trip.
    """
    text = _fast_json_text(value)
    return _reference_json_text(value, what) if text is None else text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def _reference_json_value(text: str, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise EnvelopeDecodeError(f"{what} JSON text is nested too deeply to decode") from exc
    except ValueError as exc:
        raise EnvelopeDecodeError(f"{what} is not valid strict JSON text: {exc}") from exc


def json_from_text(text: str, *, what: str = "payload") -> Any:
    """Parse strict JSON text; ``EnvelopeDecodeError`` if it is not."""
    if not isinstance(text, str):
        raise EnvelopeDecodeError(f"{what} JSON text has type {type(text).__qualname__!r}, expected str")
    # msgspec parses a subset of what the reference accepts, into the same values (it
    # refuses lone surrogates, floats beyond range, NaN); the reference decides the rest.
    try:
        return _fast_json_decode(text)
    except Exception:
        pass  # (the reference's error is raised outside this handler: no chained context)
    return _reference_json_value(text, what)


def payload_to_avro(payload: Any) -> bytes | dict[str, str] | None:
    """The Avro union value for a payload: ``None``, ``bytes`` or ``{"json": <text>}``."""
    if payload is None:
        return None
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    return {"json": json_to_text(payload, what="payload")}


def payload_from_avro(datum: Any) -> Any:
    """Inverse of :func:`payload_to_avro`."""
    if datum is None:
        return None
    if isinstance(datum, (bytes, bytearray, memoryview)):
        return bytes(datum)
    if isinstance(datum, Mapping) and "json" in datum:
        return json_from_text(datum["json"], what="payload")
    raise EnvelopeDecodeError(f"payload has unexpected Avro value of type {type(datum).__qualname__!r}")
