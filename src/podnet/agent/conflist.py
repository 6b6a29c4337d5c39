"""The node's podnet conflist, written from its own Node's ``spec.podCIDRs``.

The file is the one ``podnetctl install`` writes for the network (:func:`podnet.runtime.
installer.conflist_path`: ``<cni_conf_dir>/10-<network_name>.conflist``). When there is none,
the agent writes ``install``'s content (:func:`podnet.runtime.installer.network_conflist`:
``ranges``, the ``portMappings`` capability, ``dataDir`` when the agent's store is not the
node's default). When there is one whose first plugin is podnet's with ``ranges``, only those
``ranges`` change: every other key and every chained plugin an administrator put there
(``mtu``, ``ipMasq``, ``bandwidth``, ``podnet-portmap`` …) stays as written, and ``dataDir`` is
added only when the file has none; a file naming a ``dataDir`` that is not the agent's store
is left alone (logged once): its plugins would not use the store the agent keeps. Another
plugin's conflist, or a podnet one of a ``network`` or an ``ipam`` plugin, is left alone too.
The podnet plugin is validated as the plugin will read it. The file is replaced atomically — a
temporary file in the same directory, fsynced, renamed over the old one, then the directory
fsynced — and only when its content would change: a restarted agent writes nothing and the
file keeps its mtime (and an administrator's layout).

Ranges an administrator added to the file ("the design of the CNI allows to add additional
ranges", cni-kindnet's README) are kept, after the podCIDRs. To tell them from a podCIDR the
Node no longer has, the agent records which ranges it wrote in the store (``podnet_state``,
key ``agent_conflist:<path>``), not in the conflist: the conflist is what runtimes and
administrators read and edit — a marker there could be edited away or copied with the file —
while the store is podnet's record of the node, survives a restart of the agent and is written
in a transaction. The record is widened to old and new podCIDRs before the file is replaced and
narrowed after: an agent killed in between still knows the old podCIDR as its own.
"""

from __future__ import annotations

import json
import os
from typing import Any

from podnet import checked, nodeconf
from podnet.agent.notes import LOG, Notes
from podnet.errors import CNIError
from podnet.netconf import PodnetConf
from podnet.runtime import installer
from podnet.runtime.files import write_atomic

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.agent.model import Node
    from podnet.agent.settings import Settings
    from podnet.store import Store

__all__ = ["STATE_PREFIX", "Conflist", "write_atomic"]

#: ``podnet_state`` key prefix of the ranges the agent wrote into a conflist (then its path).
STATE_PREFIX = "agent_conflist:"


def _existing(path: str) -> tuple[dict[str, Any] | None, list[object]] | None:
    """The conflist at ``path`` and the ``ranges`` of its podnet plugin as written (items
    unchecked): ``(None, [])`` when there is no file; None when the file is not a podnet
    conflist of ranges (not a JSON object, its first plugin not of type ``podnet``, or one of
    a podnet ``network`` or of an ``ipam`` plugin): not the agent's to change."""
    try:
        with open(path, "rb") as f:
            conf = json.loads(f.read())
    except FileNotFoundError:
        return None, []
    except (OSError, ValueError):
        return None
    plugins = conf.get("plugins") if isinstance(conf, dict) else None
    if not isinstance(plugins, list) or not plugins or not isinstance(plugins[0], dict):
        return None
    first = plugins[0]
    if first.get("type") != "podnet" or "network" in first or "ipam" in first:
        return None
    ranges = first.get("ranges", [])
    return (conf, list(ranges)) if isinstance(ranges, list) else None


def _ranges_in(path: str) -> list[object] | None:
    """The ``ranges`` of :func:`_existing` (None: not the agent's file)."""
    found = _existing(path)
    return None if found is None else found[1]


class Conflist:
    """The conflist of ``settings`` (:mod:`podnet.agent.settings`): :meth:`sync` makes it
    hold this node's podCIDRs."""

    def __init__(self, settings: Settings, notes: Notes) -> None:
        self.settings = settings
        self.notes = notes
        self.path = installer.conflist_path(settings.cni_conf_dir, settings.network_name)
        self.key = STATE_PREFIX + self.path

    def _data_dir(self) -> str | None:
        """``dataDir`` for the conflist: the agent's store unless it is the node's default."""
        default = nodeconf.load().data_dir
        same = os.path.realpath(self.settings.data_dir) == os.path.realpath(default)
        return None if same else self.settings.data_dir

    def _recorded(self, store: Store) -> list[str]:
        value = store.get_state(self.key)
        return [r for r in value.split(",") if r] if value else []

    def _record(self, store: Store, ranges: list[str]) -> None:
        with store.write():
            store.set_state(self.key, ",".join(ranges))

    def _conf(self, conf: dict[str, Any] | None, ranges: list[object]) -> dict[str, Any] | None:
        """The conflist to hold: a new one (:func:`podnet.runtime.installer.network_conflist`)
        when there is none; else ``conf`` with only the podnet plugin's ``ranges`` changed (and
        ``dataDir`` added when it has none and the agent's store is not the node's default),
        every other key and chained plugin as the administrator wrote it. None (logged once)
        when ``conf`` names a ``dataDir`` that is not the agent's store: the plugins would
        then not use the store the agent keeps. InvalidConfig (7) when the podnet plugin is
        not valid as the plugin reads it."""
        mine = self._data_dir()
        if conf is None:
            return installer.network_conflist(name=self.settings.network_name,
                                              ranges=ranges,  # type: ignore[arg-type]
                                              data_dir=mine)  # fmt: skip
        plugin = dict(conf["plugins"][0])
        theirs = plugin.get("dataDir")
        if theirs is not None and not (isinstance(theirs, str) and os.path.realpath(theirs)
                                       == os.path.realpath(self.settings.data_dir)):  # fmt: skip
            self.notes.note(("conflist", "datadir", self.path, checked.show(theirs)),
                            f"conflist {self.path} names dataDir {checked.show(theirs)}, not the "
                            f"agent's store {self.settings.data_dir}: left alone (its plugins "
                            f"would not use the store the agent keeps)")  # fmt: skip
            return None
        plugin["ranges"] = ranges
        if theirs is None and mine is not None:
            plugin["dataDir"] = mine
        PodnetConf({**plugin, "name": conf.get("name"), "cniVersion": conf.get("cniVersion")})
        return {**conf, "plugins": [plugin, *conf["plugins"][1:]]}

    def sync(self, me: Node | None, store: Store) -> bool:
        """Make the conflist hold ``me``'s podCIDRs (IPv4 first) and the administrator's extra
        ranges. Returns False, having logged why, when it cannot: the directory is not
        writable, the file there is not a podnet conflist, the result is not a valid podnet
        config (an extra range overlapping a podCIDR, a ``dataDir`` the node does not allow).
        A Node without podCIDRs gets no conflist yet (said once; True)."""
        if me is None or not me.pod_cidrs:
            self.notes.note(("conflist", "waiting"),
                            f"no conflist yet: Node {self.settings.node_name} has no podCIDRs "
                            f"(waiting for spec.podCIDRs)")  # fmt: skip
            return True
        ours = [checked.text(net) for _, net in sorted(me.pod_cidrs.items())]
        found = _existing(self.path)
        if found is None:
            self.notes.note(("conflist", "foreign", self.path),
                            f"conflist {self.path} is not a podnet conflist of ranges (another "
                            f"plugin's, a network's or an ipam's): left alone")  # fmt: skip
            return False
        conf, existing = found
        before = self._recorded(store)
        extra = [r for r in existing if r not in before and r not in ours]
        try:
            new = self._conf(conf, [*ours, *extra])
        except (CNIError, ValueError) as err:
            msg = getattr(err, "msg", str(err))
            self.notes.note(("conflist", "invalid", msg),
                            f"conflist {self.path} not written: {msg}")  # fmt: skip
            return False
        if new is None:
            return False
        if new == conf:
            if before != ours:
                self._record(store, ours)
            return True
        conf = new
        data = (json.dumps(conf, indent=2) + "\n").encode()
        try:
            if before != ours:  # know both as ours while the file may hold either
                self._record(store, [*before, *(r for r in ours if r not in before)])
            changed = write_atomic(self.path, data)
        except OSError as err:
            self.notes.note(("conflist", "unwritable", self.path),
                            f"cannot write conflist {self.path}: {err.strerror or err}")
            return False
        if before != ours:
            self._record(store, ours)
        if changed:
            was = [r for r in existing if isinstance(r, str)]
            LOG.info("conflist %s: ranges %s%s", self.path, ", ".join(map(str, [*ours, *extra])),
                     f" (was {', '.join(was)})" if was else " (created)")  # fmt: skip
        return True
