#!/usr/bin/env bash
# Installs the Debian packages the project needs (idempotent; apt starts no service here).
set -euo pipefail
# python3: the simulated nodes' login user runs it when the venv's interpreter is private (simcluster/runtime.py).
# prometheus: the binary only, for tests/telemetry/test_prometheus_live.py (a stock Prometheus on the SD endpoint).
PACKAGES=(openssh-server memcached chromium libibverbs1 ibverbs-providers iproute2 procps redis-server python3
          prometheus)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Where apt may start services (a systemd host), Debian's prometheus.service would listen on every address at
  # :9090; the tests start their own on loopback, so a service this script just installed is stopped and disabled.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi
