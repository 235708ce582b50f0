"""The one retry policy (``retry.py``): what is retried, how long it waits, what it raises at the end."""

from __future__ import annotations

import asyncio

import pytest

from airflow_kafka_events.retry import exponential_backoff, retry_call, retry_call_async, retry_until

pytestmark = pytest.mark.unit


class Transient(Exception):
    pass


class Spent(Exception):
    pass


def _flaky(failures: int, error: type[Exception] = Transient):
    calls = []

    def operation() -> str:
        calls.append(len(calls))
        if len(calls) <= failures:
            raise error(f"failure {len(calls)}")
        return "done"

    return operation, calls


def _policy(waits: list[float], retried: list[tuple[int, str, float]]):
    return {
        "retry_on": lambda exc: isinstance(exc, Transient),
        "attempts": 3,
        "delay": lambda n, exc: 0.5 * n,
        "exhausted": lambda n, exc: Spent(f"gave up after {n}: {exc}"),
        "on_retry": lambda n, exc, delay: retried.append((n, str(exc), delay)),
    }


def test_transient_failures_are_retried_with_the_given_waits():
    operation, calls = _flaky(2)
    waits: list[float] = []
    retried: list[tuple[int, str, float]] = []
    assert retry_call(operation, sleep=waits.append, **_policy(waits, retried)) == "done"
    assert len(calls) == 3 and waits == [0.5, 1.0]
    assert retried == [(1, "failure 1", 0.5), (2, "failure 2", 1.0)]


def test_spent_attempts_raise_the_exhausted_error_from_the_last_failure():
    operation, calls = _flaky(5)
    waits: list[float] = []
    with pytest.raises(Spent, match="gave up after 3: failure 3") as info:
        retry_call(operation, sleep=waits.append, **_policy(waits, []))
    assert len(calls) == 3 and isinstance(info.value.__cause__, Transient)


def test_a_failure_that_is_not_transient_is_raised_at_once():
    operation, calls = _flaky(1, error=KeyError)
    waits: list[float] = []
    with pytest.raises(KeyError):
        retry_call(operation, sleep=waits.append, **_policy(waits, []))
    assert len(calls) == 1 and waits == []


def test_a_wait_that_raises_ends_the_retries():
    operation, calls = _flaky(2)

    def stop(_delay: float) -> None:
        raise InterruptedError

    with pytest.raises(InterruptedError):
        retry_call(operation, sleep=stop, **_policy([], []))
    assert len(calls) == 1


def test_the_async_variant_awaits_its_waits():
    operation, calls = _flaky(2)
    waits: list[float] = []

    async def attempt() -> str:
        return operation()

    async def sleep(delay: float) -> None:
        waits.append(delay)

    assert asyncio.run(retry_call_async(attempt, sleep=sleep, **_policy(waits, []))) == "done"
    assert len(calls) == 3 and waits == [0.5, 1.0]


def test_retry_until_stops_on_the_operations_own_error():
    calls: list[int] = []

    def operation() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Transient
        raise TimeoutError("deadline")

    with pytest.raises(TimeoutError, match="deadline"):
        retry_until(
            operation, retry_on=lambda e: isinstance(e, Transient), pause=lambda: 0.0, sleep=lambda _: None
        )
    assert len(calls) == 3


def test_exponential_backoff_doubles_up_to_its_cap():
    assert [exponential_backoff(n, initial=0.5, maximum=3.0) for n in (1, 2, 3, 4, 200)] == [
        0.5,
        1.0,
        2.0,
        3.0,
        3.0,
    ]
    with pytest.raises(ValueError):
        exponential_backoff(0, initial=1.0, maximum=2.0)
