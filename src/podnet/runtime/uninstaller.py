"""``podnetctl uninstall``: undo what :mod:`podnet.runtime.installer` wrote on this node — its
files (each only when its content is what ``install`` writes), table ``inet podnet`` of the
current network namespace when it is the store's, the node configuration, and with ``purge`` a
podnet store.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import urllib.parse
from typing import TYPE_CHECKING

from podnet import nodeconf, reconcile
from podnet.errors import INVALID_CONFIG, IO_FAILURE, CNIError
from podnet.firewall import nft
from podnet.link.names import owner_alias
from podnet.runtime.files import Installed
from podnet.runtime.installer import DEFAULT_BIN_DIR, conflist_path
from podnet.runtime.pluginfile import PLUGIN_MARK, PLUGINS
from podnet.runtime.units import _UNIT_HEAD, DEFAULT_UNIT_DIR, RESTORE_UNIT
from podnet.store import open_store
from podnet.store.conn import _require_trusted
from podnet.store.schema import MIGRATIONS

if TYPE_CHECKING:
    from podnet.nodeconf import NodeConf

__all__ = ["STORE_DIRS", "STORE_FILES", "uninstall"]


def _podnets(path: str) -> str | None:
    """What podnet file ``path`` is (``plugin``, ``conflist``, ``unit``, ``unit link``, or
    ``node config``), judged by its content as ``install`` writes it; None when it is not
    one podnet made (or is gone)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        return "unit link" if os.path.basename(target) == os.path.basename(path) and \
            _podnets(target) == "unit" else None  # fmt: skip
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return None
    text = head.decode(errors="replace")
    lines = text.splitlines()
    if len(lines) > 1 and lines[0].startswith("#!") and lines[1].startswith(PLUGIN_MARK):
        return "plugin"
    if text.startswith(_UNIT_HEAD):
        return "unit"
    if text.startswith("# podnet's node configuration"):
        return "node config"
    try:
        conf = json.loads(text)
    except ValueError:
        return None
    if (isinstance(conf, dict) and set(conf) == {"cniVersion", "cniVersions", "name", "plugins"}
            and isinstance(conf["plugins"], list) and len(conf["plugins"]) == 1
            and isinstance(conf["plugins"][0], dict)
            and conf["plugins"][0].get("type") == "podnet"):  # fmt: skip
        return "conflist"
    return None


#: Files podnet makes in a data dir (``uninstall --purge`` removes them, then the directory if
#: nothing else is left in it).
STORE_FILES = ("podnet.db", "podnet.db-wal", "podnet.db-shm", "podnet.db-journal", "podnet.lock",
               "unix.socket")  # fmt: skip
STORE_DIRS = ("podnet.lock.d",)


def uninstall(
    *,
    bin_dir: str = DEFAULT_BIN_DIR,
    conf_dir: str = "/etc/cni/net.d",
    name: str = "podnet",
    unit_dir: str = DEFAULT_UNIT_DIR,
    data_dir: str | None = None,
    node_conf: str | None = None,
    purge: bool = False,
    force: bool = False,
) -> list[Installed]:
    """Undo ``install`` on this node: the files it wrote (those the node configuration lists,
    and the plugin files of ``bin_dir``, ``<conf_dir>/10-<name>.conflist`` and the restore unit
    of ``unit_dir`` with its ``.wants`` link) — each only when its content is what ``install``
    writes —, table ``inet podnet`` of the current network namespace and the owner records in
    ``/run/podnet/tables`` when they are the store's (``data_dir``, default the node's store),
    the node configuration when its content is what ``install`` writes, and with ``purge``
    the store's files (:data:`STORE_FILES`) and its directory once empty — only when it is a
    podnet store (:func:`_purge_check`). Idempotent; returns what was done (action
    ``removed``, ``left`` with the reason, or ``absent``).

    Refused (CNIError 7, nothing removed) while any store the node may use holds pods or
    networks (:func:`_node_stores`: ``data_dir``, the node configuration's ``data_dir`` and
    every ``allow_data_dir``), unless ``force``; with ``purge``, when the data dir is a
    symlink or someone but root could change it or a directory on the way; NodeConfError (7)
    when the node configuration is malformed or untrusted; CNIError 5 when a file cannot be
    removed, 104 when nft fails.
    """
    node = nodeconf.read(node_conf or nodeconf.conf_path())
    store_dir = data_dir or node.data_dir
    if not force:
        for directory in _node_stores(node, store_dir):
            _refuse_busy(directory)
    purging = _purge_check(store_dir) if purge else None  # refused before anything goes
    candidates = list(node.installed)
    candidates += [os.path.join(bin_dir, p) for p in PLUGINS]
    candidates.append(conflist_path(conf_dir, name))
    unit = os.path.join(unit_dir, RESTORE_UNIT)
    candidates += [os.path.join(unit_dir, "multi-user.target.wants", RESTORE_UNIT), unit]
    done: list[Installed] = []
    seen: set[str] = set()
    try:
        for path in sorted(candidates, key=lambda p: _podnets(p) != "unit link"):
            if path in seen:
                continue
            seen.add(path)
            kind = _podnets(path)
            if kind is None:
                if os.path.lexists(path):
                    done.append(Installed(path, "left (not written by podnetctl install)"))
                continue
            os.unlink(path)
            done.append(Installed(path, "removed"))
        done += _remove_table(store_dir)
        if node.exists and _podnets(node.path) == "node config":
            os.unlink(node.path)
            done.append(Installed(node.path, "removed"))
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(node.path))  # only when empty
            nodeconf.forget()
        elif node.exists:
            done.append(Installed(node.path, "left (not written by podnetctl install)"))
        if purge:
            done += _purge(store_dir, purging or "")
    except OSError as err:
        raise CNIError(f"uninstall failed: {err}", code=IO_FAILURE) from err
    return done


#: Directories :func:`_node_stores` looks through below one ``<dir>/*`` entry at most.
MAX_STORE_WALK = 10000


def _podnet_db(store_dir: str) -> str | None:
    """Why ``<store_dir>/podnet.db`` is not podnet's database (it is missing, not a regular
    file, not SQLite, or lacks podnet's schema: ``user_version`` 1..len(MIGRATIONS) and
    tables ``pods`` and ``networks``); None when it is. Opened read-only: nothing is
    migrated or created."""
    db = os.path.join(store_dir, "podnet.db")
    try:
        st = os.lstat(db)
    except OSError:
        return "no podnet.db"
    if not stat.S_ISREG(st.st_mode):
        return "podnet.db is not a regular file"
    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(db)}?mode=ro", uri=True, timeout=5)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}  # fmt: skip
        finally:
            conn.close()
    except sqlite3.Error as err:
        return f"podnet.db is not an SQLite database podnet can read ({err})"
    if not (1 <= version <= len(MIGRATIONS) and {"pods", "networks"} <= tables):
        return "podnet.db does not hold podnet's schema"
    return None


def _node_stores(node: NodeConf, store_dir: str) -> list[str]:
    """Every store the node's plugins may use that exists: ``store_dir``, the node
    configuration's ``data_dir``, each ``allow_data_dir`` — for ``<dir>/*`` every directory
    below ``<dir>`` holding a ``podnet.db`` (symlinks not followed; CNIError 7 past
    :data:`MAX_STORE_WALK` directories: uninstall cannot tell they are empty) — each once,
    only those whose database is podnet's (:func:`_podnet_db`)."""
    candidates = [store_dir, node.data_dir]
    for directory, below in node.allowed:
        candidates.append(directory)
        if not below:
            continue
        seen = 0
        for top, dirs, files in os.walk(directory):
            seen += 1
            if seen > MAX_STORE_WALK:
                raise CNIError(f"refusing to uninstall: more than {MAX_STORE_WALK} directories "
                               f"below {directory} (allow_data_dir {directory}/* in "
                               f"{node.path}) to check for stores (--force)",
                               code=INVALID_CONFIG)  # fmt: skip
            dirs[:] = [d for d in dirs if d not in STORE_DIRS]
            if "podnet.db" in files:
                candidates.append(top)
    out: list[str] = []
    for directory in candidates:
        if directory not in out and _podnet_db(directory) is None:
            out.append(directory)
    return out


def _refuse_busy(store_dir: str) -> None:
    """CNIError 7 when the store in ``store_dir`` holds pods or networks, naming them."""
    with open_store(store_dir, create=False) as store:
        pods, networks = len(store.pods.all()), [n.name for n in store.networks.all()]
    if pods or networks:
        held = ", ".join(filter(None, [f"{pods} pod(s)" if pods else "",
                                       f"network(s) {', '.join(networks)}" if networks
                                       else ""]))  # fmt: skip
        raise CNIError(f"refusing to uninstall: the store in {store_dir} still holds {held} "
                       "(delete them first, or --force)", code=INVALID_CONFIG)  # fmt: skip


def _purge_check(store_dir: str) -> str | None:
    """Before anything is removed: why ``store_dir`` is left as it is by ``--purge`` (it does
    not exist, or is not a podnet store: :func:`_podnet_db`); None when it is purged. CNIError
    7 when it is a symlink, UntrustedDataDir (7) when someone but root could change it or a
    directory on the way (:mod:`podnet.trusted`'s rule, as for opening a store)."""
    try:
        st = os.lstat(store_dir)
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        raise CNIError(f"refusing to purge {store_dir}: it is a symlink (give the data dir "
                       "itself)", code=INVALID_CONFIG)  # fmt: skip
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    _require_trusted(store_dir)
    why = _podnet_db(store_dir)
    return None if why is None else f"not a podnet store: {why}"


def _purge(store_dir: str, why_not: str) -> list[Installed]:
    """The store's files (:data:`STORE_FILES`, :data:`STORE_DIRS`) and ``store_dir`` once empty
    — only when :func:`_purge_check` found nothing against it (``why_not`` empty), through a
    descriptor of the directory opened without following a symlink (a rename of it meanwhile
    cannot redirect the removals)."""
    if why_not:
        return [] if why_not == "absent" else [Installed(store_dir, f"left ({why_not})")]
    done = []
    fd = os.open(store_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for entry in STORE_FILES + STORE_DIRS:
            try:
                st = os.lstat(entry, dir_fd=fd)
            except FileNotFoundError:
                continue
            if entry in STORE_DIRS and stat.S_ISDIR(st.st_mode):
                shutil.rmtree(entry, dir_fd=fd)
            else:
                os.unlink(entry, dir_fd=fd)
            done.append(Installed(os.path.join(store_dir, entry), "removed"))
        rest = sorted(os.listdir(fd))
    finally:
        os.close(fd)
    if rest:
        done.append(Installed(store_dir, f"left (holds {', '.join(rest[:5])})"))
    else:
        os.rmdir(store_dir)
        done.append(Installed(store_dir, "removed"))
    return done


def _remove_table(store_dir: str) -> list[Installed]:
    """Table ``inet podnet`` of this network namespace when its comment names the store in
    ``store_dir`` (``podnet:<dir>``), and that store's owner records in ``/run/podnet/tables``
    (:func:`podnet.reconcile.claim`)."""
    mine = owner_alias(store_dir)
    done = []
    comment = nft.table_comment("inet", "podnet")
    if comment == mine:
        nft.apply("delete table inet podnet\n", "delete table inet podnet")
        done.append(Installed("table inet podnet", "removed"))
    elif comment is not None:
        done.append(Installed("table inet podnet", f"left (its owner is {comment or 'unknown'})"))
    try:
        records = sorted(os.listdir(reconcile.CLAIMS_DIR))
    except OSError:
        records = []
    for record in records:
        path = os.path.join(reconcile.CLAIMS_DIR, record)
        try:
            with open(path) as f:
                owner = f.read().strip()
        except OSError:
            continue
        if owner == mine:
            os.unlink(path)
            done.append(Installed(path, "removed"))
    return done
