"""`key=value` version files (driver/firmware version.info, CANN's ascend_toolkit_install.info) and MindIE's
`key : value` version.info (docs/readiness-facts.md §3.2, §3.3, §3.5)."""

from __future__ import annotations

from types import MappingProxyType

from .values import AscendVersionInfo, CannInstallInfo, MindieVersionInfo, VersionsParseError


def _pairs(text: str, separator: str, what: str) -> dict[str, tuple[int, str]]:
    """key -> (line, value); a line without the separator, an empty key or a repeated key is an error."""
    pairs: dict[str, tuple[int, str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        key, sep, value = raw.partition(separator)
        key = key.strip()
        if not sep or not key or not value.strip():
            raise VersionsParseError(number, f"a '{what}' line", raw.strip())
        if key in pairs:
            raise VersionsParseError(number, f"{key} once (first on line {pairs[key][0]})", raw.strip())
        pairs[key] = (number, value.strip())
    if not pairs:
        raise VersionsParseError(None, f"'{what}' lines", "empty output")
    return pairs


def _required(pairs: dict[str, tuple[int, str]], key: str, text: str, separator: str) -> str:
    if key not in pairs:
        raise VersionsParseError(len(text.splitlines()) + 1, f"a '{key}{separator}...' line", None)
    return pairs[key][1]


def _rest(pairs: dict[str, tuple[int, str]]) -> MappingProxyType[str, str]:
    return MappingProxyType({key: value for key, (_, value) in pairs.items()})


def ascend_parse_version_info(text: str) -> AscendVersionInfo:
    """driver/version.info or firmware/version.info: `Version=` is required."""
    pairs = _pairs(text, "=", "key=value")
    inner = pairs.get("Innerversion") or pairs.get("innerversion")
    return AscendVersionInfo(version=_required(pairs, "Version", text, "="),
                             package_version=pairs["package_version"][1] if "package_version" in pairs else None,
                             inner_version=inner[1] if inner else None, fields=_rest(pairs))


def cann_parse_install_info(text: str) -> CannInstallInfo:
    """ascend_toolkit_install.info: `version=` and `arch=` are required (`compatible_version=` is another key)."""
    pairs = _pairs(text, "=", "key=value")
    return CannInstallInfo(version=_required(pairs, "version", text, "="), arch=_required(pairs, "arch", text, "="),
                           inner_version=pairs["innerversion"][1] if "innerversion" in pairs else None,
                           path=pairs["path"][1] if "path" in pairs else None, fields=_rest(pairs))


_MINDIE_PREFIX = "MindIE "


def mindie_parse_version_info(text: str) -> MindieVersionInfo:
    """MindIE's version.info: `Ascend-mindie : MindIE <version>`, `mindie-<part>: <version>`, `Platform : <arch>`;
    the spacing around `:` varies (`mindie-sd:2.1.RC1.B152`)."""
    pairs = _pairs(text, ":", "key : value")
    headline = _required(pairs, "Ascend-mindie", text, " :")
    if not headline.startswith(_MINDIE_PREFIX) or not headline[len(_MINDIE_PREFIX):].strip():
        raise VersionsParseError(pairs["Ascend-mindie"][0], "'Ascend-mindie : MindIE <version>'", headline)
    components = {key: value for key, (_, value) in pairs.items() if key.startswith("mindie-")}
    return MindieVersionInfo(version=headline[len(_MINDIE_PREFIX):].strip(), components=MappingProxyType(components),
                             platform=pairs["Platform"][1] if "Platform" in pairs else None)
