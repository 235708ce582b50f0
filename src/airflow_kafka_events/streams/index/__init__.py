"""The stream index: one small state record per stream and per consumer in a compacted topic.

* :mod:`.record`: the records (versioned JSON), their keys and codec;
* :mod:`.options`: the ``[kafka_events]`` options (topic, how often a producer writes);
* :mod:`.publisher`: what producers (the streaming trigger) and consumers write, and when.

Reading the index and listing streams with their consumers is what the view and the CLI show:
:mod:`airflow_kafka_events.ui.inspection.index_reader` and
:mod:`airflow_kafka_events.ui.inspection.index_listing`.

See docs/stream-index.md.  Imports no Airflow module.
"""
