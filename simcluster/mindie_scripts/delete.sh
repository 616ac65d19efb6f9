#!/bin/bash
# simcluster's stand-in for MindIE-Motor's delete.sh: `bash delete.sh [namespace (default mindie)] [output dir]`.
# Stops every pod process of the namespace by its recorded PID and removes the namespace (simcluster/mindie/kube.py).
if [ -z "$SIMCLUSTER_NODE_DIR" ]; then
    echo "delete.sh: SIMCLUSTER_NODE_DIR is not set: run this in an SSH session on a simcluster node" >&2
    exit 1
fi
exec "$(dirname "$(dirname "$SIMCLUSTER_NODE_DIR")")/bin/simcluster-mindie" delete "${1:-mindie}"
