"""Where `ais_bench` runs: on the deployment's AISBench client host over SSH, or here on the evals worker.

Either way it runs in its own process group under `timeout` (the wall-clock limit holds even if this worker dies),
in a run dir of its own that outlives the job (a resume goes on from AISBench's cache in it), and its output
folder ends up below PDCP_EVALS_DIR/runs/<id>/ on the control plane.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath

from django.conf import settings

from sshexec import SshConnection, SshError
from sshexec.process_commands import (
    LaunchSpec,
    detached_start_command,
    parse_process_state,
    private_dirs_command,
    process_state_command,
    stop_command,
    tail_command,
)
from sshexec.transfer import download_tree

from .aisbench.progress import count_finished, parse_progress_output, progress_command
from .install_status import local_install_problem

KILL_AFTER_S = 15  # timeout's grace between TERM and KILL


class HostError(Exception):
    """The host cannot run the evaluation; the message says why and what to do."""


def local_run_dir(run_id: int) -> Path:
    return Path(settings.PDCP_EVALS_DIR) / "runs" / str(run_id)


def _limited(argv: list[str], limit_s: int) -> list[str]:
    return ["timeout", "-k", str(KILL_AFTER_S), str(limit_s), *argv]


class EvalHost(ABC):
    name: str
    executable: str  # absolute once check() passed
    base_env: dict[str, str] = {}  # what ais_bench's environment starts from (the login's own env when remote)

    @abstractmethod
    def check(self) -> str:
        """Why ais_bench cannot run here ("" when it can)."""

    @abstractmethod
    def put_files(self, files: dict[str, str]) -> str:
        """Write the run's files into its run dir; returns the run dir as ais_bench will see it."""

    @abstractmethod
    def start(self, argv: list[str], env: dict[str, str], limit_s: int, pass_name: str) -> None:
        """argv starts with self.executable."""

    @abstractmethod
    def running(self) -> bool: ...

    @abstractmethod
    def progress(self, work: str) -> int: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def fetch(self, work: str) -> Path:
        """The pass's output folder, brought home; returns its local path."""

    @abstractmethod
    def log_tail(self, lines: int = 40) -> list[str]: ...

    def close(self) -> None:  # noqa: B027 - only a remote host holds something to release
        pass


# What ais_bench may see of the evals worker's environment: the locale, paths, proxies and the tokenizer libraries'
# settings; never the control plane's own (SECRET_KEY, PDCP_SECRETS_KEY, DATABASE_URL, REDIS_URL...), which
# mmengine could expand into a config (docs/aisbench-facts.md "Config file") and a run's log could show.
PASSED_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "HTTP_PROXY",
                        "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "OMP_NUM_THREADS"})
PASSED_ENV_PREFIXES = ("LC_", "HF_", "TRANSFORMERS_", "TOKENIZERS_")


def worker_env_for_ais_bench(environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k in PASSED_ENV or k.startswith(PASSED_ENV_PREFIXES)}


class LocalHost(EvalHost):
    def __init__(self, run_id: int):
        self.name = "control plane"
        self.executable = settings.PDCP_AISBENCH
        self.base_env = worker_env_for_ais_bench(os.environ)
        self.run_dir = local_run_dir(run_id)
        self._proc: subprocess.Popen | None = None
        self._log: Path | None = None

    def check(self) -> str:
        return local_install_problem()

    def put_files(self, files: dict[str, str]) -> str:
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, text in files.items():
            (self.run_dir / name).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            (self.run_dir / name).write_text(text, encoding="utf-8")
        return str(self.run_dir)

    def start(self, argv, env, limit_s, pass_name):
        self._log = self.run_dir / f"{pass_name}.log"
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(_limited(argv, limit_s), cwd=self.run_dir,
                                          env=env, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def progress(self, work: str) -> int:
        return count_finished(self.run_dir / work)

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self._proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        _reap_group(self._proc.pid)

    def fetch(self, work: str) -> Path:
        return self.run_dir / work

    def log_tail(self, lines: int = 40) -> list[str]:
        if self._log is None or not self._log.exists():
            return []
        return self._log.read_text(errors="replace").splitlines()[-lines:]


def _reap_group(pgid: int, timeout: float = 5.0) -> None:
    """Workers ais_bench forked may outlive its main process for a moment: KILL what is left of the group."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)


class RemoteHost(EvalHost):
    """The deployment's AISBench client host; the run dir is <spec run_dir>/evals/run-<id> there."""

    def __init__(self, run_id: int, target, remote_root: str):
        self.name = target.name
        self.executable = settings.PDCP_AISBENCH_REMOTE
        self.run_dir = PurePosixPath(remote_root) / "evals" / f"run-{run_id}"
        self.local_dir = local_run_dir(run_id)
        self._conn = SshConnection(target)
        self._pid_file: PurePosixPath | None = None
        self._log: PurePosixPath | None = None

    def _run(self, command: str, timeout: float = 60.0):
        try:
            return self._conn.run(command, timeout=timeout)
        except SshError as exc:
            raise HostError(f"{self.name}: {exc}") from None

    def check(self) -> str:
        result = self._run(f"command -v {shlex.quote(self.executable)}")
        found = result.stdout.strip()
        if result.ok and found.startswith("/"):
            self.executable = found
        else:
            return (f"{self.executable} is not installed on {self.name} (not on the login user's PATH): install "
                    "AISBench there (scripts/aisbench-venv.sh does it on a Debian host) or clear the deployment's "
                    "bench_client to run it on the control plane")
        return ""

    def put_files(self, files: dict[str, str]) -> str:
        dirs = sorted({self.run_dir, *((self.run_dir / name).parent for name in files)})
        result = self._run(private_dirs_command(dirs))
        if not result.ok:
            raise HostError(f"{self.name}: cannot create {self.run_dir}: {result.stderr.strip()}")
        try:
            for name, text in files.items():
                self._conn.put_text(str(self.run_dir / name), text, mode=0o600)
        except SshError as exc:
            raise HostError(f"{self.name}: {exc}") from None
        return str(self.run_dir)

    def start(self, argv, env, limit_s, pass_name):
        spec = LaunchSpec(_limited(argv, limit_s), env, workdir=self.run_dir,
                          log_file=f"{pass_name}.log", pid_file=f"{pass_name}.pid")
        self._pid_file, self._log = spec.pid_path, spec.log_path
        result = self._run(detached_start_command(spec))
        if not result.ok:
            raise HostError(f"{self.name}: ais_bench did not start: {result.stderr.strip()}")

    def running(self) -> bool:
        if self._pid_file is None:
            return False
        return parse_process_state(self._run(process_state_command(self._pid_file)).stdout).state == "running"

    def progress(self, work: str) -> int:
        result = self._run(progress_command(str(self.run_dir / work)))
        try:
            return parse_progress_output(result.stdout)
        except ValueError:
            return 0

    def stop(self) -> None:
        if self._pid_file is not None:
            self._run(stop_command(self._pid_file, grace_seconds=10), timeout=60)

    def fetch(self, work: str) -> Path:
        dest = self.local_dir / work
        try:
            download_tree(self._conn, str(self.run_dir / work), dest)
        except SshError as exc:
            raise HostError(f"{self.name}: could not bring the output folder home: {exc}") from None
        return dest

    def log_tail(self, lines: int = 40) -> list[str]:
        if self._log is None:
            return []
        try:
            result = self._conn.run(tail_command(self._log, lines), timeout=30)
        except SshError:
            return []
        return result.stdout.splitlines()[-lines:]

    def close(self) -> None:
        self._conn.close()
