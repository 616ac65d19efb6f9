#!/usr/bin/env python3
"""simcluster's stand-in for MindIE-Motor's deploy_ac_job.py: `python3 deploy_ac_job.py --user_config_path F`.

Runs the simulator (`python -m simcluster.mindie deploy`, simcluster/mindie/deploy.py) through the cluster's
`simcluster-mindie` shim, found from the SSH session's SIMCLUSTER_NODE_DIR (<state-dir>/nodes/<node>).
"""

import os
import sys

node_dir = os.environ.get("SIMCLUSTER_NODE_DIR")
if not node_dir:
    sys.exit("deploy_ac_job.py: SIMCLUSTER_NODE_DIR is not set: run this in an SSH session on a simcluster node")
shim = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(node_dir))), "bin", "simcluster-mindie")
os.execv(shim, [shim, "deploy", *sys.argv[1:]])
