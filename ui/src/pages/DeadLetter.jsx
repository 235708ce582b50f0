import { Alert, Box, Button, HStack, NativeSelect, Stack, Text } from "@chakra-ui/react";
import { useState } from "react";
import { useParams } from "react-router-dom";

import { getJson, postForm } from "../api.js";
import { view } from "../links.js";
import { Time } from "../time.jsx";
import { DataTable, Facts, Loading, Mono, Problem, Title, To } from "../ui.jsx";
import { useApi } from "../useApi.js";

const coordsOf = (r) => `${r.topic}:${r.partition}:${r.offset}`;

// The Replay action: a button, then a confirmation that repeats the record (its coordinates and
// fingerprint) and where it goes; only the confirmation posts.  The server checks again: the user
// may replay (an asset write), the CSRF token is theirs, the request's Origin is this site's, the
// record is the one confirmed and the target topic an allowed one.
function Replay({ record, user }) {
  const [step, setStep] = useState("idle"); // idle | loading | confirm | posting | done
  const [confirmation, setConfirmation] = useState(null);
  const [target, setTarget] = useState(record.source_topic);
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const path = `dead-letters/${record.partition}/${record.offset}/replay`;
  const mayReplay = Boolean(user?.may_replay);

  const open = () => {
    setError(null);
    setStep("loading");
    getJson(path).then(
      (answer) => {
        setConfirmation(answer);
        setTarget(answer.targets?.[0] ?? "");
        setStep("confirm");
      },
      (e) => {
        setError(e);
        setStep("idle");
      },
    );
  };
  const confirm = () => {
    setError(null);
    setStep("posting");
    postForm(path, {
      confirm: confirmation.form.confirm,
      fingerprint: confirmation.form.fingerprint,
      target_topic: target,
      [confirmation.csrf.field]: confirmation.csrf.value,
    }).then(
      (answer) => {
        setResult(answer);
        setStep("done");
      },
      (e) => {
        setError(e);
        setStep("confirm");
      },
    );
  };

  if (step === "done" && result) {
    const r = result.receipt ?? {};
    return (
      <Alert.Root status="success" my={3} id="replayed">
        <Alert.Indicator />
        <Alert.Content>
          <Alert.Title>Replayed {result.replayed}</Alert.Title>
          <Alert.Description>
            The original record was published again to {r.target_topic}:{r.target_partition}@{r.target_offset} by{" "}
            {r.actor}.
          </Alert.Description>
        </Alert.Content>
      </Alert.Root>
    );
  }
  const targets = confirmation?.targets ?? [];
  return (
    <Box my={3}>
      {step === "confirm" || step === "posting" ? (
        <Box id="confirm-form" borderWidth="1px" borderColor="border.warning" borderRadius="md" p={4} bg="bg.warning">
          <Stack gap={2}>
            <Text fontWeight="bold">Replay this dead letter?</Text>
            <Text>
              The original record at <Mono id="confirm-coords">{coordsOf(confirmation.record)}</Mono> (fingerprint{" "}
              <Mono>{confirmation.form.fingerprint}</Mono>) is published again, with its key, value and headers.
            </Text>
            {confirmation.refused ? (
              <Text id="replay-target-refused" color="fg.error">
                {confirmation.refused}
              </Text>
            ) : null}
            <HStack gap={2}>
              <Text as="label" htmlFor="target-topic">
                To topic
              </Text>
              <NativeSelect.Root size="sm" width="auto">
                <NativeSelect.Field id="target-topic" value={target} onChange={(e) => setTarget(e.target.value)}>
                  {targets.map((t) => (
                    <option key={t} value={t}>
                      {t}
                    </option>
                  ))}
                </NativeSelect.Field>
                <NativeSelect.Indicator />
              </NativeSelect.Root>
            </HStack>
            <HStack gap={2}>
              <Button
                id="confirm"
                colorPalette="red"
                size="sm"
                onClick={confirm}
                loading={step === "posting"}
                disabled={targets.length === 0}
              >
                Replay {coordsOf(confirmation.record)}
              </Button>
              <Button size="sm" variant="outline" onClick={() => setStep("idle")} disabled={step === "posting"}>
                Cancel
              </Button>
            </HStack>
          </Stack>
        </Box>
      ) : (
        <HStack gap={3}>
          <Button id="replay" size="sm" colorPalette="blue" onClick={open} disabled={!mayReplay} loading={step === "loading"}>
            Replay…
          </Button>
          {mayReplay ? null : (
            <Text id="replay-refused" color="fg.muted" fontSize="sm">
              {user ? `${user.username} may only view dead letters: replaying needs an asset write (op or admin).` : ""}
            </Text>
          )}
        </HStack>
      )}
      <Problem error={error} title="Not replayed" />
    </Box>
  );
}

const HEADER_COLUMNS = [
  { key: "name", header: "Header", cell: ([name]) => <Mono>{name}</Mono> },
  { key: "value", header: "Value", cell: ([, value]) => <Mono>{value}</Mono> },
];

export function DeadLetterPage() {
  const { partition, offset } = useParams();
  const { data, error, loading } = useApi(`dead-letters/${partition}/${offset}`);
  const { data: user } = useApi("user");
  return (
    <Box id="dead-letter-page">
      <Title>
        Dead letter {partition}:{offset}
      </Title>
      {loading && !data ? <Loading what="the dead letter" /> : null}
      <Problem error={error} />
      {data ? (
        <Box id="dead-letter" data-coords={coordsOf(data)}>
          <Replay record={data} user={user} key={coordsOf(data)} />
          <Facts
            items={[
              ["Reason", data.reason, "reason"],
              ["Dead-lettered", <Time value={data.dead_lettered_at ?? data.timestamp} />],
              ["Source", `${data.source_topic}:${data.source_partition}:${data.source_offset}`, "source"],
              ["Consumer", data.consumer],
              ["Error", `${data.error_type}: ${data.error_message}`, "error"],
              [
                "Event",
                data.event_id ? (
                  <To to={view.assetEvent(data.event_id)} kind="asset-event">
                    {data.event_id}
                  </To>
                ) : null,
              ],
              ["Asset", data.asset_uri],
              ["Key", data.key],
              ["Size", `${data.size} bytes${data.is_reference ? " (a reference: the value is a prefix)" : ""}`],
              ["Fingerprint", <Mono>{data.fingerprint}</Mono>],
            ]}
          />
          <Title>Headers</Title>
          <DataTable id="headers" columns={HEADER_COLUMNS} rows={data.headers ?? []} empty="No header." />
          <Title>Payload ({data.payload_format})</Title>
          <Box id="payload" borderWidth="1px" borderRadius="md" p={2}>
            <Mono>{data.payload_preview}</Mono>
          </Box>
        </Box>
      ) : null}
    </Box>
  );
}
