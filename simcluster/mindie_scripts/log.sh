#!/bin/bash
# simcluster's stand-in for MindIE-Motor's log.sh: `bash log.sh [namespace (default mindie)]`.
NAME_SPACE=mindie
if [ -n "$1" ]; then
    NAME_SPACE="$1"
fi
echo "==================================================== Stdout Log From MindIE-MS Coordinator ===================================================="
kubectl logs -l app=mindie-ms-coordinator -n "$NAME_SPACE" --tail=-1
echo
echo "==================================================== Stdout Log From MindIE-MS Controller ======================================================"
kubectl logs -l app=mindie-ms-controller -n "$NAME_SPACE" --tail=-1
echo
echo "==================================================== Stdout Log From MindIE-Server ============================================================="
kubectl logs -l app=mindie-ms-server -n "$NAME_SPACE" --tail=-1
echo
