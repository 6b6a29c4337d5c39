"""``podnet-portmap``: a chained plugin that publishes ``runtimeConfig.portMappings`` like the
reference ``portmap`` (seed 000), options and iptables rule layout included, after any main
plugin (podnet, reference ptp or bridge, …). It reads the sandbox addresses of CNI_IFNAME from
``prevResult`` and prints ``prevResult`` through unchanged.

No portMappings: ADD passes through and DEL does nothing, without running any firewall command
(CP #510). UDP conntrack entries of the mapped ports are flushed after ADD and DEL (CP #123).
"""

from __future__ import annotations

from podnet.cni import errors, netconf, skel
from podnet.cni.errors import CNIError, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.netconf import PortMappingArg
    from podnet.cni.skel import Call
    from podnet.firewall.portmap_iptables import ContainerNet, PortmapOptions

PLUGIN = "podnet-portmap"
BACKENDS = ("iptables", "nftables")


class PortmapConf:
    """A validated podnet-portmap NetConf: ``name``, ``options``, ``backend``, ``port_mappings``,
    ``prev_result`` (dict or None). Code 7 naming the option for conflicting or bad values."""

    __slots__ = ("cni_version", "name", "options", "backend", "port_mappings", "prev_result")

    def __init__(self, raw: dict[str, Any]) -> None:
        from podnet.firewall.portmap_iptables import PortmapOptions

        self.cni_version = netconf.require_version(raw)
        self.name = netconf.require_str(raw, "name")
        external = raw.get("externalSetMarkChain")
        if external is not None and (not isinstance(external, str) or not external
                                     or len(external) > 28 or " " in external):
            raise InvalidConfig(
                f"externalSetMarkChain: must be an iptables chain name (1-28 characters), "
                f"got {external!r}"
            )  # fmt: skip
        if external is not None and "markMasqBit" in raw:
            raise InvalidConfig("markMasqBit: cannot be set together with externalSetMarkChain")
        conditions = {}
        for key in ("conditionsV4", "conditionsV6"):
            value = raw.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidConfig(f"{key}: must be a list of iptables match arguments")
            conditions[key] = value
        self.backend = raw.get("backend") or "iptables"
        if self.backend not in BACKENDS:
            raise InvalidConfig(
                f"backend: {self.backend!r} is not supported (supported: {', '.join(BACKENDS)})"
            )
        if self.backend == "nftables":
            for key in ("conditionsV4", "conditionsV6", "externalSetMarkChain"):
                if raw.get(key):
                    raise InvalidConfig(
                        f"{key}: iptables-only, cannot be used with backend nftables"
                    )
        self.options: PortmapOptions = PortmapOptions(
            snat=netconf.opt_bool(raw, "snat", True),
            mark_masq_bit=netconf.opt_int(raw, "markMasqBit", 13, 0, 31),
            external_set_mark_chain=external,
            conditions_v4=conditions["conditionsV4"],
            conditions_v6=conditions["conditionsV6"],
            masq_all=netconf.opt_bool(raw, "masqAll", False),
        )
        self.port_mappings = netconf.parse_port_mappings(raw)
        prev = raw.get("prevResult")
        if prev is not None and not isinstance(prev, dict):
            raise InvalidConfig("prevResult: must be an object")
        self.prev_result: dict[str, Any] | None = prev


def container_nets(prev: dict[str, Any], ifname: str) -> list[ContainerNet]:
    """The first sandbox address of each family on ``ifname`` in ``prev`` (reference portmap
    forwards to one IPv4 and one IPv6 address)."""
    from podnet.cni.result import sandbox_addresses
    from podnet.firewall.portmap_iptables import ContainerNet

    out: dict[int, ContainerNet] = {}
    for cidr in sandbox_addresses(prev, ifname):
        net = ContainerNet.from_cidr(cidr)
        out.setdefault(net.family, net)
    return [out[f] for f in sorted(out)]


def _route_localnet(container: ContainerNet) -> None:
    """route_localnet=1 on the host interface that routes to the container (seed 000 "SNAT"),
    so 127.0.0.1 → hostPort can be DNATed out of the node's loopback."""
    from podnet import proc
    from podnet.link import sysctl

    try:
        out = proc.run(["ip", "-o", "route", "get", container.ip])
    except proc.ToolError as err:
        raise errors.KernelError(f"no route to container {container.ip}", err.stderr) from err
    words = out.split()
    if "dev" in words:
        dev = words[words.index("dev") + 1]
        try:
            sysctl.write_path(f"/proc/sys/net/ipv4/conf/{dev}/route_localnet", "1")
        except OSError as err:
            raise errors.KernelError(f"cannot set route_localnet on {dev}", str(err)) from err


LOCK_PATH = "/run/podnet/portmap.lock"


class _TableLock:
    """An exclusive flock held from reading the rules to applying the change: two ADDs that
    both saw no CNI-HOSTPORT-DNAT would otherwise both declare it, and under --noflush the
    second declaration flushes the first's rules (likewise for nft's listing)."""

    def __enter__(self) -> None:
        import fcntl
        import os

        os.makedirs(os.path.dirname(LOCK_PATH), mode=0o755, exist_ok=True)
        self.fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        import os

        os.close(self.fd)  # releases the lock


def _udp_flush(mappings: list[PortMappingArg], families: list[int]) -> None:
    ports = [(f, m.host_port) for m in mappings if m.protocol == "udp" for f in families]
    if ports:
        from podnet.firewall.conntrack import flush_udp_ports

        flush_udp_ports(ports)


def cmd_add(call: Call) -> dict[str, Any]:
    """ADD: install this container's rules for each family it has an address of; returns
    prevResult unchanged. Code 7 without prevResult; 104 when iptables fails."""
    from podnet.firewall import iptables
    from podnet.firewall import portmap_iptables as rules

    conf = PortmapConf(call.config)
    if conf.prev_result is None:
        raise InvalidConfig("prevResult: missing; podnet-portmap must be chained after a plugin")
    prev = dict(conf.prev_result)
    prev.setdefault("cniVersion", conf.cni_version)
    if not conf.port_mappings:
        return prev
    nets = container_nets(prev, call.ifname)
    if not nets:
        raise CNIError(
            f"prevResult has no address on the sandbox interface {call.ifname}",
            code=errors.INVALID_CONFIG,
        )
    if conf.backend == "nftables":
        from podnet.firewall import nft, portmap_nft

        with _TableLock():
            listing = portmap_nft.list_maps(postrouting=conf.options.snat)
            script = portmap_nft.setup_script(
                listing, conf.options, conf.name, call.container_id, nets, conf.port_mappings
            )
            nft.apply(script, f"add hostPorts of {call.container_id}")
    else:
        for net in nets:
            with _TableLock():
                saved = rules.SavedNat(iptables.save(net.family))
                script = rules.setup_script(saved, conf.options, conf.name, call.container_id,
                                            net, conf.port_mappings)  # fmt: skip
                iptables.restore(net.family, script, f"add hostPorts of {call.container_id}")
    for net in nets:
        if net.family == 4 and conf.options.snat:
            _route_localnet(net)
    _udp_flush(conf.port_mappings, [n.family for n in nets])
    return prev


def cmd_del(call: Call) -> None:
    """DEL: remove this container's chain and entry rules in both families; idempotent. Does
    nothing (no firewall command) when the runtime passes no portMappings."""
    from podnet.firewall import iptables
    from podnet.firewall import portmap_iptables as rules

    conf = PortmapConf(call.config)
    if not conf.port_mappings:
        return
    if conf.backend == "nftables":
        from podnet.firewall import nft, portmap_nft

        with _TableLock():
            script = portmap_nft.teardown_script(portmap_nft.list_maps(postrouting=False),
                                                 conf.name, call.container_id)  # fmt: skip
            if script:
                nft.apply(script, f"remove hostPorts of {call.container_id}")
        _udp_flush(conf.port_mappings, [4, 6])
        return
    families = []
    for family in (4, 6):
        with _TableLock():
            try:  # a family whose iptables does not work here holds nothing of ours
                saved = rules.SavedNat(iptables.save(family))
            except errors.KernelError:
                continue
            families.append(family)
            script = rules.teardown_script(saved, conf.name, call.container_id)
            if script:
                iptables.restore(family, script, f"remove hostPorts of {call.container_id}")
    if not families:
        raise errors.KernelError("neither iptables nor ip6tables is usable")
    _udp_flush(conf.port_mappings, families)


def cmd_check(call: Call) -> None:
    """CHECK: every expected rule is present for each family the container has an address of
    (unlike reference 1.1.1, an IPv4-only pod does not look for IPv6 rules). Code 103."""
    from podnet.firewall import iptables
    from podnet.firewall import portmap_iptables as rules

    conf = PortmapConf(call.config)
    if conf.prev_result is None:
        raise InvalidConfig("prevResult: missing; CHECK needs the result of the chain")
    if not conf.port_mappings:
        return
    if conf.backend == "nftables":
        from podnet.firewall import portmap_nft

        nets = container_nets(conf.prev_result, call.ifname)
        chain = portmap_nft.chain_name(conf.name, call.container_id)
        absent = portmap_nft.missing(portmap_nft.list_table(), conf.name, call.container_id,
                                     nets, conf.port_mappings,
                                     portmap_nft.chain_text(chain))  # fmt: skip
        if absent:
            raise errors.CheckFailed(f"hostPort rule missing: {absent[0]}", "; ".join(absent[1:]))
        return
    for net in container_nets(conf.prev_result, call.ifname):
        saved = rules.SavedNat(iptables.save(net.family))
        missing = rules.missing_rules(saved, conf.options, conf.name, call.container_id, net,
                                      conf.port_mappings)  # fmt: skip
        # Text comparison first; what differs may only be spelled differently by the kernel.
        missing = [m for m in missing if not iptables.has_rule(net.family, *m.split(" ", 1))]
        if missing:
            raise errors.CheckFailed(
                f"IPv{net.family} hostPort rule missing: {missing[0]}",
                "; ".join(missing[1:]),
            )


def cmd_gc(call: Call) -> None:
    """GC (spec 1.1): remove the chains of this network's containers that are not in
    ``cni.dev/valid-attachments`` (found by the entry rules' ``dnat name: … id: …`` comment)."""
    from podnet.firewall import iptables

    conf = PortmapConf(call.config)
    valid = {cid for cid, _ in netconf.parse_valid_attachments(call.config)}
    if conf.backend == "nftables":
        from podnet.firewall import nft, portmap_nft

        with _TableLock():
            listing = portmap_nft.list_table()
            for owner in sorted(listing.owners.values()):
                network, _, cid = owner.partition(" ")
                if network == conf.name and cid not in valid:
                    script = portmap_nft.teardown_script(listing, conf.name, cid)
                    if script:
                        nft.apply(script, f"garbage-collect hostPorts of {cid}")
        return
    prefix = f'dnat name: "{conf.name}" id: "'
    for family in (4, 6):
        if not iptables.usable(family):
            continue
        with _TableLock():
            _gc_family(family, conf.name, valid, prefix)


def _gc_family(family: int, network: str, valid: set[Any], prefix: str) -> None:
    """Tear down the chains of ``network``'s containers missing from ``valid`` in one family."""
    from podnet.firewall import iptables
    from podnet.firewall import portmap_iptables as rules

    saved = rules.SavedNat(iptables.save(family))
    stale: set[str] = set()
    for rule in saved.rules.get(rules.TOP_DNAT, []):
        for word in rules.tokens(rule):
            if word.startswith(prefix) and word.endswith('"'):
                cid = word[len(prefix) : -1]
                if cid not in valid:
                    stale.add(cid)
    for cid in sorted(stale):
        script = rules.teardown_script(saved, network, cid)
        if script:
            iptables.restore(family, script, f"garbage-collect hostPorts of {cid}")


def cmd_status(call: Call) -> None:
    """STATUS: 50 when neither iptables nor ip6tables can be used."""
    from podnet.firewall import iptables

    PortmapConf(call.config)
    if not (iptables.usable(4) or iptables.usable(6)):
        raise errors.Unavailable("neither iptables nor ip6tables is usable")


HANDLERS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check, "GC": cmd_gc, "STATUS": cmd_status}


def main() -> None:
    """Console script ``podnet-portmap``: one CNI call per process."""
    import os
    import sys

    status = skel.run(PLUGIN, HANDLERS)
    sys.stdout.flush()
    os._exit(status)
