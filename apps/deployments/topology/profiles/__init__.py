"""Launch profiles by name (the `launch_profile` field of a topology)."""

from __future__ import annotations

from .base import LaunchProfile
from .mindie import MindieProfile
from .sim import SimProfile
from .vllm_ascend import VllmAscendProfile
from .vllm_cpu import VllmCpuProfile

PROFILES: dict[str, LaunchProfile] = {"vllm-ascend": VllmAscendProfile(), "sim": SimProfile(), "mindie": MindieProfile(),
                                      "vllm-cpu": VllmCpuProfile()}


def get_profile(name: str) -> LaunchProfile:
    return PROFILES[name]


def uses_npus(launch_profile: str) -> bool:
    """Whether the profile's engines run on NPU dies (validation and placement claim dies only then)."""
    return PROFILES[launch_profile].uses_npus


__all__ = ["PROFILES", "LaunchProfile", "MindieProfile", "SimProfile", "VllmAscendProfile", "VllmCpuProfile", "get_profile",
           "uses_npus"]
