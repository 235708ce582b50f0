"""After a crash, what Airflow already has: a watcher that resumes from a position its previous run
stored before it was killed asks Airflow which of its asset's events exist, and does not fire them again.

A watcher stores its position (and the idempotency keys of what it fired) at most once per store
interval, so after ``kill -9`` of a triggerer the records confirmed since the last store are read
again.  A trigger has no database access; this module gives it another way: Airflow's REST API.
It is off unless ``[kafka_events] watcher_airflow_api_conn_id`` names an Airflow connection to the
api-server (host: its base URL, e.g. ``http://airflow-api:8080``, or host + port + schema;
login / password: a user allowed to read assets and asset events).  Then a watcher whose stored
state does not say it stopped cleanly fetches its asset's :data:`RECHECK_LIMIT` most recent asset
events once, at its start, and the idempotency keys of those a watcher made join the keys it drops
as repeats.  Without the option, or when the API cannot be asked (logged once, with the cause),
duplicates after a crash stay bounded by one store interval.

Imports point down: the bridge's REST client, the watcher payload; no trigger module.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from airflow_kafka_events.airflow_config import airflow_option
from airflow_kafka_events.assets.watcher_payload import watcher_payload
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.retry import RetryPolicy
from airflow_kafka_events.watcher.keys import durable_key_of

if TYPE_CHECKING:
    from airflow_kafka_events.assets.airflow_api import AirflowApiClient

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "RECHECK_ATTEMPTS",
    "RECHECK_CONCURRENCY",
    "RECHECK_LIMIT",
    "RECHECK_OPTION",
    "RECHECK_TIMEOUT",
    "api_base_url",
    "fired_keys",
    "keys_of_events",
    "recheck_conn_id",
]

#: ``[kafka_events]`` option naming the Airflow connection to the api-server (empty: off).
RECHECK_OPTION = "watcher_airflow_api_conn_id"
#: The asset's most recent events a resuming watcher looks at (well beyond one store interval of them).
RECHECK_LIMIT = 1000
#: Seconds the fetch may take at a watcher's start before it gives up (and reads on, bounded).
RECHECK_TIMEOUT = 60.0
#: Attempts of the lookup while Airflow answers a transient failure (5xx, 429, connection errors):
#: Airflow 3.3 answers ``GET /api/v2/assets/events`` with 500 while one of the events' DAG runs is
#: still queued (its ``start_date`` is None where the response model wants a date; 3.4 fixes the
#: model), which passes once the run starts.  Backoff 0.5, 1, 2, 4, 8 s: within RECHECK_TIMEOUT.
RECHECK_ATTEMPTS = 6
RECHECK_MAX_BACKOFF = 8.0


def recheck_conn_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The connection id ``[kafka_events] watcher_airflow_api_conn_id`` names, ``None`` when off."""
    value = airflow_option("kafka_events", RECHECK_OPTION, None, environ=environ)
    return value.strip() or None if value else None


def _seen_at(event: Mapping[str, Any], default: float) -> float:
    """When Airflow made ``event`` (its ``timestamp``), as epoch seconds; ``default`` if unreadable."""
    value = event.get("timestamp")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return default


def keys_of_events(
    events: Iterable[Mapping[str, Any]], topics: Collection[str] | None = None, *, now: float | None = None
) -> dict[str, float]:
    """The durable keys of the asset events a watcher made from records of ``topics`` (any topic when
    ``None``), among ``events`` (the REST API's JSON), each with the time Airflow made the event."""
    default = time.time() if now is None else now
    keys: dict[str, float] = {}
    for event in events:
        payload = watcher_payload(event.get("extra"))
        if payload is None:
            continue  # not a watcher's event (outlets, the REST API, a bridge)
        kafka = payload.get("kafka")
        if topics is not None and not (isinstance(kafka, Mapping) and kafka.get("topic") in topics):
            continue  # another watcher's, of another topic
        event_id, key = payload.get("event_id"), payload.get("idempotency_key")
        if isinstance(event_id, str) and event_id:
            durable = durable_key_of(key if isinstance(key, str) else None, event_id)
            keys[durable] = max(keys.get(durable, 0.0), _seen_at(event, default))
    return keys


def api_base_url(
    host: str | None, port: int | None, schema: str | None, *, conn_type: str | None = None, conn_id: str
) -> str:
    """The api-server's base URL from a connection: its host (a URL, or a host name), port, and its
    schema or connection type as the scheme (``http`` / ``https``; any other schema is a path)."""
    if not host:
        raise ConfigurationError(
            f"connection {conn_id!r} ([kafka_events] {RECHECK_OPTION}) has no host: set it to the "
            "api-server's base URL, e.g. http://airflow-api:8080"
        )
    schemes = ("http", "https")
    if "://" in host:
        parts = urlsplit(host)
        netloc = parts.netloc if parts.port or not port else f"{parts.netloc}:{port}"
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    scheme = schema if schema in schemes else (conn_type if conn_type in schemes else "http")
    path = "" if not schema or schema in schemes else "/" + schema.strip("/")
    return f"{scheme}://{host}" + (f":{port}" if port else "") + path


#: Watchers of one process that ask the api-server at the same time (a triggerer restarting with many
#: watchers must not open a connection per watcher at once; each waits its turn, untimed).
RECHECK_CONCURRENCY = 4
_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


async def fired_keys(
    conn_id: str, *, name: str | None, uri: str | None, topics: Collection[str] | None = None
) -> dict[str, float]:
    """The durable keys (with when Airflow made each event) of the watcher-made events, from records
    of ``topics``, among the :data:`RECHECK_LIMIT` most recent events of the asset ``name`` / ``uri``
    (either may be unknown).

    Raises the REST client's typed errors (unreachable, refused credentials, unknown asset),
    :class:`ConfigurationError` for a connection without a host or login, and
    :class:`TimeoutError` when the fetch took over :data:`RECHECK_TIMEOUT` seconds.
    """
    from airflow.sdk import BaseHook

    conn = await BaseHook.aget_connection(conn_id)
    base_url = api_base_url(conn.host, conn.port, conn.schema, conn_type=conn.conn_type, conn_id=conn_id)
    if not conn.login:
        raise ConfigurationError(
            f"connection {conn_id!r} ([kafka_events] {RECHECK_OPTION}) has no login: give it a user "
            "allowed to read assets and asset events, and its password"
        )
    loop = asyncio.get_running_loop()
    turn = _turns.setdefault(loop, asyncio.Semaphore(RECHECK_CONCURRENCY))
    async with turn:  # one-off blocking REST calls at a watcher's start, on a thread of their own
        fetch = asyncio.to_thread(_fetch, base_url, conn.login, conn.password or "", name, uri, topics)
        async with asyncio.timeout(RECHECK_TIMEOUT):  # not wait_for: it can swallow a cancellation (3.11)
            return await fetch


def _fetch(
    base_url: str,
    login: str,
    password: str,
    name: str | None,
    uri: str | None,
    topics: Collection[str] | None,
) -> dict[str, float]:
    from airflow_kafka_events.assets.airflow_api import AirflowApiClient

    deadline = time.monotonic() + RECHECK_TIMEOUT
    with AirflowApiClient(base_url, login, password) as client:
        asset_id = _retrying(
            lambda: _asset_id(client, name, uri), f"looking up the asset at {base_url}", deadline
        )
        events = _retrying(
            lambda: client.recent_events(asset_id, limit=RECHECK_LIMIT),
            f"reading the asset's recent events at {base_url}",
            deadline,
        )
        return keys_of_events(events, topics)


def _retrying(call: Callable[[], T], what: str, deadline: float) -> T:
    """``call()`` through the bridge's retry policy for transient API failures (the package's retry
    loop), each retry logged with Airflow's answer; no retry waits past ``deadline`` (monotonic): the
    thread must end about when the watcher stops waiting for it (a triggerer's exit waits for it)."""
    from airflow_kafka_events.assets.airflow_api import TransientApiError, retry_api_call

    policy = RetryPolicy(max_attempts=RECHECK_ATTEMPTS, max_backoff=RECHECK_MAX_BACKOFF)

    def wait(delay: float) -> None:
        if time.monotonic() + delay > deadline:
            raise TimeoutError(f"{what}: no time left for another attempt within {RECHECK_TIMEOUT:g}s")
        time.sleep(delay)

    def on_retry(failures: int, exc: BaseException, delay: float) -> None:
        # the error names Airflow 3.3's known 500 of the events lookup (assets.airflow_api.QUEUED_RUN_500)
        log.warning(
            "Watcher recheck: %s failed (attempt %d of %d): %s; a transient answer, retrying in %.1fs",
            what,
            failures,
            policy.max_attempts,
            exc,
            delay,
        )

    return retry_api_call(
        call,
        policy,
        exhausted=lambda failures, exc: TransientApiError(
            f"{what}: giving up after {failures} attempts: {exc}", status=getattr(exc, "status", None)
        ),
        on_retry=on_retry,
        sleep=wait,
    )


def _asset_id(client: AirflowApiClient, name: str | None, uri: str | None) -> int:
    """The id of the active asset with this URI (and name, when known), else with this name."""
    from airflow_kafka_events.assets.airflow_api import UnknownAssetError

    found = client.assets_with_uri(uri) if uri else client.assets_named(name or "")
    if uri and name:
        found = [asset for asset in found if asset.get("name") == name]
    ids = [asset["id"] for asset in found if isinstance(asset.get("id"), int)]
    if len(ids) != 1:
        raise UnknownAssetError(
            f"Airflow has {'no' if not ids else len(ids)} active asset(s) with "
            f"{'URI ' + repr(uri) if uri else ''}{' and ' if uri and name else ''}"
            f"{'name ' + repr(name) if name else ''}",
            status=404,
        )
    return int(ids[0])
