"""Parse real `hccn_tool` output and /etc/hccn.conf (Atlas A2/A3) into typed values; no Django import here.

Every parser is strict, like apps/inventory/npu_smi: output it does not recognise raises HccnParseError naming the
1-based line and what was expected, because a readiness check must never pass on half-read output. Which command
each function reads: docs/readiness.md.
"""

from .conf import hccn_conf_parse
from .failures import hccn_classify, hccn_ip_fix_command
from .ping import hccn_parse_hccs_ping, hccn_parse_ping
from .queries import hccn_parse_ip, hccn_parse_link, hccn_parse_net_health, hccn_parse_vnic
from .values import (
    NET_HEALTH_HEALTHY,
    NET_HEALTH_VALUES,
    HccnDeviceConf,
    HccnFailure,
    HccnIp,
    HccnParseError,
    HccnPing,
    HccnVnic,
    PingReply,
)

__all__ = [
    "NET_HEALTH_HEALTHY",
    "NET_HEALTH_VALUES",
    "HccnDeviceConf",
    "HccnFailure",
    "HccnIp",
    "HccnParseError",
    "HccnPing",
    "HccnVnic",
    "PingReply",
    "hccn_classify",
    "hccn_conf_parse",
    "hccn_ip_fix_command",
    "hccn_parse_hccs_ping",
    "hccn_parse_ip",
    "hccn_parse_link",
    "hccn_parse_net_health",
    "hccn_parse_ping",
    "hccn_parse_vnic",
]
