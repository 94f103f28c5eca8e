#!/usr/bin/env bash
# Set everything up (idempotent, dev tools and chromium included) and run the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k weights
# One pytest-xdist worker per CPU, at most 4 (each holds up to ~2.5 GB): tests/workers.py gives each
# its own cores. GPEN_TEST_WORKERS=0 runs everything in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# the rooms' import rule first: a wrong-way import fails in seconds, before the suite
.venv/bin/lint-imports --no-cache
cpus=$(nproc)
workers=${GPEN_TEST_WORKERS:-$(( cpus < 4 ? cpus : 4 ))}
if [ "$workers" -le 1 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
