"""Task iteration (AIP-104) with ``@task.iterable``, in the style of the Pokémon examples.

Assumes an HTTP connection ``pokeapi`` pointing to https://pokeapi.co and the ``kafka_default``
connection (per-item results go to a Kafka results stream).

* ``pokemon_iteration``: ONE task instance fetches the details of every Pokémon listed
  upstream, 8 at a time, each request retried on its own and bounded by a timeout.
* ``pokemon_batched_iteration``: the same work split over TWO task instances
  (``batch(size=2)``); each takes the Pokémon whose position ``% 2`` is its index.  A
  further stage reads the first instance's results stream lazily, while it is written,
  and publishes one partitioned asset event per Pokémon.

=========================================================  ==============  ================
pattern                                                    task instances  work per task
=========================================================  ==============  ================
``get_pokemon.expand(url=urls)``                           100             1 Pokémon
``get_pokemon.iterate(url=urls)``                          1               100 Pokémon
``get_pokemon.batch(size=2).iterate(url=urls)``            2               ~50 Pokémon
=========================================================  ==============  ================

A retry of an iterating task runs only the Pokémon not fetched yet: progress is
checkpointed in the task state store, which survives retries (XComs do not).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

from airflow_kafka_events.iteration import results_of

POKEDEX = Asset("pokeapi://pokemon")


@task
def list_pokemon() -> list[str]:
    from airflow.providers.http.hooks.http import HttpHook

    response = HttpHook(http_conn_id="pokeapi", method="GET").run(endpoint="api/v2/pokemon?limit=100")
    return [pokemon["url"].replace("https://pokeapi.co/", "") for pokemon in response.json()["results"]]


@task.iterable(
    concurrency=8,  # requests in flight inside the task instance
    item_retries=3,  # per Pokémon; a failing one never holds the others up
    item_retry_delay=2.0,
    item_timeout=30,  # per request (async: cancelled)
    item_id=lambda item: item["url"],  # names items in logs, failures and results
    retries=2,  # task retries resume after the checkpoint (results are never logged per item)
)
async def get_pokemon(url: str) -> dict[str, Any]:
    from airflow.providers.http.hooks.http import HttpAsyncHook

    async with HttpAsyncHook(http_conn_id="pokeapi", method="GET").session() as session:
        response = await session.run(endpoint=url)
        details = await response.json()
    return {"name": details["name"], "height": details["height"], "weight": details["weight"]}


@dag(start_date=pendulum.datetime(2025, 1, 1, tz="UTC"), schedule=None, catchup=False, tags=["example"])
def pokemon_iteration():
    get_pokemon.iterate(url=list_pokemon())


@dag(start_date=pendulum.datetime(2025, 1, 1, tz="UTC"), schedule=None, catchup=False, tags=["example"])
def pokemon_batched_iteration():
    get_pokemon.batch(size=2).iterate(url=list_pokemon())

    @task.iterable(
        concurrency=4,
        results_stream=False,
        emit_partitions=POKEDEX,  # one asset event per Pokémon, partition key = its name
        partition_key=lambda item, result: item["pokemon"]["name"],
    )
    def index_pokemon(pokemon: dict[str, Any]) -> None:
        print(f"{pokemon['name']}: {pokemon['height'] / 10:.1f} m, {pokemon['weight'] / 10:.1f} kg")

    # results of batch instance 0, read while it is still fetching (no DAG edge needed)
    index_pokemon.iterate(pokemon=results_of("get_pokemon", map_index=0))


pokemon_iteration()
pokemon_batched_iteration()
