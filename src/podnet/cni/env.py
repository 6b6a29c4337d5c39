"""The spec's CNI_* environment parameters and their rules (CNI SPEC 1.1.0 "Parameters").

Used by the plugin skeleton (every verb is checked before its handler runs) and by the runtime
(``podnetctl net``), so both refuse the same values. Every refusal is
:class:`~podnet.errors.InvalidEnv` (code 4) naming the variable.
"""

from __future__ import annotations

from podnet import checked
from podnet.errors import InvalidEnv

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: Required environment per verb; CNI_NETNS is optional for DEL (libcni skel's table).
REQUIRED_ENV: dict[str, tuple[str, ...]] = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "GC": ("CNI_PATH",),
    "STATUS": ("CNI_PATH",),
    "VERSION": (),
}
#: Variables a plugin reads; each must be valid UTF-8 (non-UTF-8 bytes reach Python as lone
#: surrogates, which no tool can be given).
CNI_VARS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH")
IFNAMSIZ = 15  # usable characters of a Linux interface name


#: Longest CNI_CONTAINERID accepted (runtimes use 64 hex digits, containerd prefixes its
#: namespace): the ID goes into rows and rule comments; the spec sets no bound.
MAX_CONTAINER_ID = 255


def valid_container_id(cid: str) -> bool:
    """Spec: alphanumeric, underscore, dot, hyphen; starts with an alphanumeric character; at
    most :data:`MAX_CONTAINER_ID` characters (podnet's bound)."""
    return (
        0 < len(cid) <= MAX_CONTAINER_ID
        and cid.isascii()
        and cid[0].isalnum()
        and all(c.isalnum() or c in "_.-" for c in cid)
    )


def valid_ifname(name: str) -> bool:
    """CNI_IFNAME rules of libcni's skel: 1-15 characters, no ``/``, ``:`` or whitespace, not
    ``.`` or ``..``; valid UTF-8."""
    return (
        0 < len(name) <= IFNAMSIZ
        and name not in (".", "..")
        and not any(c in "/:" or c.isspace() for c in name)
        and _utf8(name)
    )


def _utf8(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check(command: str, env: Mapping[str, str]) -> None:
    """Refuse (code 4) what ``command`` cannot run with: a required variable missing, a
    variable that is not UTF-8, an invalid CNI_CONTAINERID or CNI_IFNAME, a CNI_NETNS that is
    not an absolute path (ADD and CHECK; DEL accepts anything, the netns may be gone)."""
    for key in CNI_VARS:
        if not _utf8(env.get(key, "")):
            raise InvalidEnv(f"{key} is not valid UTF-8")
    missing = [k for k in REQUIRED_ENV[command] if not env.get(k)]
    if missing:
        raise InvalidEnv(f"required env variables [{','.join(missing)}] missing")
    if command not in ("ADD", "DEL", "CHECK"):
        return
    cid = env.get("CNI_CONTAINERID", "")
    if not valid_container_id(cid):
        raise InvalidEnv(
            f"invalid CNI_CONTAINERID {checked.show(cid)}: must be alphanumeric, '_', '.', '-', "
            f"start with an alphanumeric character and be at most {MAX_CONTAINER_ID} characters"
        )
    ifname = env.get("CNI_IFNAME", "")
    if not valid_ifname(ifname):
        raise InvalidEnv(
            f"invalid CNI_IFNAME {checked.show(ifname)}: 1-15 characters, no '/', ':' or "
            "whitespace"
        )
    netns = env.get("CNI_NETNS", "")
    if command != "DEL" and not netns.startswith("/"):
        raise InvalidEnv(f"invalid CNI_NETNS {netns!r}: must be an absolute path")
