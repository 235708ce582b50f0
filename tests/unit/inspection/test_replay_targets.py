"""Where a replay may publish: the configuration and the dead-letter topic decide, never the dead letter."""

from __future__ import annotations

import pytest

from airflow_kafka_events.ui.inspection.errors import ReplayTargetRefusedError
from airflow_kafka_events.ui.inspection.replay_targets import ReplayTargets, WatchedSource, topic_list
from airflow_kafka_events.ui.settings import ViewSettings

pytestmark = pytest.mark.unit

DLQ = "airflow.kafka-events.dlq"
ASSETS = "airflow.asset-events"


def targets(dlq: str = DLQ, extra: tuple[str, ...] = (), watchers: tuple[WatchedSource, ...] = ()):
    return ReplayTargets.of(
        dlq, configured_dlq_topic=DLQ, asset_events_topic=ASSETS, extra=extra, watchers=watchers
    )


def test_the_asset_events_topic_is_a_source_of_the_configured_dead_letter_topic_only():
    assert targets().target_for(ASSETS) == ASSETS
    assert targets().choices(ASSETS) == [ASSETS]
    with pytest.raises(ReplayTargetRefusedError, match=r"'airflow\.asset-events'.*which no setting names"):
        targets(dlq="another.dlq").target_for(ASSETS)


@pytest.mark.parametrize(
    "forged",
    ["airflow.trigger-events", "airflow.kafka-events.dlq", "payments", "\x1b]0;owned\x07", "", " "],
)
def test_a_source_topic_no_setting_names_is_refused_naming_the_setting(forged):
    """The header is written by whoever writes to the dead-letter topic: it may not pick a topic."""
    with pytest.raises(ReplayTargetRefusedError) as refused:
        targets().target_for(forged)
    message = str(refused.value)
    assert repr(forged) in message and "nothing was published" in message
    assert "fix: an administrator adds the topic to [kafka_events] replay_extra_target_topics" in message
    assert "'airflow.asset-events' ([kafka_events] asset_events_topic)" in message  # what is allowed
    assert targets().choices(forged) == []
    # asking for an allowed target does not make an unknown source acceptable
    with pytest.raises(ReplayTargetRefusedError):
        targets(extra=("retry",)).target_for(forged, "retry")


def test_a_replay_goes_to_the_source_topic_or_a_listed_extra_topic():
    allowed = targets(extra=("orders.retry",))
    assert allowed.target_for(ASSETS, None) == ASSETS
    assert allowed.target_for(ASSETS, "  ") == ASSETS
    assert allowed.target_for(ASSETS, "orders.retry") == "orders.retry"
    assert allowed.choices(ASSETS) == [ASSETS, "orders.retry"]
    with pytest.raises(ReplayTargetRefusedError, match=r"'airflow\.trigger-events' is not the dead letter's"):
        allowed.target_for(ASSETS, "airflow.trigger-events")
    # a topic listed as an extra target is also an allowed source (an administrator said so)
    assert allowed.target_for("orders.retry") == "orders.retry"


def test_a_watcher_s_topics_are_sources_of_its_own_dead_letter_topic_only():
    watchers = (
        WatchedSource("orders_watch", ("orders", "orders.eu"), DLQ),
        WatchedSource("billing_watch", ("billing",), "billing.dlq"),
        WatchedSource("no_dlq_watch", ("logs",), None),
    )
    ours = targets(watchers=watchers)
    assert ours.target_for("orders.eu") == "orders.eu"
    assert ours.sources["orders"] == "the topics of asset watcher 'orders_watch'"
    for other in ("billing", "logs"):
        with pytest.raises(ReplayTargetRefusedError):
            ours.target_for(other)
    billing = targets(dlq="billing.dlq", watchers=watchers)
    assert billing.target_for("billing") == "billing"
    with pytest.raises(ReplayTargetRefusedError):
        billing.target_for(ASSETS)  # not the configured dead-letter topic: the bridge does not write it
    with pytest.raises(ReplayTargetRefusedError, match="'billing' is not the dead letter's source topic"):
        ours.target_for("orders", "billing")  # another watcher's topic is no target


def test_the_extra_targets_option_is_a_comma_separated_list():
    assert topic_list(" a.retry, b ,,") == frozenset({"a.retry", "b"})
    assert topic_list(None) == topic_list("") == frozenset()
    settings = ViewSettings.from_options({"replay_extra_target_topics": " a.retry, b ,,"})
    assert settings.replay_extra_target_topics == frozenset({"a.retry", "b"})
    assert ViewSettings.from_options({}).replay_extra_target_topics == frozenset()
