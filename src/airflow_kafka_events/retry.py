"""The package's one retry policy: try again after transient failures, on ``tenacity``.

Every retry loop of the package goes through here: the HTTP paginator's requests
(``429``/``5xx``/connection errors, honouring ``Retry-After``), the partition bridge's REST
calls (bounded exponential backoff with jitter, a stop request ends the wait), and the
stream progress lookups (transient Kafka errors until a deadline).  Callers say *which*
failures are transient, *how long* to wait after the ``n``-th failure and *what* to raise
once the attempts are spent; the loop itself (counting, waiting, logging, giving up) is
tenacity's.

* :func:`parse_retry_after` -- the one ``Retry-After`` parser of the package's HTTP clients (the
  HTTP paginator and the Airflow REST client);
* :func:`retry_call` / :func:`retry_call_async` -- at most ``attempts`` attempts; a failure
  ``retry_on`` does not accept is raised at once; after the last attempt ``exhausted(n, exc)``
  is raised ``from`` the last failure;
* :func:`retry_until` -- attempts until ``operation`` succeeds or raises something
  ``retry_on`` does not accept (e.g. the caller's own deadline error), pausing ``pause``
  seconds between attempts;
* :func:`exponential_backoff` -- ``initial * multiplier ** (n - 1)``, capped;
* :class:`RetryPolicy` -- the configurable backoff of the Airflow REST client's callers (the
  bridge, the watcher's recheck).

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import tenacity

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "RetryPolicy",
    "exponential_backoff",
    "parse_retry_after",
    "retry_call",
    "retry_call_async",
    "retry_until",
]

T = TypeVar("T")

#: Whether a failure is worth another attempt.
RetryOn = Callable[[BaseException], bool]
#: Seconds to wait after the ``n``-th failure (1-based), given that failure.
Delay = Callable[[int, BaseException], float]
#: Called before each wait with the failure count, the failure and the wait.
OnRetry = Callable[[int, BaseException, float], None]
#: The error to raise once ``n`` attempts failed, the last with the given failure.
Exhausted = Callable[[int, BaseException], BaseException]


def exponential_backoff(failures: int, *, initial: float, maximum: float, multiplier: float = 2.0) -> float:
    """``initial * multiplier ** (failures - 1)`` seconds, at most ``maximum`` (``failures >= 1``)."""
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures}")
    return min(maximum, initial * multiplier ** min(failures - 1, 64))  # no overflow on absurd counts


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for transient failures (5xx, 408, 429, connection errors).

    ``max_attempts`` counts every attempt, the first included.  The delay after the ``n``-th
    failure is ``initial_backoff * multiplier ** (n - 1)`` capped at ``max_backoff``, raised to a
    server's ``Retry-After`` (also capped), then shortened by up to ``jitter`` (a fraction) so
    that replicas do not retry in lock step; it never exceeds ``max_backoff``.
    """

    max_attempts: int = 8
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ConfigurationError(f"max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("initial_backoff", "max_backoff", "multiplier", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigurationError(f"{name} must be a finite number, got {value!r}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ConfigurationError(
                f"backoff must satisfy 0 <= initial_backoff <= max_backoff, got "
                f"{self.initial_backoff} and {self.max_backoff}"
            )
        if self.multiplier < 1:
            raise ConfigurationError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise ConfigurationError(f"jitter must be in [0, 1), got {self.jitter}")

    def delay(
        self, failures: int, retry_after: float | None = None, *, rand: Callable[[], float] = random.random
    ) -> float:
        """Seconds to wait after ``failures`` failed attempts (``failures >= 1``)."""
        base = exponential_backoff(
            failures, initial=self.initial_backoff, maximum=self.max_backoff, multiplier=self.multiplier
        )
        if retry_after is not None and retry_after > base:
            return min(self.max_backoff, retry_after)
        return base * (1.0 - self.jitter * rand())


def _failure(state: tenacity.RetryCallState) -> BaseException:
    assert state.outcome is not None
    error = state.outcome.exception()
    assert error is not None
    return error


def _policy(*, retry_on: RetryOn, attempts: int, delay: Delay, on_retry: OnRetry | None) -> dict[str, Any]:
    """tenacity's keyword arguments of one retry policy (the caller adds ``sleep``)."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")

    def wait(state: tenacity.RetryCallState) -> float:
        return max(0.0, delay(state.attempt_number, _failure(state)))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            assert state.next_action is not None
            on_retry(state.attempt_number, _failure(state), state.next_action.sleep)

    return {
        "retry": tenacity.retry_if_exception(retry_on),
        "stop": tenacity.stop_after_attempt(attempts),
        "wait": wait,
        "before_sleep": before_sleep,
        "reraise": False,
    }


def _give_up(error: tenacity.RetryError, exhausted: Exhausted) -> tuple[BaseException, BaseException]:
    """The caller's error for the spent attempts, and the last failure (its cause)."""
    last = error.last_attempt
    cause = last.exception()
    assert cause is not None
    return exhausted(last.attempt_number, cause), cause


def retry_call(
    operation: Callable[[], T],
    *,
    retry_on: RetryOn,
    attempts: int,
    delay: Delay,
    exhausted: Exhausted,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``operation()``, tried again after transient failures (see the module doc).

    ``sleep`` waits between attempts; it may raise to end the retries (e.g. on a stop request).
    """
    policy = _policy(retry_on=retry_on, attempts=attempts, delay=delay, on_retry=on_retry)
    retrying = tenacity.Retrying(sleep=sleep, **policy)
    try:
        return retrying(operation)
    except tenacity.RetryError as error:
        raised, cause = _give_up(error, exhausted)
        raise raised from cause


async def retry_call_async(
    operation: Callable[[], Awaitable[T]],
    *,
    retry_on: RetryOn,
    attempts: int,
    delay: Delay,
    exhausted: Exhausted,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """:func:`retry_call` for coroutines: waits with ``asyncio.sleep``, never blocking the loop."""
    policy = _policy(retry_on=retry_on, attempts=attempts, delay=delay, on_retry=on_retry)
    retrying = tenacity.AsyncRetrying(sleep=sleep, **policy)

    async def attempt() -> T:  # a coroutine function: tenacity awaits it (a lambda it would not)
        return await operation()

    try:
        return await retrying(attempt)
    except tenacity.RetryError as error:
        raised, cause = _give_up(error, exhausted)
        raise raised from cause


def retry_until(
    operation: Callable[[], T],
    *,
    retry_on: RetryOn,
    pause: Callable[[], float],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``operation()`` until it succeeds or raises what ``retry_on`` refuses; ``pause()`` seconds apart.

    The operation bounds the loop itself (it raises its deadline error, which is not retried).
    """
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(retry_on),
        wait=lambda _state: max(0.0, pause()),
        sleep=sleep,
        reraise=True,
    )
    return retrying(operation)


# ---------------------------------------------------------------- Retry-After
#: ``delay-seconds`` (RFC 9110: ``1*DIGIT``), with a decimal fraction tolerated; ASCII digits only.
_DELAY_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value; ``None``: the caller's own backoff applies.

    RFC 9110 (section 10.2.3) allows ``delay-seconds`` and an ``HTTP-date``; both are read.
    ``now`` is the reference time of an HTTP date (default: the current time; a naive ``now``
    is taken as UTC).

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
