#!/usr/bin/env bash
# Runs every check and every test of the project: formatting, clippy with -D warnings, and the
# whole test suite against a real PostgreSQL and the embedded SQLite.
#
# PostgreSQL: the server at CLOUDLY_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres;
# DATABASE_URL is honoured too) is started when it is down and local, a throwaway database is created
# for this run and dropped at the end. Tests receive its URL as CLOUDLY_TEST_DATABASE_URL and fail
# (never skip) when it does not answer.
set -euo pipefail
cd "$(dirname "$0")/.."

admin_url="${CLOUDLY_TEST_PG_URL:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}}"

pg_up() { psql "$admin_url" -Atqc 'select 1' >/dev/null 2>&1; }

if ! pg_up; then
  if ls /etc/postgresql >/dev/null 2>&1; then
    echo "test.sh: PostgreSQL does not answer; starting the local cluster"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
if ! pg_up; then
  echo "test.sh: PostgreSQL at ${admin_url%%@*}@… does not answer; the Postgres tests cannot run" >&2
  exit 1
fi

database="cloudly_test_$(date +%s)_$$"
psql "$admin_url" -Atqc "create database ${database}" >/dev/null
cleanup() { psql "$admin_url" -Atqc "drop database if exists ${database} with (force)" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The same server, this run's database.
export CLOUDLY_TEST_DATABASE_URL="${admin_url%/*}/${database}"
export CLOUDLY_TEST_PG_ADMIN_URL="$admin_url"

# The ecosystem's own TypedRequest client, for tests/real_client.rs.
if [ ! -d tests/typedrequest-client/node_modules/@api.global/typedrequest ] \
   || [ tests/typedrequest-client/package-lock.json -nt tests/typedrequest-client/node_modules ]; then
  (cd tests/typedrequest-client && npm ci --no-audit --no-fund --loglevel=error)
fi

# Redocly CLI, pinned (tests/openapi-lint/package-lock.json), for the OpenAPI lint below.
if [ ! -x tests/openapi-lint/node_modules/.bin/redocly ] \
   || [ tests/openapi-lint/package-lock.json -nt tests/openapi-lint/node_modules ]; then
  (cd tests/openapi-lint && npm ci --no-audit --no-fund --loglevel=error)
fi

# Debian's Chromium and playwright-core (pinned, tests/console-browser/package-lock.json) for
# tests/console_browser.rs, the operator console in a real headless browser.
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
if [ ! -d tests/console-browser/node_modules/playwright-core ] \
   || [ tests/console-browser/package-lock.json -nt tests/console-browser/node_modules ]; then
  (cd tests/console-browser && npm ci --no-audit --no-fund --loglevel=error)
fi

# Schemathesis, pinned with hashes, for tests/openapi_fuzz.rs (a no-op when already installed).
tests/schemathesis/install.sh

# The OpenAPI document passes Redocly's recommended-strict rules with no problem at all (every
# warning is an error; openapi/redocly.yaml turns off two rules, each with its reason).
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  tests/openapi-lint/node_modules/.bin/redocly lint --config openapi/redocly.yaml openapi/openapi.yaml

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
# The library and binary as shipped: without the `testing` feature the test builds turn on.
cargo clippy --lib --bins --locked -- -D warnings
cargo test --all-targets --locked
# Doc tests are not part of --all-targets.
cargo test --doc --locked

# The deploy kit under a real Docker engine: deploy/Dockerfile built, deploy/docker-compose.yml up
# with two controllers on PostgreSQL, the end-to-end suite against both and three faults (a private
# dockerd and stand-in base images; deploy/README.md, "The test command's run under Docker").
scripts/compose-e2e.sh
