"""A Kubernetes Node as the agent uses it, parsed once where it enters (the API's JSON object,
``core/v1`` ``Node``): its name, ``spec.podCIDRs`` and the InternalIP of each family.

What an object holds is another party's input: every value is checked into a type here
(:mod:`podnet.checked`) or the Node is refused with :class:`BadNode`, naming the field. Source:
the Kubernetes API reference, ``Node`` v1 (``spec.podCIDR``, ``spec.podCIDRs`` — "at most one
value for each of IPv4 and IPv6" — and ``status.addresses`` of type ``InternalIP``).
"""

from __future__ import annotations

from podnet import checked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from podnet.checked import IP, Net

__all__ = ["BadNode", "Node", "parse_node"]

#: A Node's name is a DNS subdomain (RFC 1123): at most 253 characters of ``a-z0-9.-``,
#: starting and ending with an alphanumeric (Kubernetes "Object Names and IDs").
MAX_NAME = 253
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


class BadNode(ValueError):
    """A Node object the agent cannot use; the message names the field and the Node."""


class Node:
    """``name``; ``pod_cidrs``: family (4, 6) → network, from ``spec.podCIDRs`` (else
    ``spec.podCIDR``), empty while the node has none; ``internal_ips``: family → the first
    ``InternalIP`` of that family in ``status.addresses``. Compared by value."""

    __slots__ = ("name", "pod_cidrs", "internal_ips")

    def __init__(self, name: str, pod_cidrs: Mapping[int, Net],
                 internal_ips: Mapping[int, IP]) -> None:  # fmt: skip
        self.name = name
        self.pod_cidrs: dict[int, Net] = dict(sorted(pod_cidrs.items()))
        self.internal_ips: dict[int, IP] = dict(sorted(internal_ips.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and (self.name, self.pod_cidrs, self.internal_ips) == (
            other.name, other.pod_cidrs, other.internal_ips)  # fmt: skip

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.pod_cidrs.items()), tuple(self.internal_ips.items())))

    def __repr__(self) -> str:
        cidrs = ",".join(str(n) for n in self.pod_cidrs.values())
        ips = ",".join(str(a) for a in self.internal_ips.values())
        return f"Node({self.name}, podCIDRs={cidrs or '-'}, InternalIP={ips or '-'})"


def node_name(value: object) -> str:
    """A Node's ``metadata.name`` checked (:data:`MAX_NAME`, RFC 1123 subdomain);
    :class:`BadNode` otherwise."""
    if (not isinstance(value, str) or not 0 < len(value) <= MAX_NAME
            or not _NAME_CHARS.issuperset(value) or not value[0].isalnum()
            or not value[-1].isalnum()):  # fmt: skip
        raise BadNode(f"metadata.name: not a Node name (RFC 1123 subdomain): "
                      f"{checked.show(value)}")  # fmt: skip
    return value


def _short(err: Exception) -> str:
    """An error's text on one line, at most 200 characters (a value it repeats may be long)."""
    text = checked.one_line(str(err))
    return text if len(text) <= 200 else text[:199] + "…"


def parse_node(obj: Mapping[str, object]) -> Node:
    """The Node of API object ``obj`` (a dict as the API's JSON gives it). :class:`BadNode`
    naming the field when a podCIDR is not a CIDR with no host bits, two podCIDRs are of one
    family, or an InternalIP is not an IP address (a zone or scope is refused). Addresses of
    other types (``ExternalIP``, ``Hostname``) are not read."""
    if not isinstance(obj, dict):
        raise BadNode(f"a Node must be an object, not {checked.show(obj)}")
    meta = obj.get("metadata")
    name = node_name(meta.get("name") if isinstance(meta, dict) else None)
    spec = obj.get("spec")
    status = obj.get("status")
    spec = {} if spec is None else spec  # null: a Node just registered
    status = {} if status is None else status
    if not isinstance(spec, dict) or not isinstance(status, dict):
        raise BadNode(f"Node {name}: spec and status must be objects")
    raw = spec.get("podCIDRs")
    if raw is None:
        raw = [] if spec.get("podCIDR") in (None, "") else [spec["podCIDR"]]
    if not isinstance(raw, list):
        raise BadNode(f"Node {name}: spec.podCIDRs must be a list")
    cidrs: dict[int, Net] = {}
    for i, item in enumerate(raw):
        try:
            net = checked.network(item, strict=True)
        except checked.BadValue as err:
            raise BadNode(f"Node {name}: spec.podCIDRs[{i}]: {_short(err)}") from None
        if net.version in cidrs:
            raise BadNode(f"Node {name}: spec.podCIDRs[{i}]: a second IPv{net.version} podCIDR "
                          f"({net}; {cidrs[net.version]} is first)")  # fmt: skip
        cidrs[net.version] = net
    addresses = status.get("addresses")
    addresses = [] if addresses is None else addresses
    if not isinstance(addresses, list):
        raise BadNode(f"Node {name}: status.addresses must be a list")
    ips: dict[int, IP] = {}
    for i, entry in enumerate(addresses):
        if not isinstance(entry, dict) or entry.get("type") != "InternalIP":
            continue
        try:
            addr = checked.ip(entry.get("address"))
        except checked.BadValue as err:
            raise BadNode(f"Node {name}: status.addresses[{i}] (InternalIP): "
                          f"{_short(err)}") from None  # fmt: skip
        ips.setdefault(addr.version, addr)
    return Node(name, cidrs, ips)
