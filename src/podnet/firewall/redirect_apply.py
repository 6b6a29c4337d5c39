"""Applying podnet-redirect's rules (:mod:`podnet.firewall.redirect`) in a network namespace,
with iptables-legacy, iptables-nft or nftables — the work of ``podnetctl proxy-init`` and of
the ``podnet-redirect`` chained plugin.

Each family is one ``*-restore --noflush`` transaction; with ``ipv6`` an IPv6 failure is an
error, never skipped (linkerd proxy-init #388 let IPv6 bypass the proxy that way).
"""

from __future__ import annotations

from podnet import proc
from podnet.cni.errors import KernelError
from podnet.firewall import redirect

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.firewall.redirect import RedirectOptions

FIREWALLS = ("iptables-legacy", "iptables-nft", "nftables")


def _in_netns(netns: str | None, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net={netns}", *argv] if netns else argv


def _tool(firewall: str, family: int, what: str) -> str:
    variant = firewall.split("-", 1)[1]  # legacy | nft
    return f"{'ip6tables' if family == 6 else 'iptables'}-{variant}-{what}"


def _run(netns: str | None, argv: list[str], stdin: str | None = None) -> str:
    try:
        return proc.run(_in_netns(netns, argv), stdin.encode() if stdin is not None else None)
    except proc.ToolError as err:
        raise KernelError(f"{argv[0]} failed", err.stderr.strip()) from err
    except FileNotFoundError as err:
        raise KernelError(f"{argv[0]} is not installed", str(err)) from err


def plan(
    options: RedirectOptions, firewall: str, ipv6: bool, netns: str | None
) -> list[tuple[str, str]]:
    """What :func:`apply` would run: ``(tool, input text)`` pairs, reading the current rules
    (so the jump rules are only added when absent). ``--simulate`` prints this."""
    if firewall == "nftables":
        return [("nft -f -", redirect.nft_script(options, ipv6))]
    out = []
    for family in (4, 6) if ipv6 else (4,):
        jumps, _ = redirect.present(_run(netns, [_tool(firewall, family, "save"), "-t", "nat"]))
        tool = _tool(firewall, family, "restore")
        out.append((f"{tool} --noflush", redirect.restore_script(options, family, jumps)))
    return out


def apply(
    options: RedirectOptions, firewall: str, ipv6: bool, netns: str | None
) -> list[tuple[str, str]]:
    """Install the rules (idempotent: a second run or a run after a half-applied one ends with
    the same rules once). Returns what was applied. KernelError (104) on any failure."""
    steps = plan(options, firewall, ipv6, netns)
    for tool, text in steps:
        _run(netns, tool.split(), text)
    return steps


def cleanup(firewall: str, ipv6: bool, netns: str | None) -> list[tuple[str, str]]:
    """Remove everything :func:`apply` installed; nothing to remove is success."""
    if firewall == "nftables":
        steps = [("nft -f -", redirect.nft_cleanup_script())]
    else:
        steps = []
        for family in (4, 6) if ipv6 else (4,):
            jumps, chains = redirect.present(
                _run(netns, [_tool(firewall, family, "save"), "-t", "nat"])
            )
            text = redirect.cleanup_script(jumps, chains)
            if text:
                steps.append((f"{_tool(firewall, family, 'restore')} --noflush", text))
    for tool, text in steps:
        _run(netns, tool.split(), text)
    if firewall == "iptables-nft":
        for family in (4, 6) if ipv6 else (4,):
            _drop_empty_nat_table(family, netns)
    return steps


def _drop_empty_nat_table(family: int, netns: str | None) -> None:
    """iptables-nft creates table ``ip nat`` (``ip6 nat``) on first use; when our chains were
    all it held, remove it too, so --cleanup leaves the netns as it was."""
    from podnet.firewall.portmap_iptables import SavedNat

    saved = SavedNat(save("iptables-nft", family, netns))
    builtin = {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
    if saved.chains and saved.chains <= builtin and not saved.rules:
        _run(netns, ["nft", "delete", "table", "ip6" if family == 6 else "ip", "nat"])


def save(firewall: str, family: int, netns: str | None) -> str:
    """``iptables-save -t nat`` of the chosen iptables variant and family in ``netns``."""
    return _run(netns, [_tool(firewall, family, "save"), "-t", "nat"])


def list_nft(netns: str | None) -> str:
    """``nft list table inet podnet_redirect`` in ``netns`` ("" when it does not exist)."""
    try:
        return _run(netns, ["nft", "list", "table", "inet", redirect.NFT_TABLE])
    except KernelError:
        return ""
