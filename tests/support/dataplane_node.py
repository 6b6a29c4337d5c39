"""The agent's dataplane in a test's node namespace: ``ip netns exec <node> python
dataplane_node.py '<settings JSON>'`` keeps one :class:`podnet.agent.dataplane.Dataplane` (so
"logged once" spans syncs, and killing this process is an agent restart) and answers one JSON
line per request on stdin:

- ``{"sync": {"me": <Node object or null>, "others": [<Node object>, …]}}`` →
  ``{"ok": bool, "log": ["LEVEL message", …]}`` — the Node objects are the API's JSON, parsed
  by :func:`podnet.agent.model.parse_node` as the watch loop parses them.

Settings JSON: ``node_name``, ``cni_conf_dir``, ``data_dir``, ``network_name``,
``no_masquerade_cidrs`` (list of CIDR texts)."""

from __future__ import annotations

import json
import logging
import sys

from podnet import checked
from podnet.agent.dataplane import Dataplane
from podnet.agent.model import parse_node
from podnet.agent.settings import Settings


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def main() -> None:
    raw = json.loads(sys.argv[1])
    settings = Settings(raw["node_name"], cni_conf_dir=raw["cni_conf_dir"], data_dir=raw["data_dir"],
                        network_name=raw.get("network_name", "podnet"),
                        no_masquerade_cidrs=tuple(checked.network(c) for c in raw.get("no_masquerade_cidrs", ())))
    collect = Collect()
    log = logging.getLogger("podnet.agent")
    log.addHandler(collect)
    log.setLevel(logging.INFO)
    dataplane = Dataplane(settings)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        view = request["sync"]
        me = parse_node(view["me"]) if view["me"] is not None else None
        others = {n.name: n for n in (parse_node(o) for o in view["others"])}
        collect.lines.clear()
        ok = dataplane.sync(me, others)
        print(json.dumps({"ok": ok, "log": collect.lines}), flush=True)
    dataplane.close()


if __name__ == "__main__":
    main()
