"""/etc/hccn.conf: `<key>_<physical device id>=<value>` lines, persisted by `hccn_tool -s` (docs/readiness-facts.md §2).

Key order is not fixed; `#` comments and blank lines are allowed. Compare it with `-ip -g`: the file is what
is persisted, `-ip -g` what is live.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from .values import HccnDeviceConf, HccnParseError, is_ip, is_netmask

_LINE = re.compile(r"^([a-z][a-z0-9_]*)_(\d{1,2})=(.*)$")  # the device id is 1-2 digits, as hccn_tool's -i
_ADDRESS_KEYS = ("address", "netdetect", "gateway")


def hccn_conf_parse(text: str) -> MappingProxyType[int, HccnDeviceConf]:
    """The file's settings grouped by physical device id, in device order."""
    by_device: dict[int, dict[str, tuple[int, str]]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise HccnParseError(number, "'<key>_<device>=<value>' (e.g. address_0=192.168.1.10) or a # comment",
                                 line)
        key, device, value = match.group(1), int(match.group(2)), match.group(3).strip()
        if not value:
            raise HccnParseError(number, f"a value after '{key}_{device}='", line)
        if key in _ADDRESS_KEYS and not is_ip(value):
            raise HccnParseError(number, f"an IP address for {key}_{device}", line)
        if key == "netmask" and not is_netmask(value):
            raise HccnParseError(number, f"a dotted IPv4 netmask for netmask_{device}", line)
        seen = by_device.setdefault(device, {})
        if key in seen:
            raise HccnParseError(number, f"{key}_{device} once (first set on line {seen[key][0]})", line)
        seen[key] = (number, value)
    result = {}
    for device in sorted(by_device):
        values = {key: value for key, (_, value) in by_device[device].items()}
        named = {key: values.pop(key, None) for key in ("address", "netmask", "netdetect", "gateway")}
        result[device] = HccnDeviceConf(device=device, **named, other=MappingProxyType(dict(sorted(values.items()))))
    return MappingProxyType(result)
