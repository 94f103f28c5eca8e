#!/usr/bin/env bash
# Idempotent setup: .venv in the project root, pinned requirements, facexlib --no-deps.
#   scripts/setup.sh        runtime only
#   scripts/setup.sh --ray  also Ray (requirements-ray.txt: batch over folders/clusters, Ray Serve; ~509 MB)
#   scripts/setup.sh --dev  also pytest, playwright, Ray (so CI runs the ray tests) and Debian's chromium
# PyTorch: the CUDA build of requirements.txt where an NVIDIA GPU answers `nvidia-smi -L` (or
# GPEN_TORCH=cuda); on a Linux x86_64 machine without one, the CPU build of requirements-cpu.txt
# (300 MiB less RSS in every process; GPEN_TORCH=cpu forces it). Elsewhere (macOS, aarch64) PyPI's
# torch is already a CPU build: requirements.txt as it is.
# A second run with unchanged requirements returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
ray=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1; ray=1 ;;
    --ray) ray=1 ;;
    *) echo "setup: unknown option $arg (use --dev and/or --ray)" >&2; exit 2 ;;
  esac
done
# What is installed, as one level: 0 runtime, r runtime + ray, 1 everything (dev includes ray).
level=0
[ $ray = 1 ] && level=r
[ $dev = 1 ] && level=1
PY=${PYTHON:-python3}
torch_build=${GPEN_TORCH:-}
if [ -z "$torch_build" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    torch_build=cuda
  elif [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ]; then
    torch_build=cpu
  else
    torch_build=cuda  # requirements.txt as it is (a CPU build anyway on macOS / aarch64)
  fi
fi
case "$torch_build" in
  cpu|cuda) ;;
  *) echo "setup: GPEN_TORCH must be cpu or cuda, not '$torch_build'" >&2; exit 2 ;;
esac

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
req=requirements.txt
[ $ray = 1 ] && req="$req + requirements-ray.txt"
[ $dev = 1 ] && req="$req + requirements-dev.txt"
base=.venv/.setup-$torch_build-$(cat requirements.txt requirements-cpu.txt requirements-dev.txt requirements-ray.txt requirements-identity.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$base-1" ] || { [ $level != 1 ] && [ -f "$base-r" ]; } || { [ $level = 0 ] && [ -f "$base-0" ]; }; then
  :  # already installed for these requirements
else
  echo "setup: installing $req, PyTorch's $torch_build build (first run: a few minutes)"
  # everything but facexlib with dependencies, then facexlib alone with --no-deps
  if [ "$torch_build" = cpu ]; then
    # the CPU build alone, from PyTorch's CPU index (no retries: where that index is out of
    # reach, a local wheel house answers at once), then requirements.txt without torch/torchvision
    # (first without a torchvision built for another torch: it would fail to import, and the
    # engine does not need one)
    .venv/bin/python -m pip uninstall -y -q --disable-pip-version-check torchvision >/dev/null 2>&1 || true
    .venv/bin/python -m pip install -q --disable-pip-version-check --retries 0 --timeout 20 \
      --extra-index-url https://download.pytorch.org/whl/cpu -r requirements-cpu.txt
    grep -v -E '^(facexlib|torch|torchvision)==|^-r ' requirements.txt > .venv/requirements-nofacexlib.txt
  else
    grep -v -E '^facexlib|^-r ' requirements.txt > .venv/requirements-nofacexlib.txt
  fi
  # requirements.txt's own -r (the identity check): a copy under .venv/ would look for it there
  extra="-r requirements-identity.txt"
  [ $dev = 1 ] && extra="$extra $(grep -v '^-r' requirements-dev.txt | grep -v '^#' | tr '\n' ' ')"
  [ $ray = 1 ] && extra="$extra -r requirements-ray.txt"
  # one OpenCV only (requirements.txt): remove the headless build older setups installed, before
  # the full one goes in (uninstalling either afterwards would delete the cv2 files they share)
  .venv/bin/python -m pip uninstall -y -q --disable-pip-version-check opencv-python-headless >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -r .venv/requirements-nofacexlib.txt $extra
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$(grep '^facexlib' requirements.txt)"
  touch "$base-$level"
fi
if [ $dev = 1 ] && ! ls "wheels/gpu/$(grep '^facexlib==' requirements.txt | sed 's/==/-/')"-*.whl >/dev/null 2>&1; then
  # what scripts/gpu_check.sh carries to a lent GPU machine (tests/test_gpu_check_script.py uses it)
  echo "setup: downloading the wheels for scripts/gpu_check.sh into wheels/gpu/"
  bash scripts/gpu_check.sh --fetch-wheels >/dev/null
fi
if [ $dev = 1 ] && [ ! -x /usr/bin/chromium ]; then
  echo "setup: installing Debian chromium for the browser test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver >/dev/null
fi
echo "setup: ready (.venv, PyTorch $torch_build build)"
