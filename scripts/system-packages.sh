#!/usr/bin/env bash
# Installs the Debian packages the project needs (idempotent; apt starts no service here).
set -euo pipefail
# python3: the simulated nodes' login user runs it when the venv's interpreter is private (simcluster/runtime.py).
PACKAGES=(openssh-server memcached chromium libibverbs1 ibverbs-providers iproute2 procps redis-server python3)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
