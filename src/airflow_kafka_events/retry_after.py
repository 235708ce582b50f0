"""The ``Retry-After`` header: how long a server asks its client to wait before trying again.

One parser for every HTTP client of the package -- the HTTP paginator
(:mod:`airflow_kafka_events.http.requests`) and the partition bridge's REST client
(:mod:`airflow_kafka_events.bridge.airflow_api`).  RFC 9110 (section 10.2.3) allows two forms,
``delay-seconds`` and an ``HTTP-date``; :func:`parse_retry_after` reads both:

=====================================================  ============================================
header value                                           seconds
=====================================================  ============================================
missing, empty, only blanks                            ``None``
``"120"``, ``" 120 "``, ``"1.5"`` (a fraction too)     ``120.0``, ``120.0``, ``1.5``
``"-3"``, ``"+3"``, ``"1e3"``, ``"nan"``, ``"inf"``,   ``None`` (not delay-seconds)
``"0x10"``, ``"1_000"``, ``"soon"``, ``"120, 120"``
digits beyond a float's range (``"9" * 400``)          ``math.inf`` (callers cap what they honour)
an HTTP date in the future                             the seconds until it
an HTTP date now or in the past                        ``0.0``
an HTTP date without a zone (``-0000``, asctime form)  read as UTC (HTTP dates are in GMT)
a date that does not parse (``"Wed, 32 Foo 2015"``)    ``None``
=====================================================  ============================================

``None`` means "no usable header": the caller's own backoff applies.  This module imports no
Airflow module.
"""

from __future__ import annotations

import email.utils
import re
from datetime import datetime, timezone

__all__ = ["parse_retry_after"]

#: ``delay-seconds`` (RFC 9110: ``1*DIGIT``), with a decimal fraction tolerated; ASCII digits only.
_DELAY_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value (see the module doc for every case).

    ``now`` is the reference time of an HTTP date (default: the current time; a naive ``now``
    is taken as UTC).  ``None`` when the header is missing or not a delay or a date; a date in
    the past is ``0.0``; a delay too large for a float is ``math.inf``.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)  # "9" * 400 is inf: the caller's cap applies
    return _seconds_until(text, now)


def _seconds_until(text: str, now: datetime | None) -> float | None:
    """Seconds from ``now`` until the HTTP date ``text`` (``0.0`` if it passed); ``None`` if no date."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    reference = now if now is not None else datetime.now(timezone.utc)
    return max(0.0, (_utc(when) - _utc(reference)).total_seconds())


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
