"""`docker` and `podman` on the simulated nodes, driven over SSH as the control plane drives them: a container's
life (run, ps, inspect, logs, the engine answering, stop, rm), each refusal with the real CLI's message and exit code
(docs/container-launch-facts.md), podman's variants, and `simcluster down` stopping a container's process.
Addresses 127.0.10.250-.254 (docs/contracts.md §2)."""

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from simcluster import cluster
from simcluster.spec import DEFAULT_IMAGE
from simcluster.sshnode import pid_alive
from tests.simcluster.container_helpers import IMAGE, OTHER_DIGEST, container_cluster, down_spec, sh
from tests.simcluster.simtest_helpers import free_port, wait_http, wait_until

pytestmark = pytest.mark.procs  # every test here starts processes or servers

ASCEND = ["--device", "/dev/davinci_manager", "--device", "/dev/devmm_svm", "--device", "/dev/hisi_hdc"]
FAST = ["-e", "SIMCLUSTER_TIME_SCALE=0.05", "-e", "SIMCLUSTER_STARTUP_S=0"]


@pytest.fixture(scope="module")
def root():
    path = Path(tempfile.mkdtemp(prefix="simcluster-containers-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def nodes(root):
    with container_cluster(root / "state") as (_state, clients):
        yield clients


@pytest.fixture(scope="module")
def weights(root):
    """A host directory the engine container mounts at /root/.cache, readable by the login user."""
    path = root / "cache"
    (path / "model").mkdir(parents=True)
    path.chmod(0o755)
    return path


def _inspect(client, ref, flavor="docker"):
    status, out, err = sh(client, flavor, "inspect", ref)
    assert status == 0, err
    return json.loads(out)[0]


def test_a_container_runs_the_engine_until_stopped_then_is_removed(nodes, weights):
    client, port = nodes["dock0"], free_port("127.0.10.250")
    status, out, err = sh(client, "docker", "run", "-d", "--name", "eng0", "--label", "pdcp.dev/deployment=d1",
                          "--label", "pdcp.dev/role=prefill", "--net=host", "--shm-size=1g", "--device",
                          "/dev/davinci0", "--device", "/dev/davinci1", *ASCEND, "-v", f"{weights}:/root/.cache",
                          "-e", "ASCEND_RT_VISIBLE_DEVICES=0,1", *FAST, IMAGE,
                          "vllm", "serve", "/root/.cache/model", "--host", "127.0.10.250", "--port", str(port),
                          "-tp", "2", "--served-model-name", "m0")
    assert status == 0, err
    cid = out.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", cid), out

    status, out, err = sh(client, "docker", "ps", "--filter", "label=pdcp.dev/deployment=d1", "--format", "{{json .}}")
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["ID"], r["Names"], r["State"]) for r in rows] == [(cid[:12], "eng0", "running")]
    assert "pdcp.dev/role=prefill" in rows[0]["Labels"].split(",")

    doc = _inspect(client, "eng0")
    assert doc["Id"] == cid and doc["Name"] == "/eng0"
    assert doc["State"]["Status"] == "running" and doc["State"]["Running"] is True
    pid = doc["State"]["Pid"]
    assert pid > 0 and pid_alive(pid)
    assert doc["Config"]["Labels"] == {"pdcp.dev/deployment": "d1", "pdcp.dev/role": "prefill"}
    assert doc["Config"]["Image"] == IMAGE and doc["Image"] == DEFAULT_IMAGE["id"]
    assert [d["PathOnHost"] for d in doc["HostConfig"]["Devices"]] == [
        "/dev/davinci0", "/dev/davinci1", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert doc["HostConfig"]["NetworkMode"] == "host" and doc["HostConfig"]["ShmSize"] == 1 << 30
    assert doc["Mounts"][0]["Source"] == str(weights) and doc["Mounts"][0]["Destination"] == "/root/.cache"
    # The bind mount's container path reaches the engine as the host path (simcluster/README.md, Containers).
    assert f"{weights}/model" in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")

    wait_http(f"http://127.0.10.250:{port}/health", timeout=60)
    wait_until(lambda: "Application startup complete" in sh(client, "docker", "logs", "--tail", "20", "eng0")[1],
               30, "the engine's startup line in docker logs")

    status, _out, err = sh(client, "docker", "rm", "eng0")
    assert (status, err.strip()) == (1, 'Error response from daemon: cannot remove container "eng0": container is '
                                        'running: stop the container before removing or force remove')

    status, out, err = sh(client, "docker", "stop", "-t", "5", "eng0")
    assert (status, out) == (0, "eng0\n"), err
    state = _inspect(client, cid)["State"]
    assert state["Status"] == "exited" and state["Running"] is False and state["Pid"] == 0
    assert state["FinishedAt"] != "0001-01-01T00:00:00Z"
    wait_until(lambda: not pid_alive(pid), 5, "the engine process to be gone after docker stop")

    status, out, err = sh(client, "docker", "rm", "eng0")
    assert (status, out) == (0, "eng0\n"), err
    status, out, err = sh(client, "docker", "inspect", "eng0")
    assert (status, out, err.strip()) == (1, "[]\n", "error: no such object: eng0")
    assert sh(client, "docker", "ps", "-a", "-q", "--filter", "name=eng0")[1] == ""


def test_a_container_that_exits_shows_its_exit_code_and_rm_flag_removes_it(nodes):
    client = nodes["dock0"]
    status, out, err = sh(client, "docker", "run", "-d", "--name", "short0", IMAGE, "bash", "-c", "echo out; echo err >&2; exit 3")
    assert status == 0, err
    wait_until(lambda: _inspect(client, "short0")["State"]["Status"] == "exited", 15, "short0 to exit")
    assert _inspect(client, "short0")["State"]["ExitCode"] == 3
    assert sh(client, "docker", "logs", "short0")[1].splitlines() == ["out", "err"]
    assert "Exited (3)" in sh(client, "docker", "ps", "-a", "--filter", "name=short0")[1]
    assert sh(client, "docker", "rm", "short0")[:2] == (0, "short0\n")

    status, out, err = sh(client, "docker", "run", "-d", "--rm", "--name", "gone0", IMAGE, "true")
    assert status == 0, err
    wait_until(lambda: sh(client, "docker", "ps", "-a", "-q", "--filter", "name=gone0")[1] == "", 15,
               "--rm to remove gone0 once it exited")


def test_docker_refuses_as_the_real_cli_does(nodes):
    client = nodes["dock0"]
    status, _out, err = sh(client, "docker", "run", "-d", "--gpus-all", IMAGE)
    assert (status, err) == (125, "unknown flag: --gpus-all\n\nUsage:  docker run [OPTIONS] IMAGE [COMMAND] [ARG...]"
                                  "\n\nRun 'docker run --help' for more information\n")

    status, _out, err = sh(client, "docker", "run", "-d", "--name", "nodev0", "--device", "/dev/davinci16", IMAGE)
    assert (status, err) == (127, 'docker: Error response from daemon: error gathering device information while '
                                  'adding custom device "/dev/davinci16": no such file or directory\n\n'
                                  "Run 'docker run --help' for more information\n")
    # docker created it before the start failed: it stays, and holds its name.
    assert "Created" in sh(client, "docker", "ps", "-a", "--filter", "name=nodev0")[1]
    left = _inspect(client, "nodev0")
    assert (left["State"]["Status"], left["State"]["ExitCode"]) == ("created", 128)
    status, _out, err = sh(client, "docker", "run", "-d", "--name", "nodev0", IMAGE)
    assert status == 125
    assert err.startswith(f'docker: Error response from daemon: Conflict. The container name "/nodev0" is already in '
                          f'use by container "{left["Id"]}". You have to remove (or rename) that container to be '
                          f"able to reuse that name.\n\nRun 'docker run --help'")
    assert sh(client, "docker", "rm", "nodev0")[0] == 0

    status, _out, err = sh(client, "docker", "run", "-d", "--pull=never", "quay.io/ascend/vllm-ascend:v0.22.1rc1-a3")
    assert (status, err) == (125, "docker: Error response from daemon: No such image: "
                                  "quay.io/ascend/vllm-ascend:v0.22.1rc1-a3\n\nRun 'docker run --help' for more "
                                  "information\n")
    status, _out, err = sh(client, "docker", "run", "-d", "vllm-ascend")
    assert status == 125
    assert err.startswith("Unable to find image 'vllm-ascend' locally\ndocker: Error response from daemon: Get "
                          '"https://registry-1.docker.io/v2/"')

    status, out, err = sh(client, "docker", "image", "inspect", "nope")
    assert (status, out, err) == (1, "[]\n", "Error response from daemon: No such image: nope:latest\n")
    status, out, err = sh(client, "docker", "stop", "nope")
    assert (status, err) == (1, "Error response from daemon: No such container: nope\n")
    assert sh(client, "docker", "rm", "-f", "nope")[:2] == (0, "")


def test_images_versions_and_digests_come_from_the_spec(nodes):
    status, out, err = sh(nodes["dock0"], "docker", "image", "inspect", IMAGE)
    assert status == 0, err
    image = json.loads(out)[0]
    assert image["Id"] == DEFAULT_IMAGE["id"] and image["RepoTags"] == [IMAGE]
    assert image["RepoDigests"] == [f"quay.io/ascend/vllm-ascend@{DEFAULT_IMAGE['digest']}"]
    other = json.loads(sh(nodes["otherdigest0"], "docker", "image", "inspect", IMAGE)[1])[0]
    assert other["RepoDigests"] == [f"quay.io/ascend/vllm-ascend@{OTHER_DIGEST}"]
    pinned = f"quay.io/ascend/vllm-ascend@{DEFAULT_IMAGE['digest']}"
    status, _out, err = sh(nodes["otherdigest0"], "docker", "run", "-d", "--pull=never", pinned)
    assert (status, err.splitlines()[0]) == (125, f"docker: Error response from daemon: No such image: {pinned}")
    assert sh(nodes["dock0"], "docker", "images", "-q")[1] == DEFAULT_IMAGE["id"][7:19] + "\n"

    assert sh(nodes["dock0"], "docker", "version", "--format", "{{.Server.Version}}")[:2] == (0, "29.1.3\n")
    assert json.loads(sh(nodes["dock0"], "docker", "version", "--format", "{{json .}}")[1])["Server"]["ApiVersion"]
    assert sh(nodes["pod0"], "podman", "version", "--format", "{{.Server.Version}}")[:2] == (0, "5.8.2\n")
    assert sh(nodes["pod0"], "docker", "ps") == (127, "", "sh: 1: docker: not found\n")
    assert sh(nodes["bare0"], "docker", "ps") == (127, "", "sh: 1: docker: not found\n")
    assert sh(nodes["bare0"], "podman", "ps")[0] == 127


def test_podman_plays_its_own_messages(nodes, weights):
    client = nodes["pod0"]
    status, out, err = sh(client, "podman", "run", "-d", "--name", "p0", "--net", "host", "--device", "/dev/davinci7",
                          "-v", f"{weights}:/root/.cache:ro", IMAGE, "bash", "-c", "echo hello; exec sleep 60")
    assert status == 0, err
    cid = out.strip()
    doc = _inspect(client, "p0", "podman")
    assert doc["Name"] == "p0" and doc["State"]["Running"] is True and doc["Mounts"][0]["RW"] is False
    wait_until(lambda: sh(client, "podman", "logs", "p0")[1] == "hello\n", 15, "p0's output in podman logs")

    status, _out, err = sh(client, "podman", "run", "-d", "--name", "p0", IMAGE)
    assert (status, err) == (125, f'Error: creating container storage: the container name "p0" is already in use by '
                                  f"{cid}. You have to remove that container to be able to reuse that name: that name "
                                  f"is already in use, or use --replace to instruct Podman to do so.\n")
    status, _out, err = sh(client, "podman", "run", "-d", "--device", "/dev/davinci8", IMAGE)  # a 910B has 8
    assert (status, err) == (125, "Error: stat /dev/davinci8: no such file or directory\n")
    status, _out, err = sh(client, "podman", "run", "-d", "-v", "/nonexistent/pdcp:/data", IMAGE)
    assert (status, err) == (125, "Error: statfs /nonexistent/pdcp: no such file or directory\n")
    status, _out, err = sh(client, "podman", "run", "--bogus", IMAGE)
    assert (status, err) == (125, "Error: unknown flag: --bogus\nSee 'podman run --help'\n")
    status, _out, err = sh(client, "podman", "run", "--pull=never", "nope:1")
    assert (status, err) == (125, "Error: nope:1: image not known\n")
    status, _out, err = sh(client, "podman", "rm", "p0")
    assert (status, err) == (2, f"Error: cannot remove container {cid} as it is running - running or paused "
                                f"containers cannot be removed without force: container state improper\n")

    assert sh(client, "podman", "stop", "-t", "2", "p0")[:2] == (0, "p0\n")
    assert _inspect(client, "p0", "podman")["State"]["Status"] == "exited"
    assert sh(client, "podman", "rm", "p0")[:2] == (0, "p0\n")
    assert sh(client, "podman", "inspect", "p0") == (125, "[]\n", 'Error: no such object: "p0"\n')
    assert sh(client, "podman", "stop", "p0") == (125, "", 'Error: no container with name or ID "p0" found: no such '
                                                         'container\n')


def test_two_runs_at_once_keep_both_containers(nodes):
    """The table is locked: concurrent invocations never lose each other's rows."""
    client = nodes["dock0"]
    status, _out, err = sh(client, "sh", "-c", " & ".join(
        f"docker run -d --label batch=b1 --name b{i} {IMAGE} sleep 60 >/dev/null" for i in range(4)) + "; wait")
    assert status == 0, err
    names = sorted(sh(client, "docker", "ps", "--filter", "label=batch=b1", "--format", "{{.Names}}")[1].split())
    assert names == ["b0", "b1", "b2", "b3"]
    status, out, err = sh(client, "docker", "rm", "-f", "b0", "b1", "b2", "b3")
    assert (status, out.split()) == (0, ["b0", "b1", "b2", "b3"]), err


def test_down_stops_a_running_container(root):
    state_dir = root / "down-state"
    with container_cluster(state_dir, down_spec()) as (_state, clients):
        status, out, err = sh(clients["dock1"], "docker", "run", "-d", "--name", "keep", IMAGE, "sleep", "300")
        assert status == 0, err
        pid = json.loads(sh(clients["dock1"], "docker", "inspect", "keep")[1])[0]["State"]["Pid"]
        assert pid_alive(pid)
    # container_cluster's exit ran `simcluster down`
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid), f"simcluster down left the container's process {pid} running"
    assert cluster.load_state(state_dir)
