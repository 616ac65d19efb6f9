"""`docker` and `podman` on the simulated nodes (simcluster/README.md, Containers): real argv checks and messages
(docs/container-launch-facts.md), a per-node container table, and containers that are process groups on the host.
"""
