"""Job handlers of deployments: preflight, deploy (reconciling), stop, restart one instance, rolling restart of a
role, refresh (read the processes' state back from the nodes). Importing this package registers them
(apps.DeploymentsConfig.ready does). Each hands its job to the runtime of the plan's launch profile (runtimes/).

Order (plan stages): store -> kv_pool -> engines (Prefill and Decode together) -> proxy; stop walks it backwards.
Every job re-reads each process's state on its node (a host process's pid file) before acting, so the Process rows
are a record, never the truth. A failed or canceled deploy stops what it started itself unless
params.keep_on_failure.
"""

from . import deploy, preflight, refresh, restart, stop  # noqa: F401  each registers its handlers
