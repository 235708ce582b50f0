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
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_kafka_events.airflow_config import airflow_option
from airflow_kafka_events.assets.watcher_payload import watcher_payload
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.triggers.watcher_keys import durable_key_of

log = logging.getLogger(__name__)

__all__ = [
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
#: Seconds the recheck may take at a watcher's start before it gives up (and reads on, bounded).
RECHECK_TIMEOUT = 60.0


def recheck_conn_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The connection id ``[kafka_events] watcher_airflow_api_conn_id`` names, ``None`` when off."""
    value = airflow_option("kafka_events", RECHECK_OPTION, None, environ=environ)
    return value.strip() or None if value else None


def keys_of_events(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """The durable keys of the asset events a watcher made, among ``events`` (the REST API's JSON)."""
    keys: set[str] = set()
    for event in events:
        payload = watcher_payload(event.get("extra"))
        if payload is None:
            continue  # not a watcher's event (outlets, the REST API, a bridge)
        event_id, key = payload.get("event_id"), payload.get("idempotency_key")
        if isinstance(event_id, str) and event_id:
            keys.add(durable_key_of(key if isinstance(key, str) else None, event_id))
    return keys


def api_base_url(host: str | None, port: int | None, schema: str | None, *, conn_id: str) -> str:
    """The api-server's base URL from a connection's host (a URL, or a host name), port and schema."""
    if not host:
        raise ConfigurationError(
            f"connection {conn_id!r} ([kafka_events] {RECHECK_OPTION}) has no host: set it to the "
            "api-server's base URL, e.g. http://airflow-api:8080"
        )
    if "://" in host:
        url = host.rstrip("/")
        return f"{url}:{port}" if port and url.count(":") == 1 else url
    scheme = schema if schema in ("http", "https") else "http"
    return f"{scheme}://{host}" + (f":{port}" if port else "")


async def fired_keys(conn_id: str, *, name: str, uri: str, limit: int = RECHECK_LIMIT) -> set[str]:
    """The durable keys of the watcher-made events among the asset's ``limit`` most recent ones.

    Raises the REST client's typed errors (unreachable, refused credentials, unknown asset) and
    :class:`ConfigurationError` for a connection without a host or login.
    """
    from airflow.sdk import BaseHook

    conn = await BaseHook.aget_connection(conn_id)
    base_url = api_base_url(conn.host, conn.port, conn.schema, conn_id=conn_id)
    if not conn.login:
        raise ConfigurationError(
            f"connection {conn_id!r} ([kafka_events] {RECHECK_OPTION}) has no login: give it a user "
            "allowed to read assets and asset events, and its password"
        )
    # one-off blocking REST calls at a watcher's start, on a thread of their own
    return await asyncio.to_thread(_fetch, base_url, conn.login, conn.password or "", name, uri, limit)


def _fetch(base_url: str, login: str, password: str, name: str, uri: str, limit: int) -> set[str]:
    from airflow_kafka_events.bridge.airflow_api import AirflowApiClient, AssetIdCache

    with AirflowApiClient(base_url, login, password) as client:
        asset_id = AssetIdCache(client).get(name, uri)
        return keys_of_events(client.recent_events(asset_id, limit=limit))
