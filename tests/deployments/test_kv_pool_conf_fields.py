"""The KV pool's files and library path, from operator text: mooncake.json and MemCache's mmc-meta.conf /
mmc-local.conf hold only the keys the profile writes, one per line; kv_pool.install_path adds exactly one directory
to LD_LIBRARY_PATH; and no name that ends up in a file name on the nodes may end in a newline (a regex's "$" matches
before a final newline)."""

from __future__ import annotations

import json

import pytest

from apps.deployments.topology import build_plan, spec_from_dict, validate_topology
from apps.deployments.topology.profiles.pool_files import mmc_local_conf
from apps.deployments.topology.spec import SpecError
from sshexec import EnvExtend

SITE = "/usr/local/lib/python3.11/site-packages"
MMC_META_KEYS = {"ock.mmc.meta_service_url", "ock.mmc.meta_service.config_store_url",
                 "ock.mmc.meta_service.metrics_url", "ock.mmc.log_level"}
MMC_LOCAL_KEYS = {"ock.mmc.meta_service_url", "ock.mmc.local_service.config_store_url", "ock.mmc.log_level",
                  "ock.mmc.local_service.world_size", "ock.mmc.local_service.protocol",
                  "ock.mmc.local_service.dram.size"}
MOONCAKE_KEYS = {"metadata_server", "protocol", "device_name", "master_server_address", "global_segment_size",
                 "preferred_segment", "prefer_alloc_in_same_node"}


def errors_of(data) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data)
    return dict(caught.value.errors)


def memcache(fixed_data, **pool) -> dict:
    fixed_data["kv_pool"] = {"backend": "memcache", "node": "proxy", "install_path": SITE, **pool}
    return fixed_data


def conf_lines(text: str) -> dict[str, str]:
    assert text.endswith("\n")
    pairs = [line.split(" = ", 1) for line in text[:-1].split("\n")]
    assert all(len(p) == 2 and p[0] and "\r" not in line for p, line in zip(pairs, text[:-1].split("\n"),
                                                                            strict=True)), text
    return dict(pairs)


@pytest.mark.parametrize("install_path", [
    "/opt/x::y",  # an empty entry: the engine's cwd, its run dir
    "/opt/x:relative/lib",  # a relative entry: resolved against the run dir
    "/opt/x:/tmp/elsewhere",  # a second directory
    "/opt/$ORIGIN/lib",  # glibc expands $ORIGIN in LD_LIBRARY_PATH: the program's own directory
    "/opt/a b", "/opt/x;y", "/opt/'q'", '/opt/x"y',
])
def test_a_memcache_pool_install_path_is_one_plain_directory(fixed_data, install_path):
    errors = errors_of(memcache(fixed_data, install_path=install_path))
    assert "LD_LIBRARY_PATH" in errors["kv_pool.install_path"]
    assert "one plain absolute directory" in errors["kv_pool.install_path"]


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_a_memcache_pool_install_path_adds_exactly_its_lib_dir(fixed_data, nodes, profile):
    fixed_data["launch_profile"] = profile
    spec = spec_from_dict(memcache(fixed_data))
    assert validate_topology(spec, nodes) == []
    for p in build_plan(spec, nodes).processes:
        if p.role in ("prefill", "decode") or (profile == "vllm-ascend" and p.role == "kv_pool"):
            assert p.launch.env["LD_LIBRARY_PATH"] == EnvExtend(prepend=f"{SITE}/memcache_hybrid/lib"), p.key


@pytest.mark.parametrize("size", ["1GB\n", "1GB\r", "1GB\nock.mmc.tls.enable = false", "1GB ", " 1GB", "1gb"])
@pytest.mark.parametrize("backend", ["mooncake", "memcache"])
def test_a_pool_segment_size_is_whole_gigabytes_and_nothing_more(fixed_data, backend, size):
    fixed_data["kv_pool"] = {"backend": backend, "node": "proxy", "segment_size": size}
    if backend == "memcache":
        fixed_data["kv_pool"]["install_path"] = SITE
    assert "whole gigabytes" in errors_of(fixed_data)["kv_pool.segment_size"]


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_memcache_pool_conf_files_hold_only_the_profile_keys_one_per_line(fixed_data, nodes, profile):
    fixed_data["launch_profile"] = profile
    data = memcache(fixed_data, segment_size="4GB", protocol="device_rdma")
    if profile == "sim":
        data["kv_pool"].pop("protocol")
    files = {str(f.path): f.content for p in build_plan(spec_from_dict(data), nodes).processes for f in p.launch.files}
    local = conf_lines(files["/var/lib/pdcp/reference/config/mmc-local.conf"])
    extra = {"simcluster.ring", "simcluster.replicas"} if profile == "sim" else set()
    assert set(local) == MMC_LOCAL_KEYS | extra and local["ock.mmc.local_service.dram.size"] == "4GB"
    if profile == "vllm-ascend":
        assert local["ock.mmc.local_service.protocol"] == "device_rdma"
        assert set(conf_lines(files["/var/lib/pdcp/reference/config/mmc-meta.conf"])) == MMC_META_KEYS


def test_mooncake_pool_json_holds_only_the_profile_keys(fixed_data, nodes):
    fixed_data["kv_pool"] = {"backend": "mooncake", "node": "proxy", "segment_size": "2GB", "prefer_local": False}
    files = [f for p in build_plan(spec_from_dict(fixed_data), nodes).processes for f in p.launch.files]
    assert files and {f.path.name for f in files} == {"mooncake.json"}
    for f in files:
        config = json.loads(f.content)
        assert set(config) == MOONCAKE_KEYS and config["protocol"] == "ascend" and config["device_name"] == ""
        assert config["global_segment_size"] == "2GB" and config["prefer_alloc_in_same_node"] is False


def test_the_memcache_conf_writer_refuses_a_value_that_would_end_its_line(fixed_data):
    pool = spec_from_dict(memcache(fixed_data)).kv_pool
    for extra in ({"k": "v\nock.mmc.x = y"}, {"k": "v\r"}, {"bad key": "v"}, {"k\n": "v"}):
        with pytest.raises(ValueError, match="is not one line"):
            mmc_local_conf(pool, "127.0.0.1", extra)


@pytest.mark.parametrize(("where", "value", "path"), [
    (("instances", 0, "name"), "p0\n", "instances[0].name"),  # logs/<name>-dp0.log, pids/<name>-dp0.pid
    (("instances", 0, "engine_id"), "e0\n", "instances[0].engine_id"),
    (("instances", 0, "extra_args"), ["--enforce-eager\n"], "instances[0].extra_args[0]"),
    (("instances", 0, "env"), {"HCCL_BUFFSIZE\n": "1"}, "instances[0].env.HCCL_BUFFSIZE\n"),
])
def test_a_name_with_a_trailing_newline_is_refused_before_it_names_a_pool_or_process_file(fixed_data, where, value,
                                                                                          path):
    target = fixed_data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    assert path in errors_of(fixed_data)
