#!/usr/bin/env bash
# `make bench`: every benchmark, each printing ratios measured side by side in one run (not timed tests).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export PYTHONPATH="$PWD"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
status=0
for bench in "bench/ssh/run.py" "bench/sim/pd_throughput.py" "bench/proxy/run.py" "bench/proxy/cache_aware.py" \
             "bench/deploy/run.py" \
             "bench/evals/run.py" "bench/pool/run.py" "bench/topology/run.py"; do
  echo "=== $bench"
  "$PY" "$bench" || { echo "!!! $bench failed"; status=1; }
  echo
done
exit $status
