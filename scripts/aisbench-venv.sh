#!/usr/bin/env bash
# Installs AISBench (ais_bench) into its own venv, pinned and idempotent (`make aisbench`).
#   ${PDCP_AISBENCH_HOME:-/opt/pdcp-aisbench}: the venv, built with Debian's /usr/bin/python3.11 so that an
#   unprivileged user can run it (a pyenv interpreter under /root is not reachable for them).
#   torch==2.13.0 goes in first: the CPU wheel that lies on disk, found through pip's configured find-links;
#   then requirements/aisbench.txt, a full pinned freeze (docs/aisbench-facts.md, "Install").
# A stamp holds the sha256 of the requirements file and the torch pin: the same stamp means nothing to do; a
# different one rebuilds from scratch. The stamp is written last, so a failed install leaves none.
set -euo pipefail
umask 022

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${PDCP_AISBENCH_HOME:-/opt/pdcp-aisbench}
PYTHON=${PDCP_AISBENCH_PYTHON:-/usr/bin/python3.11}
REQUIREMENTS=$REPO/requirements/aisbench.txt
TORCH_PIN="torch==2.13.0"
STAMP=$VENV/.pdcp-aisbench-stamp

# The simulated model's tokenizer (simcluster/tokenizer_dir.py), rebuilt when the code that defines it changes;
# world-readable: performance runs on a simulated AISBench client host read it as that host's login user.
build_sim_tokenizer() {
  local dest=${PDCP_SIM_TOKENIZER:-$VENV/sim-tokenizer}
  local want
  want=$(cat "$REPO/simcluster/tokenizer_dir.py" "$REPO/simcluster/engine/textgen.py" | sha256sum | cut -d' ' -f1)
  if [ -f "$dest/.pdcp-stamp" ] && [ "$(cat "$dest/.pdcp-stamp")" = "$want" ]; then
    return 0
  fi
  rm -rf "$dest.tmp"
  (cd / && PYTHONPATH="$REPO" "$VENV/bin/python" -m simcluster.tokenizer_dir "$dest.tmp" >/dev/null)
  echo "$want" > "$dest.tmp/.pdcp-stamp"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
  echo "simulated model's tokenizer: $dest"
}

wanted="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1) $TORCH_PIN"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && [ -x "$VENV/bin/ais_bench" ]; then
  build_sim_tokenizer
  echo "AISBench is up to date in $VENV"
  exit 0
fi

if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3.11 python3.11-venv
  else
    echo "AISBench needs $PYTHON with venv: apt-get install python3.11 python3.11-venv" >&2
    exit 1
  fi
fi

echo "installing AISBench into $VENV (a few minutes on a cold pip cache, ~2.2 GB)"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --no-input --progress-bar off -q)
"${PIP[@]}" "$TORCH_PIN"
echo "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') installed"
"${PIP[@]}" -r "$REQUIREMENTS"
(cd / && "$VENV/bin/python" -c 'import datasets, ais_bench.benchmark.cli.main') # what fails when pyarrow/numpy disagree
"$VENV/bin/ais_bench" --help >/dev/null
echo "$wanted" > "$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
build_sim_tokenizer
echo "AISBench installed: $VENV/bin/ais_bench"
