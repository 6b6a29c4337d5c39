"""Keeping table ``inet podnet`` in step with the store: incremental updates, a rebuild when the
table is new, stale or was changed behind podnet's back — for hostPorts (the ``podnet`` plugin)
and network forwards (:mod:`podnet.drivers.local_forwards`) alike.

The store is the truth; the kernel may lag behind it but never holds more than it: callers
commit rows *before* :func:`add` publishes their map elements, and call :func:`delete` *before*
they delete the rows. A plugin killed between the two steps therefore leaves rows without
elements (harmless: the runtime's DEL or a GC removes both), never an element without its row —
which would DNAT a hostPort to an address the store has freed and may give to another pod.
Every function here runs under the store's write lock (:meth:`podnet.store.Store.locked`), so
kernel changes happen in the order of the commits.

The table is rebuilt (one atomic ``nft -f``) when its epoch — boot ID and node netns inode,
stored in ``podnet_state`` after each rebuild — differs from the current one (a reboot, a new
node netns), when ranges change, and when an incremental update fails because the table or an
element is missing (``nft flush ruleset``, a firewall reload).
"""

from __future__ import annotations

import os

from podnet.errors import InvalidConfig, KernelError
from podnet.firewall import FORWARDS, T, hostports, nft

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from podnet.firewall.table import TableState
    from podnet.proc import Spawned
    from podnet.store import Store
    from podnet.values import Dnat, PortMapping

    Warn = Callable[[str], None]

EPOCH_KEY = "firewall_epoch"


def epoch() -> str:
    """Identifies the kernel state the table was built in: boot ID + node netns inode."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{boot}:{os.stat('/proc/thread-self/ns/net').st_ino}"


def state(store: Store, *, without: Collection[str] = (), warn: Warn | None = None) -> TableState:
    """The table's content from the store: ranges, hostPorts (leaving out the containers in
    ``without``), forwards, bridge networks' NAT and the cluster's destinations (the node
    agent's ``cluster_cidrs``). A row whose values podnet would refuse
    today (written by an older podnet: a scoped address, say) is left out and reported to
    ``warn``: it cannot be rendered, and one such row must not keep the table from being
    rebuilt for all the others."""
    from podnet import checked
    from podnet.firewall import table
    from podnet.networks.config import is_true, subnet

    def skip(what: str, err: Exception) -> None:
        if warn is not None:
            warn(f"left out of table inet podnet: {what}: {err}")

    ranges = []
    for _, cidr, _, masq in store.ranges.all():
        try:
            ranges.append((checked.text(checked.network(cidr)), masq))
        except ValueError as err:
            skip(f"range {checked.show(cidr)}", err)
    mappings = []
    for m in store.pods.portmaps():
        if m.container_id in without:
            continue
        try:
            mappings.append(hostports.dnat_of(m))
        except ValueError as err:
            skip(f"a hostPort of {m.container_id}", err)
    bridges = []
    for net in store.networks.all():  # every network with addresses of its own (not ptp's ranges)
        subnets, nat, nat_address = {}, {}, {}
        try:
            for family in (4, 6):
                prefix = subnet(net.config, family)
                if prefix is not None:
                    subnets[family] = checked.text(prefix)
                    nat[family] = is_true(net.config.get(f"ipv{family}.nat", "false"))
                    address = net.config.get(f"ipv{family}.nat.address") or None
                    nat_address[family] = None if address is None else \
                        checked.text(checked.ip(address))  # fmt: skip
        except ValueError as err:
            skip(f"network {net.name}", err)
            continue
        if subnets:
            bridges.append(table.BridgeNat(net.name, subnets, nat, nat_address))
    drops = []
    for address in store.networks.forward_drops():
        try:
            drops.append(checked.ip(address))
        except ValueError as err:
            skip(f"the drop of forward {checked.show(address)}", err)
    cluster = []
    for cidr, source in store.cluster_cidrs():
        try:
            cluster.append(checked.text(checked.network(cidr, strict=True)))
        except ValueError as err:
            skip(f"cluster destination {checked.show(cidr)} ({checked.show(source)})", err)
    return table.TableState(ranges, mappings, store.networks.forward_dnats(), bridges, drops,
                            cluster=cluster)  # fmt: skip


def renderable(entries: Sequence[PortMapping], warn: Warn | None) -> list[PortMapping]:
    """The ``entries`` podnet can render into an nft script; the others (rows of an older
    podnet that today's checks refuse) are reported to ``warn`` — nft never took them either."""
    out = []
    for entry in entries:
        try:
            hostports.dnat_of(entry)
        except ValueError as err:
            if warn is not None:
                warn(f"hostPort row of {entry.container_id} cannot be rendered: {err}")
            continue
        out.append(entry)
    return out


class TableOwned(InvalidConfig):
    """Table ``inet podnet`` of this network namespace belongs to another store (code 7): its
    comment names that store's data dir, which holds a database. Only its owner rebuilds it."""


#: Where the node records which store owns each network namespace's table, for this boot
#: (/run is a tmpfs): a table removed behind podnet's back (``nft flush ruleset``, a firewall
#: reload) must not go to whichever store rebuilds first.
CLAIMS_DIR = "/run/podnet/tables"
#: ``getsockopt(SOL_SOCKET, SO_NETNS_COOKIE)``: a network namespace's number, never reused
#: within a boot (Linux 5.14).
_SO_NETNS_COOKIE = 71


def _claim_path() -> str | None:
    """The registry file of the current network namespace (boot ID and netns cookie), or
    None when the kernel has no netns cookies."""
    import socket  # only a rebuild asks

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            cookie = int.from_bytes(s.getsockopt(socket.SOL_SOCKET, _SO_NETNS_COOKIE, 8), "little")
    except OSError:
        return None
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{CLAIMS_DIR}/{boot}-{cookie}"


def _registered(path: str | None) -> str:
    if path is None:
        return ""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _register(path: str | None, mark: str) -> None:
    """Record ``mark`` as the owner (write and rename, so readers never see half a file), and
    forget the records of stores whose database is gone (rare: a store registers once per
    network namespace and boot)."""
    if path is None:
        return
    try:
        os.makedirs(CLAIMS_DIR, mode=0o700, exist_ok=True)
        prune_claims()
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, mark.encode() + b"\n")
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as err:
        raise KernelError(f"cannot record the owner of table inet podnet in {CLAIMS_DIR}",
                          str(err)) from err  # fmt: skip


def prune_claims(under: str | None = None) -> int:
    """Forget the owner records (:data:`CLAIMS_DIR`) of stores whose database is gone, and,
    given ``under`` (a directory), of every store in it — for whoever is about to remove it (the
    demo, a test session). Never fails: returns how many records it removed."""
    from podnet.store.db import DB_NAME

    removed = 0
    try:
        names = os.listdir(CLAIMS_DIR)
    except OSError:
        return 0
    prefix = None if under is None else os.path.join(under, "")
    for name in names:
        other = _registered(f"{CLAIMS_DIR}/{name}")
        if not other.startswith("podnet:"):
            continue
        data_dir = other[len("podnet:") :]
        gone = not os.path.exists(f"{data_dir}/{DB_NAME}")
        if gone or (prefix is not None and os.path.join(data_dir, "").startswith(prefix)):
            try:
                os.unlink(f"{CLAIMS_DIR}/{name}")
                removed += 1
            except OSError:
                pass
    return removed


def claim(store: Store) -> str:
    """The owner mark this store writes into the table's comment (``podnet:<dataDir>``), once
    it is sure the table is not another store's, and recorded in :data:`CLAIMS_DIR` for this
    network namespace. Neither the table's comment nor the record may name another store whose
    database exists: so a store that is not the node's (a mistyped or a hostile ``dataDir``)
    cannot take the table, not even while it is gone after ``nft flush ruleset``. A table with
    no comment (made by a podnet that did not mark it yet), or marked by a store whose database
    is gone, is taken over. :class:`TableOwned` (7) naming the owner otherwise; KernelError
    (104) when nft cannot list the table or the record cannot be written."""
    from podnet.link.names import owner_alias
    from podnet.store.db import DB_NAME

    data_dir = os.path.dirname(store.path)
    mine = owner_alias(data_dir)
    record = _claim_path()
    for current in (nft.table_comment(hostports.FAMILY, hostports.TABLE), _registered(record)):
        if not current or current == mine:
            continue
        if not current.startswith("podnet:"):
            raise TableOwned(f"dataDir: table inet podnet of this network namespace was not made "
                             f"by podnet (its comment is {current!r}); podnet leaves it alone")
        other = current[len("podnet:") :]
        if os.path.exists(os.path.join(other, DB_NAME)):
            raise TableOwned(
                f"dataDir: table inet podnet of this network namespace belongs to the store in "
                f"{other}, not {data_dir}: the podnet networks of a node share one dataDir "
                f"(a mistyped data dir? {other}/{DB_NAME} exists)"
            )
    if _registered(record) != mine:
        _register(record, mine)
    return mine


def rebuild(store: Store, *, without: Collection[str] = (), warn: Warn | None = None) -> None:
    """Replace the table with one built from the store (atomic), leaving out the hostPorts of
    the containers in ``without`` (those being deleted: their rows go right after), marked as
    this store's (:func:`claim`: never another store's table). Records the epoch. KernelError
    (104) with nft's message; :class:`TableOwned` (7)."""
    from podnet.firewall import table

    content = state(store, without=without, warn=warn)
    content.owner = claim(store)
    nft.apply(table.script(content), "rebuild table inet podnet")
    with store.write():
        store.set_state(EPOCH_KEY, epoch())


def current(store: Store) -> bool:
    """Whether the table was built in this boot and node netns (incremental updates apply)."""
    return store.get_state(EPOCH_KEY) == epoch()


def forwards(store: Store, listen: str, old: Sequence[Dnat] | None,
             new: Sequence[Dnat] | None, warn: Warn | None = None) -> None:  # fmt: skip
    """Make the kernel's elements of the forward on ``listen`` go from ``old`` to ``new``
    (its translations; None: the forward does not exist), inside the write transaction that
    records the change: one nft transaction deleting what is gone and adding what is new, so
    its cost does not depend on how many forwards exist. A forward without a default target
    has its listen address in the drop set (LXD drops what no port or default target takes).
    A stale table, or one missing an element, is rebuilt from the store (which holds the
    change)."""
    from podnet import checked
    from podnet.firewall import dnat
    from podnet.firewall.table import drop_set

    before, after = old or [], new or []
    new_keys = {(d.kind, d.family, d.key()): d.value() for d in after}
    old_keys = {(d.kind, d.family, d.key()): d.value() for d in before}
    gone = [d for d in before if new_keys.get((d.kind, d.family, d.key())) != d.value()]
    added = [d for d in after if old_keys.get((d.kind, d.family, d.key())) != d.value()]
    dropped_before = old is not None and not any(d.kind == dnat.WHOLE for d in before)
    dropped_after = new is not None and not any(d.kind == dnat.WHOLE for d in after)
    if not gone and not added and dropped_before == dropped_after:
        return
    if not current(store):
        rebuild(store, warn=warn)
        return
    addr = checked.ip(listen)
    drop = f"{T} {drop_set(addr.version)} {{ {checked.text(addr)} }}\n"
    script = dnat.delete_script(T, FORWARDS, gone)
    if dropped_before and not dropped_after:
        script += f"delete element {drop}"
    script += dnat.add_script(T, FORWARDS, added)
    if dropped_after and not dropped_before:
        script += f"add element {drop}"
    done = nft.run(script)
    if done.ok:
        return
    if not done.missing and warn is not None:
        warn(f"incremental nft update failed, rebuilding table inet podnet: {done.stderr}")
    try:
        rebuild(store, warn=warn)
    except KernelError as err:
        err.details = f"{err.details}; before that, the incremental update: {done.stderr}"
        raise


class Pending:
    """An :func:`start_add` in flight: ``spawned`` (nft, or None) and ``rebuild`` (a rebuild is
    due whatever nft says)."""

    __slots__ = ("spawned", "rebuild")

    def __init__(self, spawned: Spawned | None, rebuild: bool) -> None:
        self.spawned = spawned
        self.rebuild = rebuild


def start_add(store: Store, entries: Sequence[PortMapping], *, ranges_changed: bool) -> Pending:
    """Start publishing ``entries`` (already committed); finish with :func:`finish_add`.

    Incremental (their map elements only) while the table is current. Without entries, the
    set ``ranges_v4`` is listed instead: when the table was removed behind podnet's back the
    listing fails and the table is rebuilt. (Not a chain: to print a chain's rules nft fetches
    every element of the table's maps, 4.5 → 12 ms of CPU at 1,000 hostPorts; the set holds the
    ranges only.) Either runs in parallel with the caller's other work (the veth creation)."""
    if ranges_changed or not current(store):
        return Pending(None, True)
    if not entries:
        script = f"list set {hostports.FAMILY} {hostports.TABLE} ranges_v4\n"
        return Pending(nft.start(script, die_with_parent=False), False)
    return Pending(nft.start(hostports.add_script(entries)), False)


def finish_add(store: Store, pending: Pending, warn: Warn | None = None) -> None:
    """Wait for :func:`start_add`; rebuild when it was due or the incremental update failed
    (nft's message goes to ``warn``). KernelError (104) when the rebuild fails too, with both
    messages."""
    first = ""
    if pending.spawned is not None:
        done = nft.outcome(pending.spawned)
        if done.ok and not pending.rebuild:
            return
        first = done.stderr
        if first and not done.missing and warn is not None:
            warn(f"incremental nft update failed, rebuilding table inet podnet: {first}")
    try:
        rebuild(store, warn=warn)
    except KernelError as err:
        if first:
            err.details = f"{err.details}; before that, the incremental update: {first}"
        raise


def delete(store: Store, entries: Sequence[PortMapping], owner: str,
           warn: Warn | None = None) -> None:  # fmt: skip
    """Remove ``owner``'s ``entries`` from the kernel before their rows are deleted: element by
    element, or — when one is missing or the update fails — by a rebuild without ``owner``."""
    entries = renderable(entries, warn)
    if not entries:
        return
    done = nft.run(hostports.delete_script(entries), die_with_parent=False)  # racing nothing
    if done.ok:
        return
    if not done.missing and warn is not None:
        warn(f"incremental nft delete failed, rebuilding table inet podnet: {done.stderr}")
    try:
        rebuild(store, without=(owner,), warn=warn)
    except TableOwned as err:
        # another store's table holds none of this store's elements: nothing left to remove
        if warn is not None:
            warn(f"{err.msg}; deleting {owner}'s rows without touching it")
    except KernelError as err:
        err.details = f"{err.details}; before that, the incremental delete: {done.stderr}"
        raise


def published(entries: Sequence[PortMapping]) -> list[PortMapping]:
    """Which of ``entries`` the kernel's maps hold (after an nft run that was killed: did it
    commit?). KernelError when nft cannot list them."""
    out = []
    for name in sorted({hostports.map_name(e) for e in entries}):
        have = nft.map_elements(hostports.FAMILY, hostports.TABLE, name) or set()
        out += [e for e in entries
                if hostports.map_name(e) == name and hostports.expected_element(e) in have]
    return out


def check(entries: Sequence[PortMapping]) -> str | None:
    """What CHECK finds wrong with ``entries`` in the kernel (a missing map or element), or
    None when every element is there."""
    for name in sorted({hostports.map_name(e) for e in entries}):
        have = nft.map_elements(hostports.FAMILY, hostports.TABLE, name)
        if have is None:
            return f"nftables map {name} of table inet podnet is missing"
        for e in entries:
            if hostports.map_name(e) == name and hostports.expected_element(e) not in have:
                return f"hostPort map element missing from {name}: {hostports.expected_element(e)}"
    return None
