"""``podnetctl demo``: podnet end to end, inside network namespaces of its own.

What it does, each step printed as one ``✓``/``✗`` line:

1. a node namespace, a client namespace linked to it by a veth (node 192.0.2.1 / 2001:db8:1::1,
   client .2 / ::2 — documentation ranges) and two pod namespaces; a temporary directory holding
   NETCONFPATH, CNI_PATH (the plugin installed by :func:`podnet.runtime.install`), the plugin's
   dataDir and the result cache;
2. cni-kindnet's conflist shape (``"type": "podnet"``, 10.244.2.0/24 plus a ULA IPv6 range)
   run through :class:`podnet.runtime.CNIRuntime` for both pods — every plugin call inside the node
   namespace — with hostPort 8080 → pod-a:80 and 8081 → pod-b:80;
3. an HTTP server in each pod (busybox httpd, or ``python -m http.server``), fetched (curl, or
   urllib) through the pod IPs, the node's addresses from the client, 127.0.0.1 inside the node,
   pod-a → pod-b's hostPort and pod-a → its own hostPort (hairpin);
4. networks and forwards (:mod:`podnet.cli.demo.networks`): a bridge network with two pods, a
   whole-address forward and a port forward fetched from the client, hairpin from the target
   and from another pod, then all of it removed;
5. OVN across nodes (:mod:`podnet.cli.demo.ovn`): three node namespaces of an OVN deployment
   of the demo's own, pods on two nodes talking over one OVN network, a forward of each kind
   and the NAT address seen from an outside namespace, then all of it removed;
6. the SQLite state (pods and ports tables), DEL of both pods, and a check that no row, host
   veth, hostPort map element or cache entry is left;
7. teardown of every process, namespace and file it made — also after a failure, Ctrl-C or
   SIGTERM. The machine's own interfaces, routes and firewall are never touched.

:func:`run_demo` returns True when every check passed. The package is a kit
(:mod:`podnet.cli.demo.kit`: resources, checks, teardown, and the pod and hostPort parts) plus
one module per further part (:mod:`podnet.cli.demo.networks`, :mod:`podnet.cli.demo.ovn`);
:class:`Demo` runs them all.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from podnet.cli import state
from podnet.cli.demo import kit, networks, ovn
from podnet.cli.demo.steps import DemoError, Pod, Progress

__all__ = ["Demo", "DemoError", "Pod", "Progress", "run_demo"]


class Demo(kit.Demo):
    """The whole demo: the kit's pod and hostPort parts, then networks and forwards, then OVN
    networks across nodes."""

    def parts(self) -> list[Callable[[kit.Demo], None]]:
        return [networks.run_networks, ovn.run_ovn]


def run_demo(console: Console | None = None) -> bool:
    """Run the demo, printing progress to ``console`` (default: stdout); True if all passed."""
    if console is None:
        console = state.console()
    return Demo(Progress(console)).run()
