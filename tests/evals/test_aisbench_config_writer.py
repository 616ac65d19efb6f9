"""The AISBench config file, command line and environment: typed inputs in, inert literals out."""

from __future__ import annotations

import ast

import pytest

from apps.evals.aisbench.config_writer import (
    AIME_PROMPT,
    DatasetConfig,
    EndpointConfig,
    GenerationConfig,
    SyntheticShape,
    ais_bench_argv,
    literal,
    render_config,
    run_env,
)
from apps.evals.aisbench.gsm8k_prompt import GSM8K_4_SHOT_PROMPT

ENDPOINT = EndpointConfig("http://10.0.0.5:8000/", "qwen3-8b", "chat", True)
GENERATION = GenerationConfig(max_out_len=32768, concurrency=8, request_rate=0, temperature=0.6, top_p=0.95)
AIME = DatasetConfig("aime2025", "aime", "/data/aime2025.jsonl")
HOSTILE = ['x"); __import__("os").system("id"); ("', "a'\n__import__('os')\n'", "''' + __import__('os') + '''",
           "\\", "{question}", "é\u2028x"]


def loaded(source: str) -> dict:
    """Compiles the source and checks its shape: imports of ais_bench names, then three plain assignments whose
    right sides hold only literals, dict(...) calls and imported names. Returns the values, names as strings."""
    tree = ast.parse(source)
    compile(tree, "job_config.py", "exec")
    imported: set[str] = set()
    values = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            assert node.module.startswith("ais_bench.benchmark.") and node.level == 0
            imported |= {alias.name for alias in node.names}
            assert all(alias.asname is None for alias in node.names)
            continue
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, ast.dump(node)
        values[node.targets[0].id] = evaluate(node.value, imported)
    assert list(values) == ["models", "datasets", "summarizer"]
    return values


def evaluate(node: ast.AST, names: set[str]):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        assert node.id in names, f"unknown name {node.id}"
        return f"<{node.id}>"
    if isinstance(node, ast.List):
        return [evaluate(e, names) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {evaluate(k, names): evaluate(v, names) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args, ast.dump(node)
        return {k.arg: evaluate(k.value, names) for k in node.keywords}
    raise AssertionError(f"unexpected code in the config: {ast.dump(node)}")


def test_an_aime_chat_config_is_section_5_of_the_facts():
    config = loaded(render_config("job-1", ENDPOINT, GENERATION, AIME, "/models/qwen3-8b"))
    (model,) = config["models"]
    assert model == {
        "attr": "service", "type": "<VLLMCustomAPIChat>", "abbr": "job-1", "path": "/models/qwen3-8b",
        "model": "qwen3-8b", "stream": True, "request_rate": 0.0, "use_timestamp": False, "retry": 2, "api_key": "",
        "url": "http://10.0.0.5:8000/", "max_out_len": 32768, "batch_size": 8, "trust_remote_code": False,
        "generation_kwargs": {"temperature": 0.6, "top_p": 0.95},
        "pred_postprocessor": {"type": "<extract_non_reasoning_content>"}}
    (dataset,) = config["datasets"]
    assert dataset["type"] == "<Aime2025Dataset>" and dataset["path"] == "/data/aime2025.jsonl"
    assert dataset["infer_cfg"]["prompt_template"]["template"] == {"round": [{"role": "HUMAN", "prompt": AIME_PROMPT}]}
    assert AIME_PROMPT == "{question}\nRemember to put your final answer within \\boxed{}."
    assert dataset["eval_cfg"] == {"evaluator": {"type": "<MATHEvaluator>", "version": "v2"},
                                   "pred_postprocessor": {"type": "<math_postprocess_v2>"}}
    assert config["summarizer"] == {"attr": "accuracy"}


def test_completions_gsm8k_and_synthetic_use_their_own_classes():
    completions = EndpointConfig("https://llm.example:443", "m", "completions", False, api_key="sk-123")
    gsm8k = loaded(render_config("m", completions, GENERATION, DatasetConfig("gsm8k", "gsm8k", "/data/gsm8k")))
    assert gsm8k["models"][0]["type"] == "<VLLMCustomAPI>" and gsm8k["models"][0]["api_key"] == "sk-123"
    (dataset,) = gsm8k["datasets"]
    assert dataset["type"] == "<GSM8KDataset>" and dataset["path"] == "/data/gsm8k"
    assert dataset["infer_cfg"]["prompt_template"]["template"] == GSM8K_4_SHOT_PROMPT
    assert dataset["eval_cfg"] == {"evaluator": {"type": "<Gsm8kEvaluator>"},
                                   "pred_postprocessor": {"type": "<gsm8k_postprocess>"},
                                   "dataset_postprocessor": {"type": "<gsm8k_dataset_postprocess>"}}
    synthetic = DatasetConfig("syn", "synthetic", synthetic=SyntheticShape(requests=100, input_len=512, output_len=64))
    perf = GenerationConfig(max_out_len=64, concurrency=32, request_rate=10.5, ignore_eos=True)
    (dataset,) = loaded(render_config("m", ENDPOINT, perf, synthetic, "/tok"))["datasets"]
    assert dataset["type"] == "<SyntheticDataset>" and "path" not in dataset
    assert dataset["config"] == {"Type": "string", "RequestCount": 100, "TrustRemoteCode": False, "StringConfig": {
        "Input": {"Method": "uniform", "Params": {"MinValue": 512, "MaxValue": 512}},
        "Output": {"Method": "uniform", "Params": {"MinValue": 64, "MaxValue": 64}}}}


def test_only_the_names_a_config_uses_are_imported():
    source = render_config("m", ENDPOINT, GENERATION, AIME)
    assert "GSM8KDataset" not in source and "VLLMCustomAPI," not in source and "SyntheticDataset" not in source


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_served_model_or_key_lands_as_an_inert_string_or_is_refused(hostile):
    try:
        endpoint = EndpointConfig("http://127.0.0.1:8000/", hostile, "chat", False)
    except ValueError as e:
        assert str(e).startswith("served_model:") and "\n" in hostile
        return
    (model,) = loaded(render_config("m", endpoint, GENERATION, AIME))["models"]
    assert model["model"] == hostile


# mmengine's text markers: ais_bench dumps the config it loaded and reloads the dump with Config.fromfile, which
# replaces them in the file's text (inside string literals too) and then runs the file. MMENGINE_CODE is a served name
# that made the real ais_bench create /tmp/pdcp-pwned (test_aisbench_config_reload.py runs that loader).
MMENGINE_CODE = ("{{$PDCP_NOPE:\\'+open(\"/tmp/pdcp-pwned\",\"w\").name,#}}"
                 "{{$PDCP_NOPE:'open\"/tmp/pdcp-pwned\",\"w\" name,#}}")
MMENGINE = ["{{$DATABASE_URL:x}}", "x{{'$HOME:x'}}", "{{ fileDirname }}", "{{_base_.models}}", "a}}b", MMENGINE_CODE]
SUBSTITUTED = "contains '{{' or '}}'"


@pytest.mark.parametrize("value", MMENGINE)
def test_text_mmengine_would_substitute_is_refused_in_every_field_naming_it(value):
    with pytest.raises(ValueError, match=f"^served_model: {SUBSTITUTED}"):
        EndpointConfig("http://127.0.0.1:8000/", value)
    with pytest.raises(ValueError, match=f"^api_key: {SUBSTITUTED}"):
        EndpointConfig("http://127.0.0.1:8000/", "m", api_key=value)
    path = "/opt/" + value.replace("/", "_")
    with pytest.raises(ValueError, match=f"^tokenizer_path: {SUBSTITUTED}"):
        render_config("m", ENDPOINT, GENERATION, AIME, path)
    with pytest.raises(ValueError, match=f"^path: {SUBSTITUTED}"):
        DatasetConfig("d", "aime", path)
    with pytest.raises(ValueError, match=f"^work_dir: {SUBSTITUTED}"):
        ais_bench_argv("/opt/a/bin/ais_bench", "/job/c.py", path, "accuracy")
    with pytest.raises(ValueError, match="substitute"):  # the writer's last guard: no string of the file holds one
        literal({"model": value})


def test_braces_that_are_no_mmengine_marker_stay_allowed():
    for value in ("{question}", "a{b}c", "{", "}", "{ {", "} }"):
        (model,) = loaded(render_config("m", EndpointConfig("http://h:1/", value), GENERATION, AIME))["models"]
        assert model["model"] == value


@pytest.mark.parametrize("hostile", HOSTILE + ["UPPER", "a b", "a.b", "", "x" * 65])
def test_a_hostile_abbr_is_refused_naming_the_field(hostile):
    with pytest.raises(ValueError, match="^abbr:"):
        DatasetConfig(hostile, "aime", "/data/a.jsonl")
    with pytest.raises(ValueError, match="^model_abbr:"):
        render_config(hostile, ENDPOINT, GENERATION, AIME)


@pytest.mark.parametrize("url", [
    'http://h:1/"); __import__("os")#', "http://h:1/\n__import__('os')", "ftp://h:1/", "http://:80/", "http:///",
    "http://h:99999/", "http://h:0/", "http://h:x/", "http://u:p@h:1/", "http://h:1/?a=1", "http://h:1/#x",
    "http://h:1/v1", "http://h:1/v1/", "http://h:1/serve/V1", "http://h'o:1/", "http://h o:1/", 8000, "",
])
def test_a_bad_or_hostile_base_url_is_refused_naming_the_field(url):
    with pytest.raises(ValueError, match="^base_url:"):
        EndpointConfig(url, "m")


@pytest.mark.parametrize(("given", "normal"), [
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000/"), ("http://10.0.0.5:8000/", "http://10.0.0.5:8000/"),
    ("https://llm.example", "https://llm.example:443/"), ("http://[::1]:9000", "http://[::1]:9000/"),
    ("http://gw:80/team-a/qwen", "http://gw:80/team-a/qwen/"),
])
def test_base_urls_are_normalised_to_end_in_a_slash(given, normal):
    assert EndpointConfig(given, "m").base_url == normal


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_out_len": 0}, "max_out_len"), ({"max_out_len": 1.5}, "max_out_len"), ({"max_out_len": True}, "max_out_len"),
    ({"concurrency": 0}, "concurrency"), ({"concurrency": 1001}, "concurrency"),
    ({"request_rate": -1}, "request_rate"), ({"request_rate": float("inf")}, "request_rate"),
    ({"request_rate": float("nan")}, "request_rate"), ({"temperature": 2.5}, "temperature"),
    ({"temperature": "0.6"}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_p": 1.2}, "top_p"),
    ({"retry": 0}, "retry"), ({"retry": 11}, "retry"), ({"ignore_eos": 1}, "ignore_eos"),
])
def test_generation_values_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        GenerationConfig(**{"max_out_len": 16, **kwargs})


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"family": "mmlu"}, "family"), ({"path": "data/a.jsonl"}, "path"), ({"path": "/data/../etc/passwd"}, "path"),
    ({"path": "/data/a\n.jsonl"}, "path"), ({"path": ""}, "path"), ({"path": "/"}, "path"),
    ({"synthetic": SyntheticShape(1, 1, 1)}, "synthetic"),
    ({"family": "synthetic"}, "path"), ({"family": "synthetic", "path": ""}, "synthetic"),
])
def test_dataset_values_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        DatasetConfig(**{"abbr": "d", "family": "aime", "path": "/data/a.jsonl", **kwargs})


def test_endpoint_and_render_arguments_are_checked():
    for kwargs, field in [({"api_style": "responses"}, "api_style"), ({"stream": "yes"}, "stream"),
                          ({"api_key": "a b"}, "api_key"), ({"api_key": "k\n"}, "api_key"),
                          ({"served_model": ""}, "served_model")]:
        with pytest.raises(ValueError, match=f"^{field}:"):
            EndpointConfig(**{"base_url": "http://h:1/", "served_model": "m", **kwargs})
    with pytest.raises(ValueError, match="^tokenizer_path:"):
        render_config("m", ENDPOINT, GENERATION, AIME, "relative/tok")
    with pytest.raises(ValueError, match="^synthetic.requests:"):
        SyntheticShape(0, 1, 1)
    with pytest.raises(ValueError, match="^dataset:"):
        render_config("m", ENDPOINT, GENERATION, {"abbr": "x"})  # type: ignore[arg-type]


def test_the_command_line_for_each_mode():
    assert ais_bench_argv("/opt/a/bin/ais_bench", "/job/job_config.py", "/job/out", "accuracy", None, 0, None) == [
        "/opt/a/bin/ais_bench", "/job/job_config.py", "-w", "/job/out", "--mode", "all", "--dump-eval-details",
        "--num-warmups", "0"]
    assert ais_bench_argv("/opt/a/bin/ais_bench", "/job/c.py", "/job/out", "performance", 100, 1,
                          "20261129_094933") == [
        "/opt/a/bin/ais_bench", "/job/c.py", "-w", "/job/out", "--mode", "perf", "--num-prompts", "100",
        "--num-warmups", "1", "--reuse", "20261129_094933"]


@pytest.mark.parametrize(("args", "field"), [
    (("-x", "/c.py", "/w", "accuracy"), "executable"), (("/b", "c.py", "/w", "accuracy"), "config_file"),
    (("/b", "/c.py", "--debug", "accuracy"), "work_dir"), (("/b", "/c.py", "/w", "all"), "mode"),
    (("/b", "/c.py", "/w", "accuracy", 0), "num_prompts"), (("/b", "/c.py", "/w", "accuracy", None, -1), "num_warmups"),
    (("/b", "/c.py", "/w", "accuracy", None, 1, "latest; rm"), "reuse"),
])
def test_bad_command_line_values_are_refused(args, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        ais_bench_argv(*args)


def test_the_environment_bypasses_the_proxy_for_the_endpoint_and_keeps_it_otherwise():
    base = {"PATH": "/usr/bin", "TERM": "xterm-256color", "HTTP_PROXY": "http://proxy:3128",
            "https_proxy": "http://proxy:3128", "NO_PROXY": "corp.example", "no_proxy": "corp.example,.svc",
            "PYTHONPATH": "/work/main", "PYTHONHOME": "/x"}
    env = run_env(base, "10.0.0.5")
    assert env["TERM"] == "dumb" and env["PATH"] == "/usr/bin"
    assert env["HTTP_PROXY"] == env["https_proxy"] == "http://proxy:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "corp.example,.svc,10.0.0.5,127.0.0.1,localhost"
    assert "PYTHONPATH" not in env and "PYTHONHOME" not in env
    assert base["TERM"] == "xterm-256color"  # the caller's dict is left alone
    assert run_env({}, ENDPOINT.host)["NO_PROXY"] == "10.0.0.5,127.0.0.1,localhost"
    assert "::1" in run_env({}, EndpointConfig("http://[::1]:9000", "m").host)["no_proxy"].split(",")
    with pytest.raises(ValueError, match="^endpoint_host:"):
        run_env({}, "a,b")
