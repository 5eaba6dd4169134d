#!/usr/bin/env bash
# Installs the pinned Schemathesis of tests/openapi_fuzz.rs into tests/schemathesis/.venv: a venv
# of python3, every package from requirements.txt with its hash checked. Does nothing when the venv
# was installed from this very requirements.txt.
set -euo pipefail
cd "$(dirname "$0")"
if [ -x .venv/bin/schemathesis ] && cmp -s requirements.txt .venv/installed-requirements.txt; then
  exit 0
fi
rm -rf .venv
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-input \
  --require-hashes --no-deps --only-binary=:all: -r requirements.txt
cp requirements.txt .venv/installed-requirements.txt
