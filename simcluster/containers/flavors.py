"""What docker and podman print and exit with, where they differ (docs/container-launch-facts.md §3.4, §5)."""

from __future__ import annotations

USAGE = {
    "run": "run [OPTIONS] IMAGE [COMMAND] [ARG...]", "ps": "ps [OPTIONS]",
    "inspect": "inspect [OPTIONS] NAME|ID [NAME|ID...]",
    "container inspect": "container inspect [OPTIONS] CONTAINER [CONTAINER...]",
    "logs": "logs [OPTIONS] CONTAINER", "stop": "stop [OPTIONS] CONTAINER [CONTAINER...]",
    "rm": "rm [OPTIONS] CONTAINER [CONTAINER...]", "images": "images [OPTIONS] [REPOSITORY[:TAG]]",
    "image inspect": "image inspect [OPTIONS] IMAGE [IMAGE...]", "version": "version [OPTIONS]",
}
MIN_ARGS = {"run": 1, "inspect": 1, "container inspect": 1, "logs": 1, "stop": 1, "rm": 1, "image inspect": 1}


class Refusal(Exception):
    def __init__(self, message: str, code: int, stdout: str = ""):
        super().__init__(message)
        self.message, self.code, self.stdout = message, code, stdout


def registry_host(ref: str) -> str:
    first = ref.split("/", 1)[0]
    return first if "/" in ref and ("." in first or ":" in first or first == "localhost") else "registry-1.docker.io"


class Docker:
    """docker CLI 29 (docs/container-launch-facts.md names the commit) talking to its daemon."""

    name = "docker"
    version = "29.1.3"
    api_version = "1.52"
    stop_timeout = 10

    def flag_error(self, command: str, message: str) -> Refusal:
        return Refusal(f"{message}\n\nUsage:  docker {USAGE[command]}\n\nRun 'docker {command} --help' for more "
                       f"information", 125)

    def too_few_args(self, command: str) -> Refusal:
        n = MIN_ARGS[command]
        return Refusal(f"docker: 'docker {command}' requires at least {n} argument{'s' if n > 1 else ''}\n\n"
                       f"Usage:  docker {USAGE[command]}\n\nSee 'docker {command} --help' for more information",
                       125 if command == "run" else 1)

    def run_error(self, message: str, code: int = 125) -> Refusal:
        return Refusal(f"docker: {message}\n\nRun 'docker run --help' for more information", code)

    def daemon(self, message: str, code: int = 1) -> Refusal:
        return Refusal(f"Error response from daemon: {message}", code)

    def image_missing(self, ref: str) -> Refusal:
        return self.run_error(f"Error response from daemon: No such image: {ref}")

    def pull_failed(self, ref: str) -> tuple[str, Refusal]:
        host = registry_host(ref)
        return (f"Unable to find image '{ref}' locally",
                self.run_error(f'Error response from daemon: Get "https://{host}/v2/": dial tcp: lookup {host}: '
                               f"no such host"))

    def name_conflict(self, name: str, other_id: str) -> Refusal:
        return self.run_error(f'Error response from daemon: Conflict. The container name "/{name}" is already in use '
                              f'by container "{other_id}". You have to remove (or rename) that container to be able '
                              f"to reuse that name.")

    def device_missing(self, path: str) -> Refusal:
        # 127: docker/cli's toStatusError maps "no such file or directory" to it.
        return self.run_error(f'Error response from daemon: error gathering device information while adding custom '
                              f'device "{path}": no such file or directory', 127)

    def command_missing(self, executable: str) -> Refusal:
        return self.run_error("Error response from daemon: failed to create task for container: failed to create "
                              "shim task: OCI runtime create failed: runc create failed: unable to start container "
                              f'process: error during container init: exec: "{executable}": executable file not '
                              "found in $PATH: unknown", 127)

    def bind_missing(self, path: str) -> Refusal | None:
        return None  # docker creates a missing bind source as a directory

    def mount_source_missing(self, path: str) -> Refusal:
        # `--mount type=bind` never creates its source: moby volume/mounts/linux_parser.go errBindSourceDoesNotExist,
        # wrapped as an invalid mount config when the container is created (docs/container-launch-facts.md §3.5).
        return self.run_error(f'Error response from daemon: invalid mount config for type "bind": bind source path '
                              f"does not exist: {path}")

    def no_such_container(self, name: str, verb: str) -> Refusal:
        return self.daemon(f"No such container: {name}")

    def rm_running(self, name: str, cid: str) -> Refusal:
        return self.daemon(f'cannot remove container "{name}": container is running: stop the container before '
                           f"removing or force remove")

    def inspect_missing(self, name: str) -> Refusal:
        return Refusal(f"error: no such object: {name}", 1, stdout="[]\n")

    def image_inspect_missing(self, ref: str) -> Refusal:
        return Refusal(f"Error response from daemon: No such image: {ref}", 1, stdout="[]\n")

    def not_installed(self) -> Refusal:
        return Refusal("sh: 1: docker: not found", 127)


class Podman:
    """podman 5.8 (containers/podman at the commit docs/container-launch-facts.md names)."""

    name = "podman"
    version = "5.8.2"
    api_version = "5.8.2"
    stop_timeout = 10

    def flag_error(self, command: str, message: str) -> Refusal:
        return Refusal(f"Error: {message}\nSee 'podman {command} --help'", 125)

    def too_few_args(self, command: str) -> Refusal:
        return Refusal(f"Error: requires at least {MIN_ARGS[command]} arg(s), only received 0", 125)

    def run_error(self, message: str, code: int = 125) -> Refusal:
        return Refusal(f"Error: {message}", code)

    def daemon(self, message: str, code: int = 125) -> Refusal:
        return Refusal(f"Error: {message}", code)

    def image_missing(self, ref: str) -> Refusal:
        return self.run_error(f"{ref}: image not known")

    def pull_failed(self, ref: str) -> tuple[str, Refusal]:
        host = registry_host(ref)
        return (f"Trying to pull {ref}...",
                self.run_error(f"initializing source docker://{ref}: pinging container registry {host}: Get "
                               f'"https://{host}/v2/": dial tcp: lookup {host}: no such host'))

    def name_conflict(self, name: str, other_id: str) -> Refusal:
        return self.run_error(f'creating container storage: the container name "{name}" is already in use by '
                              f"{other_id}. You have to remove that container to be able to reuse that name: that "
                              f"name is already in use, or use --replace to instruct Podman to do so.")

    def device_missing(self, path: str) -> Refusal:
        return self.run_error(f"stat {path}: no such file or directory")

    def command_missing(self, executable: str) -> Refusal:
        return self.run_error(f"crun: executable file `{executable}` not found in $PATH: No such file or directory: "
                              "OCI runtime attempted to invoke a command that was not found", 127)

    def bind_missing(self, path: str) -> Refusal | None:
        return self.run_error(f"statfs {path}: no such file or directory")

    def mount_source_missing(self, path: str) -> Refusal:
        return self.run_error(f"statfs {path}: no such file or directory")

    def no_such_container(self, name: str, verb: str) -> Refusal:
        if verb == "rm":  # podman's rm words it the other way round (test/system/055-rm.bats)
            return Refusal(f'Error: no container with ID or name "{name}" found: no such container', 1)
        return Refusal(f'Error: no container with name or ID "{name}" found: no such container', 125)

    def rm_running(self, name: str, cid: str) -> Refusal:
        return Refusal(f"Error: cannot remove container {cid} as it is running - running or paused containers "
                       f"cannot be removed without force: container state improper", 2)

    def inspect_missing(self, name: str) -> Refusal:
        return Refusal(f'Error: no such object: "{name}"', 125, stdout="[]\n")

    def image_inspect_missing(self, ref: str) -> Refusal:
        return Refusal(f"Error: {ref}: image not known", 125, stdout="[]\n")

    def not_installed(self) -> Refusal:
        return Refusal("sh: 1: podman: not found", 127)


FLAVORS = {"docker": Docker(), "podman": Podman()}
