"""The container runtime without a node: which runtime a plan gets, the dies, names and labels each `docker run`
carries, the podman variant, and what `docker inspect` prints read back (the JSON shapes of
docs/container-launch-facts.md §3.1), where a missing container is no-container and garbage a job failure naming
the node and the container, never a traceback."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from apps.deployments.fleet import Outcome
from apps.deployments.runtimes import RUNTIMES, ContainerRuntime, HostRuntime, runtime_for
from apps.deployments.runtimes import container_command as cc
from apps.deployments.runtimes.run_items import item_of
from apps.deployments.topology import NodeFacts, spec_from_dict
from apps.jobs.context import JobFailed
from sshexec import CommandResult

from .conftest import reference_inventory
from .container_fixtures import container_data, container_plan


@pytest.fixture(scope="module")
def plan():
    return container_plan()


def engines(plan):
    return [p for p in plan.processes if plan.container.runs(p.key)]


def options(argv, flag):
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


# --- which runtime ----------------------------------------------------------------------------------------------
def test_runtime_for_picks_container_when_the_topology_says_so(plan, fixed_spec):
    assert type(runtime_for(plan, spec_from_dict(container_data()))) is ContainerRuntime
    assert type(runtime_for(plan)) is ContainerRuntime  # the plan's container part says it too
    assert RUNTIMES["container"].name == "container"


def test_a_container_deployment_whose_revision_no_longer_renders_is_still_stopped_as_containers(fixed_spec):
    assert type(runtime_for(None, spec_from_dict(container_data()))) is ContainerRuntime
    assert type(runtime_for(None, fixed_spec)) is HostRuntime


def test_a_host_topology_keeps_its_profiles_runtime(fixed_spec, nodes):
    from apps.deployments.topology import build_plan
    host_plan = build_plan(fixed_spec, nodes)
    assert host_plan.container is None
    assert type(runtime_for(host_plan, fixed_spec)) is HostRuntime


# --- what each docker run carries -------------------------------------------------------------------------------
def test_only_the_engines_run_in_containers(plan):
    assert {p.role for p in engines(plan)} == {"prefill", "decode"}
    assert {p.key for p in plan.processes if not plan.container.runs(p.key)} == {"kv-pool", "proxy"}


def test_each_container_gets_exactly_its_processes_dies(plan):
    per_instance: dict[tuple[str, str], list[int]] = {}
    for p in engines(plan):
        argv = cc.run_argv(plan.container, p, deployment="reference", revision=1)
        dies = [int(d.removeprefix("/dev/davinci")) for d in options(argv, "--device") if d[12:].isdecimal()]
        assert dies == [int(d) for d in p.launch.env["ASCEND_RT_VISIBLE_DEVICES"].split(",")]
        assert options(argv, "--device")[len(dies):] == list(cc.MANAGEMENT_DEVICES)
        per_instance.setdefault((p.instance, p.node), []).extend(dies)
        assert not any(e.startswith("ASCEND_RT_VISIBLE_DEVICES=") for e in options(argv, "-e"))
    assert per_instance[("p0", "node0")] == list(range(16))
    assert per_instance[("d0", "node2")] == list(range(16))  # TP4 x DP4: four containers of four dies


def test_the_device_numbers_are_the_dies_phy_ids():
    nodes = reference_inventory()
    swapped = {f"node{i}": NodeFacts(f"node{i}", f"127.0.10.{i + 1}", frozenset(range(16)), 16, "eth0", True,
                                     phy_ids=tuple((d, 15 - d) for d in range(16))) for i in range(4)}
    plan = container_plan(nodes={**nodes, **swapped})
    d0 = next(p for p in plan.processes if p.key == "d0-dp1")  # logical 4..7
    argv = cc.run_argv(plan.container, d0, deployment="reference", revision=1)
    assert options(argv, "--device")[:4] == ["/dev/davinci11", "/dev/davinci10", "/dev/davinci9", "/dev/davinci8"]


def test_names_and_labels_identify_deployment_process_and_revision(plan):
    names = set()
    for p in engines(plan):
        argv = cc.run_argv(plan.container, p, deployment="reference", revision=7)
        name = options(argv, "--name")[0]
        assert name == f"pdcp-reference-{p.key}" and cc._NAME_RE.match(name)
        assert options(argv, "--label") == ["pdcp.deployment=reference", f"pdcp.process={p.key}", "pdcp.revision=7"]
        names.add(name)
    assert len(names) == len(engines(plan))
    with pytest.raises(ValueError, match="not a valid container name"):
        cc.container_name("bad name", "p0-dp0")


def test_the_fingerprint_line_leaves_the_revision_out(plan):
    p = engines(plan)[0]
    argv = cc.run_argv(plan.container, p, deployment="reference", revision=None)
    assert options(argv, "--label") == ["pdcp.deployment=reference", f"pdcp.process={p.key}"]


def test_podman_gets_the_same_line_under_its_own_name():
    data = container_data()
    data["container"]["engine"] = "podman"
    plan = container_plan(data)
    p = engines(plan)[0]
    docker = cc.run_argv(container_plan().container, p, deployment="reference", revision=1)
    podman = cc.run_argv(plan.container, p, deployment="reference", revision=1)
    assert podman[0] == "podman" and podman[1:] == docker[1:]
    line = cc.start_command(plan.container, p, deployment="reference", revision=1)
    assert line.startswith("podman rm pdcp-reference-") and " && podman inspect --format " in line
    assert cc.stop_command("podman", "pdcp-reference-p0-dp0", 10).startswith("o=$(podman stop -t 10 ")
    assert cc.logs_command("podman", "pdcp-reference-p0-dp0", 15) == "podman logs --tail 15 pdcp-reference-p0-dp0 2>&1"


def test_the_start_line_quotes_every_word(plan):
    p = next(p for p in engines(plan) if p.role == "decode")
    line = cc.start_command(plan.container, p, deployment="reference", revision=1)
    assert """--compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}'""" in line


# --- what inspect prints back -----------------------------------------------------------------------------------
def docker_entry(name: str, status: str = "running", pid: int = 4242, code: int = 0, **state) -> dict:
    """One container as `docker inspect` prints it (the fields of docs/container-launch-facts.md §3.1)."""
    return {"Id": "907f3c6e9345e6d38b129a8542e6c13149eb362d72995116f10ad115ff6a1c4d",
            "Created": "2026-08-22T10:00:00.000000000Z", "Path": "vllm", "Args": ["serve", "/models/x"],
            "State": {"Status": status, "Running": status == "running", "Paused": False, "Restarting": False,
                      "OOMKilled": False, "Dead": False, "Pid": pid, "ExitCode": code, "Error": "",
                      "StartedAt": "2026-08-22T10:00:01.000000000Z", "FinishedAt": "0001-01-01T00:00:00Z", **state},
            "Name": f"/{name}", "Config": {"Labels": {"pdcp.deployment": "reference"}}}


def inspect_output(entries, status: int = 0, probes: str = "") -> str:
    return json.dumps(entries, indent=4) + f"\n@@inspect {status}\n" + probes


def test_inspect_reads_running_and_exited_containers():
    out = inspect_output([docker_entry("pdcp-r-p0-dp0"), docker_entry("pdcp-r-d0-dp0", "exited", 0, 137)],
                         probes="@@health pdcp-r-p0-dp0 0\n")
    states, healthy = cc.parse_inspect(out, ["pdcp-r-p0-dp0", "pdcp-r-d0-dp0"])
    assert states["pdcp-r-p0-dp0"] == cc.ContainerState("running", 4242, 0)
    assert states["pdcp-r-d0-dp0"].text == "exited (exit code 137)" and states["pdcp-r-d0-dp0"].pid is None
    assert healthy == {"pdcp-r-p0-dp0": True}


def test_a_missing_container_is_no_container():
    out = inspect_output([docker_entry("pdcp-r-p0-dp0")], status=1)
    states, _ = cc.parse_inspect(out, ["pdcp-r-p0-dp0", "pdcp-r-p1-dp0"], "Error: No such object: pdcp-r-p1-dp0\n")
    assert states["pdcp-r-p1-dp0"] is cc.NO_CONTAINER and states["pdcp-r-p1-dp0"].text == "no-container"
    states, _ = cc.parse_inspect("[]\n@@inspect 1\n", ["pdcp-r-p1-dp0"],
                                 'Error: no such object: "pdcp-r-p1-dp0"\n')  # podman's spelling
    assert states["pdcp-r-p1-dp0"] is cc.NO_CONTAINER


def test_podmans_names_and_states_are_read():
    entry = docker_entry("x", "stopped", 0, 0)
    entry["Name"] = "pdcp-r-p0-dp0"  # podman writes no leading '/'
    states, _ = cc.parse_inspect(inspect_output([entry]), ["pdcp-r-p0-dp0"])
    assert states["pdcp-r-p0-dp0"].status == "stopped"


@pytest.mark.parametrize(("stdout", "stderr", "words"), [
    ("garbage\n@@inspect 0\n", "", "did not print JSON"),
    ('{"Name": "/x"}\n@@inspect 0\n', "", "not a JSON array"),
    ("", "", "no inspect exit status"),
    ("\n@@inspect 0\n", "", "printed nothing"),
    (inspect_output([{"Name": "/pdcp-r-p0-dp0"}]), "", "has no State"),
    (inspect_output([{"Name": "/pdcp-r-p0-dp0", "State": {"Status": "running", "ExitCode": 0}}]), "", "State.Pid"),
    (inspect_output([{"State": {}}]), "", "has no Name"),
    (inspect_output([docker_entry("someone-else")]), "", "not asked about"),
    ("\n@@inspect 1\n", "permission denied while trying to connect to the Docker daemon socket", "without saying"),
])
def test_output_that_is_not_inspects_is_a_clear_error(stdout, stderr, words):
    with pytest.raises(ValueError, match=words):
        cc.parse_inspect(stdout, ["pdcp-r-p0-dp0"], stderr)


def test_the_start_answer_gives_the_id_and_pid():
    found = cc.parse_started("907f3c6e9345e6d38b129a8542e6c13149eb362d72995116f10ad115ff6a1c4d\n4242\n")
    assert found == cc.Started("907f3c6e9345e6d38b129a8542e6c13149eb362d72995116f10ad115ff6a1c4d", 4242)
    with pytest.raises(ValueError, match="expected the new container's id"):
        cc.parse_started("Unable to find image 'x' locally\n")


# --- the runtime on a fake run ----------------------------------------------------------------------------------
class FakeRun:
    """What ContainerRuntime reads of a DeploymentRun: the spec, the plan, the deployment's name, a fleet whose
    answers the test gives, and fail() as DeploymentRun's (JobFailed with the message)."""

    def __init__(self, plan, answers: dict[str, tuple[int, str, str]], engine: str = "docker"):
        data = container_data()
        data["container"]["engine"] = engine
        self.spec, self.plan = spec_from_dict(data), plan
        self.deployment = SimpleNamespace(name="reference")
        self.revision = SimpleNamespace(number=2)
        self.sent: list[tuple[str, str]] = []
        self.fleet = SimpleNamespace(run_many=self._run_many)
        self.answers = answers

    def _run_many(self, pairs, **_):
        self.sent += pairs
        return [Outcome(node, command, CommandResult(*self.answers[node], 0.1), None) for node, command in pairs]

    def fail(self, node, message, *, item=None):
        raise JobFailed(message)


def test_read_states_asks_each_node_once_and_reads_every_container(plan):
    runtime = RUNTIMES["container"]
    d0 = [p for p in plan.processes if p.instance == "d0"]
    entries = [docker_entry(f"pdcp-reference-{p.key}", pid=100 + i) for i, p in enumerate(d0[:3])]
    run = FakeRun(plan, {"node2": (1, inspect_output(entries, 1),
                                   f"Error: No such object: pdcp-reference-{d0[3].key}\n")})
    states = runtime.read_states(run, [item_of(p) for p in d0])
    assert len(run.sent) == 1 and run.sent[0][1].startswith("docker inspect pdcp-reference-d0-dp0 ")
    assert states[d0[0].key] == ("running", 100, None)
    assert states[d0[3].key] == ("no-container", None, None)


def test_garbage_from_inspect_fails_the_job_naming_node_and_container(plan):
    runtime = RUNTIMES["container"]
    p = next(p for p in plan.processes if p.key == "p0-dp0")
    run = FakeRun(plan, {"node0": (0, "<html>proxy error</html>\n@@inspect 0\n", "")})
    with pytest.raises(JobFailed) as caught:
        runtime.read_states(run, [item_of(p)])
    assert "on node0" in str(caught.value) and "pdcp-reference-p0-dp0" in str(caught.value)
    assert "did not print JSON" in str(caught.value)


def test_the_row_records_the_docker_run_line_and_a_fingerprint_without_the_revision(plan):
    runtime = RUNTIMES["container"]
    p = next(p for p in plan.processes if p.key == "p0-dp0")
    run = FakeRun(plan, {})
    assert runtime.start_line(run, p).startswith("docker rm pdcp-reference-p0-dp0 >/dev/null 2>&1; docker run -d ")
    assert "pdcp.revision=2" in runtime.start_line(run, p)
    later = FakeRun(plan, {})
    later.revision = SimpleNamespace(number=3)
    assert runtime.fingerprint(run, p) == runtime.fingerprint(later, p)
    proxy = next(p for p in plan.processes if p.key == "proxy")
    assert runtime.start_line(run, proxy) == HostRuntime().start_line(run, proxy)  # the proxy stays a host process
    assert runtime.started(run, p, "ab12cd34ef56\n77\n") == (77, "container pdcp-reference-p0-dp0 (ab12cd34ef56), "
                                                                  "pid 77")
    with pytest.raises(ValueError, match="container pdcp-reference-p0-dp0: expected the new container's id"):
        runtime.started(run, p, "docker: Error response from daemon: Conflict.\n")


def test_stop_and_logs_go_to_the_container_and_the_proxy_to_its_pid_file(plan):
    runtime = RUNTIMES["container"]
    run = FakeRun(plan, {}, engine="podman")
    p = next(p for p in plan.processes if p.key == "d1-dp2")
    assert runtime.stop_line(run, item_of(p), 10) == cc.stop_command("podman", "pdcp-reference-d1-dp2", 10)
    assert runtime.tail_line(run, item_of(p)) == "podman logs --tail 15 pdcp-reference-d1-dp2 2>&1"
    proxy = item_of(next(p for p in plan.processes if p.key == "proxy"))
    assert runtime.stop_line(run, proxy, 10) == HostRuntime().stop_line(run, proxy, 10)
