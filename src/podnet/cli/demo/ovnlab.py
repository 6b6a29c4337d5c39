"""An OVN deployment in network namespaces, for the demo's multi-node part and the tests
(docs/sources.md#ovn-with-the-userspace-datapath): central services (NB and SB ``ovsdb-server``,
``ovn-northd``) in the first node's namespace, and on every node Open vSwitch with the userspace
datapath (``datapath_type=netdev``, no kernel module) and ``ovn-controller``.

Layout, all of it made here and removed by :meth:`OvnLab.stop`:

- ``<prefix>-fab``: the underlay, a Linux bridge ``fab0`` with one veth per node;
- ``<prefix>-<node>``: a node. Its underlay veth sits in the netdev bridge ``br-phy``, which
  carries the node's address (``192.168.<subnet>.<i>/24``): OVS then tunnels (Geneve) in user
  space. ``br-int`` is the integration bridge. Each node's OVS and OVN files live in a
  directory of its own, named by ``OVS_RUNDIR``/``OVS_DBDIR``/``OVS_LOGDIR``/``OVN_RUNDIR`` in
  :meth:`OvnLab.env` — what ``ovs-vsctl`` (and podnet, through it) reads to find the node's OVS.

The NB database listens on a unix socket (:attr:`OvnLab.nb_unix`) and on TCP at the central
node's underlay address (:attr:`OvnLab.nb_tcp`). Nothing touches the machine's own network.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from podnet.cli.demo.labnode import (
    NB_SCHEMA,
    SB_SCHEMA,
    TIMEOUT,
    VSWITCH_SCHEMA,
    LabError,
    Node,
    kill,
    missing_tools,
    run_in,
)
from podnet.ovn import vswitch

__all__ = ["LabError", "Node", "OvnLab", "missing_tools"]


class OvnLab:
    """``nodes`` node namespaces (the first runs the central services) on one underlay.

    Use as a context manager, or call :meth:`start` and then :meth:`stop` (which also undoes a
    half-made start). ``subnet``: the third octet of the underlay ``192.168.<subnet>.0/24``.
    """

    def __init__(
        self,
        prefix: str,
        nodes: Sequence[str] = ("n1", "n2"),
        *,
        subnet: int = 250,
        base: Path | None = None,
    ) -> None:
        self.prefix = prefix
        self.subnet = subnet
        self.dir = Path(tempfile.mkdtemp(prefix="podnet-ovnlab-", dir=base))
        self.central = self.dir / "central"
        self.fabric = f"{prefix}-fab"
        self.nodes = [
            Node(n, f"{prefix}-{n}", f"192.168.{subnet}.{i + 1}", self.dir / n)
            for i, n in enumerate(nodes)
        ]
        self._netns: list[str] = []
        self._pids: list[Path] = []

    # -- addresses ----------------------------------------------------------------------------
    @property
    def nb_unix(self) -> str:
        """The NB database's unix socket, as an OVSDB connection (``unix:<path>``)."""
        return f"unix:{self.central / 'nb.sock'}"

    @property
    def sb_unix(self) -> str:
        return f"unix:{self.central / 'sb.sock'}"

    @property
    def nb_tcp(self) -> str:
        """The NB database on TCP at the central node's underlay address."""
        return f"tcp:{self.nodes[0].address}:6641"

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # -- running things -----------------------------------------------------------------------
    def run(
        self,
        netns: str | None,
        *argv: str,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` in ``netns`` (None: here) with ``env`` added; LabError when it fails."""
        return run_in(netns, *argv, env=env, check=check, input=input)

    def vsctl(self, node: Node, *args: str) -> str:
        """``ovs-vsctl args`` on ``node``'s OVS; its output, stripped."""
        argv = vswitch.command(*args, timeout=10)
        return self.run(node.netns, *argv, env=node.env).stdout.strip()

    def nbctl(self, *args: str) -> str:
        return self.run(
            None, "ovn-nbctl", "--timeout=10", f"--db={self.nb_unix}", *args
        ).stdout.strip()

    def _daemon(
        self,
        netns: str | None,
        pidfile: Path,
        argv: list[str],
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._pids.append(pidfile)
        self.run(netns, *argv, f"--pidfile={pidfile}", "--detach", env=env)

    # -- set-up -------------------------------------------------------------------------------
    def start(self) -> OvnLab:
        """Bring every namespace and daemon up and wait until every chassis is registered."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _netns_add(self, name: str) -> None:
        self.run(None, "ip", "netns", "add", name)
        self._netns.append(name)
        self.run(name, "ip", "link", "set", "lo", "up")

    def _start(self) -> None:
        self._netns_add(self.fabric)
        self.run(self.fabric, "ip", "link", "add", "fab0", "type", "bridge")
        self.run(self.fabric, "ip", "link", "set", "fab0", "up")
        for node in self.nodes:
            self._netns_add(node.netns)
            node.dir.mkdir(parents=True)
            self.run(
                self.fabric,
                "ip",
                "link",
                "add",
                f"u-{node.name}",
                "type",
                "veth",
                "peer",
                "name",
                "underlay",
                "netns",
                node.netns,
            )
            self.run(self.fabric, "ip", "link", "set", f"u-{node.name}", "master", "fab0", "up")
            self.run(self.fabric, "ethtool", "-K", f"u-{node.name}", "tx", "off")
            self.run(node.netns, "ethtool", "-K", "underlay", "tx", "off")
            self.run(node.netns, "ip", "link", "set", "underlay", "up")
        self._start_central(self.nodes[0])
        for node in self.nodes:
            self._start_node(node)
        self.wait_chassis()

    def _start_central(self, node: Node) -> None:
        c = self.central
        c.mkdir()
        for db, schema in (("nb", NB_SCHEMA), ("sb", SB_SCHEMA)):
            self.run(None, "ovsdb-tool", "create", str(c / f"{db}.db"), schema)
            self._daemon(node.netns, c / f"{db}.pid", self._db_server(db))
        self.start_northd()

    def start_northd(self) -> None:
        c = self.central
        self._daemon(
            self.nodes[0].netns,
            c / "northd.pid",
            [
                "ovn-northd",
                f"--ovnnb-db={self.nb_unix}",
                f"--ovnsb-db={self.sb_unix}",
                f"--unixctl={c / 'northd.ctl'}",
                f"--log-file={c / 'northd.log'}",
            ],
        )
        self.northd_ready()

    def stop_northd(self) -> None:
        """Stop ovn-northd (a fault: new ports get no addresses)."""
        self._kill(self.central / "northd.pid")

    def _start_node(self, node: Node) -> None:
        d, env, ns = node.dir, node.env, node.netns
        self.run(None, "ovsdb-tool", "create", str(d / "conf.db"), VSWITCH_SCHEMA)
        self._daemon(
            ns,
            d / "ovsdb-server.pid",
            [
                "ovsdb-server",
                str(d / "conf.db"),
                f"--remote=punix:{d / 'db.sock'}",
                f"--unixctl={d / 'ovsdb-server.ctl'}",
                f"--log-file={d / 'ovsdb-server.log'}",
            ],
            env,
        )
        self.vsctl(node, "--no-wait", "init")
        self._daemon(
            ns,
            d / "ovs-vswitchd.pid",
            [
                "ovs-vswitchd",
                f"unix:{d / 'db.sock'}",
                f"--unixctl={d / 'ovs-vswitchd.ctl'}",
                f"--log-file={d / 'ovs-vswitchd.log'}",
            ],
            env,
        )
        self.vsctl(
            node,
            "add-br",
            "br-int",
            "--",
            "set",
            "bridge",
            "br-int",
            "datapath_type=netdev",
            "fail-mode=secure",
            "other-config:disable-in-band=true",
        )
        self.vsctl(
            node,
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            "--",
            "add-port",
            "br-phy",
            "underlay",
        )
        self.run(ns, "ip", "addr", "add", f"{node.address}/24", "dev", "br-phy")
        self.run(ns, "ip", "link", "set", "br-phy", "up")
        self.vsctl(
            node,
            "set",
            "open_vswitch",
            ".",
            f"external_ids:system-id={node.name}",
            f"external_ids:ovn-remote={self.sb_unix}",
            "external_ids:ovn-encap-type=geneve",
            f"external_ids:ovn-encap-ip={node.address}",
            "external_ids:ovn-bridge-datapath-type=netdev",
        )
        self._daemon(
            ns,
            d / "ovn-controller.pid",
            ["ovn-controller", f"unix:{d / 'db.sock'}", f"--log-file={d / 'ovn-controller.log'}"],
            env,
        )

    def wait_chassis(self, timeout: float = TIMEOUT, nodes: Sequence[Node] = ()) -> None:
        """Wait until every node's chassis (or those of ``nodes``) is in the SB database."""
        want = {n.name for n in nodes or self.nodes}
        deadline = time.monotonic() + timeout
        while True:
            out = self.run(
                None,
                "ovn-sbctl",
                "--timeout=10",
                f"--db={self.sb_unix}",
                "--bare",
                "--columns=name",
                "list",
                "Chassis",
                check=False,
            ).stdout
            if want <= set(out.split()):
                return
            if time.monotonic() > deadline:
                raise LabError(f"chassis registered: {sorted(out.split())}, wanted {sorted(want)}")
            time.sleep(0.05)

    # -- the outside world --------------------------------------------------------------------
    def outside(self, node: Node, gateway: str = "203.0.113.254/24") -> str:
        """A namespace ``<prefix>-out`` playing the uplink's router, linked to ``node`` by a veth
        whose node end ``ext0`` has no address (an uplink's ``parent``) and whose outside end
        has ``gateway``. Returns the outside namespace."""
        out = f"{self.prefix}-out"
        self._netns_add(out)
        self.run(
            out,
            "ip",
            "link",
            "add",
            "gw0",
            "type",
            "veth",
            "peer",
            "name",
            "ext0",
            "netns",
            node.netns,
        )
        self.run(out, "ip", "addr", "add", gateway, "dev", "gw0")
        for ns, dev in ((out, "gw0"), (node.netns, "ext0")):
            self.run(ns, "ethtool", "-K", dev, "tx", "off")
            self.run(ns, "ip", "link", "set", dev, "up")
        return out

    # -- faults -------------------------------------------------------------------------------
    def stop_controller(self, node: Node) -> None:
        """Stop ``node``'s ovn-controller (a fault: ports are no longer wired there)."""
        self._kill(node.dir / "ovn-controller.pid")

    def start_controller(self, node: Node) -> None:
        d = node.dir
        self._daemon(
            node.netns,
            d / "ovn-controller.pid",
            ["ovn-controller", f"unix:{d / 'db.sock'}", f"--log-file={d / 'ovn-controller.log'}"],
            node.env,
        )

    def stop_nb(self) -> None:
        """Stop the NB database server (a fault: the northbound connection is refused)."""
        self._kill(self.central / "nb.pid")

    def _db_server(self, db: str) -> list[str]:
        """The command line of central database ``db`` (``nb`` or ``sb``): its unix socket, TCP
        on node 1's underlay address, and — as ovn-central runs them — remotes and TLS settings
        from the database itself (``set-connection``, ``set-ssl``), so a test can add an
        ``ssl:`` remote while it runs."""
        c = self.central
        port, schema = (6641, "OVN_Northbound") if db == "nb" else (6642, "OVN_Southbound")
        table = "NB_Global" if db == "nb" else "SB_Global"
        return [
            "ovsdb-server",
            str(c / f"{db}.db"),
            f"--remote=punix:{c / db}.sock",
            f"--remote=ptcp:{port}:{self.nodes[0].address}",
            f"--remote=db:{schema},{table},connections",
            f"--private-key=db:{schema},SSL,private_key",
            f"--certificate=db:{schema},SSL,certificate",
            f"--ca-cert=db:{schema},SSL,ca_cert",
            f"--unixctl={c / db}.ctl",
            f"--log-file={c / db}.log",
        ]

    def start_nb(self) -> None:
        self._daemon(self.nodes[0].netns, self.central / "nb.pid", self._db_server("nb"))
        self.northd_ready()

    def northd_ready(self) -> None:
        """Return once northd has processed the NB (``--wait=sb``): after a restart of the NB it
        reconnects with a back-off of up to 8 s, and until then new ports get no addresses."""
        self.run(None, "ovn-nbctl", "--timeout=30", f"--db={self.nb_unix}", "--wait=sb", "sync")

    # -- tear-down ----------------------------------------------------------------------------
    _kill = staticmethod(kill)

    def stop(self) -> None:
        """Stop every daemon, delete every namespace and the directory; idempotent."""
        self._kill(*reversed(self._pids))
        self._pids.clear()
        for ns in reversed(self._netns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=TIMEOUT)
        self._netns.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> OvnLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
