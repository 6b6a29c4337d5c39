"""podnetctl proxy-init end to end: a real transparent proxy running as uid 2102 in
the pod reads SO_ORIGINAL_DST and relays; inbound connections go through it, skipped ports and
subnets bypass it, outbound connections go through its outbound port, its own connections do
not loop, loopback bypasses — IPv4 and IPv6, for iptables-nft, iptables-legacy and nftables."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgate import need
from netns import Lab, sh
from paths import SUPPORT, VENV_BIN

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")
PROXY = str(SUPPORT / "redirect_proxy.py")
POD = {4: "10.77.0.2", 6: "fd77::2"}
PEER = {4: "10.77.0.1", 6: "fd77::1"}


def wire(lab: Lab) -> tuple[str, str]:
    """A pod and an outside host joined by a veth (no CNI needed for the redirection)."""
    pod, outside = lab.pod("app"), lab.netns("outside")
    sh("ip", "link", "add", "eth0", "netns", pod, "type", "veth", "peer", "name", "eth0", "netns", outside)
    for ns, fam in ((pod, POD), (outside, PEER)):
        sh("ip", "-n", ns, "addr", "add", f"{fam[4]}/24", "dev", "eth0")
        sh("ip", "-n", ns, "addr", "add", f"{fam[6]}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    return pod, outside


@pytest.fixture
def log(lab: Lab) -> Iterator[Path]:
    """The proxy's log, where uid 2102 can write (pytest's tmp dirs are root-only)."""
    path = Path(f"/tmp/pnt-{lab.tag}-proxy.log")
    path.touch()
    path.chmod(0o666)
    yield path
    path.unlink(missing_ok=True)


def start_proxy(lab: Lab, pod: str, log: Path) -> None:
    proc = subprocess.Popen(["ip", "netns", "exec", pod, "setpriv", "--reuid", "2102", "--regid", "2102",
                             "--clear-groups", sys.executable, PROXY, "4143", "4140", str(log)],
                            stdout=subprocess.PIPE, text=True)
    lab.processes.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"


def proxy_init(pod: str, firewall: str, *extra: str) -> None:
    out = subprocess.run([PODNETCTL, "proxy-init", "--netns", f"/run/netns/{pod}", "--firewall", firewall,
                          "--ipv6", *extra], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def seen(log: Path) -> list[str]:
    """The proxy's log lines. It writes a connection's line (and closes the file) before it
    connects upstream, so once a client got its answer through the proxy the line is there:
    nothing to wait for."""
    return log.read_text().splitlines()


def need_firewall(firewall: str) -> None:
    if firewall != "nftables":
        need(f"{firewall}-restore", f"{firewall}-save", f"ip6{firewall[2:]}-restore")


#: Fixed, whatever the machine has: a missing variant fails its test (envgate), never vanishes.
FIREWALLS = ["iptables-nft", "iptables-legacy", "nftables"]


@pytest.mark.parametrize("firewall", FIREWALLS)
def test_inbound_outbound_and_bypasses(lab: Lab, log: Path, firewall: str) -> None:
    need_firewall(firewall)
    pod, outside = wire(lab)
    start_proxy(lab, pod, log)
    lab.serve(pod, "APP", 8080)
    lab.serve(pod, "ADMIN", 9999)
    lab.serve(outside, "EXT", 7070)
    proxy_init(pod, firewall, "--inbound-ports-to-ignore", "9999", "--outbound-ports-to-ignore", "7443")
    proxy_init(pod, firewall, "--inbound-ports-to-ignore", "9999", "--outbound-ports-to-ignore", "7443")  # idempotent
    for family in (4, 6):
        # Inbound through the proxy: the app sees the proxy's connection, from the pod itself.
        answer = lab.talk(outside, "tcp", POD[family], 8080)
        assert answer.startswith("APP ") and PEER[family] not in answer, (family, answer)
        assert f"in {POD[family]} 8080" in seen(log)
        # A skipped inbound port bypasses it: the app sees the outside host.
        assert PEER[family] in lab.talk(outside, "tcp", POD[family], 9999)
        # Outbound from the app (root) goes through the outbound port; the proxy's own
        # connection (uid 2102) is not redirected again, or nothing would answer.
        assert lab.talk(pod, "tcp", PEER[family], 7070).startswith("EXT ")
        assert f"out {PEER[family]} 7070" in seen(log)
    # Loopback bypasses.
    before = len(seen(log))
    assert lab.talk(pod, "tcp", "127.0.0.1", 8080).startswith("APP 127.0.0.1") or \
        lab.talk(pod, "tcp", "127.0.0.1", 8080).startswith("APP ::ffff:127.0.0.1")
    assert len(seen(log)) == before
    # Cleanup leaves no redirection.
    out = subprocess.run([PODNETCTL, "proxy-init", "--netns", f"/run/netns/{pod}", "--firewall", firewall,
                          "--ipv6", "--cleanup"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert PEER[4] in lab.talk(outside, "tcp", POD[4], 8080)
    if firewall != "iptables-legacy":  # legacy xtables keep an empty nat table once loaded
        assert lab.exec(pod, "nft", "list", "ruleset").stdout.strip() == ""


@pytest.mark.parametrize("skipped", [4, 6], ids=["skip-ipv4-peer", "skip-ipv6-peer"])
@pytest.mark.parametrize("firewall", FIREWALLS)
def test_skipped_subnet_bypasses(lab: Lab, log: Path, firewall: str, skipped: int) -> None:
    """--subnets-to-ignore with the outside host's address of one family: from it the app sees
    the outside host and the proxy logs nothing; from its address of the other family (the
    positive control) the connection goes through the proxy, which logs it."""
    need_firewall(firewall)
    pod, outside = wire(lab)
    start_proxy(lab, pod, log)
    lab.serve(pod, "APP", 8080)
    proxy_init(pod, firewall, "--subnets-to-ignore", f"{PEER[skipped]}/{32 if skipped == 4 else 128}")
    other = 6 if skipped == 4 else 4
    answer = lab.talk(outside, "tcp", POD[other], 8080)
    assert answer.startswith("APP ") and PEER[other] not in answer, answer
    assert f"in {POD[other]} 8080" in seen(log)
    assert PEER[skipped] in lab.talk(outside, "tcp", POD[skipped], 8080)
    assert not any(line.startswith(f"in {POD[skipped]} ") for line in seen(log)), seen(log)
