"""Remote execution over SSH, without Django: plain values in (SshTarget, LaunchSpec), typed results and errors
out, one fan-out (SshPool.run_on_many), and every shell line the control plane sends to a node."""

from .connection import CommandResult, SshConnection
from .errors import (
    SshAuthFailed,
    SshCommandTimeout,
    SshConnectionLost,
    SshError,
    SshHostKeyMismatch,
    SshTargetInvalid,
    SshTransferFailed,
    SshUnreachable,
)
from .hostkeys import fetch_host_key, host_key_fingerprint
from .pool import SshPool, TargetResult, run_on_many
from .process_commands import (
    EnvExtend,
    LaunchFile,
    LaunchSpec,
    ProcessState,
    detached_start_command,
    parse_process_state,
    private_dirs_command,
    process_marker,
    process_state_command,
    remove_files_command,
    stop_command,
    tail_command,
)
from .target import SshTarget

__all__ = [
    "CommandResult",
    "EnvExtend",
    "LaunchFile",
    "LaunchSpec",
    "ProcessState",
    "SshAuthFailed",
    "SshCommandTimeout",
    "SshConnection",
    "SshConnectionLost",
    "SshError",
    "SshHostKeyMismatch",
    "SshPool",
    "SshTarget",
    "SshTargetInvalid",
    "SshTransferFailed",
    "SshUnreachable",
    "TargetResult",
    "detached_start_command",
    "fetch_host_key",
    "host_key_fingerprint",
    "parse_process_state",
    "private_dirs_command",
    "process_marker",
    "process_state_command",
    "remove_files_command",
    "run_on_many",
    "stop_command",
    "tail_command",
]
