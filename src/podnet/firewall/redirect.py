"""Linkerd proxy-init's traffic redirection as data
(docs/sources.md#linkerd-proxy-init; linkerd/linkerd2-proxy-init
``proxy-init/internal/iptables/iptables.go``).

Pure functions: the rules of linkerd2-proxy-init, with its ``proxy-init/…`` comments, for the
iptables modes (``iptables-restore --noflush`` input; the jump rules only when absent), and one
podnet-owned ``inet`` table for nftables mode, replaced atomically (IPv4 and IPv6 in one go).
They are applied by :mod:`podnet.firewall.redirect_apply`, for ``podnet-redirect`` and
``podnetctl proxy-init``.

nat table (iptables modes)::

    PROXY_INIT_REDIRECT  -p tcp -m multiport --dports <inbound ignored> -j RETURN   (≤ 15 refs)
                         -s <subnet to ignore> -j RETURN                              (per subnet)
                         -p tcp -j REDIRECT --to-ports 4143       (or one rule per port to redirect)
    PREROUTING           -j PROXY_INIT_REDIRECT
    PROXY_INIT_OUTPUT    -m owner --uid-owner 2102 -j RETURN ; --gid-owner (when set)
                         -o lo -j RETURN
                         -p tcp -m multiport --dports <outbound ignored> -j RETURN
                         -p tcp -j REDIRECT --to-ports 4140
    OUTPUT               -j PROXY_INIT_OUTPUT
"""

from __future__ import annotations

from podnet.checked import FAMILIES, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.checked import Net

REDIRECT_CHAIN = "PROXY_INIT_REDIRECT"
OUTPUT_CHAIN = "PROXY_INIT_OUTPUT"
MULTIPORT_REFS = 15  # a port counts 1, a range a:b counts 2 (xt_multiport)
NFT_TABLE = "podnet_redirect"


class PortSpec:
    """A port (``lo == hi``) or an inclusive range, 1-65535."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int) -> None:
        if not 1 <= lo <= hi <= 65535:
            raise ValueError(f"invalid port range {lo}-{hi}: ports are 1-65535, low <= high")
        self.lo, self.hi = lo, hi

    @property
    def refs(self) -> int:
        return 1 if self.lo == self.hi else 2

    def iptables(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}:{self.hi}"

    def nft(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"

    def linkerd(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


def parse_ports(text: str | Sequence[str]) -> list[PortSpec]:
    """``"4190,4191,25-27"`` (or a list of such items) → PortSpecs; ValueError naming the item."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for raw in items:
        item = str(raw).strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"invalid port or range {item!r}")
        out.append(PortSpec(int(lo), int(hi) if sep else int(lo)))
    return out


def chunks(ports: Sequence[PortSpec]) -> list[list[PortSpec]]:
    """Split into multiport lists of at most 15 port references (a range counts 2)."""
    out: list[list[PortSpec]] = []
    current: list[PortSpec] = []
    refs = 0
    for p in ports:
        if refs + p.refs > MULTIPORT_REFS:
            out.append(current)
            current, refs = [], 0
        current.append(p)
        refs += p.refs
    if current:
        out.append(current)
    return out


class RedirectOptions:
    """linkerd2-proxy-init's options: ports (1-65535), uid/gid (a rule only when > 0),
    subnets to ignore (:mod:`ipaddress` prefixes; inbound, matched on source), ports to
    redirect (inbound "redirect-listed" mode; empty = redirect all)."""

    __slots__ = ("incoming_proxy_port", "outgoing_proxy_port", "proxy_uid", "proxy_gid",
                 "inbound_ports_to_ignore", "outbound_ports_to_ignore", "subnets_to_ignore",
                 "ports_to_redirect")  # fmt: skip

    def __init__(
        self,
        *,
        incoming_proxy_port: int = 4143,
        outgoing_proxy_port: int = 4140,
        proxy_uid: int = 2102,
        proxy_gid: int = 0,
        inbound_ports_to_ignore: Sequence[PortSpec] = (),
        outbound_ports_to_ignore: Sequence[PortSpec] = (),
        subnets_to_ignore: Sequence[Net] = (),
        ports_to_redirect: Sequence[PortSpec] = (),
    ) -> None:
        self.incoming_proxy_port = incoming_proxy_port
        self.outgoing_proxy_port = outgoing_proxy_port
        self.proxy_uid = proxy_uid
        self.proxy_gid = proxy_gid
        self.inbound_ports_to_ignore = list(inbound_ports_to_ignore)
        self.outbound_ports_to_ignore = list(outbound_ports_to_ignore)
        # typed prefixes only (parsed where they entered): rendered with checked.text
        self.subnets_to_ignore = [n for n in subnets_to_ignore if text(n)]
        self.ports_to_redirect = list(ports_to_redirect)


def _comment(name: str) -> str:
    return f"-m comment --comment proxy-init/{name}"


def _ignore_ports(ports: Sequence[PortSpec]) -> list[str]:
    out = []
    for chunk in chunks(ports):
        listed = ",".join(p.iptables() for p in chunk)
        names = ",".join(p.linkerd() for p in chunk)
        out.append(f"-p tcp -m multiport --dports {listed} {_comment(f'ignore-port-{names}')} "
                   "-j RETURN")  # fmt: skip
    return out


def redirect_rules(options: RedirectOptions, family: int) -> list[str]:
    """Rules of PROXY_INIT_REDIRECT (without ``-A <chain>``) for ``family`` (4|6)."""
    out = _ignore_ports(options.inbound_ports_to_ignore)
    for net in options.subnets_to_ignore:
        if net.version == family:
            subnet = text(net)
            out.append(f"-s {subnet} {_comment(f'ignore-subnet-{subnet}')} -j RETURN")
    to = options.incoming_proxy_port
    if options.ports_to_redirect:
        for p in options.ports_to_redirect:
            comment = _comment(f"redirect-port-{p.linkerd()}")
            out.append(f"-p tcp -m tcp --dport {p.iptables()} {comment} "
                       f"-j REDIRECT --to-ports {to}")  # fmt: skip
    else:
        out.append(f"-p tcp {_comment('redirect-all-incoming-to-proxy-port')} "
                   f"-j REDIRECT --to-ports {to}")  # fmt: skip
    return out


def output_rules(options: RedirectOptions) -> list[str]:
    """Rules of PROXY_INIT_OUTPUT (without ``-A <chain>``)."""
    out = []
    if options.proxy_uid > 0:
        out.append(f"-m owner --uid-owner {options.proxy_uid} "
                   f"{_comment('ignore-proxy-user-id')} -j RETURN")  # fmt: skip
    if options.proxy_gid > 0:
        out.append(f"-m owner --gid-owner {options.proxy_gid} "
                   f"{_comment('ignore-proxy-group-id')} -j RETURN")  # fmt: skip
    out.append(f"-o lo {_comment('ignore-loopback')} -j RETURN")
    out += _ignore_ports(options.outbound_ports_to_ignore)
    out.append(f"-p tcp {_comment('redirect-all-outgoing-to-proxy-port')} "
               f"-j REDIRECT --to-ports {options.outgoing_proxy_port}")  # fmt: skip
    return out


JUMPS = (
    ("PREROUTING", f"{_comment('install-proxy-init-prerouting')} -j {REDIRECT_CHAIN}"),
    ("OUTPUT", f"{_comment('install-proxy-init-output')} -j {OUTPUT_CHAIN}"),
)


def present(save_text: str) -> tuple[set[str], set[str]]:
    """From ``iptables-save -t nat``: the parent chains already holding our jump, and which of
    our chains exist (for an idempotent re-run and for cleanup)."""
    from podnet.firewall.iptables import Saved

    saved = Saved(save_text)
    jumps = {parent for parent, rule in JUMPS if saved.has_rule(parent, rule)}
    return jumps, saved.chains & {REDIRECT_CHAIN, OUTPUT_CHAIN}


def restore_script(options: RedirectOptions, family: int, present_jumps: set[str]) -> str:
    """``iptables-restore --noflush`` input: both chains declared (so flushed and refilled: a
    second run gives the same rules once, and a half-applied run is repaired), the jumps added
    only for the parent chains in ``present_jumps``' complement."""
    lines = ["*nat", f":{REDIRECT_CHAIN} - [0:0]", f":{OUTPUT_CHAIN} - [0:0]"]
    lines += [f"-A {REDIRECT_CHAIN} {r}" for r in redirect_rules(options, family)]
    lines += [f"-A {OUTPUT_CHAIN} {r}" for r in output_rules(options)]
    lines += [f"-A {parent} {rule}" for parent, rule in JUMPS if parent not in present_jumps]
    return "\n".join([*lines, "COMMIT", ""])


def nft_cleanup_script() -> str:
    """Remove the nftables mode's table, whether it exists or not."""
    return f"add table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n"


def cleanup_script(present_jumps: set[str], chains: set[str]) -> str | None:
    """Input removing the jumps and both chains; None when nothing of ours is there."""
    lines = [f"-D {parent} {rule}" for parent, rule in JUMPS if parent in present_jumps]
    for chain in (REDIRECT_CHAIN, OUTPUT_CHAIN):
        if chain in chains:
            lines += [f"-F {chain}", f"-X {chain}"]
    return "\n".join(["*nat", *lines, "COMMIT", ""]) if lines else None


def _nft_set(items: Sequence[PortSpec]) -> str:
    """A port set as nft prints it back: one item bare (``80``, ``80-90``), several in braces
    (so CHECK can find the rule text in ``nft list``)."""
    parts = [p.nft() for p in items]
    return parts[0] if len(parts) == 1 else "{ " + ", ".join(parts) + " }"


def nft_script(options: RedirectOptions, ipv6: bool = True) -> str:
    """The nftables mode: table ``inet podnet_redirect`` replaced in one transaction (IPv4 and
    IPv6 together; without ``ipv6`` IPv6 packets pass untouched, as linkerd without --ipv6);
    the same decisions as the iptables chains, with linkerd's comments."""
    t = f"inet {NFT_TABLE}"
    guard = [] if ipv6 else ['meta nfproto ipv6 return comment "proxy-init/ipv4-only"']
    inbound = list(guard)
    if options.inbound_ports_to_ignore:
        ignored_in = _nft_set(options.inbound_ports_to_ignore)
        inbound.append(f"tcp dport {ignored_in} return comment \"proxy-init/ignore-port\"")
    for net in options.subnets_to_ignore:
        ip, subnet = FAMILIES[net.version].nft, text(net)
        inbound.append(f"{ip} saddr {subnet} return comment \"proxy-init/ignore-subnet-{subnet}\"")
    to = options.incoming_proxy_port
    if options.ports_to_redirect:
        listed = _nft_set(options.ports_to_redirect)
        inbound.append(f"tcp dport {listed} redirect to :{to} "
                       "comment \"proxy-init/redirect-listed-ports\"")  # fmt: skip
    else:
        inbound.append(f"meta l4proto tcp redirect to :{to} "
                       "comment \"proxy-init/redirect-all-incoming-to-proxy-port\"")  # fmt: skip
    outbound = list(guard)
    if options.proxy_uid > 0:
        outbound.append(f"meta skuid {options.proxy_uid} return "
                        "comment \"proxy-init/ignore-proxy-user-id\"")  # fmt: skip
    if options.proxy_gid > 0:
        outbound.append(f"meta skgid {options.proxy_gid} return "
                        "comment \"proxy-init/ignore-proxy-group-id\"")  # fmt: skip
    outbound.append('oifname "lo" return comment "proxy-init/ignore-loopback"')
    if options.outbound_ports_to_ignore:
        ignored_out = _nft_set(options.outbound_ports_to_ignore)
        outbound.append(f"tcp dport {ignored_out} return comment \"proxy-init/ignore-port\"")
    outbound.append(f"meta l4proto tcp redirect to :{options.outgoing_proxy_port} "
                    "comment \"proxy-init/redirect-all-outgoing-to-proxy-port\"")  # fmt: skip

    def chain(name: str, hook: str, rules: list[str]) -> str:
        body = "".join(f"    {r}\n" for r in rules)
        return (f"  chain {name} {{\n    type nat hook {hook} priority -100; policy accept;\n"
                f"{body}  }}\n")  # fmt: skip

    return "".join([
        f"add table {t}\n", f"delete table {t}\n", f"table {t} {{\n",
        chain("prerouting", "prerouting", inbound), chain("output", "output", outbound), "}\n",
    ])  # fmt: skip
