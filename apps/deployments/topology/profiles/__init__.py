"""Launch profiles by name (the `launch_profile` field of a topology)."""

from __future__ import annotations

from .base import LaunchProfile
from .mindie import MindieProfile
from .sim import SimProfile
from .vllm_ascend import VllmAscendProfile

PROFILES: dict[str, LaunchProfile] = {"vllm-ascend": VllmAscendProfile(), "sim": SimProfile(), "mindie": MindieProfile()}


def get_profile(name: str) -> LaunchProfile:
    return PROFILES[name]


__all__ = ["PROFILES", "LaunchProfile", "MindieProfile", "SimProfile", "VllmAscendProfile", "get_profile"]
