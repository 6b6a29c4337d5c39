"""The result cache: the final ADD result of each attachment, as libcni keeps it.

Path ``<cache_dir>/results/<network>-<containerID>-<ifname>`` (default cache dir
``/var/lib/cni``), directory mode 0700, file mode 0600, JSON in libcni's ``cniCacheV1`` shape so
libcni-based runtimes and podnet read each other's entries::

    {"kind": "cniCacheV1", "containerId": str, "config": base64 of the conflist bytes,
     "ifName": str, "networkName": str, "netns": str?, "cniArgs": [[k, v], ...]?,
     "capabilityArgs": {...}?, "result": {...}}

A legacy entry (the bare result, from libcni < 0.8) is still read as a result. Writes go through
a temporary file and ``rename`` so a reader never sees half an entry.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from podnet.runtime.errors import CacheError

__all__ = ["CACHE_KIND", "DEFAULT_CACHE_DIR", "Attachment", "CacheEntry", "ResultCache"]

DEFAULT_CACHE_DIR = "/var/lib/cni"
CACHE_KIND = "cniCacheV1"


class Attachment(NamedTuple):
    """A GC ``cni.dev/valid-attachments`` item: ``(container_id, ifname)``."""

    container_id: str
    ifname: str

    def to_json(self) -> dict[str, str]:
        return {"containerID": self.container_id, "ifname": self.ifname}


@dataclass(frozen=True)
class CacheEntry:
    """One cached attachment (see module docstring); ``config`` is the conflist's bytes."""

    network: str
    container_id: str
    ifname: str
    result: dict[str, Any]
    netns: str = ""
    config: bytes = b""
    cni_args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": CACHE_KIND,
            "containerId": self.container_id,
            "config": base64.b64encode(self.config).decode(),
            "ifName": self.ifname,
            "networkName": self.network,
        }
        if self.netns:
            out["netns"] = self.netns
        if self.cni_args:
            out["cniArgs"] = [list(p) for p in self.cni_args]
        if self.capability_args:
            out["capabilityArgs"] = dict(self.capability_args)
        out["result"] = self.result
        return out


def _b64(value: object) -> bytes:
    try:
        return base64.b64decode(value) if isinstance(value, str) else b""
    except ValueError:
        return b""


def _entry_from_json(raw: dict[str, Any]) -> CacheEntry:
    pairs = raw.get("cniArgs") or []
    return CacheEntry(
        network=str(raw.get("networkName", "")),
        container_id=str(raw.get("containerId", "")),
        ifname=str(raw.get("ifName", "")),
        result=raw.get("result") or {},
        netns=str(raw.get("netns", "")),
        config=_b64(raw.get("config")),
        cni_args=tuple(
            (str(p[0]), str(p[1])) for p in pairs if isinstance(p, list) and len(p) == 2
        ),
        capability_args=raw.get("capabilityArgs") or {},
    )


class ResultCache:
    """Cached ADD results under ``cache_dir`` (tests pass a temporary directory)."""

    def __init__(self, cache_dir: str = DEFAULT_CACHE_DIR) -> None:
        self.cache_dir = cache_dir

    @property
    def results_dir(self) -> str:
        return os.path.join(self.cache_dir, "results")

    def path(self, network: str, container_id: str, ifname: str) -> str:
        """``<cache_dir>/results/<network>-<container_id>-<ifname>``; CacheError if one is ""."""
        if not (network and container_id and ifname):
            raise CacheError(
                f"cache file path requires network name ({network!r}), container ID "
                f"({container_id!r}) and interface name ({ifname!r})"
            )
        return os.path.join(self.results_dir, f"{network}-{container_id}-{ifname}")

    def save(self, entry: CacheEntry) -> str:
        """Write ``entry`` (mode 0600, atomically); returns its path. CacheError (5)."""
        path = self.path(entry.network, entry.container_id, entry.ifname)
        data = json.dumps(entry.to_json()).encode()
        try:
            os.makedirs(self.results_dir, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.results_dir, prefix=".tmp-")  # mode 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as err:
            raise CacheError(f"failed to write cached result {path}: {err}") from err
        return path

    def load(self, network: str, container_id: str, ifname: str) -> CacheEntry | None:
        """The entry, None when there is none; CacheError (5) for an unreadable or corrupt one."""
        path = self.path(network, container_id, ifname)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise CacheError(f"failed to read cached result {path}: {err}") from err
        try:
            raw = json.loads(data)
        except ValueError as err:
            raise CacheError(f"cached result {path} is not valid JSON: {err}") from None
        if not isinstance(raw, dict):
            raise CacheError(f"cached result {path} is not a JSON object")
        if raw.get("kind") != CACHE_KIND:  # legacy: the file is the bare result
            return CacheEntry(network, container_id, ifname, raw)
        return _entry_from_json(raw)

    def remove(self, network: str, container_id: str, ifname: str) -> None:
        """Delete the entry; a missing one is fine. CacheError (5) on other failures."""
        path = self.path(network, container_id, ifname)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise CacheError(f"failed to remove cached result {path}: {err}") from err

    def entries(self, network: str | None = None) -> list[CacheEntry]:
        """Every ``cniCacheV1`` entry (of ``network`` when given), sorted by file name.

        Unreadable, legacy and incomplete files are skipped, as libcni's GetCachedAttachments.
        """
        try:
            names = sorted(os.listdir(self.results_dir))
        except FileNotFoundError:
            return []
        except OSError as err:
            raise CacheError(f"cannot list {self.results_dir}: {err}") from err
        out = []
        for name in names:
            if name.startswith("."):
                continue
            try:
                with open(os.path.join(self.results_dir, name), "rb") as f:
                    raw = json.loads(f.read())
            except (OSError, ValueError):
                continue
            if not isinstance(raw, dict) or raw.get("kind") != CACHE_KIND:
                continue
            entry = _entry_from_json(raw)
            if not (entry.ifname and entry.network and entry.container_id):
                continue
            if network is None or entry.network == network:
                out.append(entry)
        return out
