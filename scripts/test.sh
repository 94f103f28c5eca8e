#!/usr/bin/env bash
# Set everything up (idempotent, dev tools and chromium included) and run the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k weights
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# the rooms' import rule first: a wrong-way import fails in seconds, before the suite
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest "$@"
