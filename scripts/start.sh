#!/usr/bin/env bash
# Set everything up (idempotent) and start the app on http://127.0.0.1:7860
# Extra arguments go to app.py, e.g. scripts/start.sh --port 8080 --share
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python app.py "$@"
