"""The plan as the docs write it (issue 11 item 5): every export line, command and file block is sh that, run for
real, sets the same values, passes the same argv (JSON re-indented only) and writes the same files."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import stat
import subprocess

import pytest

from apps.deployments.topology import build_plan, plan_to_text
from apps.deployments.topology.plan import Plan, PlannedProcess, Stage
from apps.deployments.topology.plan_view import (
    command_lines,
    env_word,
    export_lines,
    file_lines,
    plan_view,
    pretty_json,
    process_view,
)
from sshexec import EnvExtend, LaunchFile, LaunchSpec, detached_start_command

HOSTILE = ["a b", "it's", 'say "hi"', "$HOME", "`id`", "$(id)", "back\\slash", "new\nline", "tab\there", "*", "~",
           "semi;colon", "amp&", "pipe|", "'", "", "ü-ñ", "#not-a-comment", "-1", "{not json", "[1, 2"]

KV = {"kv_connector": "MultiConnector", "kv_role": "kv_producer",
      "kv_connector_extra_config": {"connectors": [{"kv_connector": "MooncakeConnectorV1", "kv_port": "30000"},
                                                   {"kv_connector": "AscendStoreConnector", "it's": "$HOME"}]}}


def sh_words(text: str) -> list[str]:
    """What sh passes as argv when it runs `text` (its first word becomes printf's first argument)."""
    out = subprocess.run(["sh", "-c", "printf '%s\\0' " + text], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def same_argv(got: list[str], argv: list[str]) -> bool:
    """Word for word equal, except a JSON word may differ in whitespace only (the same JSON value)."""
    if len(got) != len(argv):
        return False
    for g, a in zip(got, argv, strict=True):
        if g != a:
            flag, _, value = a.partition("=") if a.startswith("-") and not a.startswith(("{", "[")) else ("", "", a)
            prefix = f"{flag}=" if flag else ""
            try:
                if not g.startswith(prefix) or json.loads(g[len(prefix):]) != json.loads(value):
                    return False
            except ValueError:
                return False
    return True


ARGVS = [
    ["vllm", "serve", "/models/Qwen3-32B", "--served-model-name", "qwen3", "--tensor-parallel-size", "8",
     "--kv-transfer-config", json.dumps(KV, separators=(",", ":")), "--enforce-eager", "--port", "30050"],
    ["python", "-m", "pdproxy", "--host", "127.0.0.1", "--prefill", "127.0.0.1:7100", "127.0.0.2:7100",
     "--decode", "127.0.0.3:7100", "--policy", "least_conn"],
    ["python3", "-c", "from memcache_hybrid import MetaService; MetaService.main()"],
    ["memcached", "-l", "127.0.0.1", "-p", "11211", "-U", "0", "-m", "64"],
    ["mooncake_master", "--port", "50088", "--enable_offload=false", '--cfg={"a": [1, 2], "b": "it\'s"}'],
    ["/opt/bin/tool", "positional one", "--flag", *HOSTILE, "--", "--not-a-flag", "x y"],
    ["tool", "--weird", '{"a": 1, "a": 2}', "--nan", '{"x": NaN}', "--empty", "{}", "--list", "[1, 2]"],
]


@pytest.mark.procs
@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: a[0])
def test_the_command_runs_the_same_argv(argv):
    lines = command_lines(argv)
    text = "\n".join(lines)
    assert same_argv(sh_words(text), argv), text
    # shlex knows no line continuation: the lines without their " \\" joined by a space are the same words.
    assert same_argv(shlex.split(" ".join(line.removesuffix(" \\") for line in lines)), argv), text


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: a[0])
def test_one_flag_per_line_each_continued(argv):
    lines = command_lines(argv)
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    assert all(line.startswith("  -") for line in lines[1:])
    assert not lines[0].startswith(" ")


def test_program_then_flags_as_the_docs_write_them():
    assert command_lines(ARGVS[1]) == [
        "python -m pdproxy \\",
        "  --host 127.0.0.1 \\",
        "  --prefill 127.0.0.1:7100 127.0.0.2:7100 \\",
        "  --decode 127.0.0.3:7100 \\",
        "  --policy least_conn",
    ]
    assert command_lines(ARGVS[3])[:3] == ["memcached \\", "  -l 127.0.0.1 \\", "  -p 11211 \\"]
    assert command_lines(["tool", "--", "--x", "y"]) == ["tool \\", "  -- --x y"]
    assert command_lines(["tool"]) == ["tool"]


def test_json_arguments_are_pretty_printed_under_their_flag():
    lines = command_lines(["vllm", "serve", "/m", "--kv-transfer-config",
                           '{"kv_connector":"MooncakeConnectorV1","kv_connector_extra_config":{"prefill":{"dp_size":1}}}',
                           "--port", "1"])
    assert lines == [
        "vllm serve /m \\",
        "  --kv-transfer-config '{\n"
        '    "kv_connector": "MooncakeConnectorV1",\n'
        '    "kv_connector_extra_config": {\n'
        '      "prefill": {\n'
        '        "dp_size": 1\n'
        "      }\n"
        "    }\n"
        "  }' \\",
        "  --port 1",
    ]


def test_json_that_reindenting_could_change_stays_as_it_is():
    assert pretty_json('{"a": 1, "a": 2}') is None  # a repeated key: which one wins is the reader's business
    assert pretty_json('{"x": NaN}') is None and pretty_json('[Infinity]') is None
    assert pretty_json("{}") is None and pretty_json("[]") is None
    assert pretty_json("16") is None and pretty_json('"s"') is None and pretty_json("{nope") is None
    assert pretty_json('{"ü": "ñ"}') == '{\n  "ü": "ñ"\n}'  # readable, not \u-escaped


def run_exports(lines: list[str], names: list[str], before: dict[str, str | None]) -> dict[str, str | None]:
    """Run the export lines in sh with `before` as the node's environment (None: unset); each name's value after."""
    env = {k: v for k, v in os.environ.items() if k not in before}
    env.update({k: v for k, v in before.items() if v is not None})
    script = "\n".join(lines) + "\n" + "".join(
        f'if [ "${{{n}+set}}" = set ]; then printf "%s\\0" "1${n}"; else printf "0\\0"; fi\n' for n in names)
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, check=True).stdout.decode()
    return {n: (v[1:] if v.startswith("1") else None) for n, v in zip(names, out.split("\0")[:-1], strict=True)}


@pytest.mark.procs
@pytest.mark.parametrize("value", HOSTILE)
def test_plain_exports_set_the_value(value):
    lines = export_lines({"PLAIN": value, "OTHER": "x"})
    assert lines[1] == "export OTHER=x"
    assert run_exports(lines, ["PLAIN"], {"PLAIN": "old"}) == {"PLAIN": value}


@pytest.mark.parametrize(("extend", "node", "expected"), [
    (EnvExtend(prepend="/x/mooncake"), "/usr/lib", "/x/mooncake:/usr/lib"),
    (EnvExtend(prepend="/x/mooncake"), None, "/x/mooncake"),  # no trailing ':' (that would mean the cwd)
    (EnvExtend(prepend="/x/mooncake"), "", "/x/mooncake"),
    (EnvExtend(append="/y"), "/usr/lib", "/usr/lib:/y"),
    (EnvExtend(append="/y"), None, "/y"),
    (EnvExtend(prepend="/a b", append="/it's $HOME"), "/n o`id`", "/a b:/n o`id`:/it's $HOME"),
    (EnvExtend(prepend="/a", append="/b"), None, "/a:/b"),
    (EnvExtend(prepend="x", separator=" "), "y z", "x y z"),
])
@pytest.mark.procs
def test_extending_exports_keep_the_nodes_value(extend, node, expected):
    lines = export_lines({"LD_LIBRARY_PATH": extend})
    assert run_exports(lines, ["LD_LIBRARY_PATH"], {"LD_LIBRARY_PATH": node}) == {"LD_LIBRARY_PATH": expected}


def test_extending_export_reads_like_the_docs():
    assert export_lines({"LD_LIBRARY_PATH": EnvExtend(prepend="/usr/local/mooncake")}) == [
        'export LD_LIBRARY_PATH=/usr/local/mooncake"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"']


def test_extending_export_is_the_value_the_start_gives():
    """The same word as the one sshexec's start puts before setsid: the two never disagree about the value."""
    env = {"LD_LIBRARY_PATH": EnvExtend(prepend="/x/mooncake"), "PATH": EnvExtend(append="/opt/bin"),
           "PYTHONPATH": EnvExtend(prepend="/a", append="/b", separator=":")}
    line = detached_start_command(LaunchSpec(("true",), env, workdir="/tmp/run"))
    for name, value in env.items():
        assert f" {name}={env_word(name, value)} " in f" {line}"


@pytest.mark.parametrize("content", [
    '{\n  "metadata_server": "P2PHANDSHAKE",\n  "global_segment_size": "1GB"\n}\n',
    "EOF\nEOF1\nx\n",  # the delimiter must be one no line equals
    "no newline at the end $HOME `id` 'q'",
    "",
    "\n\n",
    "ends in a backslash \\\n",
])
@pytest.mark.procs
def test_file_blocks_write_the_same_file(tmp_path, content):
    path = str(tmp_path / "it's a dir" / "mooncake.json")
    os.makedirs(os.path.dirname(path))
    lines = file_lines(path, content, "640")
    subprocess.run(["sh", "-c", "\n".join(lines)], check=True)
    with open(path, encoding="utf-8", newline="") as f:
        assert f.read() == content
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_a_file_with_a_final_newline_is_a_quoted_here_document():
    assert file_lines("/run/x/mooncake.json", '{\n  "a": 1\n}\n', "600") == [
        "cat > /run/x/mooncake.json <<'EOF'", "{", '  "a": 1', "}", "EOF", "chmod 600 /run/x/mooncake.json"]


def synthetic_plan() -> Plan:
    files = (LaunchFile("/run/pd/mooncake.json", '{\n  "master_server_address": "127.0.0.1:50088"\n}\n'),
             LaunchFile("/run/pd/mooncake.json", '{\n  "master_server_address": "127.0.0.1:50088"\n}\n'))
    engine = LaunchSpec(
        ("vllm", "serve", "/models/Qwen3-32B", "--port", "30050", "--kv-transfer-config",
         '{"kv_connector":"AscendStoreConnector","kv_role":"kv_both"}'),
        {"PYTHONHASHSEED": "0", "MOONCAKE_CONFIG_PATH": "/run/pd/mooncake.json",
         "LD_LIBRARY_PATH": EnvExtend(prepend="/usr/local/Ascend/mooncake")},
        workdir="/run/pd", log_file="logs/p0.log", pid_file="pids/p0.pid", files=files)
    master = LaunchSpec(("mooncake_master", "--port", "50088"), workdir="/run/pd", log_file="logs/kv.log",
                        pid_file="pids/kv.pid")

    def proc(key, role, node, launch):
        return PlannedProcess(key=key, role=role, instance=None if role == "kv_pool" else "p0", node=node,
                              address=f"127.0.0.{len(node)}", dp_rank=None, launch=launch, health_url=None,
                              ports=(50088,), kv_port_window=None)

    return Plan("vllm-ascend", (Stage("kv_pool", (proc("kv-pool", "kv_pool", "n1", master),)),
                                Stage("engines", (proc("p0", "prefill", "n22", engine),
                                                  proc("p1", "prefill", "n1", engine)))))


def test_plan_view_groups_stages_and_nodes_like_the_plan():
    view = plan_view(synthetic_plan())
    assert [(s.number, s.name, [n.node for n in s.nodes]) for s in view] == [
        (1, "kv_pool", ["n1"]), (2, "engines", ["n22", "n1"])]
    p0 = view[1].nodes[0].processes[0]
    assert p0.key == "p0" and p0.address == "127.0.0.3"
    assert p0.log_file == "/run/pd/logs/p0.log" and p0.pid_file == "/run/pd/pids/p0.pid"
    assert p0.start_line == detached_start_command(synthetic_plan().stages[1].processes[0].launch)


def test_process_text_is_files_then_exports_then_the_command():
    p0 = plan_view(synthetic_plan())[1].processes[0]
    assert p0.exports == ("export PYTHONHASHSEED=0", "export MOONCAKE_CONFIG_PATH=/run/pd/mooncake.json",
                          'export LD_LIBRARY_PATH=/usr/local/Ascend/mooncake"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"')
    assert len(p0.files) == 1 and p0.files[0].mode == "600"  # named twice, written once
    assert p0.text == "\n".join([*p0.files[0].lines, "", *p0.exports, *p0.command])
    assert p0.command[0] == "vllm serve /models/Qwen3-32B \\" and "setsid" not in p0.text
    data = p0.as_dict()
    assert data["files"][0]["path"] == "/run/pd/mooncake.json" and data["command"] == list(p0.command)
    assert json.loads(json.dumps(data)) == data


@pytest.mark.procs
def test_process_text_runs_as_written(tmp_path):
    """The whole docs-form block in sh: the file appears, the environment and argv reach the program."""
    launch = dataclasses.replace(
        synthetic_plan().stages[1].processes[0].launch,
        argv=("printf", "%s\\0", "--kv", '{"a":[1,2]}', "--it's", "$HOME"),
        env={"LD_LIBRARY_PATH": EnvExtend(prepend="/x y"), "ODD": "a'b $c"},
        files=(LaunchFile(str(tmp_path / "conf.json"), '{"k": 1}\n', 0o600),))
    view = process_view(dataclasses.replace(synthetic_plan().stages[1].processes[0], launch=launch))
    script = view.text + '\nprintf "%s\\0" "$LD_LIBRARY_PATH" "$ODD"'
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": "/node"}
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, check=True).stdout.decode()
    words = out.split("\0")[:-1]
    assert same_argv(words[:4], ["--kv", '{"a":[1,2]}', "--it's", "$HOME"])
    assert words[4:] == ["/x y:/node", "a'b $c"]
    assert (tmp_path / "conf.json").read_text() == '{"k": 1}\n'


def test_plan_text_has_the_docs_form_and_the_exact_line_of_every_process():
    plan = synthetic_plan()
    text = plan_to_text(plan)
    for p in (p for s in plan_view(plan) for p in s.processes):
        docs = text.index(p.text)
        exact = text.index(f"# {p.key} exactly as a deploy starts it")
        assert docs < exact and text.index(p.start_line, exact) > exact
    assert text.startswith("# launch profile: vllm-ascend; 3 processes in 2 stages\n\n## stage 1: kv_pool\n")


@pytest.mark.procs
@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_every_reference_process_reads_back_to_its_argv(fixed_spec, nodes, profile):
    plan = build_plan(dataclasses.replace(fixed_spec, launch_profile=profile), nodes)
    for p in plan.processes:
        view = process_view(p)
        assert same_argv(sh_words("\n".join(view.command)), list(p.launch.argv)), view.command
        unset = dict.fromkeys(p.launch.env)  # the node has none of them: an EnvExtend is then its own parts
        assert run_exports(list(view.exports), list(p.launch.env), unset) == {
            k: v if isinstance(v, str) else v.separator.join(x for x in (v.prepend, v.append) if x)
            for k, v in p.launch.env.items()}
