"""What a runtime passes for one attachment (libcni ``RuntimeConf``) and how cnitool reads it.

cnitool's environment (containernetworking/cni ``cnitool``): ``CNI_ARGS`` (``K=V;K2=V2``, every
pair with a non-empty key and value), ``CAP_ARGS`` (a JSON object of capability arguments),
``CNI_IFNAME`` (default ``eth0``); the container ID is ``cnitool-`` + the first 10 bytes of the
SHA-512 of the absolute netns path, in hex, unless ``CNI_CONTAINERID`` is set. Using cnitool's
ID means ``cnitool del`` and ``podnetctl net del`` find the same attachment.

The ``--port`` shortcut builds the ``portMappings`` capability (CNI CONVENTIONS.md
"portMappings"): ``HOST:CONTAINER[/PROTO]`` or ``HOSTIP:HOST:CONTAINER[/PROTO]``, with an
IPv6 host IP optionally in brackets (``[2001:db8::1]:8080:80/udp``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podnet import checked
from podnet.cni.env import valid_ifname
from podnet.runtime.errors import ArgsError

__all__ = [
    "DEFAULT_IFNAME",
    "RuntimeConf",
    "build_runtime_conf",
    "default_container_id",
    "format_cni_args",
    "parse_cap_args",
    "parse_cni_args",
    "parse_port",
    "validate_container_id",
    "validate_ifname",
]

DEFAULT_IFNAME = "eth0"
PORT_PROTOCOLS = ("tcp", "udp", "sctp")

_CONTAINER_ID = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")


@dataclass(frozen=True)
class RuntimeConf:
    """One attachment: ``container_id``, ``netns`` (path, may be "" for DEL), ``ifname``,
    ``args`` (CNI_ARGS pairs, in order) and ``capability_args`` (capability name → value,
    filtered per plugin by its declared ``capabilities``)."""

    container_id: str
    netns: str
    ifname: str = DEFAULT_IFNAME
    args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict)


def validate_container_id(container_id: str) -> None:
    """The spec's container ID rule (alphanumeric first, then ``[a-zA-Z0-9_.-]``); ArgsError."""
    if not _CONTAINER_ID.fullmatch(container_id):
        raise ArgsError(
            f"invalid container ID {container_id!r}: must start with a letter or digit and "
            "contain only letters, digits, '_', '.', '-'"
        )


def validate_ifname(ifname: str) -> None:
    """Linux interface name rules as libcni checks them (1-15 chars, no ``/ :`` or space)."""
    if not valid_ifname(ifname):
        raise ArgsError(f"invalid interface name {ifname!r}: 1-15 characters, no '/', ':' or space")


def default_container_id(netns: str) -> str:
    """cnitool's container ID for ``netns`` (made absolute first): ``cnitool-<20 hex>``."""
    digest = hashlib.sha512(os.path.abspath(netns).encode()).hexdigest()
    return f"cnitool-{digest[:20]}"


def parse_cni_args(value: str) -> tuple[tuple[str, str], ...]:
    """``K=V;K2=V2`` → pairs, strictly as cnitool parses it; "" → (). ArgsError naming the pair."""
    if not value:
        return ()
    out = []
    for pair in value.split(";"):
        parts = pair.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ArgsError(f"invalid CNI_ARGS pair {pair!r}: expected KEY=VALUE")
        out.append((parts[0], parts[1]))
    return tuple(out)


def format_cni_args(pairs: Sequence[tuple[str, str]]) -> str:
    """Pairs → the ``CNI_ARGS`` string the plugin receives."""
    return ";".join(f"{k}={v}" for k, v in pairs)


def parse_cap_args(value: str) -> dict[str, Any]:
    """``CAP_ARGS``: a JSON object (capability → argument); "" → {}. ArgsError otherwise."""
    if not value.strip():
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as err:
        raise ArgsError(f"CAP_ARGS is not valid JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise ArgsError("CAP_ARGS must be a JSON object of capability arguments")
    return parsed


def _port(text: str, what: str, spec: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ArgsError(f"invalid port spec {spec!r}: {what} {text!r} is not a port 1-65535")
    return int(text)


def parse_port(spec: str) -> dict[str, Any]:
    """One ``--port`` value → a portMappings item.

    ``"8080:80"`` → ``{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}``;
    ``"127.0.0.1:8080:80/udp"`` adds ``"hostIP": "127.0.0.1"`` (canonical form). Protocols:
    tcp, udp, sctp (the plugin decides what it supports). ArgsError on anything else.
    """
    body, _, proto = spec.partition("/")
    proto = (proto or "tcp").lower()
    if proto not in PORT_PROTOCOLS:
        raise ArgsError(f"invalid port spec {spec!r}: protocol {proto!r} is not tcp, udp or sctp")
    parts = body.rsplit(":", 2)
    if len(parts) < 2:
        raise ArgsError(
            f"invalid port spec {spec!r}: expected HOST:CONTAINER[/PROTO] or "
            "HOSTIP:HOST:CONTAINER[/PROTO]"
        )
    out: dict[str, Any] = {
        "hostPort": _port(parts[-2], "host port", spec),
        "containerPort": _port(parts[-1], "container port", spec),
        "protocol": proto,
    }
    if len(parts) == 3:
        host_ip = parts[0]
        if host_ip.startswith("[") and host_ip.endswith("]"):
            host_ip = host_ip[1:-1]
        try:
            out["hostIP"] = str(checked.ip(host_ip))
        except checked.BadValue as err:
            raise ArgsError(f"invalid port spec {checked.show(spec)}: {err}") from None
    return out


def build_runtime_conf(
    netns: str,
    *,
    container_id: str = "",
    ifname: str = DEFAULT_IFNAME,
    cni_args: str = "",
    cap_args: str = "",
    ports: Sequence[str] = (),
) -> RuntimeConf:
    """A RuntimeConf from cnitool-style inputs: ``netns`` (made absolute; "" allowed, e.g. DEL),
    ``container_id`` (default: :func:`default_container_id` of ``netns``), the raw
    ``CNI_ARGS``/``CAP_ARGS`` strings and ``--port`` specs (appended to ``portMappings``).

    ArgsError (4) for malformed values or when there is neither a container ID nor a netns.
    """
    netns = os.path.abspath(netns) if netns else ""
    if not container_id:
        if not netns:
            raise ArgsError("a container ID (CNI_CONTAINERID) is needed when no netns is given")
        container_id = default_container_id(netns)
    validate_container_id(container_id)
    validate_ifname(ifname)
    caps = parse_cap_args(cap_args)
    if ports:
        existing = caps.get("portMappings") or []
        if not isinstance(existing, list):
            raise ArgsError("CAP_ARGS portMappings must be a list")
        caps["portMappings"] = existing + [parse_port(p) for p in ports]
    return RuntimeConf(container_id, netns, ifname, parse_cni_args(cni_args), caps)
