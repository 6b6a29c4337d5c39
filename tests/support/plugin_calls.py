"""The podnet plugin's NetConf and what a test reads back after a call: the store's rows, the
node's host-side veths, the hostPort maps of ``inet podnet``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from netns import Lab

RANGES = {"v4": ["10.244.2.0/24"], "v6": ["fd00:10:244::/64"],
          "dual": ["10.244.2.0/24", "fd00:10:244::/64"]}


def netconf(data_dir: Path, version: str = "1.1.0", ranges: list[str] | None = None,
            mappings: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": version, "name": "kindnet", "type": "podnet",
        "ranges": ranges or RANGES["dual"], "dataDir": str(data_dir),
        "capabilities": {"portMappings": True}, **extra,
    }
    if mappings is not None:
        conf["runtimeConfig"] = {"portMappings": mappings}
    return conf


def db_rows(data_dir: Path, table: str) -> list[tuple]:
    with sqlite3.connect(data_dir / "podnet.db") as conn:
        return conn.execute(f"SELECT * FROM {table}").fetchall()


def host_veths(lab: Lab) -> list[str]:
    out = lab.exec(lab.node, "ip", "-j", "link", "show", "type", "veth").stdout
    return [link["ifname"] for link in json.loads(out or "[]") if link["ifname"].startswith("pn")]


def map_elements(lab: Lab) -> str:
    out = lab.exec(lab.node, "nft", "-j", "list", "table", "inet", "podnet", check=False)
    if out.returncode != 0:
        return ""
    items = json.loads(out.stdout)["nftables"]
    return json.dumps([i["map"].get("elem", []) for i in items if "map" in i and i["map"]["name"].startswith("hostports")])


def ipam_conf(data_dir: Path | str, ranges: list[str] | None = None, version: str = "1.1.0",
              name: str = "brnet", **ipam: Any) -> dict[str, Any]:
    """A main plugin's config (the reference bridge's shape) with a podnet-ipam ``ipam``."""
    return {"cniVersion": version, "name": name, "type": "bridge",
            "ipam": {"type": "podnet-ipam", "ranges": ranges or ["10.22.0.0/24"],
                     "dataDir": str(data_dir), **ipam}}
