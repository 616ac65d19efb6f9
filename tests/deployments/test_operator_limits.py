"""An operator chooses among the launch profile's programs, flags and env names: nothing an instance sets may make a
node run another program or load other code (issue: a BROWSER + PYTHONWARNINGS=ignore::antigravity.x env ran a
shell as root on every node)."""

from __future__ import annotations

import pytest

from apps.deployments.topology import (
    TopologyInvalid,
    build_plan,
    get_profile,
    spec_from_dict,
    validate_topology,
)
from apps.deployments.topology.spec import SpecError

PAYLOAD = {"BROWSER": '/bin/sh -c "id > /tmp/pwned" #%s', "PYTHONWARNINGS": "ignore::antigravity.x"}

CODE_LOADING_ENV = [
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
    "PYTHONWARNINGS", "PYTHONINSPECT", "BROWSER", "EDITOR", "VISUAL", "PAGER", "SHELL", "BASH_ENV", "ENV", "HOME",
    "VLLM_PLUGINS", "VLLM_LOGGING_CONFIG_PATH", "VLLM_CONFIG_ROOT", "HF_HOME", "HF_MODULES_CACHE", "HF_ENDPOINT",
    "TRANSFORMERS_CACHE", "ASCEND_OPP_PATH", "ASCEND_CUSTOM_OPP_PATH", "ASCEND_HOME_PATH", "GIT_SSH_COMMAND",
    "TORCHINDUCTOR_CACHE_DIR", "MOONCAKE_CONFIG_PATH",
]

CODE_LOADING_ARGS = [
    ["--worker-extension-cls", "evil.Ext"], ["--worker-cls", "evil.Worker"], ["--tokenizer", "evil/tok"],
    ["--chat-template", "/etc/shadow"], ["--tool-parser-plugin", "/tmp/p.py"], ["--hf-overrides", "{}"],
    ["--load-format", "dummy"], ["--model-loader-extra-config", "{}"], ["--middleware", "evil.mw"],
    ["--logits-processors", "evil.LP"], ["--scheduler-cls", "evil.S"], ["--model-impl", "transformers"],
    ["--distributed-executor-backend", "evil.Executor"], ["--quantization", "evil"],
    ["--compilation-config", '{"inductor_passes": {"p": "evil.fn"}}'],
    ["--speculative-config", '{"model": "/tmp/draft", "num_speculative_tokens": 1}'],
    ["--additional-config", '{"enable_shared_expert_dp": "/tmp/x"}'],
    ["--compilation-config", "not json"], ["--worker-ext", "evil.Ext"],
]


def problems_of(data, nodes):
    return validate_topology(spec_from_dict(data), nodes)


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_the_reported_payload_is_refused_and_never_rendered(fixed_data, nodes, profile):
    fixed_data["launch_profile"] = profile
    fixed_data["instances"][0]["env"] = dict(PAYLOAD)
    found = {p.path: p for p in problems_of(fixed_data, nodes)}
    for name in PAYLOAD:
        problem = found[f"instances[0].env.{name}"]
        assert f"p0: env {name} is not one" in problem.message
        assert "HCCL_EXEC_TIMEOUT" in problem.suggestion  # the names that are allowed are listed
    with pytest.raises(TopologyInvalid):
        build_plan(spec_from_dict(fixed_data), nodes)


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
@pytest.mark.parametrize("name", CODE_LOADING_ENV)
def test_env_that_names_a_program_library_or_interpreter_option_is_refused(fixed_data, nodes, profile, name):
    fixed_data["launch_profile"] = profile
    fixed_data["instances"][2]["env"] = {name: "/tmp/evil"}
    assert any(p.path == f"instances[2].env.{name}" for p in problems_of(fixed_data, nodes))


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
@pytest.mark.parametrize("args", CODE_LOADING_ARGS, ids=lambda a: " ".join(a))
def test_engine_flags_that_load_code_are_refused(fixed_data, nodes, profile, args):
    fixed_data["launch_profile"] = profile
    fixed_data["instances"][1]["extra_args"] = ["--enforce-eager", *args]
    found = [p for p in problems_of(fixed_data, nodes) if p.path.startswith("instances[1].extra_args[")]
    assert found, args
    assert all(p.path in ("instances[1].extra_args[1]", "instances[1].extra_args[2]") for p in found)


def test_a_refused_flag_names_the_field_and_what_is_allowed(fixed_data, nodes):
    fixed_data["instances"][3]["extra_args"] = ["--worker-extension-cls", "evil.Ext"]
    problem = next(p for p in problems_of(fixed_data, nodes) if p.path == "instances[3].extra_args[0]")
    assert problem.message == "d1: --worker-extension-cls is not an engine flag the vllm-ascend profile allows"
    assert "--gpu-memory-utilization" in problem.suggestion and "--enforce-eager" in problem.suggestion


@pytest.mark.parametrize("args, path, fragment", [
    (["--enforce-eager", "1"], "extra_args[1]", "--enforce-eager takes no value"),
    (["--seed"], "extra_args[0]", "--seed needs a value"),
    (["--seed", "one"], "extra_args[1]", "--seed takes an integer"),
    (["--gpu-memory-utilization", "lots"], "extra_args[1]", "--gpu-memory-utilization takes a number"),
    (["--dtype", "evil"], "extra_args[1]", "--dtype takes one of"),
    (["--reasoning-parser", "../x"], "extra_args[1]", "--reasoning-parser takes a name"),
    (["--compilation-config", '{"cudagraph_mode": "a/b"}'], "extra_args[1]", "letters, digits"),
    (["--compilation-config", "[1]"], "extra_args[1]", "a JSON object"),
])
def test_flag_values_are_checked_by_kind(fixed_data, nodes, args, path, fragment):
    fixed_data["instances"][0]["extra_args"] = args
    problem = next(p for p in problems_of(fixed_data, nodes) if p.path == f"instances[0].{path}")
    assert fragment in problem.message


def test_trust_remote_code_needs_weights_on_the_nodes(fixed_data, nodes):
    assert fixed_data["model"]["path"].startswith("/")  # the reference: local weights, remote code allowed
    assert problems_of(fixed_data, nodes) == []
    fixed_data["model"]["path"] = "someone/qwen-with-a-surprise"
    found = [p for p in problems_of(fixed_data, nodes) if "--trust-remote-code" in p.message]
    assert found and found[0].path == "instances[0].extra_args[2]"
    assert "model.path" in found[0].suggestion


@pytest.mark.parametrize("field", ["path", "served_name"])
def test_model_path_and_name_cannot_be_options(fixed_data, field):
    fixed_data["model"][field] = "--worker-extension-cls=evil.Ext"
    with pytest.raises(SpecError) as info:
        spec_from_dict(fixed_data)
    assert f"model.{field}" in dict(info.value.errors)


def test_tuning_env_and_flags_of_the_reference_are_allowed(fixed_data, nodes):
    fixed_data["instances"][0]["env"] = {"HCCL_EXEC_TIMEOUT": "204", "HCCL_CONNECT_TIMEOUT": "120",
                                         "VLLM_RPC_TIMEOUT": "3600000", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "30000",
                                         "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": "600", "HCCL_BUFFSIZE": "512",
                                         "OMP_NUM_THREADS": "8"}
    fixed_data["instances"][0]["extra_args"] = [
        "--enforce-eager", "--trust-remote-code", "--seed", "1024", "--quantization", "ascend",
        "--no-enable-prefix-caching", "--gpu-memory-utilization", "0.9", "--max-num-batched-tokens", "16384",
        "--speculative-config", '{"num_speculative_tokens": 1, "method": "deepseek_mtp"}',
        "--additional-config", '{"enable_shared_expert_dp": true}']
    fixed_data["instances"][2]["extra_args"] = [
        "--additional-config", '{"recompute_scheduler_enable": true, "multistream_overlap_shared_expert": true, '
                               '"finegrained_tp_config": {"lmhead_tensor_parallel_size": 16}}',
        "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}']
    assert problems_of(fixed_data, nodes) == []


def test_sim_only_knobs_are_refused_on_a_real_cluster(fixed_data, nodes):
    fixed_data["instances"][0]["env"] = {"SIMCLUSTER_STARTUP_S": "0.2"}
    assert any(p.path == "instances[0].env.SIMCLUSTER_STARTUP_S" for p in problems_of(fixed_data, nodes))
    fixed_data["launch_profile"] = "sim"
    assert problems_of(fixed_data, nodes) == []


def test_every_allowed_flag_is_one_the_simulated_engine_accepts():
    from simcluster.engine.args import parse

    argv = ["serve", "/models/m"]
    for flag, rule in sorted(get_profile("sim").allowed_flags.items()):
        argv += [flag, *rule.example]
    parse(argv)  # argparse exits on an unknown flag or a bad value
