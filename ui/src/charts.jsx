import { Box, Text } from "@chakra-ui/react";

import { exact } from "./time.jsx";

// [{t: ms, v: number}] from what the JSON holds: [[time, value], ...] or [{at|time|t|ts, <value>}, ...].
export function series(raw, valueKeys = ["value", "v", "lag", "pages"]) {
  if (!Array.isArray(raw)) return [];
  const points = [];
  for (const item of raw) {
    let time;
    let value;
    if (Array.isArray(item)) [time, value] = item;
    else if (item && typeof item === "object") {
      time = item.at ?? item.time ?? item.t ?? item.ts ?? item.timestamp;
      value = valueKeys.map((k) => item[k]).find((v) => v !== undefined && v !== null);
    }
    const t = typeof time === "number" ? time : Date.parse(time);
    const v = Number(value);
    if (Number.isFinite(t) && Number.isFinite(v)) points.push({ t, v });
  }
  return points.sort((a, b) => a.t - b.t);
}

// The first array among obj[keys...] (fields another version of the API may add).
export function firstSeries(obj, keys, valueKeys) {
  for (const key of keys) {
    const points = series(obj?.[key], valueKeys);
    if (points.length) return points;
  }
  return [];
}

const W = 320;
const H = 80;
const PAD = 4;
// Points are marked (with their value on hover) up to this many; beyond, the line only.
const MAX_DOTS = 60;

// A step line of points over time, its last value and its time span in the caption.
export function LineChart({ points, label, unit, id }) {
  if (!points.length) return null;
  const t0 = points[0].t;
  const t1 = points[points.length - 1].t;
  const vmax = Math.max(1, ...points.map((p) => p.v));
  const x = (t) => PAD + (t1 === t0 ? W - 2 * PAD : ((t - t0) / (t1 - t0)) * (W - 2 * PAD));
  const y = (v) => H - PAD - (v / vmax) * (H - 2 * PAD);
  let d = `M${x(points[0].t).toFixed(1)},${y(points[0].v).toFixed(1)}`;
  for (const p of points.slice(1)) d += ` H${x(p.t).toFixed(1)} V${y(p.v).toFixed(1)}`;
  if (t1 === t0) d += ` H${(W - PAD).toFixed(1)}`;
  const last = points[points.length - 1];
  return (
    <Box className="chart" data-chart={id} data-points={points.length}>
      <Box color="fg.info">
        <svg width={W} height={H} viewBox={`0 0 ${W} ${H}`} role="img" aria-label={label}>
          <title>{`${label}: ${last.v}${unit ? ` ${unit}` : ""} at ${exact(new Date(last.t).toISOString())}`}</title>
          <line x1={PAD} x2={W - PAD} y1={H - PAD} y2={H - PAD} stroke="currentColor" strokeOpacity="0.25" />
          <path d={d} fill="none" stroke="currentColor" strokeWidth="2" />
          {points.length > MAX_DOTS ? null : points.map((p) => (
            <circle key={`${p.t}-${p.v}`} cx={x(p.t)} cy={y(p.v)} r="2.5" fill="currentColor">
              <title>{`${p.v}${unit ? ` ${unit}` : ""} at ${exact(new Date(p.t).toISOString())}`}</title>
            </circle>
          ))}
        </svg>
      </Box>
      <Text fontSize="xs" color="fg.muted">
        {label}: max {vmax}
        {unit ? ` ${unit}` : ""}, now {last.v}
      </Text>
    </Box>
  );
}

// One bar per item: [{label, value}]; an unknown value (null) is drawn as a dashed outline.
export function BarChart({ items, label, id }) {
  if (!items.length) return null;
  const vmax = Math.max(1, ...items.map((i) => Number(i.value) || 0));
  const bw = 28;
  const gap = 10;
  const width = items.length * (bw + gap) + gap;
  const height = 90;
  const base = height - 18;
  return (
    <Box className="chart" data-chart={id} data-bars={items.length} color="fg.info">
      <svg width={width} height={height} viewBox={`0 0 ${width} ${height}`} role="img" aria-label={label}>
        <title>{label}</title>
        {items.map((item, i) => {
          const known = item.value !== null && item.value !== undefined;
          const h = known ? Math.max(1, (Number(item.value) / vmax) * (base - 12)) : base - 12;
          const x = gap + i * (bw + gap);
          return (
            <g key={item.label} className="bar" data-label={item.label} data-value={known ? item.value : ""}>
              <title>{`${item.label}: ${known ? item.value : "unknown"}`}</title>
              <rect
                x={x}
                y={base - h}
                width={bw}
                height={h}
                fill={known ? "currentColor" : "none"}
                stroke="currentColor"
                strokeDasharray={known ? undefined : "3 3"}
                fillOpacity="0.8"
              />
              <text x={x + bw / 2} y={base - h - 2} fontSize="10" textAnchor="middle" fill="currentColor">
                {known ? item.value : "?"}
              </text>
              <text x={x + bw / 2} y={height - 4} fontSize="10" textAnchor="middle" fill="currentColor">
                {item.label}
              </text>
            </g>
          );
        })}
      </svg>
    </Box>
  );
}
