"""`python -m pdproxy ...`"""

from .cli import main

raise SystemExit(main())
