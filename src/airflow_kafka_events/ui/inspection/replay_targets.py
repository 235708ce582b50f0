"""Where a replay of a dead letter may publish: decided by configuration and the dead-letter topic read.

A dead letter names its source topic in its own ``x-source-topic`` header, and whoever may write to
the dead-letter topic writes that header.  So the header only *selects* among topics the
configuration already names as sources of that dead-letter topic; it never adds one:

* the asset events topic (``[kafka_events] asset_events_topic``), when the dead-letter topic read is
  ``[kafka_events] dlq_topic`` (the partition bridge reads the one and dead-letters to the other);
* the topics of each asset watcher whose ``dlq_topic`` is the dead-letter topic read (known where
  Airflow's metadata database is: the view; the CLI, which imports no Airflow module, has none);
* the topics ``[kafka_events] replay_extra_target_topics`` lists (an administrator's setting).

The trigger events topic (streams) is no source: nothing dead-letters a stream's records.

:meth:`ReplayTargets.target_for` is the rule, applied by
:func:`~airflow_kafka_events.ui.inspection.replay.replay_dead_letter` itself, so the view and
``airflow-kafka-events dlq replay`` cannot differ: a dead letter whose source topic is none of
those is refused (:class:`~airflow_kafka_events.ui.inspection.errors.ReplayTargetRefusedError`, naming
the setting), and a replay goes to the source topic or a topic ``replay_extra_target_topics`` lists.
A reference dead letter's original is read from its source topic, so that topic is checked before
anything is read.

This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_kafka_events.ui.inspection.errors import ReplayTargetRefusedError

__all__ = [
    "EXTRA_TARGETS_OPTION",
    "ReplayTargets",
    "WatchedSource",
    "topic_list",
]

#: The ``[kafka_events]`` option that widens where a replay may go.
EXTRA_TARGETS_OPTION = "replay_extra_target_topics"


def topic_list(text: str | None) -> frozenset[str]:
    """The topics of a comma-separated option value (blanks dropped)."""
    return frozenset(t.strip() for t in (text or "").split(",") if t.strip())


@dataclass(frozen=True)
class WatchedSource:
    """An asset watcher as a source of dead letters: its topics and its dead-letter topic."""

    name: str
    topics: Sequence[str]
    dlq_topic: str | None


@dataclass(frozen=True)
class ReplayTargets:
    """The topics a replay of a dead letter read from :attr:`dlq_topic` may publish to.

    ``sources``: topic -> the setting that names it a source of :attr:`dlq_topic` (said in errors);
    ``extra``: ``[kafka_events] replay_extra_target_topics``.
    """

    dlq_topic: str
    sources: Mapping[str, str] = field(default_factory=dict)
    extra: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        dlq_topic: str,
        *,
        configured_dlq_topic: str,
        asset_events_topic: str,
        extra: Iterable[str] = (),
        watchers: Iterable[WatchedSource] = (),
    ) -> ReplayTargets:
        """The targets of ``dlq_topic`` under this configuration (see the module doc)."""
        sources: dict[str, str] = {}
        if dlq_topic == configured_dlq_topic:
            sources[asset_events_topic] = "[kafka_events] asset_events_topic"
        for watcher in watchers:
            if watcher.dlq_topic == dlq_topic:
                for topic in watcher.topics:
                    sources.setdefault(topic, f"the topics of asset watcher {watcher.name!r}")
        return cls(dlq_topic, sources, frozenset(extra))

    def _refused(self, what: str) -> ReplayTargetRefusedError:
        known = ", ".join(f"{t!r} ({why})" for t, why in sorted(self.sources.items())) or "none"
        extra = ", ".join(repr(t) for t in sorted(self.extra)) or "none"
        return ReplayTargetRefusedError(
            f"{what}; a replay of a dead letter from {self.dlq_topic!r} may publish to its source topic "
            f"when the configuration names that topic a source of {self.dlq_topic!r} (sources: {known}), "
            f"or to a topic [kafka_events] {EXTRA_TARGETS_OPTION} lists ({extra}); nothing was "
            f"published (fix: an administrator adds the topic to [kafka_events] {EXTRA_TARGETS_OPTION})"
        )

    def target_for(self, source_topic: str, requested: str | None = None) -> str:
        """The topic a replay of a dead letter naming ``source_topic`` goes to (``requested``, else
        the source topic), or :class:`ReplayTargetRefusedError`."""
        if source_topic not in self.sources and source_topic not in self.extra:
            raise self._refused(
                f"the dead letter names {source_topic!r} as its source topic (its x-source-topic header, "
                "written by whoever wrote to the dead-letter topic), which no setting names"
            )
        target = (requested or "").strip() or source_topic
        if target != source_topic and target not in self.extra:
            raise self._refused(f"{target!r} is not the dead letter's source topic {source_topic!r}")
        return target

    def choices(self, source_topic: str) -> list[str]:
        """The topics a replay of a dead letter naming ``source_topic`` may go to (empty: none)."""
        if source_topic not in self.sources and source_topic not in self.extra:
            return []
        return [source_topic, *sorted(self.extra - {source_topic})]

    def to_dict(self) -> dict[str, object]:
        return {"dlq_topic": self.dlq_topic, "sources": dict(self.sources), "extra": sorted(self.extra)}
