#!/usr/bin/env bash
# Set everything up (idempotent, dev tools and chromium included) and run the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k weights
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
exec .venv/bin/python -m pytest "$@"
