"""Real Apache Kafka (KRaft mode) run from plain jars, without Docker: one node or a cluster.

The broker's runtime classpath is brought down once from Maven Central with ``mvn
dependency:copy-dependencies`` and cached under ``~/.cache/airflow-kafka-events/kafka-<version>/libs``
(``AIRFLOW_KAFKA_EVENTS_CACHE`` replaces ``~/.cache/airflow-kafka-events``).

:class:`LocalKafkaBroker` is one process (broker + controller) owning one *state dir*::

    broker.json        ports, cluster id and Kafka version chosen for this state dir
    server.properties  the broker configuration (rewritten on every start)
    log4j2.xml         logging configuration (everything goes to logs/, nothing to the console)
    kafka.pid          pid of the running broker
    kafka.out          the JVM's stdout/stderr
    logs/server.log    the broker log
    data/              log.dirs (topic data and KRaft metadata, formatted once)

:class:`LocalKafkaCluster` runs N of them (``node-<id>/`` state dirs) as one KRaft cluster, with
PLAINTEXT or SASL_SSL (SCRAM-SHA-512 over TLS) client listeners; see :mod:`.cluster`.

Processes are started detached (``setsid``) and stopped by pid (SIGTERM, then SIGKILL after a
deadline), never by process name; a pid is only signalled after checking that its command line
is our ``kafka.Kafka`` process with our ``server.properties``.

This package imports no Airflow module.
"""

from __future__ import annotations

from airflow_kafka_events.local_broker import java
from airflow_kafka_events.local_broker._common import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_KAFKA_VERSION,
    DEFAULT_PORT,
    BrokerStatus,
    ClusterStatus,
    NodeStatus,
    default_cache_dir,
    default_state_dir,
    new_cluster_id,
)
from airflow_kafka_events.local_broker.broker import ClusterContext, LocalKafkaBroker
from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster, is_cluster_dir, masked, wants_cluster
from airflow_kafka_events.local_broker.jars import render_pom
from airflow_kafka_events.local_broker.java import check_java, find_java, parse_java_version
from airflow_kafka_events.local_broker.properties import render_server_properties, replication_for
from airflow_kafka_events.local_broker.security import (
    SECURITY_CHOICES,
    SECURITY_PLAINTEXT,
    SECURITY_SASL_SSL,
    SecurityMaterial,
    write_ca,
)

__all__ = [
    "DEFAULT_CONTROLLER_PORT",
    "DEFAULT_KAFKA_VERSION",
    "DEFAULT_PORT",
    "SECURITY_CHOICES",
    "SECURITY_PLAINTEXT",
    "SECURITY_SASL_SSL",
    "BrokerStatus",
    "ClusterContext",
    "ClusterStatus",
    "LocalKafkaBroker",
    "LocalKafkaCluster",
    "NodeStatus",
    "SecurityMaterial",
    "check_java",
    "default_cache_dir",
    "default_state_dir",
    "find_java",
    "is_cluster_dir",
    "java",
    "masked",
    "new_cluster_id",
    "parse_java_version",
    "render_pom",
    "render_server_properties",
    "replication_for",
    "wants_cluster",
    "write_ca",
]
