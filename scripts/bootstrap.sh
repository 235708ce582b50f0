#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine:
#   - a JDK >= 17 and Maven (installed from Debian packages when missing and running as root),
#   - Chromium and chromium-driver for the UI's browser tests (the same way),
#   - PostgreSQL 15 and redis-server for the e2e tests' production topology (the same way),
#   - a virtualenv in .venv with the package (editable) and its test extras, pinned by constraints,
#   - the Apache Kafka broker jars and the tests' schema registry (Apicurio Registry) from Maven Central
#     (cached under ~/.cache, fetched once),
#   - the npm packages of tests/node and ui (npm ci, from package-lock.json) when npm is available.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

need_apt=()
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then need_apt+=(openjdk-17-jre-headless); fi
if ! command -v mvn >/dev/null 2>&1; then need_apt+=(maven); fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "bootstrap: please install ${need_apt[*]} (Kafka 4.x needs Java 17+ and Maven to fetch its jars)" >&2
    exit 1
  fi
fi

# the browser tests of the UI view (tests/e2e/ui): Debian's Chromium and its driver, when missing
need_browser=()
if ! command -v chromium >/dev/null 2>&1; then need_browser+=(chromium); fi
if ! command -v chromedriver >/dev/null 2>&1; then need_browser+=(chromium-driver); fi
if [ "${#need_browser[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${need_browser[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_browser[@]}" >/dev/null
  else
    echo "bootstrap: the UI browser tests need ${need_browser[*]} (apt-get install ${need_browser[*]})" >&2
  fi
fi

# the e2e tests' production topology (tests/harness): a PostgreSQL 15 metadata DB, a Redis broker
need_servers=()
if [ ! -x /usr/lib/postgresql/15/bin/initdb ]; then need_servers+=(postgresql-15); fi
if ! command -v redis-server >/dev/null 2>&1; then need_servers+=(redis-server); fi
if [ "${#need_servers[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${need_servers[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_servers[@]}" >/dev/null
  else
    echo "bootstrap: the e2e tests need ${need_servers[*]} (apt-get install ${need_servers[*]})" >&2
  fi
fi

stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[test]"
  touch "$stamp"
fi

# the second-language signature checker (tests/node): avsc pinned by package-lock.json; the Kafka
# Events view's build (ui): esbuild pinned by package-lock.json (its bundle is committed; a test
# rebuilds it and compares)
if command -v npm >/dev/null 2>&1; then
  for dir in tests/node ui; do
    node_stamp=$dir/node_modules/.installed
    if [ ! -f "$node_stamp" ] || [ $dir/package-lock.json -nt "$node_stamp" ]; then
      (cd $dir && npm ci --no-audit --no-fund --loglevel=error)
      touch "$node_stamp"
    fi
  done
else
  echo "bootstrap: node/npm not found; the signature vector test and the UI bundle check need node 18+ (they fail in CI without)" >&2
fi

# the broker's jars and the tests' schema registry (Apicurio Registry; it runs on Java 21+, found in
# JAVA_HOME, PATH, /usr/lib/jvm or /opt, or AIRFLOW_KAFKA_EVENTS_REGISTRY_JAVA_HOME)
"$VENV/bin/airflow-kafka-events" kafka fetch --schema-registry
