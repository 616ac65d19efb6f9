"""What a runtime is: how the processes of a launch profile's plan are started, stopped, found, their state read,
their logs tailed and their files placed. The launch profile names its runtime (`LaunchProfile.runtime`);
`runtime_for(plan)` finds it, and the job handlers only call `run.runtime.<job>(run)`.

Two levels:
- job level: `deploy`, `stop`, `restart`, `refresh`, `preflight`, each doing the whole job on a `DeploymentRun`;
- process level: `read_states`, `start_processes`, `stop_items`, `tail_log`, `write_files`, `remove_files`, what the
  job-level orchestration (process_jobs/), the health gate and a failed job's cleanup do to one planned process or
  item at a time. `DeploymentRun.states`, `.start`, `.stop`, `.tail`, `.write_files` and `.remove_files` hand them
  to the run's runtime.

Today there are three: `host` (host.py: processes over SSH, each found by its pid file; the vllm-ascend, sim and
vllm-cpu profiles), `mindie-k8s` (mindie_k8s.py: MindIE's Kubernetes deploy scripts on the deploy host do the
whole job; it replaces the job level and keeps the host's process level for the files it writes and the log it
tails when the probe fails) and `container` (container.py: a topology's `runtime: container`; a subclass of
`HostRuntime` that keeps its job level and runs the engines as `docker run` / `podman run`, stopped with
`stop` and `rm`, read with `inspect`, their logs from `logs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..jobs.deployment_run import DeploymentRun
    from ..topology import PlannedProcess
    from .run_items import Item

States = dict[str, tuple[str, int | None, bool | None]]  # item key -> (state, pid, healthy)


class Runtime(Protocol):
    name: str

    # --- job level ---------------------------------------------------------------------------------------
    def deploy(self, run: DeploymentRun) -> None: ...

    def stop(self, run: DeploymentRun) -> None: ...

    def restart(self, run: DeploymentRun, instances: list[str]) -> None: ...

    def refresh(self, run: DeploymentRun) -> None: ...

    def preflight(self, run: DeploymentRun) -> None: ...

    # --- process level -----------------------------------------------------------------------------------
    def read_states(self, run: DeploymentRun, items: list[Item], *, probe: bool = False,
                    unreachable: dict[str, str] | None = None) -> States:
        """(state, pid, healthy) per item key. A failure to ask fails the job, unless `unreachable` is given: then
        it gets key -> the failure, and the item is left out."""
        ...

    def start_processes(self, run: DeploymentRun, procs: list[PlannedProcess]) -> None:
        """Places their files, starts them and records their rows; fails the job on the first that did not start."""
        ...

    def start_line(self, run: DeploymentRun, p: PlannedProcess) -> str:
        """The shell line that starts p on its node: what its row records as its command."""
        ...

    def fingerprint(self, run: DeploymentRun, p: PlannedProcess) -> str:
        """What a deploy compares with the row's: equal means p already runs as planned and is kept."""
        ...

    def stop_items(self, run: DeploymentRun, items: list[Item], *, why: str,
                   progress: bool = True) -> list[tuple[Item, str]]:
        """Stops items stage by stage, backwards (proxy first). Returns (item, reason) for those it could not stop."""
        ...

    def tail_log(self, run: DeploymentRun, item: Item) -> str:
        """The last lines of the item's log (also logged into the job), or why they could not be read."""
        ...

    def tail_line(self, run: DeploymentRun, item: Item, lines: int = ...) -> str:
        """The shell line that prints the item's last `lines` log lines (a host log file, a container's logs)."""
        ...

    def write_files(self, run: DeploymentRun, procs: list[PlannedProcess]) -> None:
        """Writes the launch files of procs on their nodes, once per node and path in the job."""
        ...

    def remove_files(self, run: DeploymentRun, by_node: dict[str, set[str]]) -> list[tuple[str, str]]:
        """Removes launch files per node; returns (node, reason) where that failed."""
        ...
