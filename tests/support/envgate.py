"""The required-environment gate: what the suite needs from the machine, and the only way a
test may skip.

Every privilege, tool and file a test needs is named in :data:`REQUIREMENTS`. A test states its
needs with :func:`need`. A missing requirement **fails** the test, naming what is missing and
the Debian package that brings it, unless a person opted out of it with a stated reason::

    PODNET_TEST_ALLOW_MISSING='podman,ctr=no container runtimes on this laptop' pytest
    PODNET_TEST_ALLOW_MISSING='*=unprivileged quick run' pytest tests/unit/test_checked.py

Only then does the test skip (raising :class:`Allowed`), and the reason is the person's. Any
other skip (a ``skipif``, a ``pytest.skip`` in a test or at module level, a skip whose reason
merely reads like this one's) is turned into a failure by ``conftest.py``, and so is an
``xfail`` that is not strict or a ``pytest.xfail()`` call; the run's last lines list every skip
with its reason.

``scripts/test.sh`` (the README's test command, run by CI) sets ``PODNET_TEST_REQUIRE=all``:
then every requirement is checked before the first test, and the run stops at once, naming
each one missing, if any is neither present nor opted out of.
"""

from __future__ import annotations

import grp
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from runtimes import static_busybox

#: The prefix of every skip reason the gate allows (``conftest.py`` fails any other skip).
ALLOWED = "allowed missing"
#: The environment variable of the opt-out: ``name[,name...]=reason`` items joined by ``;``;
#: the name ``*`` opts out of every requirement.
ALLOW_ENV = "PODNET_TEST_ALLOW_MISSING"
#: Set to ``all`` by scripts/test.sh: check every requirement before the first test.
REQUIRE_ENV = "PODNET_TEST_REQUIRE"

#: The reference CNI plugins the comparisons and chains run (Debian containernetworking-plugins).
REFERENCE_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "ptp", "tuning")
REFERENCE_DIR = "/usr/lib/cni"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One thing the suite needs: ``present()`` says whether this machine has it; ``brings``
    says how to get it (a Debian package, or what to do)."""

    name: str
    present: Callable[[], bool]
    brings: str


def _tool(name: str, package: str) -> Requirement:
    return Requirement(name, lambda: shutil.which(name) is not None, f"Debian package {package}")


def _group(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


_TOOLS = {
    "ip": "iproute2", "bridge": "iproute2", "ss": "iproute2", "nft": "nftables",
    "iptables-nft-restore": "iptables", "iptables-nft-save": "iptables",
    "ip6tables-nft-restore": "iptables", "ip6tables-nft-save": "iptables",
    "iptables-legacy-restore": "iptables", "iptables-legacy-save": "iptables",
    "ip6tables-legacy-restore": "iptables", "ip6tables-legacy-save": "iptables",
    "iptables": "iptables", "ip6tables": "iptables",
    "conntrack": "conntrack", "podman": "podman", "ctr": "containerd", "containerd": "containerd", "containerd-shim-runc-v2": "containerd",
    "runc": "runc", "lxc": "lxd-client", "strace": "strace", "openssl": "openssl",
    "setpriv": "util-linux", "unshare": "util-linux", "nsenter": "util-linux", "mount": "mount",
    "sysctl": "procps", "curl": "curl", "setcap": "libcap2-bin", "ovsdb-client": "openvswitch-common",
    "patchelf": "patchelf", "chroot": "coreutils",
}  # fmt: skip

REQUIREMENTS: dict[str, Requirement] = {
    "root": Requirement("root", lambda: os.geteuid() == 0, "run as root (network namespaces, nft)"),
    **{name: _tool(name, package) for name, package in _TOOLS.items()},
    "reference-plugins": Requirement(
        "reference-plugins",
        lambda: all(os.access(f"{REFERENCE_DIR}/{p}", os.X_OK) for p in REFERENCE_PLUGINS),
        "Debian package containernetworking-plugins",
    ),
    "busybox-static": Requirement(
        "busybox-static", lambda: static_busybox() is not None, "Debian package busybox-static"
    ),
    "group:nogroup": Requirement("group:nogroup", lambda: _group("nogroup"), "Debian's base-passwd"),
}


class Allowed(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """The one skip the gate lets through: raised by :func:`need` for ``names``, each missing
    and opted out of (``conftest.py`` checks that again with :func:`granted`)."""

    def __init__(self, msg: str, names: tuple[str, ...]) -> None:
        super().__init__(msg)
        self.names = names


def granted(names: tuple[str, ...]) -> bool:
    """Whether every one of ``names`` is a known requirement this machine lacks and a person
    opted out of: what an :class:`Allowed` skip must still hold when its report is made."""
    opt_outs = allowed()
    return bool(names) and all(
        n in REQUIREMENTS and not REQUIREMENTS[n].present() and (n in opt_outs or "*" in opt_outs)
        for n in names)  # fmt: skip


def allowed() -> dict[str, str]:
    """The opt-outs a person stated: requirement name (or ``*``) -> reason.

    Raises :class:`pytest.UsageError` for an item without a reason or an unknown name."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in os.environ.get(ALLOW_ENV, "").split(";"))):
        names, sep, reason = item.partition("=")
        if not sep or not reason.strip():
            raise pytest.UsageError(f"{ALLOW_ENV}: {item!r} has no reason (name[,name]=reason)")
        for name in (n.strip() for n in names.split(",")):
            if name != "*" and name not in REQUIREMENTS:
                raise pytest.UsageError(f"{ALLOW_ENV}: unknown requirement {name!r}")
            out[name] = reason.strip()
    return out


def missing(names: tuple[str, ...] | None = None) -> list[Requirement]:
    """The requirements among ``names`` (default: all) this machine lacks."""
    return [REQUIREMENTS[n] for n in (names or tuple(REQUIREMENTS)) if not REQUIREMENTS[n].present()]


def describe(lacking: list[Requirement]) -> str:
    return ", ".join(f"{r.name} ({r.brings})" for r in lacking)


def need(*names: str) -> None:
    """State what the calling test needs. Returns when all of it is here; skips with the
    person's reason when every missing one was opted out of; fails otherwise, naming each."""
    unknown = [n for n in names if n not in REQUIREMENTS]
    assert not unknown, f"unknown requirement(s) {unknown}: add them to envgate.REQUIREMENTS"
    lacking = missing(names)
    if not lacking:
        return
    opt_outs = allowed()
    reasons = {r.name: opt_outs.get(r.name, opt_outs.get("*")) for r in lacking}
    if all(reasons.values()):
        why = "; ".join(f"{n}: {reason}" for n, reason in reasons.items())
        raise Allowed(f"{ALLOWED} {why}", tuple(reasons))
    pytest.fail(
        f"required but missing: {describe(lacking)}; install it (scripts/setup.sh does) or opt "
        f"out with {ALLOW_ENV}='<name>=<reason>'",
        pytrace=False,
    )


def check_all() -> str | None:
    """For ``PODNET_TEST_REQUIRE=all``: None when every requirement is present or opted out
    of, else the one-line message that stops the run."""
    opt_outs = allowed()
    lacking = [r for r in missing() if r.name not in opt_outs and "*" not in opt_outs]
    if not lacking:
        return None
    return (
        f"podnet tests: required but missing: {describe(lacking)}. Install them (scripts/setup.sh "
        f"does) or opt out, with a reason: {ALLOW_ENV}='<name>=<reason>'"
    )
