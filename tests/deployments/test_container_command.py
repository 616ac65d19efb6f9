"""The reference topology as containers, its `docker run` compared flag by flag with vllm-ascend's own: the PD guide's
"Run with Docker" line (vllm-project/vllm-ascend
VA:`docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md` lines 121-164, commit
92616f3a64e7218655c2d009aa8ecf855091e54d; verbatim in docs/container-launch-facts.md §1.3).
Every flag that differs is listed in DIFFERENCES with why (docs/containers.md says the same for operators)."""

from __future__ import annotations

import pytest

from apps.deployments.runtimes.container_command import run_argv

from .container_fixtures import container_plan

GUIDE_LINE = """docker run --rm
--name $NAME
--net=host
--shm-size=1g
--device /dev/davinci0 --device /dev/davinci1 --device /dev/davinci2 --device /dev/davinci3
--device /dev/davinci4 --device /dev/davinci5 --device /dev/davinci6 --device /dev/davinci7
--device /dev/davinci8 --device /dev/davinci9 --device /dev/davinci10 --device /dev/davinci11
--device /dev/davinci12 --device /dev/davinci13 --device /dev/davinci14 --device /dev/davinci15
--device /dev/davinci_manager
--device /dev/devmm_svm
--device /dev/hisi_hdc
-v /usr/local/dcmi:/usr/local/dcmi
-v /usr/local/Ascend/driver/tools/hccn_tool:/usr/local/Ascend/driver/tools/hccn_tool
-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi
-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/
-v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info
-v /etc/ascend_install.info:/etc/ascend_install.info
-v /etc/hccn.conf:/etc/hccn.conf
-v /mnt/sfs_turbo/.cache:/root/.cache
-it $IMAGE bash""".split()
GUIDE_IMAGE = "m.daocloud.io/quay.io/ascend/vllm-ascend:{{ vllm_ascend_version }}"

DIFFERENCES = {
    "--rm": "dropped: the container is kept after it exits so `docker inspect` reads its exit code and `docker logs` "
            "its last lines; stop runs `docker rm` itself",
    "-it": "replaced by -d: there is no terminal over SSH, and the start must return (docker refuses -it without "
           "one: docs/container-launch-facts.md §3.4)",
    "--name": "pdcp-<deployment>-<process key> instead of vllm-ascend: one container per process, found again by name",
    "--label": "added: pdcp.deployment, pdcp.process and pdcp.revision say what started the container",
    "--device /dev/davinci<N>": "exactly the process's dies (the guide hands the container all 16 because its user "
                                "picks them with ASCEND_RT_VISIBLE_DEVICES inside)",
    "-v lib64/": "the same bind without the trailing '/': the allowlist keeps one spelling per path",
    "-v /models": "added: the reference topology's weights (model.path /models/...), read-only",
    "-v <run_dir>/config": "added: the launch files the engine reads (mooncake.json), read-only at the same path",
    "-e": "added: the env the host runtime sets (the guide exports it inside the container by hand), without "
          "ASCEND_RT_VISIBLE_DEVICES: the container's runtime numbers its dies from 0 (vllm-project/vllm-ascend#12959)",
    "image": "quay.io/ascend/vllm-ascend:v0.23.0-a3: the A3 tag of the install guide (the PD guide's line omits -a3 "
             "and goes through the m.daocloud.io mirror), pinned by the cluster allowlist",
    "command": "the host runtime's `vllm serve ...` argv instead of `bash` and typing it inside",
}

WITH_VALUE = ("--name", "--label", "--device", "-v", "-e")


def split(argv: list[str], image: str) -> tuple[list[tuple[str, str | None]], str, list[str]]:
    """(options as (flag, value or None), the image, the command after it)."""
    at = argv.index(image)
    options, words = [], iter(argv[2:at])
    for word in words:
        options.append((word, next(words) if word in WITH_VALUE else None))
    return options, argv[at], argv[at + 1:]


def devices(options) -> list[str]:
    return [v for f, v in options if f == "--device" and v.startswith("/dev/davinci") and v[12:].isdecimal()]


def expected_from_guide(process, plan, *, deployment: str, revision: int) -> list[tuple[str, str | None]]:
    """The guide's options with each of DIFFERENCES applied, in the order the renderer writes them."""
    guide, _, _ = split(GUIDE_LINE, "$IMAGE")
    dies = [f"/dev/davinci{n}" for n in plan.container.dies_of(process.key)]
    out: list[tuple[str, str | None]] = [("-d", None), ("--name", f"pdcp-{deployment}-{process.key}"),
                                         ("--label", f"pdcp.deployment={deployment}"),
                                         ("--label", f"pdcp.process={process.key}"),
                                         ("--label", f"pdcp.revision={revision}")]
    for flag, value in guide:
        if flag in ("--rm", "-it", "--name"):
            continue
        if flag == "--device" and value in devices(guide):
            if value == devices(guide)[0]:
                out += [("--device", d) for d in dies]
            continue
        if flag == "-v" and value.endswith("/"):
            value = value.replace("/:", ":").rstrip("/")
        out.append((flag, value))
    out += [("-v", "/models:/models:ro"), ("-v", "/var/lib/pdcp/reference/config:/var/lib/pdcp/reference/config:ro")]
    out += [("-e", f"{k}={v}") for k, v in sorted(process.launch.env.items()) if k != "ASCEND_RT_VISIBLE_DEVICES"]
    return out


@pytest.fixture(scope="module")
def plan():
    return container_plan()


@pytest.mark.parametrize("key", ["p0-dp0", "d0-dp1"])
def test_the_docker_run_is_the_guides_flag_by_flag_but_for_the_listed_differences(plan, key):
    p = next(p for p in plan.processes if p.key == key)
    argv = run_argv(plan.container, p, deployment="reference", revision=3)
    assert argv[:2] == ["docker", "run"] == GUIDE_LINE[:2]
    options, image, command = split(argv, plan.container.image)
    assert options == expected_from_guide(p, plan, deployment="reference", revision=3)
    assert image == "quay.io/ascend/vllm-ascend:v0.23.0-a3" != GUIDE_IMAGE
    assert command == list(p.launch.argv) and command[:2] == ["vllm", "serve"]


def test_a_tp16_prefill_gets_all_16_dies_like_the_guide(plan):
    p0 = next(p for p in plan.processes if p.key == "p0-dp0")
    options, _, _ = split(run_argv(plan.container, p0, deployment="reference", revision=1), plan.container.image)
    assert devices(options) == devices(split(GUIDE_LINE, "$IMAGE")[0])


def test_no_flag_the_guide_lacks_gives_the_container_more_than_the_guide(plan):
    """Nothing the topology writes adds --privileged, another network, --entrypoint or a mount off the allowlist."""
    for p in plan.processes:
        if not plan.container.runs(p.key):
            continue
        options, _, _ = split(run_argv(plan.container, p, deployment="reference", revision=1), plan.container.image)
        flags = {f for f, _ in options}
        assert flags <= {"-d", "--name", "--label", "--net=host", "--shm-size=1g", "--device", "-v", "-e"}, flags
        assert not any(f.startswith(("--privileged", "--entrypoint", "--network", "--ipc", "--pid", "--cap-add",
                                     "--security-opt", "-u", "--user")) for f in flags)


def test_every_difference_is_explained():
    assert set(DIFFERENCES) == {"--rm", "-it", "--name", "--label", "--device /dev/davinci<N>", "-v lib64/",
                                "-v /models", "-v <run_dir>/config", "-e", "image", "command"}
    assert all(len(why) > 30 for why in DIFFERENCES.values())
