"""`vllm serve` command line as the launch reference uses it; unknown flags are an error, as in vLLM.

Flags that change nothing in the simulator are accepted and ignored so the `sim` and `vllm-ascend`
launch profiles can render the same command shape.
"""

from __future__ import annotations

import argparse

from simcluster.engine.kvconfig import validate_top

IGNORED_VALUE_FLAGS = [
    "--quantization", "--additional-config", "--compilation-config", "--seed", "--max-num-batched-tokens",
    "--speculative-config", "--distributed-executor-backend", "--block-size", "--dtype", "--api-server-count",
    "--pipeline-parallel-size", "--uvicorn-log-level", "--tokenizer", "--swap-space", "--load-format",
    "--reasoning-parser", "--tool-call-parser", "--hf-overrides", "--async-scheduling",
]
IGNORED_SWITCHES = [
    "--enforce-eager", "--trust-remote-code", "--enable-expert-parallel", "--disable-log-requests", "--disable-log-stats", "--enable-chunked-prefill",
    "--no-enable-chunked-prefill", "--enable-auto-tool-choice", "--disable-uvicorn-access-log",
]


def _kv_transfer_config(text: str) -> dict:
    """vLLM validates this JSON into KVTransferConfig with pydantic; a failure is an argparse error (exit 2)."""
    try:
        return validate_top(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _kv_events_config(text: str):
    """vLLM validates --kv-events-config into KVEventsConfig (pydantic); a failure is an argparse error (exit 2)."""
    from simcluster.engine.kv_events import parse_config

    try:
        return parse_config(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", description="simcluster engine (speaks vLLM's API)")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("model_tag", nargs="?")
    s.add_argument("--model")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    s.add_argument("--data-parallel-rank", "-dpn", type=int, default=None)
    s.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None)
    s.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=0)
    s.add_argument("--data-parallel-address", "-dpa", default=None)
    s.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=None)
    s.add_argument("--headless", action="store_true")
    s.add_argument("--served-model-name", nargs="+", default=None)
    s.add_argument("--max-model-len", type=int, default=32768)
    s.add_argument("--max-num-seqs", type=int, default=256)
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--kv-transfer-config", type=_kv_transfer_config, default=None)
    s.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    s.add_argument("--kv-events-config", type=_kv_events_config, default=None)
    s.add_argument("--num-gpu-blocks-override", type=int, default=None)  # KV capacity in blocks (per DP rank)
    for flag in IGNORED_VALUE_FLAGS:
        s.add_argument(flag, default=None)
    for flag in IGNORED_SWITCHES:
        s.add_argument(flag, action="store_true")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.model = args.model or args.model_tag
    if not args.model:
        build_parser().error("serve: a model is required (positional or --model)")
    return args
