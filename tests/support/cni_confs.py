"""Network configuration lists and results as a test writes them for :mod:`podnet.runtime`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


def conflist(
    name: str = "net1",
    version: str = "1.1.0",
    plugins: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": plugins or [{"type": "p1"}], **extra}


def result(address: str = "10.0.0.2/32", version: str = "1.1.0") -> dict[str, Any]:
    return {
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/x"}],
        "ips": [{"address": address, "gateway": "10.0.0.1", "interface": 0}],
    }
