"""Where a playground request goes: the deployment's running proxy, and the names of the instances behind it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..choices import ProcessState
from ..models import Deployment, Process


class PlaygroundRefused(Exception):
    """The deployment cannot take a playground request now (no proxy, not running); the message says why."""


@dataclass(frozen=True)
class Served:
    """One Prefill or Decode API server, as the proxy names it (host:port) and as the control plane does."""

    address: str
    key: str = ""  # the Process key: p0-dp0, d1-dp2; empty when the proxy names an address no process has
    instance: str = ""

    def as_dict(self) -> dict:
        return {"address": self.address, "key": self.key, "instance": self.instance}


@dataclass(frozen=True)
class ProxyTarget:
    deployment_id: int
    deployment_name: str
    url: str  # http://host:port of the proxy's client listener
    model: str
    engines: dict[str, Served] = field(default_factory=dict)  # "host:port" -> the engine process serving there

    def served(self, address: str | None) -> Served | None:
        if not address:
            return None
        return self.engines.get(address) or Served(address)


def proxy_target(deployment: Deployment) -> ProxyTarget:
    """The running proxy of the deployment, or PlaygroundRefused saying what is missing."""
    rows = list(Process.objects.filter(deployment=deployment, role__in=("proxy", "prefill", "decode"))
                .select_related("revision"))
    proxy = next((p for p in rows if p.role == "proxy"), None)
    if proxy is None or not proxy.ports:
        raise PlaygroundRefused(f"deployment {deployment.name} has no proxy process: deploy it first")
    if proxy.state != ProcessState.RUNNING:
        raise PlaygroundRefused(f"deployment {deployment.name} is not running: its proxy is "
                                f"{proxy.get_state_display().lower()}; deploy or restart it first")
    revision = proxy.revision or deployment.active_revision
    if revision is None:
        raise PlaygroundRefused(f"deployment {deployment.name} has no revision")
    engines = {f"{p.address}:{p.ports[0]}": Served(f"{p.address}:{p.ports[0]}", p.key, p.instance)
               for p in rows if p.role != "proxy" and p.ports}
    return ProxyTarget(deployment_id=deployment.pk, deployment_name=deployment.name,
                       url=f"http://{proxy.address}:{proxy.ports[0]}", model=revision.served_model, engines=engines)
