#!/usr/bin/env bash
# The one command for a lent GPU machine, run as it is (docs/gpu.md):
#
#   bash scripts/gpu_check.sh                 # there: the whole GPU check, results under $OUT
#   bash scripts/gpu_check.sh --fetch-wheels  # here, before: download the wheels it carries
#
# The lent machine has python3 3.12 with torch (CUDA), torchvision, opencv-python-headless, numpy,
# psutil, pillow, scikit-image, tqdm, onnx and onnxruntime, and reaches no package registry. Of
# what the check imports it lacks only facexlib (its face detection, all the engine imports, needs
# none of facexlib's declared extras), so facexlib travels as a wheel in wheels/gpu/ (ignored by
# git, carried with the working tree). Its wheel is unpacked into a temporary folder that goes
# first on PYTHONPATH: no pip, no network. Results: $OUT/gpu_check.json, $OUT/gpu_row.md (the
# "GPU: 512 float16" row for docs/performance.md) and $OUT/gpu_check.log; without $OUT, out/gpu/.
#
# Exit status: benchmarks/gpu_check.py's (0 all ok, 1 selfcheck failed, 2 no CUDA device: it
# says "no CUDA device" after importing everything the check needs); 3 when a wheel is missing or
# the interpreter lacks a module the check imports (torch, OpenCV...: named, with the package).
# GPU_CHECK_PYTHON picks the interpreter (default python3; tests point it at a prepared venv).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=wheels/gpu
# What the lent image lacks, pinned as requirements.txt pins it (one name==version a line).
NEEDED="$(grep -E '^facexlib==' requirements.txt)"

if [ "${1:-}" = --fetch-wheels ]; then
  # For the lent machine's Python 3.12 on Linux x86_64; pure-Python wheels fit any Python 3.
  pip_py=${PIP_PYTHON:-.venv/bin/python}
  [ -x "$pip_py" ] || pip_py=python3
  mkdir -p "$WHEELS"
  # shellcheck disable=SC2086
  "$pip_py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux2014_x86_64 -d "$WHEELS" $NEEDED
  ls -l "$WHEELS"
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "gpu_check.sh: unknown option $1 (none, or --fetch-wheels)" >&2
  exit 2
fi

PY=${GPU_CHECK_PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "gpu_check.sh: no Python interpreter '$PY' here; install python3 or point GPU_CHECK_PYTHON at one" >&2
  exit 3
fi
OUTDIR=${OUT:-out/gpu}
mkdir -p "$OUTDIR"
unpacked=$(mktemp -d "${TMPDIR:-/tmp}/gpen-gpu-wheels.XXXXXX")
home=$(mktemp -d "${TMPDIR:-/tmp}/gpen-gpu-home.XXXXXX")
trap 'rm -rf "$unpacked" "$home"' EXIT
for req in $NEEDED; do
  name=${req%%==*}
  version=${req##*==}
  wheel=$(ls "$WHEELS/$name-$version"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    echo "gpu_check.sh: no $name $version wheel in $WHEELS/; run \`bash scripts/gpu_check.sh --fetch-wheels\` on a machine that reaches PyPI first (it travels with the working tree)" >&2
    exit 3
  fi
  "$PY" -m zipfile -e "$wheel" "$unpacked"
done
echo "gpu_check.sh: $("$PY" --version 2>&1) ($(command -v "$PY")), wheels from $WHEELS unpacked into $unpacked"

# Nothing may reach the network: weights are synthetic, and hubs are told to stay offline.
# The models folder is a fresh temporary one (no saved profile or cache from elsewhere).
set +e
PYTHONPATH="$unpacked:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONNOUSERSITE=1 \
  HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1 GPEN_HOME="$home" \
  "$PY" benchmarks/gpu_check.py --json "$OUTDIR/gpu_check.json" --row-out "$OUTDIR/gpu_row.md" \
  2>&1 | tee "$OUTDIR/gpu_check.log"
rc=${PIPESTATUS[0]}
set -e
echo "gpu_check.sh: exit $rc; results in $OUTDIR/"
exit "$rc"
