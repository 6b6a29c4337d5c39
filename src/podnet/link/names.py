"""Deterministic names and MAC addresses for pod interfaces."""

from __future__ import annotations

import os
import zlib

from podnet.cni.env import IFNAMSIZ

#: Prefix of every host-side veth podnet creates; GC uses it to find leaked links.
HOST_PREFIX = "pn"


def host_ifname(container_id: str, ifname: str) -> str:
    """Host-side veth name for (CNI_CONTAINERID, CNI_IFNAME): ``pn`` + 13 hex digits (15 chars).

    Two CRC-32s (of the key and of the key reversed) give 52 bits after truncation: a collision
    among a node's pods is vanishingly unlikely, and the name is computable on DEL from the
    environment alone, before the database is opened. zlib instead of hashlib: hashlib loads
    OpenSSL, ~4 ms of import per plugin call.
    """
    key = f"{container_id}/{ifname}".encode()
    digest = (zlib.crc32(key) << 32) | zlib.crc32(key[::-1])
    return f"{HOST_PREFIX}{digest:016x}"[: IFNAMSIZ]


def random_mac() -> str:
    """A random locally administered unicast MAC address, ``"0a:1b:…"``."""
    raw = bytearray(os.urandom(6))
    raw[0] = (raw[0] & 0xFE) | 0x02
    return ":".join(f"{b:02x}" for b in raw)


def owner_alias(data_dir: str) -> str:
    """The alias podnet sets on the links it makes (host veths, bridges): ``podnet:<dataDir>``
    names the store that owns them, so GC of one ``dataDir`` never touches another's links and
    no store takes over a link it did not make. ``data_dir`` is a checked path
    (:func:`podnet.checked.path`)."""
    return f"podnet:{data_dir}"
