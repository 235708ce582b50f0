import { Box, HStack, Stack, Text } from "@chakra-ui/react";

import { LineChart, firstSeries } from "../charts.jsx";
import { view } from "../links.js";
import { Time } from "../time.jsx";
import { DagLink, DagRunLink, DataTable, Loading, Problem, StateBadge, TaskLink, Title, To, Window } from "../ui.jsx";
import { useApi } from "../useApi.js";

// Series a stream or a consumer row may carry (the stream index's history), newest API first.
export const PAGES_SERIES = ["pages_over_time", "pages_series", "page_history", "history"];
export const LAG_SERIES = ["lag_over_time", "lag_series", "lag_history", "history"];

function lagText(lag) {
  return lag === null || lag === undefined ? "lag ?" : `lag ${lag}`;
}

export function ConsumerList({ consumers }) {
  if (!consumers?.length) return <Text color="fg.muted">none</Text>;
  return (
    <Stack gap={1}>
      {consumers.map((c) => (
        <Box key={`${c.dag_id}/${c.run_id}/${c.task_id}/${c.map_index}`} className="consumer">
          <TaskLink dagId={c.dag_id} runId={c.run_id} taskId={c.task_id} mapIndex={c.map_index} />{" "}
          <Text as="span" className="lag" color={c.lag_pages ? "fg.warning" : "fg.muted"}>
            ({lagText(c.lag_pages)})
          </Text>
        </Box>
      ))}
    </Stack>
  );
}

const COLUMNS = [
  {
    key: "stream",
    header: "Stream",
    cell: (s) => (
      <To to={view.stream(s.trigger_run_id, s.partition, s.last_offset)} kind="stream" fontFamily="mono" fontSize="xs">
        {s.trigger_run_id}
      </To>
    ),
  },
  { key: "dag", header: "DAG", cell: (s) => <DagLink dagId={s.dag_id} /> },
  { key: "run", header: "DAG run", cell: (s) => <DagRunLink dagId={s.dag_id} runId={s.run_id} /> },
  { key: "task", header: "Task", cell: (s) => <TaskLink dagId={s.dag_id} runId={s.run_id} taskId={s.task_id} mapIndex={s.map_index} /> },
  { key: "state", header: "State", cell: (s) => <StateBadge state={s.state} /> },
  { key: "pages", header: "Pages", cell: (s) => String(s.pages ?? "-") },
  {
    key: "trend",
    header: "Pages over time",
    cell: (s) => <LineChart id="stream-pages" points={firstSeries(s, PAGES_SERIES, ["pages", "value", "v"])} label="pages" />,
  },
  { key: "last", header: "Last page", cell: (s) => <Time value={s.last_at} /> },
  { key: "consumers", header: "Consumers", cell: (s) => <ConsumerList consumers={s.consumers} /> },
];

function StreamTable({ streams }) {
  // the chart column only when some stream has a history to draw
  const charted = streams.some((s) => firstSeries(s, PAGES_SERIES, ["pages", "value", "v"]).length);
  return (
    <DataTable
      id="streams"
      columns={charted ? COLUMNS : COLUMNS.filter((c) => c.key !== "trend")}
      rows={streams}
      rowKey={(s) => s.trigger_run_id}
      rowProps={(s) => ({ className: "stream", "data-stream": s.trigger_run_id, "data-state": s.state ?? "" })}
      empty="No stream matches."
    />
  );
}

// The task-instance tab: the stream this task instance writes and those it reads.
function TaskInstanceStreams({ data }) {
  const own = data.task_instance_stream;
  const reads = data.read_by_task_instance ?? [];
  const ownRow = (data.streams ?? []).find((s) => s.trigger_run_id === own);
  return (
    <Box my={3}>
      <Title>This task instance's stream</Title>
      {own ? (
        <HStack gap={2}>
          <To to={view.stream(own, ownRow?.partition, ownRow?.last_offset)} kind="stream" id="own-stream">
            {own}
          </To>
          {ownRow ? <StateBadge state={ownRow.state} /> : null}
        </HStack>
      ) : (
        <Text color="fg.muted" id="no-own-stream">
          It writes no stream.
        </Text>
      )}
      <Title>Streams it reads</Title>
      {reads.length ? (
        <Stack gap={1} id="reads">
          {reads.map((r) => (
            <Box key={r.trigger_run_id} className="reads" data-stream={r.trigger_run_id}>
              <To to={view.stream(r.trigger_run_id)} kind="stream">
                {r.trigger_run_id}
              </To>{" "}
              <Text as="span" color="fg.muted">
                ({r.pages_handled ?? "?"} pages handled, {lagText(r.lag_pages)})
              </Text>
            </Box>
          ))}
        </Stack>
      ) : (
        <Text color="fg.muted">It reads no stream.</Text>
      )}
    </Box>
  );
}

// Streams, all or those of a DAG / DAG run / task instance (the tabs Airflow shows on them).
export function StreamsPage({ dagId, runId, taskId, mapIndex }) {
  const params = { dag_id: dagId, run_id: runId, task_id: taskId, map_index: mapIndex };
  const { data, error, loading } = useApi("streams", params);
  const taskTab = Boolean(dagId && runId && taskId);
  return (
    <Box id="streams-page">
      {taskTab ? null : <Title>Streams{dagId ? ` of ${dagId}` : ""}{runId ? ` / ${runId}` : ""}</Title>}
      {loading && !data ? <Loading what="streams" /> : null}
      <Problem error={error} />
      {data ? (
        <>
          {taskTab ? <TaskInstanceStreams data={data} /> : null}
          {taskTab ? <Title>Streams of this task instance</Title> : null}
          <StreamTable streams={data.streams ?? []} />
          <Window text={data.window_text} />
        </>
      ) : null}
    </Box>
  );
}
