import { Box, Stack, Text } from "@chakra-ui/react";

import { BarChart } from "../charts.jsx";
import { view } from "../links.js";
import { Time } from "../time.jsx";
import { AssetLink, DataTable, Loading, Problem, StateBadge, Title, To } from "../ui.jsx";
import { useApi } from "../useApi.js";

// {topic: [{partition, lag}] | "error text"} as one bar chart per topic.
function Lags({ topics, id }) {
  return (
    <Stack gap={2}>
      {Object.entries(topics ?? {}).map(([topic, lags]) =>
        typeof lags === "string" ? (
          <Text key={topic} color="fg.error">
            {topic}: {lags}
          </Text>
        ) : (
          <Box key={topic}>
            <Text fontSize="xs" color="fg.muted">
              {topic}: lag per partition
            </Text>
            <BarChart id={id} label={`${topic}: lag per partition`} items={lags.map((l) => ({ label: `p${l.partition}`, value: l.lag }))} />
          </Box>
        ),
      )}
    </Stack>
  );
}

const WATCHER_COLUMNS = [
  { key: "asset", header: "Asset", cell: (w) => <AssetLink assetId={w.asset_id} name={w.asset} /> },
  {
    key: "triggerer",
    header: "Triggerer",
    cell: (w) => (
      <Box>
        <Text>{w.triggerer_host ?? "no triggerer"}</Text>
        {w.triggerer_heartbeat ? (
          <Text fontSize="xs" color="fg.muted">
            heartbeat <Time value={w.triggerer_heartbeat} />
          </Text>
        ) : null}
      </Box>
    ),
  },
  { key: "lag", header: "Lag per partition", cell: (w) => <Lags topics={w.topics} id="watcher-lag" /> },
  { key: "stored", header: "Positions stored", cell: (w) => <Time value={w.positions_updated_at} /> },
  { key: "problem", header: "Problem", cell: (w) => (w.problem ? <Text color="fg.error">{w.problem}</Text> : "") },
];

const BRIDGE_COLUMNS = [
  { key: "group", header: "Consumer group", cell: (b) => b.group_id },
  { key: "state", header: "State", cell: (b) => <StateBadge state={b.state} /> },
  { key: "members", header: "Members", cell: (b) => String(b.members ?? "-") },
  {
    key: "lag",
    header: "Lag per partition",
    cell: (b) =>
      typeof b.partitions === "string" ? (
        <Text color="fg.error">{b.partitions}</Text>
      ) : (
        <Lags topics={{ [b.topic]: b.partitions ?? [] }} id="bridge-lag" />
      ),
  },
];

const STUCK_COLUMNS = [
  { key: "stream", header: "Stream", cell: (s) => <To to={view.stream(s.trigger_run_id, s.partition, s.last_offset)} kind="stream">{s.trigger_run_id}</To> },
  { key: "pages", header: "Pages", cell: (s) => String(s.pages ?? "-") },
  { key: "last", header: "Last page", cell: (s) => <Time value={s.last_at} /> },
];

export function HealthPage() {
  const { data, error, loading } = useApi("health");
  const post = data?.last_bridge_post;
  return (
    <Box id="health-page">
      {loading && !data ? <Loading what="health" /> : null}
      <Problem error={error} />
      {data ? (
        <>
          <Title id="watchers">Watchers</Title>
          <DataTable columns={WATCHER_COLUMNS} rows={data.watchers ?? []} rowProps={(w) => ({ className: "watcher", "data-asset": w.asset })} empty="No asset watcher of this package." />
          <Title id="bridges">Bridges</Title>
          <DataTable columns={BRIDGE_COLUMNS} rows={data.bridges ?? []} rowProps={(b) => ({ className: "bridge", "data-group": b.group_id })} empty="No bridge group configured ([kafka_events] ui_bridge_group_ids)." />
          <Text fontSize="sm" color="fg.muted" id="last-post">
            Last asset event a bridge posted:{" "}
            {post ? (
              <>
                asset event {post.id} of <AssetLink assetId={post.asset_id} name={post.asset} /> <Time value={post.timestamp} />
              </>
            ) : (
              "none"
            )}
          </Text>
          <Title id="stuck">Stuck streams (running, nothing written for {data.stuck_after_seconds} s)</Title>
          {data.streams_error ? <Text color="fg.error">{data.streams_error}</Text> : null}
          <DataTable columns={STUCK_COLUMNS} rows={data.stuck_streams ?? []} empty="None." />
        </>
      ) : null}
    </Box>
  );
}
