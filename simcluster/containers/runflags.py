"""The flags of `docker run` / `podman run` and of the other subcommands the shim plays.

`run` knows every flag docker/cli declares for `docker run` (cli/command/container/opts.go, run.go, create.go at the
commit docs/container-launch-facts.md names): the ones the simulation plays are read, the others are accepted and
have no effect, so only a flag the real CLI lacks is refused.
"""

from __future__ import annotations

from simcluster.containers.flags import Flag

PLAYED = [
    Flag("detach", "d", value=False), Flag("name"), Flag("label", "l", repeat=True),
    Flag("net", key="network"), Flag("network"), Flag("shm-size"), Flag("device", repeat=True),
    Flag("volume", "v", repeat=True), Flag("env", "e", repeat=True), Flag("rm", value=False),
    Flag("workdir", "w"), Flag("ipc"), Flag("privileged", value=False), Flag("pull"),
    Flag("interactive", "i", value=False), Flag("tty", "t", value=False), Flag("entrypoint"),
    Flag("hostname", "h"), Flag("user", "u"), Flag("mount", repeat=True),
]
_ACCEPTED_BOOLS = ("disable-content-trust", "init", "no-healthcheck", "oom-kill-disable", "read-only",
                   "sig-proxy", "use-api-socket", "help")
_ACCEPTED_VALUES = (
    "add-host annotation blkio-weight blkio-weight-device cap-add cap-drop cgroup-parent cgroupns cidfile cpu-count "
    "cpu-percent cpu-period cpu-quota cpu-rt-period cpu-rt-runtime cpus cpuset-cpus cpuset-mems detach-keys "
    "device-cgroup-rule device-read-bps device-read-iops device-write-bps device-write-iops dns dns-opt dns-option "
    "dns-search domainname env-file expose gpus group-add health-cmd health-interval health-retries "
    "health-start-interval health-start-period health-timeout io-maxbandwidth io-maxiops isolation kernel-memory "
    "label-file link link-local-ip log-driver log-opt mac-address memory-reservation memory-swap memory-swappiness "
    "net-alias network-alias oom-score-adj pid pids-limit platform restart runtime security-opt stop-signal "
    "stop-timeout storage-opt sysctl tmpfs ulimit userns uts volume-driver volumes-from").split()
ACCEPTED = [*(Flag(n, value=False, repeat=False) for n in _ACCEPTED_BOOLS), *(Flag(n, repeat=True) for n in _ACCEPTED_VALUES),
            Flag("attach", "a", repeat=True), Flag("cpu-shares", "c"), Flag("memory", "m"), Flag("publish", "p", repeat=True),
            Flag("publish-all", "P", value=False), Flag("quiet", "q", value=False)]
# podman's own run flags a control plane may send (podman-run(1)); the rest of podman's set is docker's.
PODMAN_ONLY = [Flag("replace", value=False), Flag("pod"), Flag("userns"), Flag("systemd"), Flag("log-level")]

RUN = PLAYED + ACCEPTED
PODMAN_RUN = RUN + [f for f in PODMAN_ONLY if f.name not in {g.name for g in RUN}]

PS = [Flag("all", "a", value=False), Flag("quiet", "q", value=False), Flag("no-trunc", value=False),
      Flag("filter", "f", repeat=True), Flag("format"), Flag("last", "n"), Flag("latest", "l", value=False),
      Flag("size", "s", value=False)]
INSPECT = [Flag("format", "f"), Flag("type"), Flag("size", "s", value=False)]
LOGS = [Flag("tail", "n"), Flag("timestamps", "t", value=False), Flag("follow", "f", value=False), Flag("since"),
        Flag("until"), Flag("details", value=False)]
STOP = [Flag("time", "t"), Flag("signal", "s")]
RM = [Flag("force", "f", value=False), Flag("volumes", "v", value=False), Flag("link", "l", value=False),
      Flag("time", "t")]
IMAGES = [Flag("all", "a", value=False), Flag("quiet", "q", value=False), Flag("no-trunc", value=False),
          Flag("digests", value=False), Flag("format"), Flag("filter", "f", repeat=True)]
IMAGE_INSPECT = [Flag("format", "f"), Flag("platform")]
VERSION = [Flag("format", "f")]
