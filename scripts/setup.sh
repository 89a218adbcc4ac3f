#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test torch_spyre; does
# nothing for what is already there, so it is safe to run every time.
set -euo pipefail

PYTHON=${PYTHON:-python3}
DEBIAN_PACKAGES=(cmake ninja-build ccache g++ clang-format googletest
                 libgtest-dev libgmock-dev libopenblas-dev)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# PyTorch 2.13.0 CPU: pip takes the copy on this machine's disk. Pin it
# exactly so nothing ever pulls a different (CUDA) build.
if ! "$PYTHON" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "setup: installing torch==2.13.0"
  "$PYTHON" -m pip install -q torch==2.13.0
fi

PY_PACKAGES=(pytest pyyaml numpy expecttest hypothesis)
for pkg in "${PY_PACKAGES[@]}"; do
  module=$pkg; [ "$pkg" = pyyaml ] && module=yaml
  "$PYTHON" -c "import $module" 2>/dev/null || {
    echo "setup: installing $pkg"; "$PYTHON" -m pip install -q "$pkg"; }
done
echo "setup: ok"
