"""The server config: LXD's ``config`` of ``GET|PUT|PATCH /1.0`` and ``lxc config
set|get|unset|show``, for the keys podnet implements (LXD's server config
``network.ovn.*``, lxd/cluster/config/config.go).

- ``network.ovn.northbound_connection``: where OVN's northbound database is, as OVSDB names a
  connection — ``unix:<absolute path>``, ``tcp:<IP>:<port>`` or ``ssl:<IP>:<port>`` (an IPv6
  address in brackets), several separated by commas (a clustered NB). Default
  :data:`DEFAULT_NB` (LXD's);
- ``network.ovn.ca_cert``, ``network.ovn.client_cert``, ``network.ovn.client_key``: PEM text,
  used with ``ssl:`` connections (all three are then required);
- ``network.ovn.integration_bridge``: the OVS bridge pods' ports join (default ``br-int``).

Values are parsed here, once, where they enter (the API, the CLI, the store): a connection
becomes :class:`Remote` values, never text handed to a tool unchecked. Messages follow LXD's
``cannot set 'KEY' to 'VALUE': REASON``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from podnet import checked
from podnet.networks.errors import NetworkError

NB_CONNECTION = "network.ovn.northbound_connection"
CA_CERT = "network.ovn.ca_cert"
CLIENT_CERT = "network.ovn.client_cert"
CLIENT_KEY = "network.ovn.client_key"
INTEGRATION_BRIDGE = "network.ovn.integration_bridge"

#: LXD's default northbound connection (the ovn-central package's socket).
DEFAULT_NB = "unix:/var/run/ovn/ovnnb_db.sock"
DEFAULT_BRIDGE = "br-int"
#: Defaults of keys that are unset (LXD shows only what was set).
DEFAULTS = {NB_CONNECTION: DEFAULT_NB, INTEGRATION_BRIDGE: DEFAULT_BRIDGE}
#: Bytes: the longest PEM value accepted (a certificate chain fits many times over).
MAX_PEM = 64 * 1024
#: The most remotes a connection may name (a clustered NB has 3 or 5 members); each one is an
#: argument of every ``ovsdb-client`` call and a connection it may try.
MAX_REMOTES = 8


@dataclass(frozen=True, slots=True)
class Remote:
    """One OVSDB connection: ``kind`` ``unix`` (``path``) or ``tcp``/``ssl`` (``address``,
    ``port``). :meth:`text` renders the form ``ovsdb-client`` and ``ovn-nbctl`` take."""

    kind: str
    path: str = ""
    address: checked.IP | None = None
    port: int = 0

    def text(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.path}"
        assert self.address is not None
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{self.kind}:{host}:{self.port}"


_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<v4>[0-9.]+)):(?P<port>[0-9]{1,5})$")


def remotes(value: str) -> list[Remote]:
    """``network.ovn.northbound_connection`` parsed: one :class:`Remote` per comma-separated
    item. ValueError with the reason for anything else (host names included: the node must not
    depend on a resolver to reach OVN)."""
    out = []
    for item in value.split(","):
        kind, sep, rest = item.strip().partition(":")
        if not sep or kind not in ("unix", "tcp", "ssl"):
            raise ValueError(f"{item.strip()!r} is not unix:PATH, tcp:IP:PORT or ssl:IP:PORT")
        if kind == "unix":
            try:
                out.append(Remote("unix", path=checked.path(rest)))
            except checked.BadValue as err:
                raise ValueError(f"bad socket path {rest!r}: {err}") from None
            continue
        m = _HOST_PORT.match(rest)
        if m is None:
            raise ValueError(
                f"{item.strip()!r}: the address must be an IP address and a port (IPv6 in brackets)"
            )
        text = m.group("v6") or m.group("v4")
        try:
            address = checked.ip(text)
        except checked.BadValue:
            raise ValueError(f"{text!r} is not an IP address") from None
        if bool(m.group("v6")) != (address.version == 6):
            raise ValueError(f"{rest!r}: an IPv6 address goes in brackets, an IPv4 one does not")
        port = int(m.group("port"))
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} is out of range (1-65535)")
        out.append(Remote(kind, address=address, port=port))
    if len(out) > MAX_REMOTES:
        raise ValueError(
            f"{len(out)} connections: at most {MAX_REMOTES} (a clustered NB has 3 or 5)"
        )
    if len(set(out)) != len(out):
        raise ValueError("a connection is named twice")
    kinds = {r.kind for r in out}
    if "ssl" in kinds and kinds != {"ssl"}:
        raise ValueError("ssl: cannot be mixed with unix: or tcp: connections")
    return out


def _connection(value: str) -> None:
    remotes(value)


def _pem(label: str) -> Callable[[str], None]:
    begin = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*" + label + r"-----")

    def check(value: str) -> None:
        if len(value.encode()) > MAX_PEM:
            raise ValueError(f"longer than {MAX_PEM} bytes")
        if not begin.search(value) or "-----END " not in value:
            raise ValueError(f"not PEM text with a {label}")
        if not value.isascii() or any(
            (c < " " and c not in "\r\n\t") or c == "\x7f" for c in value
        ):
            raise ValueError("PEM text holds only printable ASCII")

    return check


def _bridge(value: str) -> None:
    try:
        checked.name(value)
    except checked.BadValue as err:
        raise ValueError(str(err)) from None


#: key → validator (ValueError with the reason).
KEYS: dict[str, Callable[[str], None]] = {
    NB_CONNECTION: _connection,
    CA_CERT: _pem("CERTIFICATE"),
    CLIENT_CERT: _pem("CERTIFICATE"),
    CLIENT_KEY: _pem("PRIVATE KEY"),
    INTEGRATION_BRIDGE: _bridge,
}
#: Keys whose values are secrets: shown as set, never echoed back in errors.
SECRET = (CLIENT_KEY,)
#: What ``GET /1.0`` shows for a secret that is set (PUT/PATCH of it keeps the value).
HIDDEN = "(hidden)"


def _shown(key: str, value: str) -> str:
    if key in SECRET or len(value) > 80:
        return "…"
    return checked.printable(value)


def validate(config: Mapping[str, str]) -> dict[str, str]:
    """The server config checked, empty values dropped (unset); NetworkError (400) naming the
    first bad key: ``cannot set 'KEY' to 'VALUE': REASON``."""
    out = {}
    for key, value in config.items():
        if not isinstance(value, str):
            raise NetworkError(
                f"cannot set '{checked.printable(str(key))}': the value is not a string"
            )
        if key not in KEYS:
            raise NetworkError(
                f"cannot set '{checked.printable(key)}' to '{_shown(key, value)}': unknown key"
            )
        if value == "":
            continue
        try:
            KEYS[key](value)
        except ValueError as err:
            raise NetworkError(f"cannot set '{key}' to '{_shown(key, value)}': {err}") from None
        out[key] = value
    if any(r.kind == "ssl" for r in remotes(out.get(NB_CONNECTION, DEFAULT_NB))):
        absent = [k for k in (CA_CERT, CLIENT_CERT, CLIENT_KEY) if k not in out]
        if absent:
            raise NetworkError(
                f"cannot set '{NB_CONNECTION}' to an ssl: connection without {', '.join(absent)}"
            )
    return out


def effective(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` with the defaults of unset keys."""
    return {**DEFAULTS, **config}
