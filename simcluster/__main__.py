"""Entry point: python -m simcluster up|down|status|fault."""

import sys

from simcluster.cli import main

sys.exit(main(sys.argv[1:]))
