// Builds the Kafka Events view's bundle: src/main.jsx -> ../src/airflow_kafka_events/ui/static/kafka-events.js
//
// React, React Router and Chakra UI are not bundled: Airflow's UI puts its own instances on
// globalThis (React, ReactJSXRuntime, ReactRouterDOM, ChakraUI) before it imports a react_apps
// bundle, and the view must use those (one React, the UI's router and its Chakra theme).
//
//   node build.mjs           write the bundle
//   node build.mjs --check   exit 1 if the committed bundle differs from a fresh build
import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const OUTFILE = resolve(here, "../src/airflow_kafka_events/ui/static/kafka-events.js");

const GLOBALS = {
  react: "React",
  "react/jsx-runtime": "ReactJSXRuntime",
  "react-router-dom": "ReactRouterDOM",
  "@chakra-ui/react": "ChakraUI",
};

const airflowGlobals = {
  name: "airflow-globals",
  setup(b) {
    b.onResolve({ filter: /^(react|react\/jsx-runtime|react-router-dom|@chakra-ui\/react)$/ }, (args) => ({
      path: args.path,
      namespace: "airflow-global",
    }));
    b.onLoad({ filter: /.*/, namespace: "airflow-global" }, (args) => ({
      contents:
        `const g = globalThis[${JSON.stringify(GLOBALS[args.path])}];\n` +
        `if (g === undefined) throw new Error("Airflow's UI did not provide globalThis.${GLOBALS[args.path]}");\n` +
        "module.exports = g;\n",
      loader: "js",
    }));
  },
};

const result = await build({
  entryPoints: [resolve(here, "src/main.jsx")],
  bundle: true,
  format: "esm",
  target: "es2020",
  jsx: "automatic",
  minify: false,
  legalComments: "none",
  charset: "utf8",
  write: false,
  plugins: [airflowGlobals],
  absWorkingDir: here,
  logLevel: "warning",
});
const text = result.outputFiles[0].text;

if (process.argv.includes("--check")) {
  let committed = "";
  try {
    committed = readFileSync(OUTFILE, "utf8");
  } catch {
    committed = "";
  }
  if (committed !== text) {
    console.error(`${OUTFILE} differs from a fresh build of ui/src: run \`make ui\` and commit it`);
    process.exit(1);
  }
  console.log(`${OUTFILE} matches ui/src`);
} else {
  writeFileSync(OUTFILE, text);
  console.log(`wrote ${OUTFILE} (${text.length} bytes)`);
}
