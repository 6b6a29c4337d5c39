"""The reference ``portmap`` plugin's iptables layout, rule for rule, as data
(containernetworking/plugins ``plugins/meta/portmap``;
docs/sources.md#the-reference-portmap-plugin). Pure functions; :mod:`podnet.firewall.iptables`
applies the text with ``iptables-restore --noflush``, one transaction per table and family.

nat table::

    PREROUTING, OUTPUT    -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
    CNI-HOSTPORT-DNAT     [conditions] -p P -m comment --comment 'dnat name: "N" id: "ID"'
                          -m multiport --dports p1,p2,… -j CNI-DN-<hash>     (≤ 15 ports a rule)
    CNI-DN-<hash>         -s <container net> [-d hostIP] -p P --dport h -j CNI-HOSTPORT-SETMARK
                          -s 127.0.0.1 [-d hostIP] -p P --dport h -j CNI-HOSTPORT-SETMARK  (IPv4)
                          [-d hostIP] -p P --dport h -j DNAT --to-destination C:c
    CNI-HOSTPORT-SETMARK  -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark M/M
    POSTROUTING (first)   -m comment --comment "CNI portfwd requiring masquerade"
                          -j CNI-HOSTPORT-MASQ
    CNI-HOSTPORT-MASQ     -m mark --mark M/M -j MASQUERADE

Saved tables are read with :class:`podnet.firewall.iptables.Saved`.

``<hash>``: the first 21 hex digits of sha512(network name + container ID) (chain names are cut
to 28 characters). ``snat: false`` drops the SETMARK rules and the SETMARK/MASQ chains;
``externalSetMarkChain`` jumps there instead and creates neither chain; ``masqAll`` marks
hairpin traffic from any source (``-s 0.0.0.0/0``, current upstream; Debian's 1.1.1 predates the
option and ignores it) and drops the localhost rule. Rules are
written in the order ``iptables-save`` prints them, so the generated text is what the kernel
shows, and the top-level rules can be found in a save by plain text.
"""

from __future__ import annotations

from podnet.firewall.iptables import Saved as SavedNat
from podnet.firewall.iptables import quote, tokens

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.checked import IP
    from podnet.values import ContainerNet, PortMappingArg

TOP_DNAT = "CNI-HOSTPORT-DNAT"
SETMARK = "CNI-HOSTPORT-SETMARK"
MASQ = "CNI-HOSTPORT-MASQ"
OLD_SNAT = "CNI-HOSTPORT-SNAT"
MAX_CHAIN = 28
MAX_COMMENT = 256
MULTIPORT_MAX = 15
ENTRY_MATCH = "-m addrtype --dst-type LOCAL"
POSTROUTING_COMMENT = "CNI portfwd requiring masquerade"
SETMARK_COMMENT = "CNI portfwd masquerade mark"


class PortmapOptions:
    """The reference portmap's options (its README.md): ``snat`` (default true), ``mark_masq_bit``
    (0-31, default 13), ``external_set_mark_chain`` (None or a chain name),
    ``conditions_v4``/``conditions_v6`` (iptables match arguments), ``masq_all`` (default false)."""

    __slots__ = ("snat", "mark_masq_bit", "external_set_mark_chain", "conditions_v4",
                 "conditions_v6", "masq_all")  # fmt: skip

    def __init__(
        self,
        *,
        snat: bool = True,
        mark_masq_bit: int = 13,
        external_set_mark_chain: str | None = None,
        conditions_v4: Sequence[str] = (),
        conditions_v6: Sequence[str] = (),
        masq_all: bool = False,
    ) -> None:
        self.snat = snat
        self.mark_masq_bit = mark_masq_bit
        self.external_set_mark_chain = external_set_mark_chain
        self.conditions_v4 = list(conditions_v4)
        self.conditions_v6 = list(conditions_v6)
        self.masq_all = masq_all

    @property
    def mark(self) -> str:
        """``0x2000/0x2000`` for bit 13."""
        value = 1 << self.mark_masq_bit
        return f"{value:#x}/{value:#x}"

    @property
    def own_masq_chains(self) -> bool:
        """Whether podnet creates CNI-HOSTPORT-SETMARK/-MASQ (snat without an external chain)."""
        return self.snat and self.external_set_mark_chain is None


def dnat_chain_name(network: str, container_id: str) -> str:
    """``CNI-DN-`` + sha512(network + containerID), 28 characters (CP's FormatChainName)."""
    from hashlib import sha512

    digest: str = sha512((network + container_id).encode()).hexdigest()
    return ("CNI-DN-" + digest)[:MAX_CHAIN]


def entry_comment(network: str, container_id: str) -> str:
    """The entry rules' comment as the kernel keeps it: upstream cuts a comment longer than 256
    characters to 253 + ``...``, and xt_comment stores at most 255."""
    text = f'dnat name: "{network}" id: "{container_id}"'
    if len(text) > MAX_COMMENT:
        text = text[: MAX_COMMENT - 3] + "..."
    return text[: MAX_COMMENT - 1]


def setmark_rule(options: PortmapOptions) -> str:
    return f"-m comment --comment {quote(SETMARK_COMMENT)} -j MARK --set-xmark {options.mark}"


def masq_rule(options: PortmapOptions) -> str:
    return f"-m mark --mark {options.mark} -j MASQUERADE"


def postrouting_rule() -> str:
    return f"-m comment --comment {quote(POSTROUTING_COMMENT)} -j {MASQ}"


def toplevel_rule() -> str:
    return f"{ENTRY_MATCH} -j {TOP_DNAT}"


def _split_standard(conditions: Sequence[str]) -> tuple[list[str], list[str]]:
    """Conditions' standard fields (``[!] -s/-d/-i/-o X``) go first in a saved rule."""
    standard: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(conditions):
        neg = conditions[i] == "!"
        j = i + 1 if neg else i
        if j + 1 < len(conditions) and conditions[j] in ("-s", "-d", "-i", "-o"):
            standard += conditions[i : j + 2]
            i = j + 2
        else:
            rest.append(conditions[i])
            i += 1
    return standard, rest


def entry_rules(
    options: PortmapOptions, family: int, network: str, container_id: str,
    mappings: Sequence[PortMappingArg],
) -> list[str]:  # fmt: skip
    """The CNI-HOSTPORT-DNAT rules jumping to this container's chain: per protocol (sorted),
    multiport lists of at most 15 host ports, conditions of ``family`` inserted."""
    chain = dnat_chain_name(network, container_id)
    comment = quote(entry_comment(network, container_id))
    conditions = options.conditions_v6 if family == 6 else options.conditions_v4
    standard, extra = _split_standard(conditions)
    by_proto: dict[str, list[int]] = {}
    for m in mappings:
        by_proto.setdefault(m.protocol, []).append(m.host_port)
    out = []
    for proto in sorted(by_proto):
        ports = by_proto[proto]
        for start in range(0, len(ports), MULTIPORT_MAX):
            chunk = ",".join(str(p) for p in ports[start : start + MULTIPORT_MAX])
            words = [*standard, "-p", proto, "-m", "comment", "--comment", comment,
                     "-m", "multiport", "--dports", chunk, *extra, "-j", chain]  # fmt: skip
            out.append(" ".join(words))
    return out


def _host_prefix(ip: IP) -> str:
    from podnet.checked import FAMILIES, text

    return f"{text(ip)}/{FAMILIES[ip.version].host_prefix}"


def dnat_rules(
    options: PortmapOptions, container: ContainerNet, mappings: Sequence[PortMappingArg]
) -> list[str]:
    """The rules of the container's CNI-DN chain: per mapping the hairpin and localhost SETMARK
    rules (with snat) then the DNAT; mappings whose hostIP is of the other family are skipped."""
    set_mark = options.external_set_mark_chain or SETMARK
    v6 = container.family == 6
    out = []
    for m in mappings:
        dst = ""
        if m.host_ip is not None:
            if m.host_ip.version != container.family:
                continue
            if not m.host_ip.is_unspecified:  # unspecified: no -d (as upstream)
                dst = f"-d {_host_prefix(m.host_ip)} "
        match = f"{dst}-p {m.protocol} -m {m.protocol} --dport {m.host_port}"
        if options.snat:
            # masqAll marks hairpin traffic from any source: -s 0.0.0.0/0 (::/0), which
            # iptables-save prints as no -s at all.
            source = "" if options.masq_all else f"-s {container.network} "
            out.append(f"{source}{match} -j {set_mark}")
            if not v6 and not options.masq_all:
                out.append(f"-s 127.0.0.1/32 {match} -j {set_mark}")
        host = f"[{container.ip}]" if v6 else container.ip
        target = f"{host}:{m.container_port}"
        out.append(f"{match} -j DNAT --to-destination {target}")
    return out


def _ensure_chain(saved: SavedNat, chain: str, out: list[str]) -> None:
    if chain not in saved.chains:
        out.append(f":{chain} - [0:0]")


def setup_script(
    saved: SavedNat, options: PortmapOptions, network: str, container_id: str,
    container: ContainerNet, mappings: Sequence[PortMappingArg],
) -> str:  # fmt: skip
    """``iptables-restore --noflush`` input that makes the table hold this container's rules:
    shared chains and jumps created only when missing (declaring an existing chain would flush
    it), the container's chain declared (so flushed: a repeated ADD is idempotent) and its old
    entry rules deleted first."""
    chain = dnat_chain_name(network, container_id)
    head: list[str] = ["*nat"]
    body: list[str] = []
    if options.own_masq_chains:
        _ensure_chain(saved, SETMARK, head)
        _ensure_chain(saved, MASQ, head)
        if not saved.has_rule(SETMARK, setmark_rule(options)):
            body.append(f"-A {SETMARK} {setmark_rule(options)}")
        if not saved.has_rule(MASQ, masq_rule(options)):
            body.append(f"-A {MASQ} {masq_rule(options)}")
        if not saved.has_rule("POSTROUTING", postrouting_rule()):
            body.append(f"-I POSTROUTING 1 {postrouting_rule()}")
    _ensure_chain(saved, TOP_DNAT, head)
    for parent in ("PREROUTING", "OUTPUT"):
        if not saved.has_rule(parent, toplevel_rule()):
            body.append(f"-A {parent} {toplevel_rule()}")
    head.append(f":{chain} - [0:0]")
    for rule in saved.rules.get(TOP_DNAT, []):
        if tokens(rule)[-2:] == ["-j", chain]:
            body.append(f"-D {TOP_DNAT} {rule}")
    body += [f"-A {chain} {r}" for r in dnat_rules(options, container, mappings)]
    body += [
        f"-A {TOP_DNAT} {r}"
        for r in entry_rules(options, container.family, network, container_id, mappings)
    ]
    return "\n".join([*head, *body, "COMMIT", ""])


def teardown_script(saved: SavedNat, network: str, container_id: str) -> str | None:
    """Input removing this container's chain and the rules jumping to it (also the old
    ``CNI-SN-`` chain of earlier plugin versions); None when there is nothing to remove."""
    lines: list[str] = []
    for prefix, parent in (("CNI-DN-", TOP_DNAT), ("CNI-SN-", OLD_SNAT)):
        chain = (prefix + dnat_chain_name(network, container_id)[7:])[:MAX_CHAIN]
        for rule in saved.rules.get(parent, []):
            if tokens(rule)[-2:] == ["-j", chain]:
                lines.append(f"-D {parent} {rule}")
        if chain in saved.chains:
            lines += [f"-F {chain}", f"-X {chain}"]
    if not lines:
        return None
    return "\n".join(["*nat", *lines, "COMMIT", ""])


def missing_rules(
    saved: SavedNat, options: PortmapOptions, network: str, container_id: str,
    container: ContainerNet, mappings: Sequence[PortMappingArg],
) -> list[str]:  # fmt: skip
    """Every expected rule absent from ``saved``, as ``"<chain> <rule>"`` (empty: all there)."""
    chain = dnat_chain_name(network, container_id)
    wanted: list[tuple[str, str]] = [("PREROUTING", toplevel_rule()), ("OUTPUT", toplevel_rule())]
    if options.own_masq_chains:
        wanted += [(SETMARK, setmark_rule(options)), (MASQ, masq_rule(options)),
                   ("POSTROUTING", postrouting_rule())]  # fmt: skip
    wanted += [(chain, r) for r in dnat_rules(options, container, mappings)]
    wanted += [
        (TOP_DNAT, r)
        for r in entry_rules(options, container.family, network, container_id, mappings)
    ]
    return [f"{c} {r}" for c, r in wanted if not saved.has_rule(c, r)]
