"""What the launch and sweep forms show, and how a POST becomes the plain dict RunSettings.from_dict and the
services check: these forms validate nothing themselves, they only place the errors they get on their fields."""

from __future__ import annotations

from dataclasses import MISSING, dataclass

from django.conf import settings

from apps.deployments.selectors import deployments_with_summary

from .choices import ApiStyle, EvalMode
from .datasets import dataset_choices
from .run_settings import MAX_SWEEP_POINTS, RunSettings
from .services import SIM_PROFILE

UPLOAD_FAMILIES = (("aime", "AIME-style: integer answers, scored from \\boxed{}"),
                   ("gsm8k", "GSM8K-style: answers ending in '#### <number>'"))


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    kind: str = "number"  # number | text | select | checkbox
    hint: str = ""
    choices: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BoundField:
    field: FormField
    value: str | bool
    error: str = ""


MODE = FormField("mode", "Mode", "select", choices=tuple(EvalMode.choices))
API_STYLE = FormField("api_style", "API style", "select", choices=tuple(ApiStyle.choices))
STREAM = FormField("stream", "Stream the answers (needed for TTFT, TPOT and ITL)", "checkbox")
MAX_OUT_LEN = FormField("max_out_len", "Max output tokens")
IGNORE_EOS = FormField("ignore_eos", "Fixed output length (ignore EOS)", "checkbox",
                       hint="performance pass only: the server ignores end-of-sequence, so every answer is max "
                            "output tokens long, as published benchmarks measure")
CONCURRENCY = FormField("concurrency", "Concurrency", hint="requests in flight at once")
REQUEST_RATE = FormField("request_rate", "Request rate (req/s)", hint="0 = as fast as the concurrency allows")
TEMPERATURE = FormField("temperature", "Temperature")
NUM_PROMPTS = FormField("num_prompts", "Number of prompts", hint="the first N items; empty = all of them")
NUM_WARMUPS = FormField("num_warmups", "Warm-up requests")
TOKENIZER = FormField("tokenizer_path", "Tokenizer directory", "text",
                      hint="on the host that runs ais_bench; performance runs count tokens with it. Empty on a "
                           "simulated deployment: the simulated model's tokenizer ({sim_tokenizer})")
TIME_LIMIT = FormField("time_limit_s", "Time limit (s)", hint="wall clock; ais_bench is killed after it")
CONCURRENCIES = FormField("concurrencies", "Concurrencies", "text",
                          hint=f"2 to {MAX_SWEEP_POINTS} values, e.g. 1,2,4,8: one performance run each, in order")

LAUNCH_FIELDS = (MODE, API_STYLE, STREAM, MAX_OUT_LEN, IGNORE_EOS, CONCURRENCY, REQUEST_RATE, TEMPERATURE,
                 NUM_PROMPTS, NUM_WARMUPS, TOKENIZER, TIME_LIMIT)
SWEEP_FIELDS = (CONCURRENCIES, API_STYLE, STREAM, MAX_OUT_LEN, IGNORE_EOS, REQUEST_RATE, TEMPERATURE, NUM_PROMPTS,
                NUM_WARMUPS, TOKENIZER, TIME_LIMIT)
MAY_BE_EMPTY = ("num_prompts", "tokenizer_path")  # empty means something; other empty fields take the default
DEFAULT_CONCURRENCIES = "1,2,4,8"
# A sweep is a performance series: fixed output length by default, so its points compare with published figures.
SWEEP_INITIAL = {"concurrencies": DEFAULT_CONCURRENCIES, "ignore_eos": True}


def initial_values(fields, overrides: dict | None = None) -> dict[str, str | bool]:
    """The RunSettings defaults, except the overrides (the sweep form's own)."""
    overrides = overrides or {}
    values = {}
    for f in fields:
        if f.name in overrides:
            values[f.name] = overrides[f.name]
            continue
        default = RunSettings.__dataclass_fields__[f.name].default
        values[f.name] = default if f.kind == "checkbox" else ("" if default in (None, MISSING) else str(default))
    return values


def values_from_post(post, fields) -> dict[str, str | bool]:
    """What the operator typed, kept as typed so a form with errors shows it again."""
    return {f.name: bool(post.get(f.name)) if f.kind == "checkbox" else post.get(f.name, "").strip()
            for f in fields}


def settings_dict(values: dict, dataset: str) -> dict:
    """The plain dict RunSettings.from_dict reads (the sweep's concurrencies left out)."""
    data = {"dataset": dataset}
    for name, value in values.items():
        if name == "concurrencies":
            continue
        if isinstance(value, bool) or value or name in MAY_BE_EMPTY:
            data[name] = value
    return data


def bind(fields, values: dict, errors: dict) -> list[BoundField]:
    bound = []
    for f in fields:
        if "{sim_tokenizer}" in f.hint:
            f = FormField(f.name, f.label, f.kind, f.hint.format(sim_tokenizer=settings.PDCP_SIM_TOKENIZER),
                          f.choices)
        bound.append(BoundField(f, values.get(f.name, ""), errors.get(f.name, "")))
    return bound


def other_errors(errors: dict, fields) -> dict:
    """Errors no field of the form shows (the deployment and dataset selects show their own)."""
    placed = {f.name for f in fields} | {"deployment", "dataset"}
    return {k: v for k, v in errors.items() if k not in placed}


def dataset_options(selected: str) -> list[dict]:
    options = []
    for c in dataset_choices():
        lines = f", {c.lines} items" if c.lines else ""
        note = " · simulated model only" if c.simulated_only else ""
        problem = f" — {c.problem}" if c.problem else ""
        options.append({"key": c.key, "label": f"{c.name}: {c.title}{lines}{note}{problem}",
                        "disabled": not c.runnable, "selected": c.key == selected})
    return options


def deployment_options(selected: str) -> list[dict]:
    options = []
    for d in deployments_with_summary():
        state = f"r{d.active_number}, {d.launch_profile}" if d.active_number else "no active revision"
        options.append({"pk": d.pk, "label": f"{d.name} ({state})", "selected": str(d.pk) == selected,
                        "simulated": d.launch_profile == SIM_PROFILE})
    return options
