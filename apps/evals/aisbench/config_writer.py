"""Typed, validated run inputs -> one self-contained AISBench config file (Python source), and the command
line and environment to run it (docs/aisbench-facts.md, sections "Config file" and "Running").

Every value reaches the generated source through repr() of a checked str/int/float/bool; the only bare names
are the AISBench classes listed in IMPORTS. The file must stay pure literals: AISBench reads it with mmengine's
lazy importer, where even `import os` breaks the load. repr() alone is not enough: ais_bench then dumps the config
and reloads the dump with mmengine's text substitution ({{$ENV:default}}, {{ fileDirname }}) before running it, so
no string in the file (nor the work dir it is given) may hold '{{' or '}}' (checks.TEMPLATE)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from apps.evals.aisbench import checks
from apps.evals.aisbench.gsm8k_prompt import GSM8K_4_SHOT_PROMPT

API_STYLES = ("chat", "completions")
FAMILIES = ("aime", "gsm8k", "synthetic")
MODES = {"accuracy": "all", "performance": "perf"}
AIME_PROMPT = "{question}\nRemember to put your final answer within \\boxed{}."
HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")
URL_PATH = re.compile(r"/([A-Za-z0-9._~-]+/)*")
RUN_TIMESTAMP = re.compile(r"\d{8}_\d{6}")


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible server. base_url is normalised to "scheme://host:port/" (plus a path prefix if the
    server sits under one); AISBench joins "v1/chat/completions" onto it, so ".../v1" is refused."""

    base_url: str
    served_model: str
    api_style: str = "chat"
    stream: bool = False
    api_key: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", normalise_base_url(self.base_url))
        checks.text("served_model", self.served_model, max_len=256)
        checks.one_of("api_style", self.api_style, API_STYLES)
        checks.boolean("stream", self.stream)
        checks.text("api_key", self.api_key, empty_ok=True, max_len=1024)
        if any(c.isspace() for c in self.api_key):
            raise checks.fail("api_key", "must not contain spaces")

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""


@dataclass(frozen=True)
class GenerationConfig:
    max_out_len: int
    concurrency: int = 1
    request_rate: float = 0.0
    temperature: float = 0.0
    top_p: float | None = None
    retry: int = 2
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        checks.integer("max_out_len", self.max_out_len, 1, 2**20)
        checks.integer("concurrency", self.concurrency, 1, 1000)
        object.__setattr__(self, "request_rate", checks.number("request_rate", self.request_rate, 0, 1e6))
        object.__setattr__(self, "temperature", checks.number("temperature", self.temperature, 0, 2))
        if self.top_p is not None:
            object.__setattr__(self, "top_p", checks.number("top_p", self.top_p, 0, 1))
            if self.top_p == 0:
                raise checks.fail("top_p", "must be above 0")
        checks.integer("retry", self.retry, 1, 10)  # AISBench: attempts, not retries; 0 sends nothing
        checks.boolean("ignore_eos", self.ignore_eos)


@dataclass(frozen=True)
class SyntheticShape:
    """Fixed-length synthetic requests: `input_len` words "A A A ..." asking for `output_len` tokens each."""

    requests: int
    input_len: int
    output_len: int

    def __post_init__(self) -> None:
        checks.integer("synthetic.requests", self.requests, 1, 2**20)
        checks.integer("synthetic.input_len", self.input_len, 1, 2**20)
        checks.integer("synthetic.output_len", self.output_len, 1, 2**20)


@dataclass(frozen=True)
class DatasetConfig:
    """family "aime": path = a JSONL file of {"question", "answer"}; "gsm8k": path = a directory holding
    test.jsonl and train.jsonl (AISBench's GSM8KDataset reads both); "synthetic": no path, a SyntheticShape."""

    abbr: str
    family: str
    path: str = ""
    synthetic: SyntheticShape | None = None

    def __post_init__(self) -> None:
        checks.abbr("abbr", self.abbr)
        checks.one_of("family", self.family, FAMILIES)
        if self.family == "synthetic":
            if self.path:
                raise checks.fail("path", "must be empty for a synthetic dataset")
            if not isinstance(self.synthetic, SyntheticShape):
                raise checks.fail("synthetic", "a synthetic dataset needs a SyntheticShape")
        else:
            checks.absolute_path("path", self.path)
            if self.synthetic is not None:
                raise checks.fail("synthetic", f"only for the synthetic family, not {self.family}")


def normalise_base_url(url: object) -> str:
    url = checks.text("base_url", url, max_len=2048)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise checks.fail("base_url", f"scheme must be http or https, got {url!r}")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise checks.fail("base_url", "must have no query, fragment or user info")
    host = parts.netloc.rsplit(":", 1)[0] if not parts.netloc.endswith("]") else parts.netloc
    if not HOSTNAME.fullmatch(host):
        raise checks.fail("base_url", f"has no valid host: {url!r}")
    try:
        port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise checks.fail("base_url", f"has an invalid port: {url!r}") from None
    if port == 0:
        raise checks.fail("base_url", "port 0 is not a port to connect to")
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    if not URL_PATH.fullmatch(path):
        raise checks.fail("base_url", f"path {parts.path!r} may hold only letters, digits and . _ ~ -")
    if path.rstrip("/").rsplit("/", 1)[-1].lower() == "v1":
        raise checks.fail("base_url", "must not end in /v1: AISBench appends v1/chat/completions itself; "
                                      "give http://host:port/")
    return f"{parts.scheme}://{host}:{port}{path}"


class Name:
    """A bare identifier in the generated source: only ever one of the constant names in IMPORTS."""

    def __init__(self, name: str):
        assert name in IMPORTED_NAMES, name
        self.name = name


IMPORTS = {
    "ais_bench.benchmark.models": ("VLLMCustomAPIChat", "VLLMCustomAPI"),
    "ais_bench.benchmark.utils.postprocess.model_postprocessors": ("extract_non_reasoning_content",),
    "ais_bench.benchmark.openicl.icl_prompt_template": ("PromptTemplate",),
    "ais_bench.benchmark.openicl.icl_retriever": ("ZeroRetriever",),
    "ais_bench.benchmark.openicl.icl_inferencer": ("GenInferencer",),
    "ais_bench.benchmark.datasets": ("Aime2025Dataset", "MATHEvaluator", "math_postprocess_v2", "GSM8KDataset",
                                     "Gsm8kEvaluator", "gsm8k_postprocess", "gsm8k_dataset_postprocess",
                                     "SyntheticDataset"),
}
IMPORTED_NAMES = frozenset(name for names in IMPORTS.values() for name in names)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def literal(value: object, indent: int = 0) -> str:
    """Python source for a value built only of checked scalars, lists, dicts with str keys, and Names."""
    pad, inner = "    " * indent, "    " * (indent + 1)
    if isinstance(value, Name):
        return value.name
    if isinstance(value, str) and checks.TEMPLATE.search(value):
        raise ValueError(f"{value[:60]!r} holds '{{{{' or '}}}}', which mmengine would substitute when ais_bench "
                         "reloads the config")
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float):
        return repr(value)  # finite: the dataclasses refuse inf and nan
    if isinstance(value, list):
        return "[\n" + "".join(f"{inner}{literal(v, indent + 1)},\n" for v in value) + f"{pad}]"
    if isinstance(value, dict):
        if all(isinstance(k, str) and IDENTIFIER.fullmatch(k) for k in value):
            body = "".join(f"{inner}{k}={literal(v, indent + 1)},\n" for k, v in value.items())
            return "dict(\n" + body + f"{pad})"
        body = "".join(f"{inner}{literal(str(k))}: {literal(v, indent + 1)},\n" for k, v in value.items())
        return "{\n" + body + pad + "}"
    raise TypeError(f"no literal for {type(value).__name__}")


def model_entry(model_abbr: str, endpoint: EndpointConfig, generation: GenerationConfig,
                tokenizer_path: str) -> dict:
    kwargs: dict[str, object] = {"temperature": generation.temperature}
    if generation.top_p is not None:
        kwargs["top_p"] = generation.top_p
    if generation.ignore_eos:
        kwargs["ignore_eos"] = True
    return {
        "attr": "service",
        "type": Name("VLLMCustomAPIChat" if endpoint.api_style == "chat" else "VLLMCustomAPI"),
        "abbr": model_abbr,
        "path": tokenizer_path,
        "model": endpoint.served_model,
        "stream": endpoint.stream,
        "request_rate": generation.request_rate,
        "use_timestamp": False,
        "retry": generation.retry,
        "api_key": endpoint.api_key,
        "url": endpoint.base_url,
        "max_out_len": generation.max_out_len,
        "batch_size": generation.concurrency,
        "trust_remote_code": False,
        "generation_kwargs": kwargs,
        "pred_postprocessor": {"type": Name("extract_non_reasoning_content")},
    }


def zero_shot(template: object) -> dict:
    return {"prompt_template": {"type": Name("PromptTemplate"), "template": template},
            "retriever": {"type": Name("ZeroRetriever")}, "inferencer": {"type": Name("GenInferencer")}}


def dataset_entry(dataset: DatasetConfig) -> dict:
    if dataset.family == "aime":
        return {"abbr": dataset.abbr, "type": Name("Aime2025Dataset"), "path": dataset.path,
                "reader_cfg": {"input_columns": ["question"], "output_column": "answer"},
                "infer_cfg": zero_shot({"round": [{"role": "HUMAN", "prompt": AIME_PROMPT}]}),
                "eval_cfg": {"evaluator": {"type": Name("MATHEvaluator"), "version": "v2"},
                             "pred_postprocessor": {"type": Name("math_postprocess_v2")}}}
    if dataset.family == "gsm8k":  # as the packaged gsm8k_gen (= gsm8k_gen_4_shot_cot_str) does
        return {"abbr": dataset.abbr, "type": Name("GSM8KDataset"), "path": dataset.path,
                "reader_cfg": {"input_columns": ["question"], "output_column": "answer"},
                "infer_cfg": zero_shot(GSM8K_4_SHOT_PROMPT),
                "eval_cfg": {"evaluator": {"type": Name("Gsm8kEvaluator")},
                             "pred_postprocessor": {"type": Name("gsm8k_postprocess")},
                             "dataset_postprocessor": {"type": Name("gsm8k_dataset_postprocess")}}}
    shape = dataset.synthetic
    assert shape is not None
    fixed = {"Method": "uniform", "Params": {"MinValue": shape.input_len, "MaxValue": shape.input_len}}
    out = {"Method": "uniform", "Params": {"MinValue": shape.output_len, "MaxValue": shape.output_len}}
    return {"abbr": dataset.abbr, "type": Name("SyntheticDataset"),
            "config": {"Type": "string", "RequestCount": shape.requests, "TrustRemoteCode": False,
                       "StringConfig": {"Input": fixed, "Output": out}},
            "reader_cfg": {"input_columns": ["question", "max_out_len"], "output_column": "answer"},
            "infer_cfg": zero_shot("{question}"),
            "eval_cfg": {"evaluator": {"type": Name("MATHEvaluator"), "version": "v2"},
                         "pred_postprocessor": {"type": Name("math_postprocess_v2")}}}


def render_config(model_abbr: str, endpoint: EndpointConfig, generation: GenerationConfig,
                  dataset: DatasetConfig, tokenizer_path: str = "") -> str:
    """The config file's source. tokenizer_path: a local tokenizer directory, "" for none (perf mode needs
    one: AISBench's perf summarizer loads it even when the server reports usage)."""
    checks.abbr("model_abbr", model_abbr)
    checks.absolute_path("tokenizer_path", tokenizer_path, empty_ok=True)
    for field, value, kind in (("endpoint", endpoint, EndpointConfig), ("generation", generation, GenerationConfig),
                               ("dataset", dataset, DatasetConfig)):
        if not isinstance(value, kind):
            raise checks.fail(field, f"must be a {kind.__name__}")
    models = [model_entry(model_abbr, endpoint, generation, tokenizer_path)]
    datasets = [dataset_entry(dataset)]
    used = names_in([models, datasets])
    lines = ["# AISBench job config, written by the control plane. Only literals; never edit by hand."]
    for module, names in IMPORTS.items():
        if wanted := [name for name in names if name in used]:
            lines.append(f"from {module} import {', '.join(wanted)}")
    lines += ["", f"models = {literal(models)}", "", f"datasets = {literal(datasets)}",
              "", f"summarizer = {literal({'attr': 'accuracy'})}", ""]
    return "\n".join(lines)


def names_in(value: object) -> set[str]:
    if isinstance(value, Name):
        return {value.name}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(names_in(v) for v in value))
    return set()


def ais_bench_argv(executable: str, config_file: str, work_dir: str, mode: str, num_prompts: int | None = None,
                   num_warmups: int = 1, reuse: str | None = None) -> list[str]:
    """The command line. mode "accuracy" runs infer + eval (`--mode all --dump-eval-details`), "performance"
    runs `--mode perf`. reuse: the YYYYmmdd_HHMMSS run folder to go on from (perf: recompute only)."""
    argv = [checks.absolute_path("executable", executable), checks.absolute_path("config_file", config_file),
            "-w", checks.absolute_path("work_dir", work_dir), "--mode", MODES[checks.one_of("mode", mode, tuple(MODES))]]
    if mode == "accuracy":
        argv.append("--dump-eval-details")
    if num_prompts is not None:
        argv += ["--num-prompts", str(checks.integer("num_prompts", num_prompts, 1, 2**31))]
    argv += ["--num-warmups", str(checks.integer("num_warmups", num_warmups, 0, 1000))]
    if reuse is not None:
        if not isinstance(reuse, str) or not RUN_TIMESTAMP.fullmatch(reuse):
            raise checks.fail("reuse", f"must be a run folder name YYYYmmdd_HHMMSS, got {reuse!r}")
        argv += ["--reuse", reuse]
    return argv


def run_env(base_env: dict[str, str], endpoint_host: str) -> dict[str, str]:
    """The environment for ais_bench: TERM=dumb (else curses writes escapes into stdout), the endpoint host
    added to NO_PROXY/no_proxy (its HTTP clients honour HTTP(S)_PROXY, which stay as they are), and no
    PYTHONPATH/PYTHONHOME that could make its venv import the caller's packages."""
    host = checks.text("endpoint_host", endpoint_host, max_len=255).strip("[]")
    if not HOSTNAME.fullmatch(host) and not re.fullmatch(r"[0-9A-Fa-f:.]{2,45}", host):
        raise checks.fail("endpoint_host", f"is not a host name or address: {endpoint_host!r}")
    env = {k: v for k, v in base_env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "TERM")}
    env["TERM"] = "dumb"
    no_proxy: list[str] = []
    for entry in (base_env.get("NO_PROXY", "") + "," + base_env.get("no_proxy", "") + f",{host},127.0.0.1,localhost"
                  ).split(","):
        if entry.strip() and entry.strip() not in no_proxy:
            no_proxy.append(entry.strip())
    env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy)
    return env
