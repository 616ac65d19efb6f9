"""Process states and roles, and the HBM fit verdict: each member with its label and UI colour."""

from apps.coloured_choices import ColouredChoices


class ProcessState(ColouredChoices):
    RUNNING = "running", "Running", "green"
    STOPPED = "stopped", "Stopped", "grey"
    FAILED = "failed", "Failed", "red"        # died on its own, or never became healthy
    UNKNOWN = "unknown", "Unknown", "amber"   # its node could not be asked (unreachable, job lost)


class ProcessRole(ColouredChoices):
    """What a process does; in a plan's stage order, which stop and reconcile walk backwards."""

    STORE = "store", "Store", "purple"
    KV_POOL = "kv_pool", "KV pool", "purple"
    PREFILL = "prefill", "Prefill", "blue"
    DECODE = "decode", "Decode", "green"
    PROXY = "proxy", "Proxy", "amber"


ROLE_ORDER = tuple(ProcessRole.values)


class HbmVerdict(ColouredChoices):
    """The HBM fit estimate's verdict on an instance (DieFit.status, topology/hbm_fit.py)."""

    FITS = "fits", "fits", "green"
    TIGHT = "tight", "tight", "amber"
    NO_ROOM = "no room for one sequence", "no room for one sequence", "red"
    CANNOT_LOAD = "cannot load", "cannot load", "red"
    CANNOT_START = "cannot start", "cannot start", "red"
