#!/usr/bin/env bash
# `make run`: migrate, create the admin, bring the simulated cluster up and import it, then run the ASGI
# server, a Celery worker and beat on 127.0.0.1 until Ctrl-C, which stops all of it (by PID).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="$ROOT/.venv/bin/python"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PDCP_DATA_DIR="${PDCP_DATA_DIR:-$ROOT/data}"
HOST=127.0.0.1
PORT="${PORT:-8000}"
# The simulated nodes' login user reads this dir, and the clone may sit below a 0700 directory: keep it
# under root-owned 0755 dirs, one per data dir.
SIM_STATE="${SIMCLUSTER_STATE_DIR:-/var/lib/pdcp-sim/state-$(printf %s "$PDCP_DATA_DIR" | sha256sum | cut -c1-12)}"
mkdir -p "$PDCP_DATA_DIR/logs"
LOGS="$PDCP_DATA_DIR/logs"

port_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
if ! port_free "$PORT"; then
  for p in $(seq 8001 8099); do port_free "$p" && PORT=$p && break; done
  echo "port 8000 is taken: using $PORT"
fi

"$PY" manage.py migrate --no-input -v0
ADMIN_NOTE=$("$PY" manage.py ensure_admin)
echo "$ADMIN_NOTE"

PIDS=()
SIM_UP=0
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ "$SIM_UP" = 1 ]; then "$PY" -m simcluster down --state-dir "$SIM_STATE" || true; fi
  echo "stopped."
}
trap cleanup INT TERM EXIT

if [ "${PDCP_SIMCLUSTER:-1}" = 1 ]; then
  echo "starting the simulated reference cluster (state in $SIM_STATE)..."
  "$PY" -m simcluster up --state-dir "$SIM_STATE" > "$LOGS/simcluster.log" 2>&1 || {
    echo "simcluster failed to start; see $LOGS/simcluster.log"; tail -n 20 "$LOGS/simcluster.log"; exit 1; }
  SIM_UP=1
  "$PY" manage.py import_inventory "$SIM_STATE/inventory.yaml"
  # The reference topology (node 0 corrected), ready to plan and deploy on the simulated cluster, whose model
  # answers the made-up AIME questions of simcluster/answer_books (70% right) for an accuracy run.
  DEMO_SPEC="$PDCP_DATA_DIR/reference-sim.yaml"
  "$PY" - examples/reference-topology-fixed.yaml "$DEMO_SPEC" <<'EOF'
import sys
from pathlib import Path

import yaml

import plainyaml

data = plainyaml.load(Path(sys.argv[1]).read_text(encoding="utf-8"))
data["launch_profile"] = "sim"
data["simulation"] = {"answer_book": "made-up-aime", "accuracy": 0.7, "think": True}
Path(sys.argv[2]).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
EOF
  # The demo is a convenience: when the operator's own deployments hold its dies, the control plane starts without it.
  "$PY" manage.py load_deployment "$DEMO_SPEC" --cluster reference \
    --name reference-sim --launch-profile sim --if-missing \
    --run-dir "$(getent passwd simnode | cut -d: -f6)/pdcp-runs/reference-sim" \
    || echo "  (the demo deployment reference-sim was not created, see above; starting without it)"
else
  "$PY" manage.py import_inventory examples/reference-cluster.yaml
fi

"$PY" -m celery -A controlplane worker -Q "$("$PY" manage.py celery_queues)" --concurrency=2 --loglevel=INFO \
  --without-gossip --without-mingle > "$LOGS/worker.log" 2>&1 &
PIDS+=($!)
"$PY" -m celery -A controlplane beat --loglevel=INFO --schedule "$PDCP_DATA_DIR/celerybeat-schedule" \
  > "$LOGS/beat.log" 2>&1 &
PIDS+=($!)
"$PY" -m daphne -b "$HOST" -p "$PORT" controlplane.asgi:application > "$LOGS/web.log" 2>&1 &
PIDS+=($!)

for _ in $(seq 100); do (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null && break; sleep 0.1; done
echo
echo "  PD control plane: http://$HOST:$PORT/   (logs in $LOGS)"
echo "  ${ADMIN_NOTE//$'\n'/$'\n'  }"
echo "  API docs:         http://$HOST:$PORT/api/docs/"
echo "  Ctrl-C stops the web server, the worker, beat and the simulated cluster."
wait -n "${PIDS[@]}" || true
echo "a process exited; see $LOGS"
