#!/usr/bin/env bash
# Runs the end-to-end suite (tests/e2e.rs) in release mode, one test at a time.
#
# Against running controllers (the compose `e2e` service): set CLOUDLY_E2E_URLS to the two
# controller base URLs, comma-separated, and CLOUDLY_E2E_IDENTITY to the path of an administrator
# identity JSON file. The suite then talks to them only over HTTP, WebSocket and the `cloudly` CLI,
# with ids of its own (a random suffix per run), so it can run again and again.
#
# Without them the suite starts two `cloudly serve` processes itself, on a fresh database of the
# PostgreSQL server named by CLOUDLY_TEST_PG_ADMIN_URL (default
# postgres://postgres@127.0.0.1:5432/postgres), as `scripts/test.sh` does.
#
# The environment is passed through unchanged; extra arguments go to the test binary.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${CLOUDLY_E2E_URLS:-}" ] && [ -z "${CLOUDLY_E2E_IDENTITY:-}" ]; then
  echo "e2e.sh: CLOUDLY_E2E_URLS is set but CLOUDLY_E2E_IDENTITY is not" >&2
  exit 2
fi
if [ -n "${CLOUDLY_E2E_IDENTITY:-}" ] && [ ! -r "${CLOUDLY_E2E_IDENTITY}" ]; then
  echo "e2e.sh: CLOUDLY_E2E_IDENTITY (${CLOUDLY_E2E_IDENTITY}) is not a readable file" >&2
  exit 2
fi

exec cargo test --release --locked --test e2e -- --test-threads=1 "$@"
