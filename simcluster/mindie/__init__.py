"""The simulated MindIE (MindIE-Motor's Kubernetes deploy scripts, a kubectl, the MS coordinator) on simcluster.

docs/mindie.md is the contract with the control plane; simcluster/README.md "MindIE" says what is simulated.
"""
