"""B8's summary and report: ratios of each phase's burst to Airflow's ceilings, paced latencies."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from benchmarks.harness import say

if TYPE_CHECKING:
    from benchmarks.watcher_throughput import Batch


#: The suffix of a ceiling configuration whose events are as large as a Kafka watcher's (``ceiling-<n>+pad``).
PADDED = "+pad"


def summarize(batches: list[Batch]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b in batches:
        if b.kind == "warmup":
            continue
        out.setdefault(b.label or b.phase, {})[b.kind] = {
            "events": b.count,
            "rows": b.rows,
            "distinct": b.distinct,
            "events_per_s": b.throughput,
            "steady_events_per_s": b.steady_rate,
            "latency_ms": b.latency_ms,
            "emit_to_fired_ms": b.emit_to_fired_ms,
            "fired_to_row_ms": b.fired_to_row_ms,
            "offered_rate": b.rate,
            "cpu_s": b.cpu_s,
            "position_stores": b.position_stores,
            "others_cores_before": b.others_before,
            "others_cores_during": b.others_during,
            "loadavg_after": b.loadavg_end,
        }
    shapes = {"ceiling", *(label.split("#", 1)[0] for label in out if label.startswith("ceiling-"))}
    references = {shape: _reference(out, shape) for shape in sorted(shapes)}
    for label, kinds in list(out.items()):
        if "burst" not in kinds:
            continue
        phase = label.split("#", 1)[0]
        _add_ratios(kinds, references["ceiling"], "")
        if phase.startswith("kafka-"):  # against Airflow's own ceiling in the same shape, when measured
            count = phase.split("-", 1)[1]
            _add_ratios(kinds, references.get(f"ceiling-{count}"), "_same_shape")
            _add_ratios(kinds, references.get(f"ceiling-{count}{PADDED}"), "_same_shape_padded")
    if references["ceiling"]:
        out["ceiling_reference"] = references["ceiling"]
    for shape, reference in references.items():
        if shape != "ceiling" and reference:
            out[f"{shape}_reference"] = reference
    return out


def _reference(out: dict[str, Any], shape: str) -> dict[str, Any] | None:
    """The mean of every burst of ceiling phase ``shape`` (one may run before and after the Kafka phases)."""
    bursts = [
        kinds["burst"] for label, kinds in out.items() if label.split("#", 1)[0] == shape and "burst" in kinds
    ]
    if not bursts:
        return None
    return {
        "events_per_s": round(statistics.fmean(c["events_per_s"] for c in bursts), 1),
        "steady_events_per_s": round(statistics.fmean(c["steady_events_per_s"] for c in bursts), 1),
        "ceiling_bursts": len(bursts),
    }


def _add_ratios(kinds: dict[str, Any], reference: dict[str, Any] | None, suffix: str) -> None:
    if not reference:
        return
    burst = kinds["burst"]
    kinds[f"ratio_to_ceiling{suffix}"] = round(burst["events_per_s"] / reference["events_per_s"], 2)
    kinds[f"steady_ratio_to_ceiling{suffix}"] = round(
        burst["steady_events_per_s"] / reference["steady_events_per_s"], 2
    )


def _ratio(value: float | None) -> str:
    """A ratio as printed; ``-`` where there is nothing to compare with (no such ceiling phase ran)."""
    return "-" if value is None else f"{value:.2f}"


def print_report(
    summary: dict[str, Any], rates: Sequence[float], triggerers: int = 1, database: str = "postgres"
) -> None:
    say("")
    where = "one triggerer" if triggerers == 1 else f"{triggerers} triggerers"
    say(f"B8 asset events into Airflow ({where}, {database}): bursts (events/s, ratio to the ceiling)")
    say(
        f"{'config':<10} {'events/s':>9} {'ratio':>6} {'steady/s':>9} {'ratio':>6} "
        f"{'p50':>8} {'p95':>8} {'emit->fired p50':>16} {'fired->row p50':>15} {'pos. stores':>11} "
        f"{'vs ceiling-N':>12} {'vs +pad':>8}"
    )
    for phase, kinds in summary.items():
        burst = kinds.get("burst")
        if not burst:
            continue
        ratio, steady_ratio, same_shape, padded = (
            _ratio(kinds.get(name))
            for name in (
                "ratio_to_ceiling",
                "steady_ratio_to_ceiling",
                "ratio_to_ceiling_same_shape",
                "ratio_to_ceiling_same_shape_padded",
            )
        )
        lat = burst["latency_ms"]
        say(
            f"{phase:<10} {burst['events_per_s']:>9.1f} {ratio:>6} {burst['steady_events_per_s']:>9.1f} "
            f"{steady_ratio:>6} {lat['p50']:>6.0f}ms {lat['p95']:>6.0f}ms "
            f"{burst['emit_to_fired_ms'].get('p50', float('nan')):>14.0f}ms "
            f"{burst['fired_to_row_ms'].get('p50', float('nan')):>13.0f}ms "
            f"{'-' if burst['position_stores'] is None else burst['position_stores']:>11} "
            f"{same_shape:>12} {padded:>8}"
        )
    _print_references(summary)
    say("paced batches: latency emit -> AssetEvent row")
    say(
        f"{'config':<10} {'offered':>8} {'got/s':>7} {'p50':>8} {'p95':>8} {'max':>8} {'emit->fired p50':>16}"
    )
    for phase, kinds in summary.items():
        if phase.endswith("_reference"):
            continue
        for rate in rates:
            paced = kinds.get(f"paced-{rate:g}")
            if not paced:
                continue
            lat = paced["latency_ms"]
            say(
                f"{phase:<10} {rate:>6g}/s {paced['events_per_s']:>7.1f} {lat['p50']:>6.0f}ms "
                f"{lat['p95']:>6.0f}ms {lat['max']:>6.0f}ms "
                f"{paced['emit_to_fired_ms'].get('p50', float('nan')):>14.0f}ms"
            )
    say("(the watcher path before the redesign is gone from the code: ratios are to Airflow's ceiling)")


def _print_references(summary: dict[str, Any]) -> None:
    """What each burst's ratios are measured against."""
    reference = summary.get("ceiling_reference")
    if reference:
        say(
            f"ratios are to the mean of {reference['ceiling_bursts']} ceiling burst(s): "
            f"{reference['events_per_s']:.1f} events/s, steady {reference['steady_events_per_s']:.1f}/s"
        )
    for key, shaped in summary.items():
        if not (key.startswith("ceiling-") and key.endswith("_reference") and shaped):
            continue
        config = key.removesuffix("_reference")
        n = config.removeprefix("ceiling-").removesuffix(PADDED)
        column, what = (
            ("'vs +pad'", "the same triggers, each event as large as a watcher's")
            if config.endswith(PADDED)
            else ("'vs ceiling-N'", f"the same {n} assets, each watched by a no-Kafka trigger")
        )
        say(
            f"{column}: kafka-{n} against the mean of {shaped['ceiling_bursts']} {config} burst(s) "
            f"({what}): {shaped['events_per_s']:.1f} events/s"
        )


def print_resources(resources: dict[str, Any]) -> None:
    """The triggerers' memory, threads and Kafka clients per phase, and per watcher."""
    say("triggerer(s) after each phase (all triggerers together; memory per watcher above 'no watcher')")
    say(
        f"{'phase':<14} {'watchers':>8} {'RSS MiB':>8} {'KiB/watcher':>11} {'threads':>7} {'rdk thr.':>8} "
        f"{'Kafka clients':>13} {'quiet CPU':>9} {'ms/s/watcher':>12} {'paced CPU':>9} {'ms/s/watcher':>12}"
    )
    for label, figures in resources.items():
        if label == "no watcher":
            total, count, per_kib = figures["all"], 0, None
        else:
            total, count, per_kib = (
                figures["triggerers"]["all"],
                figures["watchers"],
                figures["rss_per_watcher_kib"],
            )
        paced = next((k for k in figures if k.startswith("paced-") and k.endswith("_cpu_cores")), None)
        paced_per = paced.replace("_cpu_cores", "_cpu_ms_per_s_per_watcher") if paced else None
        say(
            f"{label:<14} {count:>8} {total['rss_mib']:>8.1f} {_figure(per_kib):>11} "
            f"{total['threads']:>7.0f} "
            f"{total['librdkafka_threads']:>8.0f} {total['kafka_clients']:>13.0f} "
            f"{_figure(figures.get('quiet_cpu_cores')):>9} "
            f"{_figure(figures.get('quiet_cpu_ms_per_s_per_watcher')):>12} "
            f"{_figure(figures.get(paced) if paced else None):>9} "
            f"{_figure(figures.get(paced_per) if paced_per else None):>12}"
        )


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
