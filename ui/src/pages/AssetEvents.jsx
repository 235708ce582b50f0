import { Box, Stack, Text } from "@chakra-ui/react";
import { useLocation } from "react-router-dom";

import { view } from "../links.js";
import { Time } from "../time.jsx";
import { AssetLink, DagRunLink, DataTable, Loading, Mono, Problem, Title, To, Window } from "../ui.jsx";
import { useApi } from "../useApi.js";

function Outcome({ event }) {
  const made = event.airflow_events ?? [];
  if (made.length) {
    return (
      <Stack gap={1}>
        {made.map((a) => (
          <Box key={a.id} className="airflow-event">
            <Text as="span">asset event {a.id} of </Text>
            <AssetLink assetId={a.asset_id} name={a.asset} />
            <Text as="span" color="fg.muted"> (via {a.via}) </Text>
            {(a.dag_runs ?? []).map((r) => (
              <Box key={`${r.dag_id}/${r.run_id}`}>
                → <DagRunLink dagId={r.dag_id} runId={r.run_id} /> <Text as="span" color="fg.muted">({r.dag_id})</Text>
              </Box>
            ))}
          </Box>
        ))}
      </Stack>
    );
  }
  if (event.dead_letter) {
    return (
      <To to={view.deadLetter(event.dead_letter.partition, event.dead_letter.offset)} kind="dead-letter">
        dead letter ({event.dead_letter.reason})
      </To>
    );
  }
  return <Text color="fg.muted">not in Airflow (yet)</Text>;
}

const COLUMNS = [
  { key: "when", header: "Emitted", cell: (e) => <Time value={e.emitted_at ?? e.timestamp} /> },
  { key: "asset", header: "Asset", cell: (e) => <Mono>{e.asset_uri}</Mono> },
  { key: "partition-key", header: "Partition key", cell: (e) => e.partition_key ?? "-" },
  {
    key: "source",
    header: "Source",
    cell: (e) => (e.source && typeof e.source === "object" ? Object.entries(e.source).map(([k, v]) => `${k}=${v}`).join(" ") : "-"),
  },
  {
    key: "causation",
    header: "Caused by",
    cell: (e) =>
      (e.causation ?? []).map((id) => (
        <Box key={id}>
          <To to={view.assetEvent(id)} kind="asset-event">
            {id}
          </To>
        </Box>
      )),
  },
  { key: "extra", header: "Extra", cell: (e) => <Mono>{e.extra_preview}</Mono> },
  { key: "outcome", header: "In Airflow", cell: (e) => <Outcome event={e} /> },
];

export function AssetEventsPage() {
  const query = new URLSearchParams(useLocation().search);
  const eventId = query.get("event_id");
  const { data, error, loading } = useApi("asset-events", { event_id: eventId, asset: query.get("asset") });
  return (
    <Box id="asset-events-page">
      <Title>Asset events{eventId ? ` — event ${eventId}` : ""}</Title>
      {loading && !data ? <Loading what="asset events" /> : null}
      <Problem error={error} />
      {data ? (
        <>
          <DataTable
            id="asset-events"
            columns={COLUMNS}
            rows={data.events ?? []}
            rowKey={(e) => `${e.partition}:${e.offset}`}
            rowProps={(e) => ({ className: "asset-event", "data-event": e.event_id })}
            empty="No asset event in the window."
          />
          <Window text={data.window_text} />
        </>
      ) : null}
    </Box>
  );
}
