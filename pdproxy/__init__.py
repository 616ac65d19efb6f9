"""pdproxy: the production Prefill/Decode proxy in front of vllm-ascend (or simulated) instances. No Django."""

__version__ = "0.1.0"
