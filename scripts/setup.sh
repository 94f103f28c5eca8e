#!/usr/bin/env bash
# Idempotent setup: .venv in the project root, pinned requirements, facexlib --no-deps.
#   scripts/setup.sh        runtime only
#   scripts/setup.sh --dev  also pytest, playwright and Debian's chromium (for the browser test)
# A second run with unchanged requirements returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
req=requirements.txt
[ $dev = 1 ] && req="requirements.txt + requirements-dev.txt"
base=.venv/.setup-$(cat requirements.txt requirements-dev.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$base-1" ] || { [ $dev = 0 ] && [ -f "$base-0" ]; }; then
  :  # already installed for these requirements
else
  echo "setup: installing $req (first run: a few minutes)"
  # everything but facexlib with dependencies, then facexlib alone with --no-deps
  grep -v '^facexlib' requirements.txt > .venv/requirements-nofacexlib.txt
  extra=""
  [ $dev = 1 ] && extra=$(grep -v '^-r' requirements-dev.txt | grep -v '^#' | tr '\n' ' ')
  .venv/bin/python -m pip install -q --disable-pip-version-check -r .venv/requirements-nofacexlib.txt $extra
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$(grep '^facexlib' requirements.txt)"
  touch "$base-$dev"
fi
if [ $dev = 1 ] && [ ! -x /usr/bin/chromium ]; then
  echo "setup: installing Debian chromium for the browser test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver >/dev/null
fi
echo "setup: ready (.venv)"
