"""The shapes of networks and network forwards, as LXD's API and ``lxc`` show them
(LXD's shared/api/network_forward.go: ``NetworkForward``, ``NetworkForwardPut``,
``NetworkForwardPort``; shared/api/network.go: ``Network``), their
canonical form (LXD's ``Normalise``) and their ETags.

Field order is the one ``lxc … show`` prints (yaml.v2 follows the Go struct): a forward is
``description, config, ports, listen_address, location``; a port is ``description, protocol,
listen_port, target_port, target_address``; a network is ``config, description, name, type,
used_by, managed, status, locations``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

from podnet import checked

__all__ = [
    "FORWARD_KEYS",
    "Forward",
    "ForwardPort",
    "Network",
    "canonical_address",
    "clean",
    "etag",
    "go_json",
]

#: Keys of a forward object (API body of PUT/PATCH; POST adds ``listen_address``).
FORWARD_KEYS = ("description", "config", "ports")
PORT_KEYS = ("description", "protocol", "listen_port", "target_port", "target_address")


def canonical_address(text: str) -> str:
    """``text`` in canonical form when it is an IP address (``2001:DB8:0::1`` → ``2001:db8::1``,
    ``::ffff:198.51.100.9`` → ``198.51.100.9`` as LXD's ``net.ParseIP().String()``), else as
    given (validation refuses it later with a message naming it)."""
    try:
        addr = checked.ip(text.strip())
    except checked.BadValue:
        return text.strip()
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def clean(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate (JSON ``"\\ud800"``, a non-UTF-8 argument)
    replaced by U+FFFD, as Go's JSON decoder does: what LXD stores, and what SQLite can."""
    if text.isascii():
        return text
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _split_ports(text: str) -> str:
    return ",".join(p.strip() for p in text.split(",")) if text.strip() else ""


@dataclass
class ForwardPort:
    """One port specification: ``protocol`` tcp|udp, ``listen_port``/``target_port`` comma
    lists of ports and ``a-b`` ranges (target empty: the listen ports), ``target_address``."""

    description: str = ""
    protocol: str = ""
    listen_port: str = ""
    target_port: str = ""
    target_address: str = ""

    def normalised(self) -> ForwardPort:
        """LXD's ``NetworkForwardPort.Normalise``: trimmed, canonical address, port lists
        re-joined without spaces."""
        return ForwardPort(
            description=clean(self.description.strip()),
            protocol=clean(self.protocol.strip()),
            listen_port=clean(_split_ports(self.listen_port)),
            target_port=clean(_split_ports(self.target_port)),
            target_address=clean(canonical_address(self.target_address)),
        )

    def to_api(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in PORT_KEYS}

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> ForwardPort:
        """From a validated API/YAML object (strings only, known keys only)."""
        return cls(**{k: str(raw.get(k) or "") for k in PORT_KEYS})


@dataclass
class Forward:
    """A network forward: ``listen_address`` (canonical), ``description``, ``config``
    (``target_address``: the default target; ``user.*``), ``ports``, ``location`` (the node)."""

    listen_address: str
    description: str = ""
    config: dict[str, str] = field(default_factory=dict)
    ports: list[ForwardPort] = field(default_factory=list)
    location: str = ""

    def normalised(self) -> Forward:
        """LXD's ``NetworkForwardPut.Normalise`` plus the canonical listen address. Config keys
        with empty values stay (validation refuses unknown ones; the store keeps none)."""
        config = {clean(k): clean(v) for k, v in self.config.items()}
        if config.get("target_address"):
            config["target_address"] = canonical_address(config["target_address"])
        return Forward(
            listen_address=clean(canonical_address(self.listen_address)),
            description=clean(self.description.strip()),
            config=config,
            ports=[p.normalised() for p in self.ports],
            location=self.location,
        )

    @property
    def default_target(self) -> str:
        return self.config.get("target_address", "")

    def to_api(self) -> dict[str, Any]:
        """The API object (``NetworkForward``), in ``lxc show``'s field order."""
        return {
            "description": self.description,
            "config": dict(sorted(self.config.items())),
            "ports": [p.to_api() for p in self.ports],
            "listen_address": self.listen_address,
            "location": self.location,
        }

    def etag(self) -> str:
        """LXD's ETag of a forward: sha256 of Go's JSON of ``[listen_address, description,
        config, ports]`` (``NetworkForward.Etag``, LXD's shared/api/network_forward.go), so the
        ``lxc`` client's ``If-Match`` matches."""
        return etag([self.listen_address, self.description, dict(self.config),
                     [GoStruct(p.to_api()) for p in self.ports]])  # fmt: skip


@dataclass
class Network:
    """A managed network: ``name``, ``type`` (``bridge`` | ``ptp``), ``description``,
    ``config`` (LXD keys), ``used_by`` (API URLs of what uses it), ``status``."""

    name: str
    type: str
    description: str = ""
    config: dict[str, str] = field(default_factory=dict)
    used_by: list[str] = field(default_factory=list)
    status: str = "Created"
    location: str = ""
    #: The members a cluster network is defined on (LXD's ``locations``); default
    #: ``[location]`` when ``location`` is set.
    locations: list[str] = field(default_factory=list)

    def to_api(self) -> dict[str, Any]:
        """The API object (LXD's ``Network``), in ``lxc network show``'s field order."""
        return {
            "config": dict(sorted(self.config.items())),
            "description": self.description,
            "name": self.name,
            "type": self.type,
            "used_by": sorted(self.used_by),
            "managed": True,
            "status": self.status,
            "locations": self.locations or ([self.location] if self.location else []),
        }

    def etag(self) -> str:
        """LXD's ETag of a network: sha256 of Go's JSON of ``[name, managed, type, description,
        config]``."""
        return etag([self.name, True, self.type, self.description, dict(self.config)])


class GoStruct(dict[str, Any]):
    """A dict encoded in insertion order, as Go encodes a struct (a plain dict is a Go map:
    keys sorted)."""


def _go_string(text: str) -> str:
    """A string as Go 1.19's encoding/json writes it (Debian 12's LXD 5.0.2 is built with it):
    ``\\n \\r \\t`` short, other control characters and ``< > &`` U+2028 U+2029 as
    ``\\u00XX``/``\\uXXXX``, a lone surrogate as U+FFFD, everything else raw."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif code < 0x20 or ch in "<>&" or code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _go(value: Any) -> str:
    if isinstance(value, GoStruct):
        return "{" + ",".join(f"{_go(k)}:{_go(v)}" for k, v in value.items()) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_go(k)}:{_go(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_go(v) for v in value) + "]"
    if isinstance(value, str):
        return _go_string(value)
    return json.dumps(value)


def go_json(value: Any) -> str:
    """JSON as Go's ``json.Encoder.Encode`` writes it: no spaces, map keys sorted
    (:class:`GoStruct` keeps its order), HTML characters and U+2028/2029 escaped, other
    non-ASCII raw, a trailing newline."""
    return _go(value) + "\n"


def etag(value: Any) -> str:
    """sha256 hex of :func:`go_json` (LXD's ``util.EtagHash``)."""
    return hashlib.sha256(go_json(value).encode()).hexdigest()
