"""The demo's kit: the namespaces, runtime, servers, checks and teardown every part of
``podnetctl demo`` uses (:mod:`podnet.cli.demo`), and its first parts: pods with hostPorts
through the runtime, the fetches, the SQLite state, DEL and the check that nothing is left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from podnet import checked
from podnet.cli import state
from podnet.cli.demo.steps import (
    CLIENT4,
    CLIENT6,
    NETWORK,
    NODE4,
    NODE6,
    POD_PORT,
    RANGES,
    TIMEOUT,
    DemoError,
    Pod,
    Progress,
    client_kind,
    fetch,
    make_url,
    one_line,
    run_cmd,
    server_kind,
)
from podnet.firewall import hostports
from podnet.reconcile import prune_claims
from podnet.runtime import (
    CNIRuntime,
    ResultCache,
    RuntimeConf,
    SubprocessExec,
    install,
    load_conflist,
    parse_port,
)
from podnet.store import open_store


@dataclass
class Demo:
    """The demo's resources and steps; :meth:`run` guarantees :meth:`teardown`."""

    progress: Progress
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    namespaces: list[str] = field(default_factory=list)
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    tmp: str = ""
    pods: list[Pod] = field(default_factory=list)
    #: PODNET_DATA_DIRS as it was before the demo allowed its own data dir (None: unset).
    _data_dirs: str | None = None

    @property
    def node(self) -> str:
        return f"pndemo-{self.tag}-node"

    def path_of(self, name: str) -> str:
        """The path of ``name`` in the demo's temporary directory."""
        return os.path.join(self.tmp, name)

    # -- setup --------------------------------------------------------------------------------
    def add_netns(self, name: str) -> None:
        """A network namespace of the demo (loopback up), deleted by :meth:`teardown`."""
        self.namespaces.append(name)  # recorded first: teardown must see a half-made one
        run_cmd("ip", "netns", "add", name)
        run_cmd("ip", "-n", name, "link", "set", "lo", "up")

    def setup(self) -> None:
        p = self.progress
        p.section("Setup")
        with p.step("checks") as detail:
            if os.geteuid() != 0:
                raise DemoError("the demo needs root (network namespaces, nftables)")
            for tool in ("ip", "nft"):
                if shutil.which(tool) is None:
                    raise DemoError(f"{tool} is not installed")
            detail.append(f"HTTP: {self.server_kind()}, client: {self.client_kind()}")
        with p.step("temporary NETCONFPATH, CNI_PATH, dataDir and result cache") as detail:
            self.tmp = tempfile.mkdtemp(prefix="podnet-demo-")
            # as the node's administrator would in the runtime's environment: the demo's
            # conflists name a data dir in its temporary directory (given back at teardown)
            self._data_dirs = os.environ.get("PODNET_DATA_DIRS")
            allowed = [self._data_dirs, self.path_of("data")]
            os.environ["PODNET_DATA_DIRS"] = ":".join(filter(None, allowed))
            done = install(
                bin_dir=self.path_of("bin"),
                conf_dir=self.path_of("net.d"),
                name=NETWORK,
                ranges=RANGES,
                data_dir=self.path_of("data"),
                node_conf=self.path_of("podnet.conf"),  # never the machine's /etc/podnet
            )
            detail.append(
                f"{self.tmp}: " + ", ".join(os.path.relpath(d.path, self.tmp) for d in done)
            )
        with p.step(f"node namespace {self.node}"):
            self.add_netns(self.node)
        client = f"pndemo-{self.tag}-client"
        with p.step(f"client namespace {client} ({CLIENT4}, {CLIENT6}) linked to the node"):
            self.add_netns(client)
            run_cmd(
                "ip",
                "link",
                "add",
                "up0",
                "netns",
                self.node,
                "type",
                "veth",
                "peer",
                "name",
                "up0",
                "netns",
                client,
            )
            for ns, a4, a6 in ((self.node, NODE4, NODE6), (client, CLIENT4, CLIENT6)):
                run_cmd("ip", "-n", ns, "addr", "add", f"{a4}/24", "dev", "up0")
                run_cmd("ip", "-n", ns, "addr", "add", f"{a6}/64", "dev", "up0", "nodad")
                run_cmd("ip", "-n", ns, "link", "set", "up0", "up")
            run_cmd("ip", "-n", self.node, "route", "add", "default", "via", CLIENT4)
            run_cmd("ip", "-n", self.node, "-6", "route", "add", "default", "via", CLIENT6)
        for label, host_port in (("pod-a", 8080), ("pod-b", 8081)):
            pod = Pod(label, f"pndemo-{self.tag}-{label}", f"demo-{self.tag}-{label}", host_port)
            with p.step(f"pod namespace {pod.netns}"):
                self.add_netns(pod.netns)
            self.pods.append(pod)

    # -- CNI ----------------------------------------------------------------------------------
    def runtime(self) -> CNIRuntime:
        return CNIRuntime(
            [self.path_of("bin")],
            cache=ResultCache(self.path_of("cache")),
            executor=SubprocessExec(wrapper=("ip", "netns", "exec", self.node), timeout=TIMEOUT),
        )

    def add(self) -> None:
        p = self.progress
        net = load_conflist(NETWORK, self.path_of("net.d"))
        p.section(f"ADD through the runtime (network {net.name}, cniVersion {net.cni_version})")
        cni = self.runtime()
        for pod in self.pods:
            port = parse_port(f"{pod.host_port}:{POD_PORT}")
            with p.step(f"ADD {pod.label}, hostPort {pod.host_port} → {POD_PORT}") as detail:
                args = (("K8S_POD_NAMESPACE", "demo"), ("K8S_POD_NAME", pod.label))
                caps = {"portMappings": [port]}
                rt = RuntimeConf(pod.container_id, pod.path, args=args, capability_args=caps)
                result = cni.add(net, rt)
                for ip in result.get("ips", []):
                    iface = checked.interface(ip["address"])
                    if iface.version == 6:
                        pod.ipv6 = checked.text(iface.ip)
                    else:
                        pod.ipv4 = checked.text(iface.ip)
                pod.host_if = result["interfaces"][0]["name"]
                detail.append(f"{pod.ipv4} {pod.ipv6} host veth {pod.host_if}")
            with p.step(f"CHECK {pod.label}"):
                cni.check(net, RuntimeConf(pod.container_id, pod.path))

    def delete(self) -> None:
        p = self.progress
        p.section("DEL through the runtime")
        net = load_conflist(NETWORK, self.path_of("net.d"))
        cni = self.runtime()
        for pod in self.pods:
            with p.step(f"DEL {pod.label}", fatal=False):
                cni.delete(net, RuntimeConf(pod.container_id, pod.path))

    # -- HTTP ---------------------------------------------------------------------------------
    server_kind = staticmethod(server_kind)
    client_kind = staticmethod(client_kind)

    def fetch(self, netns: str, url: str, timeout: float = 3.0) -> tuple[bool, str]:
        """GET ``url`` from inside ``netns`` (:func:`podnet.cli.demo.steps.fetch`)."""
        return fetch(netns, url, timeout)

    def serve(self) -> None:
        self.progress.section("HTTP servers in the pods")
        self.start_servers(self.pods)

    def start_servers(self, pods: list[Pod]) -> None:
        """An HTTP server answering ``hello from <label>`` in each pod, waited for."""
        p = self.progress
        kind = self.server_kind()
        for pod in pods:
            www = self.path_of(f"www-{pod.label}")
            os.makedirs(www)
            with open(os.path.join(www, "index.html"), "w") as f:
                f.write(f"hello from {pod.label}\n")
            if kind == "busybox httpd":
                argv = ["busybox", "httpd", "-f", "-p", str(POD_PORT), "-h", www]
            else:
                argv = [
                    sys.executable,
                    "-m",
                    "http.server",
                    str(POD_PORT),
                    "--bind",
                    "::",
                    "--directory",
                    www,
                ]
            with p.step(f"{kind} in {pod.label} on port {POD_PORT}"):
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", pod.netns, *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                self.servers.append(proc)
                self._wait_ready(pod, proc)

    def _wait_ready(self, pod: Pod, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise DemoError(f"the server in {pod.label} exited with status {proc.returncode}")
            if self.fetch(pod.netns, make_url(pod.ipv4 or pod.ipv6, POD_PORT), timeout=0.5)[0]:
                return
            time.sleep(0.05)
        raise DemoError(f"the server in {pod.label} did not answer within 5 s")

    def fetches(self) -> None:
        p = self.progress
        p.section("Fetches")
        a, b = self.pods
        client = f"pndemo-{self.tag}-client"
        checks = [
            (self.node, make_url(a.ipv4, POD_PORT), a, "node → pod-a at its IPv4 address"),
            (self.node, make_url(a.ipv6, POD_PORT), a, "node → pod-a at its IPv6 address"),
            (client, make_url(NODE4, a.host_port), a,
             f"client → node {NODE4}:{a.host_port} → pod-a"),
            (client, make_url(NODE6, b.host_port), b,
             f"client → node [{NODE6}]:{b.host_port} → pod-b"),
            (
                self.node,
                make_url("127.0.0.1", a.host_port),
                a,
                f"node → 127.0.0.1:{a.host_port} → pod-a",
            ),
            (a.netns, make_url(NODE4, b.host_port), b,
             f"pod-a → node {NODE4}:{b.host_port} → pod-b"),
            (
                a.netns,
                make_url(NODE4, a.host_port),
                a,
                f"pod-a → its own hostPort {NODE4}:{a.host_port} (hairpin)",
            ),
        ]
        self.check_fetches(checks)

    def check_fetches(self, checks: list[tuple[str, str, Pod, str]]) -> None:
        """Each ``(netns, url, pod, text)``: GET from the namespace, answered by that pod."""
        p = self.progress
        for netns, url, want, text in checks:
            with p.step(text, fatal=False) as detail:
                ok, body = self.fetch(netns, url)
                if not ok:
                    raise DemoError(f"GET {url}: {body}")
                if f"hello from {want.label}" not in body:
                    raise DemoError(f"GET {url}: unexpected answer {body.strip()!r}")
                detail.append(repr(body.strip()))

    # -- state --------------------------------------------------------------------------------
    def show_state(self, title: str) -> tuple[int, int]:
        """Print the pods and ports tables; returns ``(pods, ports)`` row counts."""
        with open_store(self.path_of("data"), create=False) as store:
            pods, ports = state.pod_records(store), state.port_records(store)
        self.progress.section(title)
        console = self.progress.console
        console.print(state.render_table("pods", pods, title="pods"))
        console.print(state.render_table("ports", ports, title="portmap_entries"))
        return len(pods), len(ports)

    def verify_empty(self) -> None:
        p = self.progress
        pods, ports = self.show_state("State after DEL")
        p.section("Nothing left")
        with p.step("no pod or portmap rows", fatal=False):
            if pods or ports:
                raise DemoError(f"{pods} pod rows and {ports} portmap rows remain")
        with p.step("no host veths in the node namespace", fatal=False):
            links = json.loads(run_cmd("ip", "-n", self.node, "-j", "link", "show").stdout)
            ours = {pod.host_if for pod in self.pods}
            left = [li["ifname"] for li in links if li["ifname"] in ours]
            if left:
                raise DemoError(f"left: {', '.join(left)}")
        with p.step("hostPort maps empty", fatal=False) as detail:
            table = (hostports.FAMILY, hostports.TABLE)
            out = run_cmd("ip", "netns", "exec", self.node, "nft", "-j", "list", "table", *table)
            maps = [o["map"] for o in json.loads(out.stdout)["nftables"] if "map" in o]
            full = [m["name"] for m in maps if m.get("elem")]
            if full:
                raise DemoError(f"maps with elements: {', '.join(full)}")
            detail.append(f"{len(maps)} maps in table {' '.join(table)}")
        with p.step("no cached results", fatal=False):
            left = ResultCache(self.path_of("cache")).entries()
            if left:
                raise DemoError(f"{len(left)} cache entries remain")

    # -- teardown -----------------------------------------------------------------------------
    def teardown(self) -> None:
        """Stop servers, delete namespaces and the temporary directory; ignores Ctrl-C."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            p = self.progress
            p.section("Teardown")
            with p.step(f"stopped {len(self.servers)} HTTP servers", fatal=False):
                for proc in self.servers:
                    if proc.poll() is None:
                        proc.terminate()
                for proc in self.servers:
                    try:
                        proc.wait(timeout=3)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=3)
            with p.step(f"deleted {len(self.namespaces)} namespaces", fatal=False):
                errors = []
                for ns in reversed(self.namespaces):
                    if os.path.exists(f"/run/netns/{ns}"):
                        done = run_cmd("ip", "netns", "del", ns, check=False)
                        if done.returncode != 0:
                            errors.append(f"{ns}: {done.stderr.strip()}")
                if errors:
                    raise DemoError("; ".join(errors))
            if self.tmp:
                with p.step(f"removed {self.tmp}", fatal=False):
                    shutil.rmtree(self.tmp)
                    prune_claims(str(self.tmp))  # its node's table owner record (/run/podnet)
                if self._data_dirs is None:
                    os.environ.pop("PODNET_DATA_DIRS", None)
                else:
                    os.environ["PODNET_DATA_DIRS"] = self._data_dirs
        finally:
            signal.signal(signal.SIGINT, previous)

    # -- all of it -----------------------------------------------------------------------------
    def parts(self) -> list[Callable[[Demo], None]]:
        """The parts run after the fetches, each given this demo (none in the kit itself: the
        package's :class:`podnet.cli.demo.Demo` adds networks and forwards)."""
        return []

    def run(self) -> bool:
        """Every step, then teardown whatever happened; True when all checks passed."""
        p = self.progress
        p.console.print(f"[bold]podnet demo[/bold] [dim](namespaces pndemo-{self.tag}-*)[/dim]")

        def on_sigterm(signum: int, frame: FrameType | None) -> Any:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            self.setup()
            self.add()
            self.serve()
            self.fetches()
            for part in self.parts():
                part(self)
            self.show_state("State (SQLite)")
            self.delete()
            self.verify_empty()
        except DemoError as err:
            if not p.failures:  # steps report their own failure; anything else is reported here
                p.fail("demo stopped", one_line(err))
        except KeyboardInterrupt:
            p.fail("interrupted")
        except Exception as err:  # noqa: BLE001 - a bug still ends in ✗, teardown and exit 1
            p.fail("demo stopped", one_line(err))
        finally:
            try:
                self.teardown()
            finally:
                signal.signal(signal.SIGTERM, previous)
        if p.failures:
            p.console.print(f"[bold red]demo failed: {p.failures} check(s) failed[/bold red]")
        else:
            p.console.print("[bold green]demo passed: every check succeeded[/bold green]")
        return p.failures == 0

