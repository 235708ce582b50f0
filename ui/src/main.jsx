// The Kafka Events view: a react_apps page of Airflow's UI.
//
// Airflow imports this module (bundle_url) and renders the function it leaves on
// globalThis.AirflowPlugin, inside its own React tree: its router (links navigate inside Airflow),
// its Chakra UI theme (its fonts, colours, light and dark mode).  The props are the route's
// dagId / runId / taskId / mapIndex: set on a DAG, DAG run or task instance tab, none in the
// navigation bar's page (which routes its own tabs under /plugin/kafka-events/*).
import { Box, Center, Flex, Heading } from "@chakra-ui/react";
import { NavLink, Navigate, Route, Routes } from "react-router-dom";

import { VIEW_ROUTE } from "./links.js";
import { AssetEventsPage } from "./pages/AssetEvents.jsx";
import { DeadLetterPage } from "./pages/DeadLetter.jsx";
import { DeadLettersPage } from "./pages/DeadLetters.jsx";
import { HealthPage } from "./pages/Health.jsx";
import { StreamPage } from "./pages/Stream.jsx";
import { StreamsPage } from "./pages/Streams.jsx";

const TABS = [
  ["streams", "Streams"],
  ["asset-events", "Asset events"],
  ["dead-letters", "Dead letters"],
  ["health", "Health"],
];

function NavTabs() {
  return (
    <Flex as="nav" className="tabs" alignItems="center" borderBottomWidth="1px" mb={2}>
      {TABS.map(([tab, label]) => (
        <NavLink key={tab} to={`${VIEW_ROUTE}/${tab}`} data-tab={tab}>
          {({ isActive }) => (
            <Center
              className={isActive ? "tab active" : "tab"}
              data-active={isActive ? "true" : undefined}
              borderBottomColor="border.info"
              borderBottomWidth={isActive ? 3 : 0}
              color={isActive ? "fg" : "fg.muted"}
              fontWeight="bold"
              height="40px"
              mb="-2px"
              pb={isActive ? 0 : "3px"}
              px={4}
            >
              {label}
            </Center>
          )}
        </NavLink>
      ))}
    </Flex>
  );
}

function ViewPages() {
  return (
    <>
      <Heading size="lg" mb={2}>
        Kafka Events
      </Heading>
      <NavTabs />
      <Routes>
        <Route index element={<Navigate to={`${VIEW_ROUTE}/streams`} replace />} />
        <Route path="streams" element={<StreamsPage />} />
        <Route path="streams/*" element={<StreamPage />} />
        <Route path="asset-events" element={<AssetEventsPage />} />
        <Route path="dead-letters" element={<DeadLettersPage />} />
        <Route path="dead-letters/:partition/:offset" element={<DeadLetterPage />} />
        <Route path="health" element={<HealthPage />} />
        <Route path="*" element={<Navigate to={`${VIEW_ROUTE}/streams`} replace />} />
      </Routes>
    </>
  );
}

export default function KafkaEvents({ dagId, runId, taskId, mapIndex }) {
  return (
    <Box className="kafka-events" p={2} color="fg" data-view={dagId ? "tab" : "nav"}>
      {dagId ? <StreamsPage dagId={dagId} runId={runId} taskId={taskId} mapIndex={mapIndex} /> : <ViewPages />}
    </Box>
  );
}

globalThis.AirflowPlugin = KafkaEvents;
