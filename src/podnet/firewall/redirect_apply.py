"""Applying podnet-redirect's rules (:mod:`podnet.firewall.redirect`) in a network namespace,
with iptables-legacy, iptables-nft or nftables — the work of ``podnetctl proxy-init`` and of
the ``podnet-redirect`` chained plugin.

Each family is one ``*-restore --noflush`` transaction; with ``ipv6`` an IPv6 failure is an
error, never skipped (linkerd proxy-init #388 let IPv6 bypass the proxy that way).
"""

from __future__ import annotations

from podnet.errors import KernelError
from podnet.firewall import iptables, nft, redirect

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.firewall.redirect import RedirectOptions

FIREWALLS = ("iptables-legacy", "iptables-nft", "nftables")


def _variant(firewall: str) -> str:
    return firewall.split("-", 1)[1]  # legacy | nft


def _nft(netns: str | None, script: str) -> None:
    from podnet import proc

    argv = ["nsenter", f"--net={netns}", "nft", "-f", "-"] if netns else ["nft", "-f", "-"]
    try:
        proc.run(argv, script.encode(), die_with_parent=True)
    except proc.ToolError as err:
        raise KernelError("nft failed", err.stderr.strip()) from err


def plan(
    options: RedirectOptions, firewall: str, ipv6: bool, netns: str | None
) -> list[tuple[str, str]]:
    """What :func:`apply` would run: ``(tool, input text)`` pairs, reading the current rules
    (so the jump rules are only added when absent). ``--simulate`` prints this."""
    if firewall == "nftables":
        return [("nft -f -", redirect.nft_script(options, ipv6))]
    out = []
    for family in (4, 6) if ipv6 else (4,):
        jumps, _ = redirect.present(save(firewall, family, netns))
        tool = iptables.tool(family, "restore", _variant(firewall))
        out.append((f"{tool} --noflush", redirect.restore_script(options, family, jumps)))
    return out


def apply(
    options: RedirectOptions, firewall: str, ipv6: bool, netns: str | None
) -> list[tuple[str, str]]:
    """Install the rules (idempotent: a second run or a run after a half-applied one ends with
    the same rules once). Returns what was applied. KernelError (104) on any failure."""
    steps = plan(options, firewall, ipv6, netns)
    _run_steps(firewall, netns, steps)
    return steps


def _run_steps(firewall: str, netns: str | None, steps: list[tuple[str, str]]) -> None:
    for tool, text in steps:
        if firewall == "nftables":
            _nft(netns, text)
        else:
            family = 6 if tool.startswith("ip6") else 4
            iptables.restore(family, text, "apply the proxy redirection",
                             variant=_variant(firewall), netns=netns)  # fmt: skip


def cleanup(firewall: str, ipv6: bool, netns: str | None) -> list[tuple[str, str]]:
    """Remove everything :func:`apply` installed; nothing to remove is success."""
    if firewall == "nftables":
        steps = [("nft -f -", redirect.nft_cleanup_script())]
    else:
        steps = []
        for family in (4, 6) if ipv6 else (4,):
            jumps, chains = redirect.present(save(firewall, family, netns))
            text = redirect.cleanup_script(jumps, chains)
            if text:
                tool = iptables.tool(family, "restore", _variant(firewall))
                steps.append((f"{tool} --noflush", text))
    _run_steps(firewall, netns, steps)
    if firewall == "iptables-nft":
        for family in (4, 6) if ipv6 else (4,):
            _drop_empty_nat_table(family, netns)
    return steps


def _drop_empty_nat_table(family: int, netns: str | None) -> None:
    """iptables-nft creates table ``ip nat`` (``ip6 nat``) on first use; when our chains were
    all it held, remove it too, so --cleanup leaves the netns as it was."""
    saved = iptables.Saved(save("iptables-nft", family, netns))
    builtin = {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
    if saved.chains and saved.chains <= builtin and not saved.rules:
        _nft(netns, f"delete table {'ip6' if family == 6 else 'ip'} nat\n")


def save(firewall: str, family: int, netns: str | None) -> str:
    """``iptables-save -t nat`` of the chosen iptables variant and family in ``netns``."""
    return iptables.save(family, variant=_variant(firewall), netns=netns)


def list_nft(netns: str | None) -> str:
    """``nft list table inet podnet_redirect`` in ``netns`` ("" when it does not exist);
    KernelError for any other failure."""
    if netns is None:
        return nft.list_text("table", "inet", redirect.NFT_TABLE) or ""
    from podnet import proc

    argv = ["nsenter", f"--net={netns}", "nft", "list", "table", "inet", redirect.NFT_TABLE]
    rc, out, err = proc.spawn(argv).wait()
    if rc == 0:
        return out
    if "No such file or directory" in err:
        return ""
    raise KernelError(f"nft failed to list table inet {redirect.NFT_TABLE} in {netns}",
                      err.strip())  # fmt: skip
