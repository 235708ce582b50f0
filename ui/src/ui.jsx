import { Alert, Badge, Box, Code, Heading, Link, Spinner, Table, Text } from "@chakra-ui/react";
import { Link as RouterLink } from "react-router-dom";

import { airflow } from "./links.js";

// A link that navigates inside Airflow's UI (its router: no page load, no frame).
export function To({ to, children, kind, ...rest }) {
  return (
    <Link asChild color="fg.info" {...rest}>
      <RouterLink to={to} data-link={kind}>
        {children}
      </RouterLink>
    </Link>
  );
}

export function DagLink({ dagId }) {
  return (
    <To to={airflow.dag(dagId)} kind="dag">
      {dagId}
    </To>
  );
}

export function DagRunLink({ dagId, runId }) {
  return (
    <To to={airflow.dagRun(dagId, runId)} kind="dag-run">
      {runId}
    </To>
  );
}

export function TaskLink({ dagId, runId, taskId, mapIndex }) {
  const mapped = Number(mapIndex) >= 0;
  return (
    <To to={airflow.taskInstance(dagId, runId, taskId, mapIndex)} kind="task-instance">
      {taskId}
      {mapped ? ` [${mapIndex}]` : ""}
    </To>
  );
}

export function AssetLink({ assetId, name }) {
  if (assetId === undefined || assetId === null) return <Text as="span">{name}</Text>;
  return (
    <To to={airflow.asset(assetId)} kind="asset">
      {name}
    </To>
  );
}

const STATE_COLORS = {
  complete: "green",
  running: "blue",
  failed: "red",
  stuck: "orange",
  "not running": "orange",
};

export function StateBadge({ state }) {
  if (!state) return null;
  return (
    <Badge className="state" data-state={state} colorPalette={STATE_COLORS[state] ?? "gray"} variant="subtle">
      {state}
    </Badge>
  );
}

export function Loading({ what }) {
  return (
    <Box py={6} display="flex" gap={2} alignItems="center" color="fg.muted">
      <Spinner size="sm" /> <Text>Loading {what}…</Text>
    </Box>
  );
}

export function Problem({ error, title }) {
  if (!error) return null;
  const signIn = error.status === 401;
  return (
    <Alert.Root status="error" my={3} className="problem" data-status={error.status ?? ""}>
      <Alert.Indicator />
      <Alert.Content>
        <Alert.Title>{title ?? (signIn ? "Not signed in" : error.kind ?? "Error")}</Alert.Title>
        <Alert.Description>
          <Text whiteSpace="pre-wrap">{signIn ? "Sign in to Airflow again." : error.message}</Text>
        </Alert.Description>
      </Alert.Content>
    </Alert.Root>
  );
}

export function Window({ text }) {
  if (!text) return null;
  return (
    <Text className="window" fontSize="sm" color="fg.muted" my={2}>
      {text}
    </Text>
  );
}

export function Title({ children, id }) {
  return (
    <Heading size="md" my={3} id={id}>
      {children}
    </Heading>
  );
}

export function Mono({ children, ...rest }) {
  return (
    <Code fontSize="xs" whiteSpace="pre-wrap" wordBreak="break-all" {...rest}>
      {children}
    </Code>
  );
}

// A table: columns [{key, header}], rows of cells; rowProps(row) adds attributes to a row.
export function DataTable({ columns, rows, rowKey, rowProps, empty, id }) {
  if (!rows.length) {
    return (
      <Text color="fg.muted" my={3} className="empty">
        {empty}
      </Text>
    );
  }
  return (
    <Box overflowX="auto" borderWidth="1px" borderRadius="md" my={2}>
      <Table.Root size="sm" striped id={id}>
        <Table.Header>
          <Table.Row>
            {columns.map((c) => (
              <Table.ColumnHeader key={c.key}>{c.header}</Table.ColumnHeader>
            ))}
          </Table.Row>
        </Table.Header>
        <Table.Body>
          {rows.map((row, i) => (
            <Table.Row key={rowKey ? rowKey(row) : i} {...(rowProps ? rowProps(row) : {})}>
              {columns.map((c) => (
                <Table.Cell key={c.key} className={c.key} verticalAlign="top">
                  {c.cell(row)}
                </Table.Cell>
              ))}
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    </Box>
  );
}

// Label / value pairs.
export function Facts({ items, id }) {
  return (
    <Box as="dl" id={id} display="grid" gridTemplateColumns="max-content 1fr" columnGap={4} rowGap={1} my={3}>
      {items
        .filter(([, value]) => value !== undefined)
        .map(([label, value, key]) => (
          <Box display="contents" key={label}>
            <Text as="dt" color="fg.muted" fontSize="sm">
              {label}
            </Text>
            <Box as="dd" fontSize="sm" id={key}>
              {value === null || value === "" ? "-" : value}
            </Box>
          </Box>
        ))}
    </Box>
  );
}
