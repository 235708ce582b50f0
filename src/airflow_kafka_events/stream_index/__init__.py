"""The stream index: one small state record per stream and per consumer in a compacted topic.

* :mod:`.record`: the records (versioned JSON), their keys and codec;
* :mod:`.options`: the ``[kafka_events]`` options (topic, how often a producer writes);
* :mod:`.publisher`: what producers (the streaming trigger) and consumers write, and when;
* :mod:`.reader`: reading the index topic (all of it, or what is new since the last read);
* :mod:`.listing`: streams merged with their consumers, filtered, as pages and the CLI show them.

See docs/stream-index.md.  Imports no Airflow module.
"""
