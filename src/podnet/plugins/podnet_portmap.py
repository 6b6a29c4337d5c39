"""``podnet-portmap``: a chained plugin that publishes ``runtimeConfig.portMappings`` like the
reference ``portmap`` (docs/sources.md#the-reference-portmap-plugin), options and iptables rule
layout included, after any main plugin (podnet, reference ptp or bridge, …). It reads the sandbox
addresses of CNI_IFNAME from ``prevResult`` and prints ``prevResult`` through unchanged.

No portMappings: ADD passes through and DEL does nothing, without running any firewall command
(CP #510). UDP conntrack entries of the mapped ports are flushed after ADD and DEL (CP #123).

The hostPorts it publishes are recorded in the node's podnet store (``dataDir``, default
``/var/lib/podnet``; table ``portmap_claims``) before its rules go in, and forgotten after they
are gone: podnet's hostPorts and network forwards and podnet-portmap's see each other (a clash
is code 101 naming the holder, either way), and ``podnetctl ports`` lists them all. Among
podnet-portmap's own containers the reference's behaviour is kept (no check).
"""

from __future__ import annotations

from podnet import errors
from podnet.cni import netconf, skel
from podnet.errors import CNIError, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.firewall.portmap_iptables import PortmapOptions
    from podnet.firewall.portmapper import PortMapper
    from podnet.store import Store
    from podnet.values import ContainerNet, PortMapping, PortMappingArg

PLUGIN = "podnet-portmap"
BACKENDS = ("iptables", "nftables")


class PortmapConf:
    """A validated podnet-portmap NetConf: ``name``, ``options``, ``backend``, ``port_mappings``,
    ``prev_result`` (dict or None). Code 7 naming the option for conflicting or bad values."""

    __slots__ = ("cni_version", "name", "options", "backend", "port_mappings", "raw", "data_dir",
                 "busy_timeout")  # fmt: skip

    def __init__(self, raw: dict[str, Any]) -> None:
        from podnet.firewall.portmap_iptables import PortmapOptions
        from podnet.netconf import store_keys

        self.cni_version = netconf.require_version(raw)
        self.name = netconf.require_name(raw)
        self.data_dir, self.busy_timeout = store_keys(raw)
        external = raw.get("externalSetMarkChain")
        if external is not None and (not isinstance(external, str) or not external
                                     or len(external) > 28 or not _word(external)):
            raise InvalidConfig("externalSetMarkChain: must be an iptables chain name "
                                f"(1-28 characters), got {external!r}")  # fmt: skip
        if external is not None and "markMasqBit" in raw:
            raise InvalidConfig("markMasqBit: cannot be set together with externalSetMarkChain")
        conditions = {}
        for key in ("conditionsV4", "conditionsV6"):
            value = raw.get(key)
            if value is None:
                value = []
            if not isinstance(value, list) or not all(isinstance(v, str) and _arg(v)
                                                      for v in value):
                raise InvalidConfig(f"{key}: must be a list of iptables match arguments, each "
                                    "one printable ASCII word of at most 255 characters without "
                                    "quotes, '#', ';', braces, '%', '\\', '`' or '$', and not "
                                    "-M/--modprobe")
            conditions[key] = value
        backend = raw.get("backend")
        self.backend = "iptables" if backend is None else backend
        if not isinstance(self.backend, str) or self.backend not in BACKENDS:
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
        if "prevResult" in raw and not isinstance(raw["prevResult"], dict):
            raise InvalidConfig("prevResult: must be an object")
        self.raw = raw

    @property
    def prev_result(self) -> dict[str, Any] | None:
        """``prevResult`` validated (code 7 naming the bad key), or None when absent. Read by
        every verb but GC (DEL does not use it, but refuses a malformed one like any key)."""
        from podnet.cni.result import prev_result

        return prev_result(self.raw)

    def mapper(self) -> PortMapper:
        """The chosen backend (:mod:`podnet.firewall.portmapper`)."""
        from podnet.firewall.portmapper import mapper

        return mapper(self.backend, self.name, self.options)


#: Characters of an iptables chain name podnet writes (``externalSetMarkChain``).
_CHAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
#: Characters that mean something to iptables-restore, nft or a shell, or cannot be one word of
#: a restore line: refused in ``conditionsV4``/``conditionsV6`` items, never escaped.
_SYNTAX = frozenset(' \t"\'#;{}%\\`$')


def _word(text: str) -> bool:
    """A chain name: letters, digits, ``_``, ``.``, ``-``."""
    return _CHAIN_CHARS.issuperset(text)


def _arg(text: str) -> bool:
    """One iptables argument of a restore line: printable ASCII, no whitespace, quote, ``#``,
    ``;``, brace, ``%``, backslash, backquote or ``$`` — and not ``-M``/``--modprobe`` in any
    spelling getopt takes (``-M/x``, ``--modp=/x``), which makes iptables run a program of the
    caller's choice to load a module."""
    option = text.partition("=")[0]
    modprobe = text.startswith("-M") or (len(option) >= 4 and "--modprobe".startswith(option))
    return (0 < len(text) <= 255 and text.isascii() and text.isprintable()
            and not _SYNTAX.intersection(text) and not modprobe)  # fmt: skip


def container_nets(prev: dict[str, Any], ifname: str) -> list[ContainerNet]:
    """The first sandbox address of each family on ``ifname`` in ``prev`` (reference portmap
    forwards to one IPv4 and one IPv6 address)."""
    from podnet.cni.result import sandbox_addresses
    from podnet.values import ContainerNet

    out: dict[int, ContainerNet] = {}
    for cidr in sandbox_addresses(prev, ifname):
        net = ContainerNet.from_cidr(cidr)
        out.setdefault(net.family, net)
    return [out[f] for f in sorted(out)]


def _route_localnet(container: ContainerNet) -> None:
    """route_localnet=1 on the host interface that routes to the container (the reference
    portmap README's "SNAT"),
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


def _udp_flush(call: Call, mappings: list[PortMappingArg], families: list[int]) -> None:
    """Flush stale UDP conntrack entries; a failure is logged, never fails the call."""
    ports = [(f, m.host_port) for m in mappings if m.protocol == "udp" for f in families]
    if ports:
        from podnet.firewall.conntrack import flush_udp_ports

        flush_udp_ports(ports, call.log.warn)


def _claims(call: Call, nets: list[ContainerNet],
            mappings: list[PortMappingArg]) -> list[PortMapping]:  # fmt: skip
    """The hostPorts ``mappings`` publish for the container's addresses ``nets``, one per
    family for a hostIP of any address (as podnet records its own)."""
    from podnet.checked import FAMILIES
    from podnet.values import PortMapping

    out = []
    for net in nets:
        for m in mappings:
            if m.host_ip is not None and m.host_ip.version != net.family:
                continue
            host_ip = FAMILIES[net.family].wildcard if m.host_ip is None else str(m.host_ip)
            out.append(PortMapping(call.container_id, host_ip, m.host_port, m.protocol, net.ip,
                                   m.container_port, net.family))  # fmt: skip
    return out


def _claim(store: Store, conf: PortmapConf, call: Call, claims: list[PortMapping]) -> None:
    """Record ``claims`` in the node's store (one write transaction), after checking no podnet
    hostPort, nor a forward on one of the node's addresses, takes their traffic: code 101
    naming the holder."""
    from podnet.claims import first_conflict, hostport_message
    from podnet.values import HOSTPORT

    with store.write():
        found = first_conflict(store, [c.dnat() for c in claims], of=HOSTPORT, portmap=False)
        if found is not None:
            raise errors.HostPortConflict(hostport_message(*found))
        store.pods.set_portmap_claims(conf.name, call.container_id, claims)


def cmd_add(call: Call) -> dict[str, Any]:
    """ADD: install this container's rules for each family it has an address of; returns
    prevResult unchanged. Code 7 without prevResult or for a malformed one (checked before any
    rule is written); 101 when podnet or a forward on a node address holds a hostPort; 104 when
    the firewall fails; 5/11 when the store cannot record the claim."""
    conf = PortmapConf(call.config)
    prev_result = conf.prev_result
    if prev_result is None:
        raise InvalidConfig("prevResult: missing; podnet-portmap must be chained after a plugin")
    prev = dict(prev_result)
    prev.setdefault("cniVersion", conf.cni_version)
    if not conf.port_mappings:
        return prev
    nets = container_nets(prev, call.ifname)
    if not nets:
        raise CNIError(
            f"prevResult has no address on the sandbox interface {call.ifname}",
            code=errors.INVALID_CONFIG,
        )
    from podnet.store import open_store

    mapper = conf.mapper()
    with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store, store.locked():
        _claim(store, conf, call, _claims(call, nets, conf.port_mappings))
        try:
            mapper.setup(call.container_id, nets, conf.port_mappings)
            for net in nets:
                if net.family == 4 and conf.options.snat:
                    _route_localnet(net)
        except BaseException:
            try:
                mapper.teardown(call.container_id)  # a failed ADD undoes its own work
                with store.write():
                    store.pods.delete_portmap_claims(conf.name, call.container_id)
            except CNIError:
                pass
            raise
    _udp_flush(call, conf.port_mappings, [n.family for n in nets])
    return prev


def cmd_del(call: Call) -> None:
    """DEL: remove this container's chain and entry rules in both families, then its claims in
    the store; idempotent. Does nothing (no firewall command, no store) when the runtime passes
    no portMappings."""
    from podnet.store import open_store

    conf = PortmapConf(call.config)
    _ = conf.prev_result  # validated like every other key: a malformed one changes nothing
    if not conf.port_mappings:
        return
    families = conf.mapper().teardown(call.container_id)
    with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store, store.write():
        store.pods.delete_portmap_claims(conf.name, call.container_id)
    _udp_flush(call, conf.port_mappings, families)


def cmd_check(call: Call) -> None:
    """CHECK: every expected rule is present for each family the container has an address of
    (unlike reference 1.1.1, an IPv4-only pod does not look for IPv6 rules). Code 103."""
    conf = PortmapConf(call.config)
    prev = conf.prev_result
    if prev is None:
        raise InvalidConfig("prevResult: missing; CHECK needs the result of the chain")
    if not conf.port_mappings:
        return
    nets = container_nets(prev, call.ifname)
    conf.mapper().check(call.container_id, nets, conf.port_mappings)


def cmd_gc(call: Call) -> None:
    """GC (spec 1.1): remove the rules of this network's containers that are not in
    ``cni.dev/valid-attachments``."""
    from podnet.store import open_store

    conf = PortmapConf(call.config)
    valid = {cid for cid, _ in netconf.parse_valid_attachments(call.config)}
    conf.mapper().gc(valid)
    with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store, store.write():
        store.pods.delete_portmap_claims(conf.name, keep=valid)


def cmd_status(call: Call) -> None:
    """STATUS: 50 when the backend's tool cannot be used (iptables: neither family works;
    nftables: nft is not installed)."""
    PortmapConf(call.config).mapper().status()


HANDLERS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check, "GC": cmd_gc, "STATUS": cmd_status}


def main() -> None:
    """Console script ``podnet-portmap``: one CNI call per process (``skel.main``)."""
    skel.main(PLUGIN, HANDLERS)
