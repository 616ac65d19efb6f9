"""Number formats of the dashboard's overview: rates and byte rates with SI prefixes, a dash for "not measured"."""

from django import template

register = template.Library()

DASH = "—"


def _si(value: float, units: tuple[str, ...]) -> str:
    k = 0
    while value >= 1000 and k < len(units) - 1:
        value /= 1000
        k += 1
    return f"{value:.0f} {units[k]}" if value >= 100 else f"{value:.1f} {units[k]}"


@register.filter
def per_second(value, unit: str = "req/s") -> str:
    if value is None:
        return DASH
    return _si(float(value), (unit, f"k{unit}", f"M{unit}"))


@register.filter
def bytes_per_second(value) -> str:
    if value is None:
        return DASH
    return _si(float(value), ("B/s", "KB/s", "MB/s", "GB/s", "TB/s"))
