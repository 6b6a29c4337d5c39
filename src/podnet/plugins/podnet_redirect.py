"""``podnet-redirect``: Linkerd-style proxy redirection as a chained CNI plugin
(docs/sources.md#linkerd-proxy-init).

Options come from the conflist entry — podnet's own keys, or linkerd-cni's in a ``linkerd``
object — and per pod from the annotations containerd passes through the
``io.kubernetes.cri.pod-annotations`` capability: ``config.linkerd.io/skip-inbound-ports``
appends, ``skip-outbound-ports`` and ``skip-subnets`` replace, ``proxy-uid`` overrides.
``"pods": "all"`` redirects every pod, ``"annotated"`` (default) only pods annotated
``linkerd.io/inject: enabled``. prevResult is passed through; CHECK verifies the rules; DEL
removes them when the netns still exists and succeeds when it does not.
"""

from __future__ import annotations

from podnet.cni import netconf, skel
from podnet.errors import CheckFailed, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.firewall.redirect import RedirectOptions

PLUGIN = "podnet-redirect"
ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
INJECT = "linkerd.io/inject"
#: podnet key → linkerd-cni key (linkerd2 cni-plugin ProxyInit JSON names).
KEYS = {
    "incomingProxyPort": "incoming-proxy-port",
    "outgoingProxyPort": "outgoing-proxy-port",
    "proxyUID": "proxy-uid",
    "proxyGID": "proxy-gid",
    "inboundPortsToIgnore": "inbound-ports-to-ignore",
    "outboundPortsToIgnore": "outbound-ports-to-ignore",
    "subnetsToIgnore": "subnets-to-ignore",
    "portsToRedirect": "ports-to-redirect",
    "ipv6": "ipv6",
}


class RedirectConf:
    """A validated podnet-redirect NetConf: ``options`` (after annotations), ``firewall``,
    ``ipv6``, ``active`` (whether this pod is redirected), ``prev_result``. Code 7 naming the
    key for bad values."""

    def __init__(self, raw: dict[str, Any]) -> None:
        from podnet.firewall import redirect

        netconf.require_version(raw)
        linkerd = raw.get("linkerd")
        if linkerd is None:
            linkerd = {}
        if not isinstance(linkerd, dict):
            raise InvalidConfig("linkerd: must be an object")

        def get(key: str, default: Any) -> Any:
            if key in raw:
                return raw[key]
            return linkerd.get(KEYS[key], default)

        firewall = raw.get("firewall")
        if firewall is None:
            firewall = linkerd.get("iptables-mode")
        self.firewall = "iptables-nft" if firewall is None else firewall
        if not isinstance(self.firewall, str):
            raise InvalidConfig(f"firewall: must be a string, got {self.firewall!r}")
        if self.firewall in ("legacy", "nft"):  # linkerd-cni's iptables-mode values
            self.firewall = f"iptables-{self.firewall}"
        if self.firewall not in ("iptables-legacy", "iptables-nft", "nftables"):
            raise InvalidConfig(f"firewall: {self.firewall!r} is not iptables-legacy, "
                                "iptables-nft or nftables")  # fmt: skip
        self.ipv6 = get("ipv6", False)
        if not isinstance(self.ipv6, bool):
            raise InvalidConfig("ipv6: must be true or false")
        pods = raw.get("pods", "annotated")
        if pods not in ("all", "annotated"):
            raise InvalidConfig(f"pods: {pods!r} is not 'all' or 'annotated'")
        annotations = netconf.runtime_config(raw).get(ANNOTATIONS)
        if annotations is None:
            annotations = {}
        if not isinstance(annotations, dict) or not all(
            isinstance(v, str) for v in annotations.values()
        ):
            raise InvalidConfig(f"runtimeConfig.{ANNOTATIONS}: must be an object of strings")
        self.active = pods == "all" or annotations.get(INJECT) in ("enabled", "ingress")

        def ports(key: str, value: Any) -> list[redirect.PortSpec]:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list):
                raise InvalidConfig(f"{key}: must be a list of ports and a-b ranges")
            try:
                return redirect.parse_ports([str(i) for i in items])
            except ValueError as err:
                raise InvalidConfig(f"{key}: {err}") from None

        def port(key: str, value: Any, low: int = 1) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
                raise InvalidConfig(f"{key}: must be an integer {low}-65535, got {value!r}")
            return value

        inbound = ports("inboundPortsToIgnore", get("inboundPortsToIgnore", []))
        outbound = ports("outboundPortsToIgnore", get("outboundPortsToIgnore", []))
        subnets = get("subnetsToIgnore", [])
        subnets_key = "subnetsToIgnore"
        uid = get("proxyUID", None)
        if uid is None:
            uid = 2102
        prefix = "config.linkerd.io/"
        if f"{prefix}skip-inbound-ports" in annotations:
            inbound += ports(
                f"{prefix}skip-inbound-ports", annotations[f"{prefix}skip-inbound-ports"]
            )
        if f"{prefix}skip-outbound-ports" in annotations:
            outbound = ports(
                f"{prefix}skip-outbound-ports", annotations[f"{prefix}skip-outbound-ports"]
            )
        if f"{prefix}skip-subnets" in annotations:
            subnets = str(annotations[f"{prefix}skip-subnets"]).split(",")
            subnets_key = f"runtimeConfig.{ANNOTATIONS}.{prefix}skip-subnets"
        if f"{prefix}proxy-uid" in annotations:
            try:
                uid = int(annotations[f"{prefix}proxy-uid"])
            except ValueError:
                raise InvalidConfig(f"{prefix}proxy-uid: not an integer") from None
        if not isinstance(subnets, list):
            raise InvalidConfig(f"{subnets_key}: must be a list of CIDRs")
        from podnet import checked

        cidrs = []
        for i, item in enumerate(subnets):
            if isinstance(item, str) and not item.strip():
                continue
            try:
                cidrs.append(checked.network(item.strip() if isinstance(item, str) else item))
            except checked.BadValue as err:
                raise InvalidConfig(f"{subnets_key}[{i}]: {err}") from None
        self.options: RedirectOptions = redirect.RedirectOptions(
            incoming_proxy_port=port("incomingProxyPort", get("incomingProxyPort", 4143)),
            outgoing_proxy_port=port("outgoingProxyPort", get("outgoingProxyPort", 4140)),
            proxy_uid=port("proxyUID", uid, 0),
            proxy_gid=port("proxyGID", get("proxyGID", 0), 0),
            inbound_ports_to_ignore=inbound,
            outbound_ports_to_ignore=outbound,
            subnets_to_ignore=cidrs,
            ports_to_redirect=ports("portsToRedirect", get("portsToRedirect", [])),
        )
        self.raw = raw

    @property
    def prev_result(self) -> dict[str, Any] | None:
        """``prevResult`` validated (code 7 naming the bad key), or None."""
        from podnet.cni.result import prev_result

        return prev_result(self.raw)


def _passthrough(conf: RedirectConf, call: Call) -> dict[str, Any]:
    prev_result = conf.prev_result
    if prev_result is None:
        raise InvalidConfig("prevResult: missing; podnet-redirect must be chained after a plugin")
    prev = dict(prev_result)
    prev.setdefault("cniVersion", call.config.get("cniVersion"))
    return prev


def cmd_add(call: Call) -> dict[str, Any]:
    """ADD: install the redirection in CNI_NETNS for a pod that asks for it."""
    conf = RedirectConf(call.config)
    prev = _passthrough(conf, call)
    if conf.active:
        from podnet.firewall import redirect_apply

        redirect_apply.apply(conf.options, conf.firewall, conf.ipv6, call.netns)
    return prev


def cmd_del(call: Call) -> None:
    """DEL: remove the redirection if the netns is still there; success when it is gone."""
    import os

    conf = RedirectConf(call.config)
    _ = conf.prev_result  # validated like every other key: a malformed one changes nothing
    if conf.active and call.netns and os.path.exists(call.netns):
        from podnet.firewall import redirect_apply

        redirect_apply.cleanup(conf.firewall, conf.ipv6, call.netns)


def cmd_check(call: Call) -> None:
    """CHECK: every rule of the redirection is present in CNI_NETNS (code 103 naming it)."""
    from podnet.firewall import redirect, redirect_apply
    from podnet.firewall.iptables import Saved

    conf = RedirectConf(call.config)
    _passthrough(conf, call)
    if not conf.active:
        return
    if conf.firewall == "nftables":
        text = redirect_apply.list_nft(call.netns)
        for line in redirect.nft_script(conf.options, conf.ipv6).splitlines():
            line = line.strip()
            if "comment" in line and line not in text:
                raise CheckFailed(f"nftables rule missing in {call.netns}: {line}")
        return
    for family in (4, 6) if conf.ipv6 else (4,):
        saved = Saved(redirect_apply.save(conf.firewall, family, call.netns))
        wanted = [
            (redirect.REDIRECT_CHAIN, r) for r in redirect.redirect_rules(conf.options, family)
        ]
        wanted += [(redirect.OUTPUT_CHAIN, r) for r in redirect.output_rules(conf.options)]
        wanted += list(redirect.JUMPS)
        for chain, rule in wanted:
            if not saved.has_rule(chain, rule):
                raise CheckFailed(f"IPv{family} rule missing in {call.netns}: -A {chain} {rule}")


HANDLERS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check}


def main() -> None:
    """Console script ``podnet-redirect``: one CNI call per process (``skel.main``)."""
    skel.main(PLUGIN, HANDLERS)
