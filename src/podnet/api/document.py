"""``GET /1.0``, the server document the ``lxc`` client reads first, and the one project."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from podnet import __version__

__all__ = ["API_EXTENSIONS", "default_project", "server_document"]

#: The API extensions podnet implements (the ``lxc`` client checks ``network``,
#: ``network_forward`` and, on its first run, ``projects``; with ``explicit_trust_token`` pylxd
#: and later ``lxc`` send a trust token as ``trust_token`` rather than ``password``).
API_EXTENSIONS = ["network", "network_forward", "network_nat_address", "projects",
                  "explicit_trust_token"]


def server_document(trusted: bool, data_dir: str,
                    config: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """``GET /1.0``: the fields the ``lxc`` client reads, podnet's name and version, and (to a
    trusted client) the server config."""
    if not trusted:
        return {"api_extensions": API_EXTENSIONS, "api_status": "stable", "api_version": "1.0",
                "auth": "untrusted", "public": False, "auth_methods": ["tls"]}  # fmt: skip
    uname = platform.uname()
    return {
        "config": config or {},
        "api_extensions": API_EXTENSIONS,
        "api_status": "stable",
        "api_version": "1.0",
        "auth": "trusted",
        "public": False,
        "auth_methods": ["tls"],
        "environment": {
            "addresses": [],
            "architectures": [uname.machine],
            "certificate": "",
            "certificate_fingerprint": "",
            "driver": "podnet",
            "driver_version": __version__,
            "firewall": "nftables",
            "kernel": uname.system,
            "kernel_architecture": uname.machine,
            "kernel_features": {},
            "kernel_version": uname.release,
            "lxc_features": {},
            "os_name": platform.freedesktop_os_release().get("NAME", "") if hasattr(
                platform, "freedesktop_os_release") else "",  # fmt: skip
            "os_version": "",
            "project": "default",
            "server": "podnet",
            "server_clustered": False,
            "server_event_mode": "full-mesh",
            "server_name": socket.gethostname(),
            "server_pid": os.getpid(),
            "server_version": __version__,
            "storage": "podnet",
            "storage_version": "",
            "storage_supported_drivers": [],
            "data_dir": data_dir,
        },
    }


def default_project() -> dict[str, Any]:
    """``GET /1.0/projects/default``: the only project (``features.networks`` on)."""
    return {"name": "default", "description": "Default project", "config": {
        "features.networks": "true"}, "used_by": []}  # fmt: skip
