import { Box, Text } from "@chakra-ui/react";

import { view } from "../links.js";
import { Time } from "../time.jsx";
import { DataTable, Loading, Mono, Problem, Title, To, Window } from "../ui.jsx";
import { useApi } from "../useApi.js";

const COLUMNS = [
  {
    key: "where",
    header: "Dead letter",
    cell: (r) => (
      <To to={view.deadLetter(r.partition, r.offset)} kind="dead-letter" className="open">
        {r.partition}:{r.offset}
      </To>
    ),
  },
  { key: "when", header: "When", cell: (r) => <Time value={r.timestamp} /> },
  { key: "reason", header: "Reason", cell: (r) => r.reason },
  { key: "source", header: "Source", cell: (r) => `${r.source_topic}:${r.source_partition}:${r.source_offset}` },
  { key: "consumer", header: "Consumer", cell: (r) => r.consumer ?? "-" },
  {
    key: "error",
    header: "Error",
    cell: (r) => (
      <Text fontSize="sm">
        {r.error_type}: {r.error_message}
      </Text>
    ),
  },
  { key: "payload", header: "Payload", cell: (r) => <Mono>{r.payload_preview}</Mono> },
];

export function DeadLettersPage() {
  const { data, error, loading } = useApi("dead-letters");
  return (
    <Box id="dead-letters-page">
      <Title>Dead letters{data?.topic ? ` in ${data.topic}` : ""}</Title>
      {loading && !data ? <Loading what="dead letters" /> : null}
      <Problem error={error} />
      {data ? (
        <>
          <DataTable
            id="dead-letters"
            columns={COLUMNS}
            rows={data.records ?? []}
            rowKey={(r) => `${r.partition}:${r.offset}`}
            rowProps={(r) => ({ className: "dead-letter", "data-coords": `${r.topic}:${r.partition}:${r.offset}` })}
            empty="No dead letter in the window."
          />
          <Window text={data.window_text} />
        </>
      ) : null}
    </Box>
  );
}
