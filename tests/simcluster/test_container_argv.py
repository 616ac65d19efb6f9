"""The docker/podman shim's parsing, without processes: pflag's rules and messages, references, devices, mounts,
templates."""

import pytest

from simcluster.containers import flags, hostfs, humane, images, runflags, templates


def test_flags_parse_as_pflag_does():
    opts, args = flags.parse(["-d", "--name=x", "-l", "a=b", "--label", "c=d", "--net=host", "-itv", "/a:/b",
                              "--privileged=true", "img", "vllm", "--port", "1"], runflags.RUN, interspersed=False)
    assert args == ["img", "vllm", "--port", "1"]
    assert opts["detach"] and opts["interactive"] and opts["tty"] and opts["privileged"]
    assert (opts["name"], opts["label"], opts["network"], opts["volume"]) == ("x", ["a=b", "c=d"], "host", ["/a:/b"])
    assert flags.parse(["-p", "8000:8000", "--ipc", "host", "i"], runflags.RUN, interspersed=False)[1] == ["i"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--foo"], "unknown flag: --foo"),
    (["-x"], "unknown shorthand flag: 'x' in -x"),
    (["--name"], "flag needs an argument: --name"),
    (["-e"], "flag needs an argument: 'e' in -e"),
    (["--rm=maybe"], 'invalid argument "maybe" for "--rm" flag: strconv.ParseBool: parsing "maybe": invalid syntax'),
])
def test_flag_errors_carry_pflags_text(argv, message):
    with pytest.raises(flags.FlagError) as exc:
        flags.parse(argv, runflags.RUN)
    assert str(exc.value) == message


def test_references_resolve_as_docker_reads_them():
    held = [{"ref": "quay.io/ascend/vllm-ascend:v0.23.0-a3", "id": "sha256:" + "a" * 64, "digest": "sha256:" + "b" * 64},
            {"ref": "busybox", "id": "sha256:" + "c" * 64, "digest": "sha256:" + "d" * 64}]
    assert images.find(held, "docker.io/library/busybox:latest") is held[1]
    assert images.find(held, "quay.io/ascend/vllm-ascend@sha256:" + "b" * 64) is held[0]
    assert images.find(held, "aaaaaaaaaaaa") is held[0]
    assert images.find(held, "quay.io/ascend/vllm-ascend") is None  # :latest
    assert images.familiar_ref("hello-world") == "hello-world:latest"


def test_devices_mounts_and_container_paths():
    node = {"npu_count": 8, "host_paths": ["/usr/local/Ascend/driver"]}
    assert hostfs.device_exists(node, "/dev/davinci7") and not hostfs.device_exists(node, "/dev/davinci8")
    assert hostfs.device_exists(node, "/dev/hisi_hdc") and not hostfs.device_exists({"npu_count": 0}, "/dev/hisi_hdc")
    assert hostfs.parse_device("/dev/davinci0:rwm") == {"PathOnHost": "/dev/davinci0", "PathInContainer":
                                                        "/dev/davinci0", "CgroupPermissions": "rwm"}
    assert hostfs.path_exists(node, "/usr/local/Ascend/driver/lib64") and not hostfs.path_exists(node, "/nope/x")
    mounts = [hostfs.parse_volume("/data/w:/root/.cache:ro"), hostfs.parse_volume("/run/x:/etc/mooncake")]
    assert mounts[0]["RW"] is False
    assert hostfs.argv_to_host(["serve", "/root/.cache/m", "--cfg=/etc/mooncake/m.json", "/root/.cachex"], mounts) == [
        "serve", "/data/w/m", "--cfg=/run/x/m.json", "/root/.cachex"]
    with pytest.raises(hostfs.BadSpec):
        hostfs.parse_volume("named:/data")


def test_templates_and_tables():
    doc = {"State": {"Status": "running", "Pid": 7, "Running": True}, "Config": {"Labels": {"a": "b"}}}
    assert templates.render("{{.State.Status}} {{.State.Pid}} {{.State.Running}}", doc) == "running 7 true"
    assert templates.render("{{json .Config.Labels}}\\t{{index .Config.Labels \"a\"}}", doc) == '{"a":"b"}\tb'
    assert templates.render("{{.Nope}}", doc) == "<no value>"
    assert humane.ram_in_bytes("1g") == 1 << 30 and humane.size(16_321_000_000) == "16.3GB"
    assert humane.table([["CONTAINER ID", "IMAGE", "NAMES"], ["abc", "img", "n"]], minwidth=10, padding=3) == (
        "CONTAINER ID   IMAGE     NAMES\nabc            img       n\n")
