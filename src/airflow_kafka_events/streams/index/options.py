"""The stream index's ``[kafka_events]`` options, read without importing Airflow.

=================================  =======================================  ==========================
option                             default                                  meaning
=================================  =======================================  ==========================
``stream_index_topic``             ``airflow.kafka-events.stream-index``    the index topic
``stream_index_every_pages``       ``100``                                  a producer writes its
                                                                            record every N pages ...
``stream_index_every_seconds``     ``10``                                   ... or S seconds (at the
                                                                            next page), whichever first
``stream_index_retention_ms``      ``604800000`` (7 days)                   a stream leaves the index
                                                                            this long after its last
                                                                            record (``topics ensure``)
=================================  =======================================  ==========================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_kafka_events.airflow_config import airflow_option
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.topic_plan import SECTION, STREAM_INDEX_TOPIC, configured_topic

__all__ = [
    "DEFAULT_EVERY_PAGES",
    "DEFAULT_EVERY_SECONDS",
    "TOPIC_OPTION",
    "Cadence",
    "index_topic",
]

TOPIC_OPTION = "stream_index_topic"
DEFAULT_EVERY_PAGES = 100
DEFAULT_EVERY_SECONDS = 10.0


def index_topic(environ: Mapping[str, str] | None = None) -> str:
    """The topic ``[kafka_events] stream_index_topic`` names (default: :data:`STREAM_INDEX_TOPIC`)."""
    return configured_topic(TOPIC_OPTION, STREAM_INDEX_TOPIC, environ)


def _number(option: str, default: float, environ: Mapping[str, str] | None) -> float:
    text = airflow_option(SECTION, option, None, environ=environ)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigurationError(f"[{SECTION}] {option} must be a number > 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Cadence:
    """When a writer writes its record again: every ``pages`` pages or ``seconds`` seconds."""

    pages: int = DEFAULT_EVERY_PAGES
    seconds: float = DEFAULT_EVERY_SECONDS

    @classmethod
    def from_config(cls, environ: Mapping[str, str] | None = None) -> Cadence:
        return cls(
            pages=int(_number("stream_index_every_pages", DEFAULT_EVERY_PAGES, environ)),
            seconds=_number("stream_index_every_seconds", DEFAULT_EVERY_SECONDS, environ),
        )

    def due(self, pages_since: int, seconds_since: float) -> bool:
        """Whether ``pages_since`` pages and ``seconds_since`` seconds after the last write call for one."""
        return pages_since >= self.pages or (pages_since > 0 and seconds_since >= self.seconds)
