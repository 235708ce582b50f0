var __create = Object.create;
var __defProp = Object.defineProperty;
var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
var __getOwnPropNames = Object.getOwnPropertyNames;
var __getProtoOf = Object.getPrototypeOf;
var __hasOwnProp = Object.prototype.hasOwnProperty;
var __commonJS = (cb, mod) => function __require() {
  try {
    return mod || (0, cb[__getOwnPropNames(cb)[0]])((mod = { exports: {} }).exports, mod), mod.exports;
  } catch (e) {
    throw mod = 0, e;
  }
};
var __copyProps = (to, from, except, desc) => {
  if (from && typeof from === "object" || typeof from === "function") {
    for (let key of __getOwnPropNames(from))
      if (!__hasOwnProp.call(to, key) && key !== except)
        __defProp(to, key, { get: () => from[key], enumerable: !(desc = __getOwnPropDesc(from, key)) || desc.enumerable });
  }
  return to;
};
var __toESM = (mod, isNodeMode, target) => (target = mod != null ? __create(__getProtoOf(mod)) : {}, __copyProps(
  // If the importer is in node compatibility mode or this is not an ESM
  // file that has been converted to a CommonJS file using a Babel-
  // compatible transform (i.e. "__esModule" has not been set), then set
  // "default" to the CommonJS "module.exports" for node compatibility.
  isNodeMode || !mod || !mod.__esModule ? __defProp(target, "default", { value: mod, enumerable: true }) : target,
  mod
));

// airflow-global:@chakra-ui/react
var require_react = __commonJS({
  "airflow-global:@chakra-ui/react"(exports, module) {
    var g = globalThis["ChakraUI"];
    if (g === void 0) throw new Error("Airflow's UI did not provide globalThis.ChakraUI");
    module.exports = g;
  }
});

// airflow-global:react-router-dom
var require_react_router_dom = __commonJS({
  "airflow-global:react-router-dom"(exports, module) {
    var g = globalThis["ReactRouterDOM"];
    if (g === void 0) throw new Error("Airflow's UI did not provide globalThis.ReactRouterDOM");
    module.exports = g;
  }
});

// airflow-global:react/jsx-runtime
var require_jsx_runtime = __commonJS({
  "airflow-global:react/jsx-runtime"(exports, module) {
    var g = globalThis["ReactJSXRuntime"];
    if (g === void 0) throw new Error("Airflow's UI did not provide globalThis.ReactJSXRuntime");
    module.exports = g;
  }
});

// airflow-global:react
var require_react2 = __commonJS({
  "airflow-global:react"(exports, module) {
    var g = globalThis["React"];
    if (g === void 0) throw new Error("Airflow's UI did not provide globalThis.React");
    module.exports = g;
  }
});

// src/main.jsx
var import_react12 = __toESM(require_react());
var import_react_router_dom6 = __toESM(require_react_router_dom());

// src/links.js
var VIEW_ROUTE = "/plugin/kafka-events";
var seg = (value) => encodeURIComponent(String(value));
var airflow = {
  dag: (dagId) => `/dags/${seg(dagId)}`,
  dagRun: (dagId, runId) => `/dags/${seg(dagId)}/runs/${seg(runId)}`,
  taskInstance: (dagId, runId, taskId, mapIndex) => {
    const base = `/dags/${seg(dagId)}/runs/${seg(runId)}/tasks/${seg(taskId)}`;
    const index = Number(mapIndex);
    return Number.isInteger(index) && index >= 0 ? `${base}/mapped/${index}` : base;
  },
  asset: (assetId) => `/assets/${seg(assetId)}`
};
var view = {
  tab: (tab) => `${VIEW_ROUTE}/${tab}`,
  stream: (streamId, partition, offset) => {
    const query = new URLSearchParams();
    if (partition !== void 0 && partition !== null) query.set("partition", String(partition));
    if (offset !== void 0 && offset !== null) query.set("offset", String(offset));
    const text = query.toString();
    return `${VIEW_ROUTE}/streams/${seg(streamId)}${text ? `?${text}` : ""}`;
  },
  deadLetter: (partition, offset) => `${VIEW_ROUTE}/dead-letters/${seg(partition)}/${seg(offset)}`,
  assetEvent: (eventId) => `${VIEW_ROUTE}/asset-events?event_id=${seg(eventId)}`
};

// src/pages/AssetEvents.jsx
var import_react4 = __toESM(require_react());
var import_react_router_dom3 = __toESM(require_react_router_dom());

// src/time.jsx
var import_react = __toESM(require_react());
var import_jsx_runtime = __toESM(require_jsx_runtime());
function ago(value, now = Date.now()) {
  const at = Date.parse(value);
  if (Number.isNaN(at)) return null;
  const seconds = (now - at) / 1e3;
  const size = Math.abs(seconds);
  let text;
  if (size < 45) text = `${Math.round(size)} s`;
  else if (size < 45 * 60) text = `${Math.round(size / 60)} min`;
  else if (size < 36 * 3600) text = `${Math.round(size / 3600)} h`;
  else text = `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `${text} ago` : `in ${text}`;
}
function exact(value) {
  const at = Date.parse(value);
  return Number.isNaN(at) ? String(value) : new Date(at).toISOString().replace(".000Z", "Z");
}
function Time({ value }) {
  if (value === void 0 || value === null || value === "") return /* @__PURE__ */ (0, import_jsx_runtime.jsx)(import_react.Text, { as: "span", children: "-" });
  const shown = ago(value);
  if (shown === null) return /* @__PURE__ */ (0, import_jsx_runtime.jsx)(import_react.Text, { as: "span", children: String(value) });
  return /* @__PURE__ */ (0, import_jsx_runtime.jsx)(import_react.Text, { as: "time", dateTime: exact(value), title: exact(value), className: "human-time", children: shown });
}

// src/ui.jsx
var import_react2 = __toESM(require_react());
var import_react_router_dom = __toESM(require_react_router_dom());
var import_jsx_runtime2 = __toESM(require_jsx_runtime());
function To({ to, children, kind, ...rest }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Link, { asChild: true, color: "fg.info", ...rest, children: /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react_router_dom.Link, { to, "data-link": kind, children }) });
}
function DagLink({ dagId }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(To, { to: airflow.dag(dagId), kind: "dag", children: dagId });
}
function DagRunLink({ dagId, runId }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(To, { to: airflow.dagRun(dagId, runId), kind: "dag-run", children: runId });
}
function TaskLink({ dagId, runId, taskId, mapIndex }) {
  const mapped = Number(mapIndex) >= 0;
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(To, { to: airflow.taskInstance(dagId, runId, taskId, mapIndex), kind: "task-instance", children: [
    taskId,
    mapped ? ` [${mapIndex}]` : ""
  ] });
}
function AssetLink({ assetId, name }) {
  if (assetId === void 0 || assetId === null) return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Text, { as: "span", children: name });
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(To, { to: airflow.asset(assetId), kind: "asset", children: name });
}
var STATE_COLORS = {
  complete: "green",
  running: "blue",
  failed: "red",
  stuck: "orange",
  "not running": "orange"
};
function StateBadge({ state }) {
  if (!state) return null;
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Badge, { className: "state", "data-state": state, colorPalette: STATE_COLORS[state] ?? "gray", variant: "subtle", children: state });
}
function Loading({ what }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(import_react2.Box, { py: 6, display: "flex", gap: 2, alignItems: "center", color: "fg.muted", children: [
    /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Spinner, { size: "sm" }),
    " ",
    /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(import_react2.Text, { children: [
      "Loading ",
      what,
      "…"
    ] })
  ] });
}
function Problem({ error, title }) {
  if (!error) return null;
  const signIn = error.status === 401;
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(import_react2.Alert.Root, { status: "error", my: 3, className: "problem", "data-status": error.status ?? "", children: [
    /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Alert.Indicator, {}),
    /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(import_react2.Alert.Content, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Alert.Title, { children: title ?? (signIn ? "Not signed in" : error.kind ?? "Error") }),
      /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Alert.Description, { children: /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Text, { whiteSpace: "pre-wrap", children: signIn ? "Sign in to Airflow again." : error.message }) })
    ] })
  ] });
}
function Window({ text }) {
  if (!text) return null;
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Text, { className: "window", fontSize: "sm", color: "fg.muted", my: 2, children: text });
}
function Title({ children, id }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Heading, { size: "md", my: 3, id, children });
}
function Mono({ children, ...rest }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Code, { fontSize: "xs", whiteSpace: "pre-wrap", wordBreak: "break-all", ...rest, children });
}
function DataTable({ columns, rows, rowKey, rowProps, empty, id }) {
  if (!rows.length) {
    return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Text, { color: "fg.muted", my: 3, className: "empty", children: empty });
  }
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Box, { overflowX: "auto", borderWidth: "1px", borderRadius: "md", my: 2, children: /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(import_react2.Table.Root, { size: "sm", striped: true, id, children: [
    /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Table.Header, { children: /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Table.Row, { children: columns.map((c) => /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Table.ColumnHeader, { children: c.header }, c.key)) }) }),
    /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Table.Body, { children: rows.map((row, i) => /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Table.Row, { ...rowProps ? rowProps(row) : {}, children: columns.map((c) => /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Table.Cell, { className: c.key, verticalAlign: "top", children: c.cell(row) }, c.key)) }, rowKey ? rowKey(row) : i)) })
  ] }) });
}
function Facts({ items, id }) {
  return /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Box, { as: "dl", id, display: "grid", gridTemplateColumns: "max-content 1fr", columnGap: 4, rowGap: 1, my: 3, children: items.filter(([, value]) => value !== void 0).map(([label, value, key]) => /* @__PURE__ */ (0, import_jsx_runtime2.jsxs)(import_react2.Box, { display: "contents", children: [
    /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Text, { as: "dt", color: "fg.muted", fontSize: "sm", children: label }),
    /* @__PURE__ */ (0, import_jsx_runtime2.jsx)(import_react2.Box, { as: "dd", fontSize: "sm", id: key, children: value === null || value === "" ? "-" : value })
  ] }, label)) });
}

// src/useApi.js
var import_react3 = __toESM(require_react2());
var import_react_router_dom2 = __toESM(require_react_router_dom());

// src/api.js
var API_PREFIX = "kafka-events/api";
function apiUrl(path, params) {
  const url = new URL(`${API_PREFIX}/${path.replace(/^\//, "")}`, document.baseURI);
  for (const [key, value] of Object.entries(params ?? {})) {
    if (value !== void 0 && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  return url.href;
}
var ApiError = class extends Error {
  constructor(status, kind, message) {
    super(message);
    this.status = status;
    this.kind = kind;
  }
};
async function answer(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const detail = body?.message ?? body?.detail ?? response.statusText;
    const kind = body?.error ?? `HTTP ${response.status}`;
    throw new ApiError(response.status, kind, typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return body;
}
async function getJson(path, params) {
  const response = await fetch(apiUrl(path, params), {
    credentials: "same-origin",
    headers: { Accept: "application/json" }
  });
  return answer(response);
}
async function postForm(path, fields) {
  const response = await fetch(apiUrl(path), {
    method: "POST",
    credentials: "same-origin",
    headers: { Accept: "application/json" },
    body: new URLSearchParams(Object.entries(fields).filter(([, v]) => v !== void 0 && v !== null))
  });
  return answer(response);
}

// src/useApi.js
var WINDOW_PARAMS = ["minutes", "max_records"];
function useApi(path, givenParams) {
  const search = new URLSearchParams((0, import_react_router_dom2.useLocation)().search);
  const params = { ...givenParams ?? {} };
  for (const name of WINDOW_PARAMS) if (search.get(name)) params[name] = search.get(name);
  const key = JSON.stringify([path, params]);
  const [state, setState] = (0, import_react3.useState)({ data: null, error: null, loading: true, key: null });
  const [tick, setTick] = (0, import_react3.useState)(0);
  (0, import_react3.useEffect)(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true, error: null }));
    getJson(path, params).then(
      (data) => live && setState({ data, error: null, loading: false, key }),
      (error) => live && setState({ data: null, error, loading: false, key })
    );
    return () => {
      live = false;
    };
  }, [key, tick]);
  const reload = (0, import_react3.useCallback)(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

// src/pages/AssetEvents.jsx
var import_jsx_runtime3 = __toESM(require_jsx_runtime());
function Outcome({ event }) {
  const made = event.airflow_events ?? [];
  if (made.length) {
    return /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(import_react4.Stack, { gap: 1, children: made.map((a) => /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_react4.Box, { className: "airflow-event", children: [
      /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_react4.Text, { as: "span", children: [
        "asset event ",
        a.id,
        " of "
      ] }),
      /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(AssetLink, { assetId: a.asset_id, name: a.asset }),
      /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_react4.Text, { as: "span", color: "fg.muted", children: [
        " (via ",
        a.via,
        ") "
      ] }),
      (a.dag_runs ?? []).map((r) => /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_react4.Box, { children: [
        "→ ",
        /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(DagRunLink, { dagId: r.dag_id, runId: r.run_id }),
        " ",
        /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_react4.Text, { as: "span", color: "fg.muted", children: [
          "(",
          r.dag_id,
          ")"
        ] })
      ] }, `${r.dag_id}/${r.run_id}`))
    ] }, a.id)) });
  }
  if (event.dead_letter) {
    return /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(To, { to: view.deadLetter(event.dead_letter.partition, event.dead_letter.offset), kind: "dead-letter", children: [
      "dead letter (",
      event.dead_letter.reason,
      ")"
    ] });
  }
  return /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(import_react4.Text, { color: "fg.muted", children: "not in Airflow (yet)" });
}
var COLUMNS = [
  { key: "when", header: "Emitted", cell: (e) => /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Time, { value: e.emitted_at ?? e.timestamp }) },
  { key: "asset", header: "Asset", cell: (e) => /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Mono, { children: e.asset_uri }) },
  { key: "partition-key", header: "Partition key", cell: (e) => e.partition_key ?? "-" },
  {
    key: "source",
    header: "Source",
    cell: (e) => e.source && typeof e.source === "object" ? Object.entries(e.source).map(([k, v]) => `${k}=${v}`).join(" ") : "-"
  },
  {
    key: "causation",
    header: "Caused by",
    cell: (e) => (e.causation ?? []).map((id) => /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(import_react4.Box, { children: /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(To, { to: view.assetEvent(id), kind: "asset-event", children: id }) }, id))
  },
  { key: "extra", header: "Extra", cell: (e) => /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Mono, { children: e.extra_preview }) },
  { key: "outcome", header: "In Airflow", cell: (e) => /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Outcome, { event: e }) }
];
function AssetEventsPage() {
  const query = new URLSearchParams((0, import_react_router_dom3.useLocation)().search);
  const eventId = query.get("event_id");
  const { data, error, loading } = useApi("asset-events", { event_id: eventId, asset: query.get("asset") });
  return /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_react4.Box, { id: "asset-events-page", children: [
    /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(Title, { children: [
      "Asset events",
      eventId ? ` — event ${eventId}` : ""
    ] }),
    loading && !data ? /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Loading, { what: "asset events" }) : null,
    /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Problem, { error }),
    data ? /* @__PURE__ */ (0, import_jsx_runtime3.jsxs)(import_jsx_runtime3.Fragment, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(
        DataTable,
        {
          id: "asset-events",
          columns: COLUMNS,
          rows: data.events ?? [],
          rowKey: (e) => `${e.partition}:${e.offset}`,
          rowProps: (e) => ({ className: "asset-event", "data-event": e.event_id }),
          empty: "No asset event in the window."
        }
      ),
      /* @__PURE__ */ (0, import_jsx_runtime3.jsx)(Window, { text: data.window_text })
    ] }) : null
  ] });
}

// src/pages/DeadLetter.jsx
var import_react5 = __toESM(require_react());
var import_react6 = __toESM(require_react2());
var import_react_router_dom4 = __toESM(require_react_router_dom());
var import_jsx_runtime4 = __toESM(require_jsx_runtime());
var coordsOf = (r) => `${r.topic}:${r.partition}:${r.offset}`;
function Replay({ record, user }) {
  const [step, setStep] = (0, import_react6.useState)("idle");
  const [confirmation, setConfirmation] = (0, import_react6.useState)(null);
  const [target, setTarget] = (0, import_react6.useState)(record.source_topic);
  const [result, setResult] = (0, import_react6.useState)(null);
  const [error, setError] = (0, import_react6.useState)(null);
  const path = `dead-letters/${record.partition}/${record.offset}/replay`;
  const mayReplay = Boolean(user?.may_replay);
  const open = () => {
    setError(null);
    setStep("loading");
    getJson(path).then(
      (answer2) => {
        setConfirmation(answer2);
        setTarget(answer2.targets?.[0] ?? "");
        setStep("confirm");
      },
      (e) => {
        setError(e);
        setStep("idle");
      }
    );
  };
  const confirm = () => {
    setError(null);
    setStep("posting");
    postForm(path, {
      confirm: confirmation.form.confirm,
      fingerprint: confirmation.form.fingerprint,
      target_topic: target,
      [confirmation.csrf.field]: confirmation.csrf.value
    }).then(
      (answer2) => {
        setResult(answer2);
        setStep("done");
      },
      (e) => {
        setError(e);
        setStep("confirm");
      }
    );
  };
  if (step === "done" && result) {
    const r = result.receipt ?? {};
    return /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Alert.Root, { status: "success", my: 3, id: "replayed", children: [
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Alert.Indicator, {}),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Alert.Content, { children: [
        /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Alert.Title, { children: [
          "Replayed ",
          result.replayed
        ] }),
        /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Alert.Description, { children: [
          "The original record was published again to ",
          r.target_topic,
          ":",
          r.target_partition,
          "@",
          r.target_offset,
          " by",
          " ",
          r.actor,
          "."
        ] })
      ] })
    ] });
  }
  const targets = confirmation?.targets ?? [];
  return /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Box, { my: 3, children: [
    step === "confirm" || step === "posting" ? /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Box, { id: "confirm-form", borderWidth: "1px", borderColor: "border.warning", borderRadius: "md", p: 4, bg: "bg.warning", children: /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Stack, { gap: 2, children: [
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Text, { fontWeight: "bold", children: "Replay this dead letter?" }),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Text, { children: [
        "The original record at ",
        /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Mono, { id: "confirm-coords", children: coordsOf(confirmation.record) }),
        " (fingerprint",
        " ",
        /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Mono, { children: confirmation.form.fingerprint }),
        ") is published again, with its key, value and headers."
      ] }),
      confirmation.refused ? /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Text, { id: "replay-target-refused", color: "fg.error", children: confirmation.refused }) : null,
      /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.HStack, { gap: 2, children: [
        /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Text, { as: "label", htmlFor: "target-topic", children: "To topic" }),
        /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.NativeSelect.Root, { size: "sm", width: "auto", children: [
          /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.NativeSelect.Field, { id: "target-topic", value: target, onChange: (e) => setTarget(e.target.value), children: targets.map((t) => /* @__PURE__ */ (0, import_jsx_runtime4.jsx)("option", { value: t, children: t }, t)) }),
          /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.NativeSelect.Indicator, {})
        ] })
      ] }),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.HStack, { gap: 2, children: [
        /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(
          import_react5.Button,
          {
            id: "confirm",
            colorPalette: "red",
            size: "sm",
            onClick: confirm,
            loading: step === "posting",
            disabled: targets.length === 0,
            children: [
              "Replay ",
              coordsOf(confirmation.record)
            ]
          }
        ),
        /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Button, { size: "sm", variant: "outline", onClick: () => setStep("idle"), disabled: step === "posting", children: "Cancel" })
      ] })
    ] }) }) : /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.HStack, { gap: 3, children: [
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Button, { id: "replay", size: "sm", colorPalette: "blue", onClick: open, disabled: !mayReplay, loading: step === "loading", children: "Replay…" }),
      mayReplay ? null : /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Text, { id: "replay-refused", color: "fg.muted", fontSize: "sm", children: user ? `${user.username} may only view dead letters: replaying needs an asset write (op or admin).` : "" })
    ] }),
    /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Problem, { error, title: "Not replayed" })
  ] });
}
var HEADER_COLUMNS = [
  { key: "name", header: "Header", cell: ([name]) => /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Mono, { children: name }) },
  { key: "value", header: "Value", cell: ([, value]) => /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Mono, { children: value }) }
];
function DeadLetterPage() {
  const { partition, offset } = (0, import_react_router_dom4.useParams)();
  const { data, error, loading } = useApi(`dead-letters/${partition}/${offset}`);
  const { data: user } = useApi("user");
  return /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Box, { id: "dead-letter-page", children: [
    /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(Title, { children: [
      "Dead letter ",
      partition,
      ":",
      offset
    ] }),
    loading && !data ? /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Loading, { what: "the dead letter" }) : null,
    /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Problem, { error }),
    data ? /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(import_react5.Box, { id: "dead-letter", "data-coords": coordsOf(data), children: [
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Replay, { record: data, user }, coordsOf(data)),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(
        Facts,
        {
          items: [
            ["Reason", data.reason, "reason"],
            ["Dead-lettered", /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Time, { value: data.dead_lettered_at ?? data.timestamp })],
            ["Source", `${data.source_topic}:${data.source_partition}:${data.source_offset}`, "source"],
            ["Consumer", data.consumer],
            ["Error", `${data.error_type}: ${data.error_message}`, "error"],
            [
              "Event",
              data.event_id ? /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(To, { to: view.assetEvent(data.event_id), kind: "asset-event", children: data.event_id }) : null
            ],
            ["Asset", data.asset_uri],
            ["Key", data.key],
            ["Size", `${data.size} bytes${data.is_reference ? " (a reference: the value is a prefix)" : ""}`],
            ["Fingerprint", /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Mono, { children: data.fingerprint })]
          ]
        }
      ),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Title, { children: "Headers" }),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(DataTable, { id: "headers", columns: HEADER_COLUMNS, rows: data.headers ?? [], empty: "No header." }),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsxs)(Title, { children: [
        "Payload (",
        data.payload_format,
        ")"
      ] }),
      /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(import_react5.Box, { id: "payload", borderWidth: "1px", borderRadius: "md", p: 2, children: /* @__PURE__ */ (0, import_jsx_runtime4.jsx)(Mono, { children: data.payload_preview }) })
    ] }) : null
  ] });
}

// src/pages/DeadLetters.jsx
var import_react7 = __toESM(require_react());
var import_jsx_runtime5 = __toESM(require_jsx_runtime());
var COLUMNS2 = [
  {
    key: "where",
    header: "Dead letter",
    cell: (r) => /* @__PURE__ */ (0, import_jsx_runtime5.jsxs)(To, { to: view.deadLetter(r.partition, r.offset), kind: "dead-letter", className: "open", children: [
      r.partition,
      ":",
      r.offset
    ] })
  },
  { key: "when", header: "When", cell: (r) => /* @__PURE__ */ (0, import_jsx_runtime5.jsx)(Time, { value: r.timestamp }) },
  { key: "reason", header: "Reason", cell: (r) => r.reason },
  { key: "source", header: "Source", cell: (r) => `${r.source_topic}:${r.source_partition}:${r.source_offset}` },
  { key: "consumer", header: "Consumer", cell: (r) => r.consumer ?? "-" },
  {
    key: "error",
    header: "Error",
    cell: (r) => /* @__PURE__ */ (0, import_jsx_runtime5.jsxs)(import_react7.Text, { fontSize: "sm", children: [
      r.error_type,
      ": ",
      r.error_message
    ] })
  },
  { key: "payload", header: "Payload", cell: (r) => /* @__PURE__ */ (0, import_jsx_runtime5.jsx)(Mono, { children: r.payload_preview }) }
];
function DeadLettersPage() {
  const { data, error, loading } = useApi("dead-letters");
  return /* @__PURE__ */ (0, import_jsx_runtime5.jsxs)(import_react7.Box, { id: "dead-letters-page", children: [
    /* @__PURE__ */ (0, import_jsx_runtime5.jsxs)(Title, { children: [
      "Dead letters",
      data?.topic ? ` in ${data.topic}` : ""
    ] }),
    loading && !data ? /* @__PURE__ */ (0, import_jsx_runtime5.jsx)(Loading, { what: "dead letters" }) : null,
    /* @__PURE__ */ (0, import_jsx_runtime5.jsx)(Problem, { error }),
    data ? /* @__PURE__ */ (0, import_jsx_runtime5.jsxs)(import_jsx_runtime5.Fragment, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime5.jsx)(
        DataTable,
        {
          id: "dead-letters",
          columns: COLUMNS2,
          rows: data.records ?? [],
          rowKey: (r) => `${r.partition}:${r.offset}`,
          rowProps: (r) => ({ className: "dead-letter", "data-coords": `${r.topic}:${r.partition}:${r.offset}` }),
          empty: "No dead letter in the window."
        }
      ),
      /* @__PURE__ */ (0, import_jsx_runtime5.jsx)(Window, { text: data.window_text })
    ] }) : null
  ] });
}

// src/pages/Health.jsx
var import_react9 = __toESM(require_react());

// src/charts.jsx
var import_react8 = __toESM(require_react());
var import_jsx_runtime6 = __toESM(require_jsx_runtime());
function series(raw, valueKeys = ["value", "v", "lag", "pages"]) {
  if (!Array.isArray(raw)) return [];
  const points = [];
  for (const item of raw) {
    let time;
    let value;
    if (Array.isArray(item)) [time, value] = item;
    else if (item && typeof item === "object") {
      time = item.at ?? item.time ?? item.t ?? item.ts ?? item.timestamp;
      value = valueKeys.map((k) => item[k]).find((v2) => v2 !== void 0 && v2 !== null);
    }
    const t = typeof time === "number" ? time : Date.parse(time);
    const v = Number(value);
    if (Number.isFinite(t) && Number.isFinite(v)) points.push({ t, v });
  }
  return points.sort((a, b) => a.t - b.t);
}
function firstSeries(obj, keys, valueKeys) {
  for (const key of keys) {
    const points = series(obj?.[key], valueKeys);
    if (points.length) return points;
  }
  return [];
}
var W = 320;
var H = 80;
var PAD = 4;
var MAX_DOTS = 60;
function LineChart({ points, label, unit, id }) {
  if (!points.length) return null;
  const t0 = points[0].t;
  const t1 = points[points.length - 1].t;
  const vmax = Math.max(1, ...points.map((p) => p.v));
  const x = (t) => PAD + (t1 === t0 ? W - 2 * PAD : (t - t0) / (t1 - t0) * (W - 2 * PAD));
  const y = (v) => H - PAD - v / vmax * (H - 2 * PAD);
  let d = `M${x(points[0].t).toFixed(1)},${y(points[0].v).toFixed(1)}`;
  for (const p of points.slice(1)) d += ` H${x(p.t).toFixed(1)} V${y(p.v).toFixed(1)}`;
  if (t1 === t0) d += ` H${(W - PAD).toFixed(1)}`;
  const last = points[points.length - 1];
  return /* @__PURE__ */ (0, import_jsx_runtime6.jsxs)(import_react8.Box, { className: "chart", "data-chart": id, "data-points": points.length, children: [
    /* @__PURE__ */ (0, import_jsx_runtime6.jsx)(import_react8.Box, { color: "fg.info", children: /* @__PURE__ */ (0, import_jsx_runtime6.jsxs)("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, children: [
      /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("title", { children: `${label}: ${last.v}${unit ? ` ${unit}` : ""} at ${exact(new Date(last.t).toISOString())}` }),
      /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("line", { x1: PAD, x2: W - PAD, y1: H - PAD, y2: H - PAD, stroke: "currentColor", strokeOpacity: "0.25" }),
      /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("path", { d, fill: "none", stroke: "currentColor", strokeWidth: "2" }),
      points.length > MAX_DOTS ? null : points.map((p) => /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("circle", { cx: x(p.t), cy: y(p.v), r: "2.5", fill: "currentColor", children: /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("title", { children: `${p.v}${unit ? ` ${unit}` : ""} at ${exact(new Date(p.t).toISOString())}` }) }, `${p.t}-${p.v}`))
    ] }) }),
    /* @__PURE__ */ (0, import_jsx_runtime6.jsxs)(import_react8.Text, { fontSize: "xs", color: "fg.muted", children: [
      label,
      ": max ",
      vmax,
      unit ? ` ${unit}` : "",
      ", now ",
      last.v
    ] })
  ] });
}
function BarChart({ items, label, id }) {
  if (!items.length) return null;
  const vmax = Math.max(1, ...items.map((i) => Number(i.value) || 0));
  const bw = 28;
  const gap = 10;
  const width = items.length * (bw + gap) + gap;
  const height = 90;
  const base = height - 18;
  return /* @__PURE__ */ (0, import_jsx_runtime6.jsx)(import_react8.Box, { className: "chart", "data-chart": id, "data-bars": items.length, color: "fg.info", children: /* @__PURE__ */ (0, import_jsx_runtime6.jsxs)("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label, children: [
    /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("title", { children: label }),
    items.map((item, i) => {
      const known = item.value !== null && item.value !== void 0;
      const h = known ? Math.max(1, Number(item.value) / vmax * (base - 12)) : base - 12;
      const x = gap + i * (bw + gap);
      return /* @__PURE__ */ (0, import_jsx_runtime6.jsxs)("g", { className: "bar", "data-label": item.label, "data-value": known ? item.value : "", children: [
        /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("title", { children: `${item.label}: ${known ? item.value : "unknown"}` }),
        /* @__PURE__ */ (0, import_jsx_runtime6.jsx)(
          "rect",
          {
            x,
            y: base - h,
            width: bw,
            height: h,
            fill: known ? "currentColor" : "none",
            stroke: "currentColor",
            strokeDasharray: known ? void 0 : "3 3",
            fillOpacity: "0.8"
          }
        ),
        /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("text", { x: x + bw / 2, y: base - h - 2, fontSize: "10", textAnchor: "middle", fill: "currentColor", children: known ? item.value : "?" }),
        /* @__PURE__ */ (0, import_jsx_runtime6.jsx)("text", { x: x + bw / 2, y: height - 4, fontSize: "10", textAnchor: "middle", fill: "currentColor", children: item.label })
      ] }, item.label);
    })
  ] }) });
}

// src/pages/Health.jsx
var import_jsx_runtime7 = __toESM(require_jsx_runtime());
function Lags({ topics, id }) {
  return /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(import_react9.Stack, { gap: 2, children: Object.entries(topics ?? {}).map(
    ([topic, lags]) => typeof lags === "string" ? /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Text, { color: "fg.error", children: [
      topic,
      ": ",
      lags
    ] }, topic) : /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Box, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Text, { fontSize: "xs", color: "fg.muted", children: [
        topic,
        ": lag per partition"
      ] }),
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(BarChart, { id, label: `${topic}: lag per partition`, items: lags.map((l) => ({ label: `p${l.partition}`, value: l.lag })) })
    ] }, topic)
  ) });
}
var WATCHER_COLUMNS = [
  { key: "asset", header: "Asset", cell: (w) => /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(AssetLink, { assetId: w.asset_id, name: w.asset }) },
  {
    key: "triggerer",
    header: "Triggerer",
    cell: (w) => /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Box, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(import_react9.Text, { children: w.triggerer_host ?? "no triggerer" }),
      w.triggerer_heartbeat ? /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Text, { fontSize: "xs", color: "fg.muted", children: [
        "heartbeat ",
        /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Time, { value: w.triggerer_heartbeat })
      ] }) : null
    ] })
  },
  { key: "lag", header: "Lag per partition", cell: (w) => /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Lags, { topics: w.topics, id: "watcher-lag" }) },
  { key: "stored", header: "Positions stored", cell: (w) => /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Time, { value: w.positions_updated_at }) },
  { key: "problem", header: "Problem", cell: (w) => w.problem ? /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(import_react9.Text, { color: "fg.error", children: w.problem }) : "" }
];
var BRIDGE_COLUMNS = [
  { key: "group", header: "Consumer group", cell: (b) => b.group_id },
  { key: "state", header: "State", cell: (b) => /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(StateBadge, { state: b.state }) },
  { key: "members", header: "Members", cell: (b) => String(b.members ?? "-") },
  {
    key: "lag",
    header: "Lag per partition",
    cell: (b) => typeof b.partitions === "string" ? /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(import_react9.Text, { color: "fg.error", children: b.partitions }) : /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Lags, { topics: { [b.topic]: b.partitions ?? [] }, id: "bridge-lag" })
  }
];
var STUCK_COLUMNS = [
  { key: "stream", header: "Stream", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(To, { to: view.stream(s.trigger_run_id, s.partition, s.last_offset), kind: "stream", children: s.trigger_run_id }) },
  { key: "pages", header: "Pages", cell: (s) => String(s.pages ?? "-") },
  { key: "last", header: "Last page", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Time, { value: s.last_at }) }
];
function HealthPage() {
  const { data, error, loading } = useApi("health");
  const post = data?.last_bridge_post;
  return /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Box, { id: "health-page", children: [
    loading && !data ? /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Loading, { what: "health" }) : null,
    /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Problem, { error }),
    data ? /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_jsx_runtime7.Fragment, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Title, { id: "watchers", children: "Watchers" }),
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(DataTable, { columns: WATCHER_COLUMNS, rows: data.watchers ?? [], rowProps: (w) => ({ className: "watcher", "data-asset": w.asset }), empty: "No asset watcher of this package." }),
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Title, { id: "bridges", children: "Bridges" }),
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(DataTable, { columns: BRIDGE_COLUMNS, rows: data.bridges ?? [], rowProps: (b) => ({ className: "bridge", "data-group": b.group_id }), empty: "No bridge group configured ([kafka_events] ui_bridge_group_ids)." }),
      /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_react9.Text, { fontSize: "sm", color: "fg.muted", id: "last-post", children: [
        "Last asset event a bridge posted:",
        " ",
        post ? /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(import_jsx_runtime7.Fragment, { children: [
          "asset event ",
          post.id,
          " of ",
          /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(AssetLink, { assetId: post.asset_id, name: post.asset }),
          " ",
          /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(Time, { value: post.timestamp })
        ] }) : "none"
      ] }),
      /* @__PURE__ */ (0, import_jsx_runtime7.jsxs)(Title, { id: "stuck", children: [
        "Stuck streams (running, nothing written for ",
        data.stuck_after_seconds,
        " s)"
      ] }),
      data.streams_error ? /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(import_react9.Text, { color: "fg.error", children: data.streams_error }) : null,
      /* @__PURE__ */ (0, import_jsx_runtime7.jsx)(DataTable, { columns: STUCK_COLUMNS, rows: data.stuck_streams ?? [], empty: "None." })
    ] }) : null
  ] });
}

// src/pages/Stream.jsx
var import_react11 = __toESM(require_react());
var import_react_router_dom5 = __toESM(require_react_router_dom());

// src/pages/Streams.jsx
var import_react10 = __toESM(require_react());
var import_jsx_runtime8 = __toESM(require_jsx_runtime());
var PAGES_SERIES = ["pages_over_time", "pages_series", "page_history", "history"];
var LAG_SERIES = ["lag_over_time", "lag_series", "lag_history", "history"];
function lagText(lag) {
  return lag === null || lag === void 0 ? "lag ?" : `lag ${lag}`;
}
function ConsumerList({ consumers }) {
  if (!consumers?.length) return /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(import_react10.Text, { color: "fg.muted", children: "none" });
  return /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(import_react10.Stack, { gap: 1, children: consumers.map((c) => /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.Box, { className: "consumer", children: [
    /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(TaskLink, { dagId: c.dag_id, runId: c.run_id, taskId: c.task_id, mapIndex: c.map_index }),
    " ",
    /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.Text, { as: "span", className: "lag", color: c.lag_pages ? "fg.warning" : "fg.muted", children: [
      "(",
      lagText(c.lag_pages),
      ")"
    ] })
  ] }, `${c.dag_id}/${c.run_id}/${c.task_id}/${c.map_index}`)) });
}
var COLUMNS3 = [
  {
    key: "stream",
    header: "Stream",
    cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(To, { to: view.stream(s.trigger_run_id, s.partition, s.last_offset), kind: "stream", fontFamily: "mono", fontSize: "xs", children: s.trigger_run_id })
  },
  { key: "dag", header: "DAG", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(DagLink, { dagId: s.dag_id }) },
  { key: "run", header: "DAG run", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(DagRunLink, { dagId: s.dag_id, runId: s.run_id }) },
  { key: "task", header: "Task", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(TaskLink, { dagId: s.dag_id, runId: s.run_id, taskId: s.task_id, mapIndex: s.map_index }) },
  { key: "state", header: "State", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(StateBadge, { state: s.state }) },
  { key: "pages", header: "Pages", cell: (s) => String(s.pages ?? "-") },
  {
    key: "trend",
    header: "Pages over time",
    cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(LineChart, { id: "stream-pages", points: firstSeries(s, PAGES_SERIES, ["pages", "value", "v"]), label: "pages" })
  },
  { key: "last", header: "Last page", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Time, { value: s.last_at }) },
  { key: "consumers", header: "Consumers", cell: (s) => /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(ConsumerList, { consumers: s.consumers }) }
];
function StreamTable({ streams }) {
  const charted = streams.some((s) => firstSeries(s, PAGES_SERIES, ["pages", "value", "v"]).length);
  return /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(
    DataTable,
    {
      id: "streams",
      columns: charted ? COLUMNS3 : COLUMNS3.filter((c) => c.key !== "trend"),
      rows: streams,
      rowKey: (s) => s.trigger_run_id,
      rowProps: (s) => ({ className: "stream", "data-stream": s.trigger_run_id, "data-state": s.state ?? "" }),
      empty: "No stream matches."
    }
  );
}
function TaskInstanceStreams({ data }) {
  const own = data.task_instance_stream;
  const reads = data.read_by_task_instance ?? [];
  const ownRow = (data.streams ?? []).find((s) => s.trigger_run_id === own);
  return /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.Box, { my: 3, children: [
    /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Title, { children: "This task instance's stream" }),
    own ? /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.HStack, { gap: 2, children: [
      /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(To, { to: view.stream(own, ownRow?.partition, ownRow?.last_offset), kind: "stream", id: "own-stream", children: own }),
      ownRow ? /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(StateBadge, { state: ownRow.state }) : null
    ] }) : /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(import_react10.Text, { color: "fg.muted", id: "no-own-stream", children: "It writes no stream." }),
    /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Title, { children: "Streams it reads" }),
    reads.length ? /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(import_react10.Stack, { gap: 1, id: "reads", children: reads.map((r) => /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.Box, { className: "reads", "data-stream": r.trigger_run_id, children: [
      /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(To, { to: view.stream(r.trigger_run_id), kind: "stream", children: r.trigger_run_id }),
      " ",
      /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.Text, { as: "span", color: "fg.muted", children: [
        "(",
        r.pages_handled ?? "?",
        " pages handled, ",
        lagText(r.lag_pages),
        ")"
      ] })
    ] }, r.trigger_run_id)) }) : /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(import_react10.Text, { color: "fg.muted", children: "It reads no stream." })
  ] });
}
function StreamsPage({ dagId, runId, taskId, mapIndex }) {
  const params = { dag_id: dagId, run_id: runId, task_id: taskId, map_index: mapIndex };
  const { data, error, loading } = useApi("streams", params);
  const taskTab = Boolean(dagId && runId && taskId);
  return /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_react10.Box, { id: "streams-page", children: [
    taskTab ? null : /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(Title, { children: [
      "Streams",
      dagId ? ` of ${dagId}` : "",
      runId ? ` / ${runId}` : ""
    ] }),
    loading && !data ? /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Loading, { what: "streams" }) : null,
    /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Problem, { error }),
    data ? /* @__PURE__ */ (0, import_jsx_runtime8.jsxs)(import_jsx_runtime8.Fragment, { children: [
      taskTab ? /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(TaskInstanceStreams, { data }) : null,
      taskTab ? /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Title, { children: "Streams of this task instance" }) : null,
      /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(StreamTable, { streams: data.streams ?? [] }),
      /* @__PURE__ */ (0, import_jsx_runtime8.jsx)(Window, { text: data.window_text })
    ] }) : null
  ] });
}

// src/pages/Stream.jsx
var import_jsx_runtime9 = __toESM(require_jsx_runtime());
function pagesOverTime(detail) {
  const given = firstSeries(detail, PAGES_SERIES, ["pages", "value", "v"]);
  if (given.length) return given;
  const summaryGiven = firstSeries(detail.summary, PAGES_SERIES, ["pages", "value", "v"]);
  if (summaryGiven.length) return summaryGiven;
  const times = (detail.pages ?? []).filter((p) => !p.is_last).map((p) => Date.parse(p.emitted_at)).filter(Number.isFinite).sort((a, b) => a - b);
  return times.map((t, i) => ({ t, v: i + 1 }));
}
function pagesLabel(detail) {
  const given = firstSeries(detail, PAGES_SERIES, ["pages"]).length || firstSeries(detail.summary, PAGES_SERIES, ["pages"]).length;
  return given ? "pages written" : "pages written, of those shown below";
}
var PAGE_COLUMNS = [
  { key: "sequence", header: "#", cell: (p) => p.is_last ? "end" : String(p.sequence_index) },
  { key: "offset", header: "Offset", cell: (p) => String(p.offset) },
  { key: "attempt", header: "Attempt", cell: (p) => String(p.attempt) },
  { key: "emitted", header: "Emitted", cell: (p) => /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Time, { value: p.emitted_at }) },
  { key: "bytes", header: "Bytes", cell: (p) => String(p.record_bytes ?? "-") },
  {
    key: "payload",
    header: "Payload",
    cell: (p) => p.error ? /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(import_react11.Text, { color: "fg.error", children: p.error }) : /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Mono, { children: p.payload_preview ?? "" })
  }
];
var CONSUMER_COLUMNS = [
  {
    key: "task",
    header: "Consumer task",
    cell: (c) => /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(TaskLink, { dagId: c.dag_id, runId: c.run_id, taskId: c.task_id, mapIndex: c.map_index })
  },
  { key: "handled", header: "Pages handled", cell: (c) => String(c.pages_handled ?? "-") },
  { key: "lag", header: "Lag (pages)", cell: (c) => c.lag_pages === null || c.lag_pages === void 0 ? "?" : String(c.lag_pages) },
  {
    key: "lag-chart",
    header: "Lag over time",
    cell: (c) => /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(LineChart, { id: "consumer-lag", points: firstSeries(c, LAG_SERIES, ["lag", "lag_pages", "value", "v"]), label: "lag", unit: "pages" })
  },
  { key: "finished", header: "Finished", cell: (c) => c.finished ? "yes" : "no" },
  { key: "updated", header: "Checkpoint", cell: (c) => /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Time, { value: c.updated_at }) },
  { key: "problem", header: "Problem", cell: (c) => c.problem ?? "" }
];
function safeDecode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
function StreamPage() {
  const location = (0, import_react_router_dom5.useLocation)();
  const match = location.pathname.match(/\/streams\/(.+)$/);
  const streamId = match ? safeDecode(match[1]) : "";
  const query = new URLSearchParams(location.search);
  const { data, error, loading } = useApi(`streams/${streamId.split("/").map(encodeURIComponent).join("/")}`, {
    partition: query.get("partition"),
    offset: query.get("offset")
  });
  const s = data?.summary ?? {};
  const pages = data ? pagesOverTime(data) : [];
  return /* @__PURE__ */ (0, import_jsx_runtime9.jsxs)(import_react11.Box, { id: "stream-page", children: [
    /* @__PURE__ */ (0, import_jsx_runtime9.jsxs)(Title, { children: [
      "Stream ",
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(import_react11.Text, { as: "span", id: "stream-id", children: streamId })
    ] }),
    loading && !data ? /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Loading, { what: "the stream" }) : null,
    /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Problem, { error }),
    data ? /* @__PURE__ */ (0, import_jsx_runtime9.jsxs)(import_jsx_runtime9.Fragment, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(
        Facts,
        {
          id: "stream-facts",
          items: [
            ["DAG", /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(DagLink, { dagId: s.dag_id })],
            ["DAG run", /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(DagRunLink, { dagId: s.dag_id, runId: s.run_id })],
            ["Task instance", /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(TaskLink, { dagId: s.dag_id, runId: s.run_id, taskId: s.task_id, mapIndex: s.map_index })],
            ["State", /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(StateBadge, { state: s.state }), "stream-state"],
            ["Pages", String(s.pages ?? "-"), "stream-pages"],
            ["Attempt", String(s.attempt ?? "-")],
            ["First page", /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Time, { value: s.first_at })],
            ["Last page", /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Time, { value: s.last_at })],
            ["Where", `${s.topic ?? "?"} partition ${s.partition ?? "?"}`],
            ["Error", s.error ? /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(import_react11.Text, { color: "fg.error", children: s.error }) : null]
          ]
        }
      ),
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(import_react11.Flex, { gap: 8, wrap: "wrap", my: 3, children: /* @__PURE__ */ (0, import_jsx_runtime9.jsxs)(import_react11.Box, { children: [
        /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(import_react11.Heading, { size: "sm", children: "Pages over time" }),
        pages.length ? /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(LineChart, { id: "pages-over-time", points: pages, label: pagesLabel(data) }) : /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(import_react11.Text, { color: "fg.muted", children: "No page yet." })
      ] }) }),
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Title, { children: "Consumers" }),
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(
        DataTable,
        {
          id: "consumers",
          columns: (data.consumers ?? []).some((c) => firstSeries(c, LAG_SERIES, ["lag", "lag_pages", "value", "v"]).length) ? CONSUMER_COLUMNS : CONSUMER_COLUMNS.filter((c) => c.key !== "lag-chart"),
          rows: data.consumers ?? [],
          rowProps: (c) => ({ className: "consumer-row", "data-task": c.task_id }),
          empty: "No consumer has a checkpoint of this stream."
        }
      ),
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Title, { children: "Pages" }),
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(
        DataTable,
        {
          id: "pages",
          columns: PAGE_COLUMNS,
          rows: data.pages ?? [],
          rowKey: (p) => p.offset,
          rowProps: (p) => ({ className: "page", "data-offset": p.offset }),
          empty: "No page in the window."
        }
      ),
      /* @__PURE__ */ (0, import_jsx_runtime9.jsx)(Window, { text: data.window_text })
    ] }) : null
  ] });
}

// src/main.jsx
var import_jsx_runtime10 = __toESM(require_jsx_runtime());
var TABS = [
  ["streams", "Streams"],
  ["asset-events", "Asset events"],
  ["dead-letters", "Dead letters"],
  ["health", "Health"]
];
function NavTabs() {
  return /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react12.Flex, { as: "nav", className: "tabs", alignItems: "center", borderBottomWidth: "1px", mb: 2, children: TABS.map(([tab, label]) => /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.NavLink, { to: `${VIEW_ROUTE}/${tab}`, "data-tab": tab, children: ({ isActive }) => /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(
    import_react12.Center,
    {
      className: isActive ? "tab active" : "tab",
      "data-active": isActive ? "true" : void 0,
      borderBottomColor: "border.info",
      borderBottomWidth: isActive ? 3 : 0,
      color: isActive ? "fg" : "fg.muted",
      fontWeight: "bold",
      height: "40px",
      mb: "-2px",
      pb: isActive ? 0 : "3px",
      px: 4,
      children: label
    }
  ) }, tab)) });
}
function ViewPages() {
  return /* @__PURE__ */ (0, import_jsx_runtime10.jsxs)(import_jsx_runtime10.Fragment, { children: [
    /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react12.Heading, { size: "lg", mb: 2, children: "Kafka Events" }),
    /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(NavTabs, {}),
    /* @__PURE__ */ (0, import_jsx_runtime10.jsxs)(import_react_router_dom6.Routes, { children: [
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { index: true, element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Navigate, { to: `${VIEW_ROUTE}/streams`, replace: true }) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "streams", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(StreamsPage, {}) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "streams/*", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(StreamPage, {}) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "asset-events", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(AssetEventsPage, {}) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "dead-letters", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(DeadLettersPage, {}) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "dead-letters/:partition/:offset", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(DeadLetterPage, {}) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "health", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(HealthPage, {}) }),
      /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Route, { path: "*", element: /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react_router_dom6.Navigate, { to: `${VIEW_ROUTE}/streams`, replace: true }) })
    ] })
  ] });
}
function KafkaEvents({ dagId, runId, taskId, mapIndex }) {
  return /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(import_react12.Box, { className: "kafka-events", p: 2, color: "fg", "data-view": dagId ? "tab" : "nav", children: dagId ? /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(StreamsPage, { dagId, runId, taskId, mapIndex }) : /* @__PURE__ */ (0, import_jsx_runtime10.jsx)(ViewPages, {}) });
}
globalThis.AirflowPlugin = KafkaEvents;
export {
  KafkaEvents as default
};
