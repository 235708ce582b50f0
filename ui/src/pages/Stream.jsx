import { Box, Flex, Heading, Text } from "@chakra-ui/react";
import { useLocation } from "react-router-dom";

import { LineChart, firstSeries } from "../charts.jsx";
import { Time } from "../time.jsx";
import {
  DagLink,
  DagRunLink,
  DataTable,
  Facts,
  Loading,
  Mono,
  Problem,
  StateBadge,
  TaskLink,
  Title,
  Window,
} from "../ui.jsx";
import { useApi } from "../useApi.js";
import { LAG_SERIES, PAGES_SERIES } from "./Streams.jsx";

// Pages written over time: the JSON's series when it has one, else counted from the pages shown.
function pagesOverTime(detail) {
  const given = firstSeries(detail, PAGES_SERIES, ["pages", "value", "v"]);
  if (given.length) return given;
  const summaryGiven = firstSeries(detail.summary, PAGES_SERIES, ["pages", "value", "v"]);
  if (summaryGiven.length) return summaryGiven;
  const times = (detail.pages ?? [])
    .filter((p) => !p.is_last)
    .map((p) => Date.parse(p.emitted_at))
    .filter(Number.isFinite)
    .sort((a, b) => a - b);
  return times.map((t, i) => ({ t, v: i + 1 }));
}

// The JSON's series counts every page written; counted from the pages shown, only those.
function pagesLabel(detail) {
  const given = firstSeries(detail, PAGES_SERIES, ["pages"]).length || firstSeries(detail.summary, PAGES_SERIES, ["pages"]).length;
  return given ? "pages written" : "pages written, of those shown below";
}

const PAGE_COLUMNS = [
  { key: "sequence", header: "#", cell: (p) => (p.is_last ? "end" : String(p.sequence_index)) },
  { key: "offset", header: "Offset", cell: (p) => String(p.offset) },
  { key: "attempt", header: "Attempt", cell: (p) => String(p.attempt) },
  { key: "emitted", header: "Emitted", cell: (p) => <Time value={p.emitted_at} /> },
  { key: "bytes", header: "Bytes", cell: (p) => String(p.record_bytes ?? "-") },
  {
    key: "payload",
    header: "Payload",
    cell: (p) => (p.error ? <Text color="fg.error">{p.error}</Text> : <Mono>{p.payload_preview ?? ""}</Mono>),
  },
];

const CONSUMER_COLUMNS = [
  {
    key: "task",
    header: "Consumer task",
    cell: (c) => <TaskLink dagId={c.dag_id} runId={c.run_id} taskId={c.task_id} mapIndex={c.map_index} />,
  },
  { key: "handled", header: "Pages handled", cell: (c) => String(c.pages_handled ?? "-") },
  { key: "lag", header: "Lag (pages)", cell: (c) => (c.lag_pages === null || c.lag_pages === undefined ? "?" : String(c.lag_pages)) },
  {
    key: "lag-chart",
    header: "Lag over time",
    cell: (c) => <LineChart id="consumer-lag" points={firstSeries(c, LAG_SERIES, ["lag", "lag_pages", "value", "v"])} label="lag" unit="pages" />,
  },
  { key: "finished", header: "Finished", cell: (c) => (c.finished ? "yes" : "no") },
  { key: "updated", header: "Checkpoint", cell: (c) => <Time value={c.updated_at} /> },
  { key: "problem", header: "Problem", cell: (c) => c.problem ?? "" },
];

function safeDecode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

export function StreamPage() {
  const location = useLocation();
  const match = location.pathname.match(/\/streams\/(.+)$/);
  const streamId = match ? safeDecode(match[1]) : "";
  const query = new URLSearchParams(location.search);
  const { data, error, loading } = useApi(`streams/${streamId.split("/").map(encodeURIComponent).join("/")}`, {
    partition: query.get("partition"),
    offset: query.get("offset"),
  });
  const s = data?.summary ?? {};
  const pages = data ? pagesOverTime(data) : [];
  return (
    <Box id="stream-page">
      <Title>
        Stream <Text as="span" id="stream-id">{streamId}</Text>
      </Title>
      {loading && !data ? <Loading what="the stream" /> : null}
      <Problem error={error} />
      {data ? (
        <>
          <Facts
            id="stream-facts"
            items={[
              ["DAG", <DagLink dagId={s.dag_id} />],
              ["DAG run", <DagRunLink dagId={s.dag_id} runId={s.run_id} />],
              ["Task instance", <TaskLink dagId={s.dag_id} runId={s.run_id} taskId={s.task_id} mapIndex={s.map_index} />],
              ["State", <StateBadge state={s.state} />, "stream-state"],
              ["Pages", String(s.pages ?? "-"), "stream-pages"],
              ["Attempt", String(s.attempt ?? "-")],
              ["First page", <Time value={s.first_at} />],
              ["Last page", <Time value={s.last_at} />],
              ["Where", `${s.topic ?? "?"} partition ${s.partition ?? "?"}`],
              ["Error", s.error ? <Text color="fg.error">{s.error}</Text> : null],
            ]}
          />
          <Flex gap={8} wrap="wrap" my={3}>
            <Box>
              <Heading size="sm">Pages over time</Heading>
              {pages.length ? (
                <LineChart id="pages-over-time" points={pages} label={pagesLabel(data)} />
              ) : (
                <Text color="fg.muted">No page yet.</Text>
              )}
            </Box>
          </Flex>
          <Title>Consumers</Title>
          <DataTable
            id="consumers"
            columns={
              (data.consumers ?? []).some((c) => firstSeries(c, LAG_SERIES, ["lag", "lag_pages", "value", "v"]).length)
                ? CONSUMER_COLUMNS
                : CONSUMER_COLUMNS.filter((c) => c.key !== "lag-chart")
            }
            rows={data.consumers ?? []}
            rowProps={(c) => ({ className: "consumer-row", "data-task": c.task_id })}
            empty="No consumer has a checkpoint of this stream."
          />
          <Title>Pages</Title>
          <DataTable
            id="pages"
            columns={PAGE_COLUMNS}
            rows={data.pages ?? []}
            rowKey={(p) => p.offset}
            rowProps={(p) => ({ className: "page", "data-offset": p.offset })}
            empty="No page in the window."
          />
          <Window text={data.window_text} />
        </>
      ) : null}
    </Box>
  );
}
