"""Values checked where they enter podnet: IP addresses and prefixes as :mod:`ipaddress` values,
and names and paths that the tools' syntax can carry.

podnet renders scripts for tools that run as root — ``ip -batch``, ``nft -f``,
``iptables-restore``, ``sh -c`` — from values that come from people who are not the node's
administrator: NetConfs, ``runtimeConfig``, CNI_ARGS, pod annotations, CLI arguments, API
bodies. Every such value is parsed once, at the boundary where it enters, by a function here,
and whatever a tool's syntax cannot carry is refused there instead of being escaped:

- :func:`ip`, :func:`network`, :func:`interface` parse with :mod:`ipaddress` and refuse a scoped
  IPv6 address (``fd00::1%eth0``): :mod:`ipaddress` accepts any text after ``%`` — newlines,
  quotes, ``include "…"`` — and prints it back verbatim;
- :func:`name` checks an interface name against an allow-list, :func:`path` an absolute path;
- :func:`family` gives an address's family from the typed value (never from the text), and
  :data:`FAMILIES` what goes with it (wildcard, host prefix, default route, nft keyword, column).

Renderers add a last check of their own (:func:`text`, :func:`batch_line`): a value that reached
them without passing a boundary is an internal error, never a command.

Refusals raise :class:`BadValue` (a ValueError) whose text is the reason without the key; each
boundary wraps it in its own error (CNI code 7 naming the key, HTTP 400, a CLI error). Hostile
text is shown with :func:`show` (``repr``, cut to 64 characters), so an error stays one line.

:mod:`ipaddress` is imported only by the parsing functions: DEL renders the rows it reads with
:func:`text` and does not pay for the import (~1 ms of every plugin call, measured).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ipaddress import (
        IPv4Address,
        IPv4Interface,
        IPv4Network,
        IPv6Address,
        IPv6Interface,
        IPv6Network,
    )

    IP = IPv4Address | IPv6Address
    Net = IPv4Network | IPv6Network
    Iface = IPv4Interface | IPv6Interface

__all__ = ["FAMILIES", "PATH_CHARS", "WORD_CHARS", "BadValue", "Family", "ScopedAddress",
           "batch_line", "family", "interface", "ip", "mac", "name", "network", "one_line", "path",
           "pod_range_problem", "printable", "show", "text"]  # fmt: skip


class BadValue(ValueError):
    """A value refused at a boundary; ``str(err)`` is the reason, without the key."""


def show(value: object, limit: int = 64) -> str:
    """``repr(value)`` cut to ``limit`` characters: hostile text in an error stays one line."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


#: Longest message kept: a refused value is quoted in it, and a value may be megabytes long.
MAX_MESSAGE = 1000


def _inert(code: int) -> bool:
    """Whether a character is safe to print as it is: not a C0 or C1 control (line breaks,
    escapes a terminal obeys, NEL U+0085), DEL, a line or paragraph separator (U+2028/9), a
    bidirectional override (U+202A-E, U+2066-9) or a lone surrogate."""
    return not (code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029)
                or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069
                or 0xD800 <= code <= 0xDFFF)  # fmt: skip


def printable(text: str) -> str:
    """``text`` with every character :func:`_inert` refuses written as an escape (``\\n``,
    ``\\x1b``, ``\\u2028``, ``\\udcff``): for values people stored (descriptions,
    ``user.*`` keys) shown on a terminal, where an escape sequence would be obeyed."""
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if _inert(code):
            out.append(ch)
        else:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or
                       (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
    return "".join(out)


def one_line(text: str) -> str:
    """``text`` on one line (:func:`printable`), cut to :data:`MAX_MESSAGE` characters. LXD's
    messages quote the refused value as given; a hostile value must not make the CLI's
    ``Error:`` line or the API's ``error`` field more than one line, nor drive a terminal."""
    line = printable(text)
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


class ScopedAddress(BadValue):
    """A scoped IPv6 address (``fd00::1%eth0``): refused everywhere."""


def _scoped(value: str) -> BadValue:
    return ScopedAddress(f"{show(value)} is a scoped IPv6 address: a %zone is not accepted")


def _text_of(value: object) -> str:
    if not isinstance(value, str):
        raise BadValue(f"must be a string, got {show(value)}")
    if "%" in value:
        raise _scoped(value)
    return value


def ip(value: object) -> IP:
    """An IPv4 or IPv6 address (``"10.0.0.1"``, ``"fd00::1"``) as an :mod:`ipaddress` value.

    BadValue for anything else: not a string, a scoped IPv6 address, a prefix, surrounding
    whitespace.
    """
    import ipaddress

    text = _text_of(value)
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise BadValue(f"{show(text)} is not an IP address") from None


def network(value: object, *, strict: bool = True) -> Net:
    """A prefix in CIDR form (``"10.244.0.0/16"``); a bare address is a /32 (/128). With
    ``strict``, host bits must be zero. BadValue otherwise (scoped addresses included)."""
    import ipaddress

    text = _text_of(value)
    try:
        return ipaddress.ip_network(text, strict=strict)
    except ValueError as err:
        raise BadValue(f"{show(text)} is not a valid CIDR: {err}") from None


def interface(value: object, *, prefix: bool = True) -> Iface:
    """An address with its prefix (``"10.0.0.1/24"``); with ``prefix`` the ``/len`` is required.
    BadValue otherwise (scoped addresses included)."""
    import ipaddress

    text = _text_of(value)
    if prefix and "/" not in text:
        raise BadValue(f"{show(text)} is not an address in CIDR form")
    try:
        return ipaddress.ip_interface(text)
    except ValueError:
        raise BadValue(f"{show(text)} is not an address in CIDR form") from None


#: The IPv6 prefixes a pod range may lie in: unique local (fc00::/7), the documentation ranges
#: (2001:db8::/32, 3fff::/20) and local-use NAT64 (64:ff9b:1::/48). An allow-list, since
#: ``is_global`` of Python 3.11 calls all of 2001::/23 non-global (Teredo's 2001::/32 too) and
#: passes 6to4 (2002::/16) and IPv4-mapped addresses of public IPv4 ones.
_V6_POD_PREFIXES = ("fc00::/7", "2001:db8::/32", "3fff::/20", "64:ff9b:1::/48")


def pod_range_problem(net: Net) -> str | None:
    """Why ``net`` cannot be a pod range, or None. A range is node-wide: every pod's egress
    masquerade takes the destinations inside any range as internal, so a public range — up to
    ``0.0.0.0/1`` — would turn off the masquerade of every pod towards it. Pod ranges are
    therefore non-global IPv4 (RFC 1918, 100.64.0.0/10, the documentation ranges …, never the
    limited broadcast address) or IPv6 inside :data:`_V6_POD_PREFIXES`, and never loopback,
    link-local, multicast or unspecified."""
    from ipaddress import ip_network

    public = net.is_global
    if net.version == 6:
        public = not any(net.subnet_of(ip_network(p)) for p in _V6_POD_PREFIXES)  # type: ignore[arg-type]
    for what, flag in (("a loopback", net.is_loopback), ("a link-local", net.is_link_local),
                       ("a multicast", net.is_multicast), ("an unspecified", net.is_unspecified),
                       ("a public", public)):  # fmt: skip
        if flag:
            return (f"{net} is {what} range: pod ranges are private (RFC 1918, 100.64.0.0/10, "
                    "fc00::/7, …), since every range is internal to every pod's egress NAT")
    if net.version == 4 and net.overlaps(ip_network("255.255.255.255/32")):
        return f"{net} holds the limited broadcast address 255.255.255.255: not a pod range"
    return None


class Family:
    """What goes with an address family: ``version`` (4|6), ``wildcard`` (``0.0.0.0``/``::``),
    ``host_prefix`` (32/128), ``default_route`` (``0.0.0.0/0``/``::/0``), ``nft`` (the nft
    keyword, ``ip``/``ip6``) and ``column`` (``ip_address_v4``/``ip_address_v6`` of cni-kindnet's
    ``pods``)."""

    __slots__ = ("version", "wildcard", "host_prefix", "default_route", "nft", "column")

    def __init__(self, version: int, wildcard: str, host_prefix: int, default_route: str,
                 nft: str) -> None:  # fmt: skip
        self.version = version
        self.wildcard = wildcard
        self.host_prefix = host_prefix
        self.default_route = default_route
        self.nft = nft
        self.column = f"ip_address_v{version}"

    def __repr__(self) -> str:
        return f"Family({self.version})"


FAMILIES = {4: Family(4, "0.0.0.0", 32, "0.0.0.0/0", "ip"),
            6: Family(6, "::", 128, "::/0", "ip6")}  # fmt: skip


def family(value: IP | Net | Iface) -> int:
    """The family (4 or 6) of a typed address, prefix or interface. Text is never asked: it is
    parsed first (:func:`ip`, :func:`network`, :func:`interface`), or its family is known from
    where it was kept (the ``ip_address_v4``/``ip_address_v6`` column of a pod)."""
    return int(value.version)


#: Characters of an address or prefix as podnet renders it (canonical, lower-case hex).
_ADDRESS_CHARS = frozenset("0123456789abcdefABCDEF.:/")


def text(value: IP | Net | Iface | str) -> str:
    """An address or prefix as a tool script takes it: ``str(value)``, refused (ValueError)
    unless it holds only hex digits, ``.``, ``:`` and ``/`` — no zone, no whitespace, nothing a
    tool could read as syntax. Renderers call this on every address they write; a value that
    fails it never passed a boundary (an internal error, or a database row not podnet's)."""
    rendered = str(value)
    if not rendered or len(rendered) > 49 or not _ADDRESS_CHARS.issuperset(rendered):
        raise ValueError(f"refusing to render {show(rendered)} as an address")
    return rendered


def canonical(value: str) -> bool:
    """Whether ``value`` is an address exactly as :func:`text` renders one (``"10.0.0.1"``,
    ``"fd00::1"``; not ``"010.0.0.1"``, ``"FD00::1"``, a prefix, a zone or whitespace): how a
    key another writer may have made is recognised as podnet's. IPv4 goes through the C parser
    first, whose ``inet_pton`` takes only four decimal octets without leading zeros, so its round
    trip gives ``value`` back exactly when it is canonical (a registry of 1,000 forwards spent
    about 5 ms on :mod:`ipaddress` alone); anything else through :func:`ip`."""
    import socket

    try:
        return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, value)) == value
    except (OSError, ValueError, TypeError):
        pass  # IPv6, or not an address
    try:
        return text(ip(value)) == value
    except ValueError:
        return False


#: Characters of an interface name podnet gives to ``ip``: the kernel takes more, but nothing
#: else is needed, and each of these means nothing to ``ip -batch``, ``nft`` or ``sh``.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
IFNAMSIZ = 15


def name(value: object) -> str:
    """An interface name podnet may write into a tool script: 1-15 of ``[A-Za-z0-9_.-]``, not
    ``.`` or ``..``, not starting with ``-``. BadValue otherwise."""
    if not isinstance(value, str):
        raise BadValue(f"must be a string, got {show(value)}")
    if not 0 < len(value) <= IFNAMSIZ or value in (".", ".."):
        raise BadValue(f"{show(value)} is not 1-15 characters (or is '.' / '..')")
    if not _NAME_CHARS.issuperset(value):
        raise BadValue(f"{show(value)} may only contain letters, digits, '_', '.' and '-'")
    if value.startswith("-"):  # a tool would read it as an option (ovs-vsctl, ethtool, ip)
        raise BadValue(f"{show(value)} starts with '-'")
    return value


#: Characters of a path podnet accepts (dataDir, logFile, CNI_NETNS): ASCII letters, digits
#: and ``_ . - / + @ , = ~`` — none means anything to ``ip -batch``, nft or ``sh`` inside
#: double quotes, and no ``:``, which separates paths in lists (``PODNET_DATA_DIRS``).
PATH_CHARS = _NAME_CHARS | frozenset("/+@,=~")
#: Characters of a word podnet quotes for a tool (a checked path or name, or a mark such as
#: ``podnet:<path>``).
WORD_CHARS = PATH_CHARS | frozenset(":")
#: Longest path accepted: the data dir is recorded in table ``inet podnet``'s comment, which
#: nft limits to 128 characters.
PATH_MAX = 110


def path(value: object) -> str:
    """An absolute, normal path (no ``.``/``..`` component, no ``//``, no trailing ``/``) of at
    most :data:`PATH_MAX` characters from ``[A-Za-z0-9_.-/+@,=~]``: no whitespace, quote,
    ``#``, ``;``, brace, ``%``, backslash, control character, NUL or non-ASCII. BadValue
    otherwise."""
    if not isinstance(value, str):
        raise BadValue(f"must be a string, got {show(value)}")
    if not value.startswith("/"):
        raise BadValue(f"{show(value)} is not an absolute path")
    if len(value) > PATH_MAX:
        raise BadValue(f"{show(value)} is longer than {PATH_MAX} characters")
    if not PATH_CHARS.issuperset(value):
        raise BadValue(f"{show(value)} may only contain letters, digits and _ . - / + @ , = ~")
    parts = value.split("/")[1:]
    if value != "/" and any(p in ("", ".", "..") for p in parts):
        raise BadValue(f"{show(value)} is not a normal path (no '.', '..', '//' or trailing '/')")
    return value


#: What ``ip -batch`` reads as more than one argument's worth of a word: line breaks end a
#: command, ``#`` starts a comment even inside quotes, NUL ends the line early.
_BATCH_FORBIDDEN = frozenset("\n\r#\0")


def batch_line(line: str) -> str:
    """One ``ip -batch`` command line, refused (ValueError) when it holds a line break, ``#`` or
    NUL — a last check: the words in it passed :func:`name`, :func:`path` or :func:`text`."""
    if _BATCH_FORBIDDEN.intersection(line):
        raise ValueError(f"refusing to give ip the batch line {show(line)}")
    return line


_HEX = frozenset("0123456789abcdef")


def mac(value: object) -> str:
    """A unicast Ethernet address as six colon-separated pairs of hex digits, returned in
    lower case (``"00:16:3e:12:ab:cd"``): what a link's ``address`` and an OVN port's
    ``addresses`` carry (IEEE 802 section 8.2: bit 0 of the first octet set means a group
    address). BadValue for anything else: another notation, a group (multicast or broadcast)
    address, all zeros, surrounding whitespace."""
    if not isinstance(value, str):
        raise BadValue(f"must be a string, got {show(value)}")
    text = value.lower()
    pairs = text.split(":")
    if len(pairs) != 6 or not all(len(p) == 2 and _HEX.issuperset(p) for p in pairs):
        raise BadValue(f"{show(value)} is not a MAC address (six hex pairs split by ':')")
    if int(pairs[0], 16) & 1:
        raise BadValue(f"{show(value)} is a group (multicast or broadcast) MAC address")
    if text == "00:00:00:00:00:00":
        raise BadValue(f"{show(value)} is the all-zero MAC address")
    return text
