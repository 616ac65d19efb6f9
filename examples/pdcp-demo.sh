#!/usr/bin/env bash
# pdcp from end to end (docs/cli.md): import an inventory, create the deployment if it is missing, add a revision
# and make it active, show the plan, deploy it with a live progress bar per node, check the result, stop it.
#
#   examples/pdcp-demo.sh INVENTORY.yaml SPEC.yaml [DEPLOYMENT] [CLUSTER]
#
# The server: PDCP_URL with PDCP_TOKEN, or PDCP_URL with PDCP_PASSWORD (and PDCP_USER, default admin) to log in
# first, or what an earlier `pdcp login` saved. On the simulated reference cluster (`python -m simcluster up`),
# INVENTORY is the state dir's inventory.yaml and SPEC a topology with `launch_profile: sim` and its own run_dir.
set -euo pipefail

inventory=${1:?usage: examples/pdcp-demo.sh INVENTORY.yaml SPEC.yaml [DEPLOYMENT] [CLUSTER]}
spec=${2:?usage: examples/pdcp-demo.sh INVENTORY.yaml SPEC.yaml [DEPLOYMENT] [CLUSTER]}
name=${3:-pdcp-demo}
cluster=${4:-reference}

step() { printf '\n== %s\n' "$*"; }

if [ -n "${PDCP_PASSWORD:-}" ]; then
  step "log in"
  printf '%s\n' "$PDCP_PASSWORD" | pdcp login --url "${PDCP_URL:?PDCP_URL names the control plane}" \
    --user "${PDCP_USER:-admin}" --password-stdin
fi
pdcp whoami

step "import the inventory"
pdcp import "$inventory"
pdcp clusters
pdcp nodes --cluster "$cluster"

step "the deployment"
if pdcp deployment show "$name" >/dev/null 2>&1; then
  echo "$name exists"
else
  pdcp deployment create "$name" --cluster "$cluster" -f "$spec" --description "made by examples/pdcp-demo.sh"
fi

step "a new revision, made active"
pdcp revision create "$name" -f "$spec" --activate --comment "examples/pdcp-demo.sh"
pdcp revisions "$name"
pdcp diff "$name"

step "the plan (nothing runs)"
pdcp plan "$name" | sed -n '1,12p'

step "deploy"
status=0
pdcp deploy "$name" --wait --health-timeout 60 --stop-grace 3 || status=$?
if [ "$status" -ne 0 ]; then
  echo "deploy ended with exit code $status (1 failed, 2 canceled, 3 pdcp could not ask)" >&2
  pdcp jobs --deployment "$name" --limit 1 >&2 || true
  exit "$status"
fi
pdcp deployment show "$name"

step "read the processes' state back from the nodes (starts and stops nothing)"
pdcp refresh "$name" --wait

step "stop"
pdcp stop "$name" --wait --stop-grace 3
pdcp jobs --deployment "$name" --limit 3
echo
echo "done: $name was deployed and stopped"
