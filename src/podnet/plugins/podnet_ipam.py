"""``podnet-ipam``: an IPAM plugin (CNI SPEC 1.1.0 "IP Allocation") on podnet's SQLite store, so
the reference bridge, ptp, macvlan… — and the ``podnet`` plugin itself — can allocate from it.

Same store and allocator as the ``podnet`` main plugin (:func:`podnet.ipam.allocator.allocate_in`
inside ``BEGIN IMMEDIATE``), so both can share one ``dataDir`` without handing out an address
twice. A row of cni-kindnet's ``pods`` table is one allocation:

- ``container_id``: ``<CNI_CONTAINERID>/<CNI_IFNAME>/<network>``
  (:func:`podnet.store.pods.ipam_key`): never equal to a container ID, so the ``podnet``
  plugin's rows (keyed by the container ID) and podnet-ipam's never clash, and one container
  may hold allocations in several networks;
- ``netns``: CNI_NETNS as ADD received it (NOT NULL; the IPAM plugin never enters it);
- ``interface_name``: CNI_IFNAME. The column means "the pod's interface on the host"; an IPAM
  plugin never learns the host-side name the main plugin chose, and CNI_IFNAME is the name the
  allocation is keyed by (spec: IPAM state is per container ID and ifname);
- ``interface_mtu``, MACs: NULL;
- ``pod_attachments``: ifname, network name and ``owner = 'podnet-ipam'`` (migration
  ``0004_pod_owner``): DEL, CHECK and GC of each plugin only touch rows it owns.

When the ``podnet`` plugin delegates to podnet-ipam on its own database it takes the addresses
over into its own row (see :mod:`podnet.plugins.podnet`); CHECK then accepts that row.

Verbs: ADD (result: ``ips`` with the range's prefix length and gateway, ``routes``, empty
``dns``; errors 7 bad config, 100 no free address, 102 the attachment already has an
allocation, 11 database locked, 5 database I/O); DEL (idempotent, CNI_NETNS may be empty);
CHECK (3 no allocation, 103 prevResult lacks an allocated address); GC; STATUS (50 when a
family's ranges are full or the database is unusable); VERSION (answered by the skeleton without
importing anything else).
"""

from __future__ import annotations

from podnet import errors
from podnet.cni import skel, version
from podnet.errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.ipam.allocator import Network
    from podnet.plugins.podnet_ipam_conf import IpamStoreConf
    from podnet.store import Store

PLUGIN = "podnet-ipam"


def _open(conf: IpamStoreConf) -> Store:
    from podnet.store import open_store

    return open_store(conf.data_dir, busy_timeout=conf.busy_timeout)


def ipam_result(
    alloc: dict[int, tuple[str, str, Network]], routes: list[dict[str, str]] | None
) -> dict[str, Any]:
    """The abbreviated 1.x result of an IPAM plugin (spec "Delegated plugins (IPAM)")::

        {"cniVersion": "1.1.0",
         "ips": [{"address": "10.22.0.5/24", "gateway": "10.22.0.1"}, …],   (4 before 6)
         "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1"}, …] | routes,
         "dns": {}}

    ``alloc``: ``{family: (address, gateway, range)}``; ``routes``: the configured routes, or
    None for a default route per allocated family through its gateway.
    """
    ips, defaults = [], []
    for family, (addr, gw, net) in sorted(alloc.items()):
        ips.append({"address": f"{addr}/{net.prefixlen}", "gateway": gw})
        defaults.append({"dst": "0.0.0.0/0" if family == 4 else "::/0", "gw": gw})
    return {
        "cniVersion": version.CURRENT_VERSION,
        "ips": ips,
        "routes": defaults if routes is None else [dict(r) for r in routes],
        "dns": {},
    }


def cmd_add(call: Call) -> dict[str, Any]:
    """ADD: one address per family of ``ipam.ranges`` (or the one asked for by
    ``runtimeConfig.ips`` / CNI_ARGS ``IP=``), recorded in one ``BEGIN IMMEDIATE`` transaction."""
    from podnet.cni.netconf import parse_requested_ips
    from podnet.ipam.allocator import allocate_in
    from podnet.plugins.podnet_ipam_conf import IpamConf
    from podnet.store.pods import OWNER_IPAM, ipam_key

    conf = IpamConf(call.config)
    requested = parse_requested_ips(call.config, call.args)
    key = ipam_key(call.container_id, call.ifname, conf.name)
    with _open(conf) as store, store.write():
        held = store.pods.get(key)
        if held is not None:
            have = ", ".join(a for a in (held.ip_address_v4, held.ip_address_v6) if a)
            raise errors.InterfaceExists(
                f"container {call.container_id} already has a podnet-ipam allocation for "
                f"{call.ifname} in network {conf.name} ({have}); DEL it first"
            )
        store.ranges.add(conf.range_strings, f"network {conf.name} (podnet-ipam)")
        alloc = allocate_in(store, conf.ranges, requested)
        store.pods.insert(
            container_id=key, netns=call.netns, interface_name=call.ifname, interface_mtu=None,
            ifname=call.ifname, network_name=conf.name, host_mac=None, pod_mac=None,
            owner=OWNER_IPAM, ip_address_v4=alloc[4][0] if 4 in alloc else None,
            ip_address_v6=alloc[6][0] if 6 in alloc else None,
            ip_gateway_v4=alloc[4][1] if 4 in alloc else None,
            ip_gateway_v6=alloc[6][1] if 6 in alloc else None,
            name=call.args.get("K8S_POD_NAME"), namespace=call.args.get("K8S_POD_NAMESPACE"),
            uid=call.args.get("K8S_POD_UID"),
        )  # fmt: skip
    return ipam_result(alloc, conf.routes)


def cmd_del(call: Call) -> None:
    """DEL: release the allocation of (CNI_CONTAINERID, CNI_IFNAME, network); idempotent, and
    CNI_NETNS is not used. Rows of the ``podnet`` plugin are left to it."""
    from podnet.plugins.podnet_ipam_conf import IpamStoreConf
    from podnet.store.pods import OWNER_IPAM, ipam_key

    conf = IpamStoreConf(call.config)
    key = ipam_key(call.container_id, call.ifname, conf.name)
    with _open(conf) as store, store.write():
        pod = store.pods.get(key)
        if pod is not None and pod.owner == OWNER_IPAM:
            store.pods.delete(key)


def cmd_check(call: Call) -> None:
    """CHECK: the allocation exists — podnet-ipam's own row, or the row of a ``podnet`` plugin
    that delegated to podnet-ipam on the same database and took it over — (else code 3), and
    every address of it is in ``prevResult`` when one is given (else 103)."""
    from podnet.plugins.podnet_ipam_conf import IpamStoreConf
    from podnet.store.pods import OWNER_PODNET, ipam_key

    conf = IpamStoreConf(call.config)
    with _open(conf) as store:
        pod = store.pods.get(ipam_key(call.container_id, call.ifname, conf.name))
        if pod is None:
            taken = store.pods.get(call.container_id)
            if (
                taken is not None
                and taken.owner == OWNER_PODNET
                and taken.ifname == call.ifname
                and taken.network_name == conf.name
            ):
                pod = taken
    if pod is None:
        raise CNIError(
            f"container {call.container_id} has no podnet-ipam allocation for {call.ifname} in "
            f"network {conf.name}",
            code=errors.UNKNOWN_CONTAINER,
        )
    from podnet.cni.result import prev_result

    prev = prev_result(call.config)
    if prev is not None:
        listed = {str(ip.get("address", "")).split("/")[0] for ip in prev.get("ips", [])
                  if isinstance(ip, dict)}  # fmt: skip
        for addr in (pod.ip_address_v4, pod.ip_address_v6):
            if addr and addr not in listed:
                raise errors.CheckFailed(f"prevResult lacks the allocated address {addr}")


def cmd_gc(call: Call) -> None:
    """GC (spec 1.1): release podnet-ipam allocations of this network whose (containerID, ifname)
    is not in ``cni.dev/valid-attachments``. An entry without ``ifname`` keeps every allocation
    of its container. Nothing printed on success."""
    from podnet.plugins.podnet_ipam_conf import IpamStoreConf
    from podnet.store.pods import OWNER_IPAM, ipam_key

    conf = IpamStoreConf(call.config)
    valid_raw = call.config.get("cni.dev/valid-attachments", [])
    if not isinstance(valid_raw, list):
        raise errors.InvalidConfig("cni.dev/valid-attachments: must be a list")
    keep_keys, keep_containers = set(), set()
    for i, item in enumerate(valid_raw):
        # A malformed item must not make GC release a live allocation: refuse it (code 7).
        cid = item.get("containerID") if isinstance(item, dict) else None
        ifname = item.get("ifname") if isinstance(item, dict) else None
        if not isinstance(cid, str) or not cid or not (ifname is None or
                                                       (isinstance(ifname, str) and ifname)):
            raise errors.InvalidConfig(
                f"cni.dev/valid-attachments[{i}]: needs a string containerID (and ifname), "
                f"got {item!r}"[:300]
            )
        if ifname is not None:
            keep_keys.add(ipam_key(cid, ifname, conf.name))
        else:
            keep_containers.add(cid)
    with _open(conf) as store, store.write():
        for pod in store.pods.all():
            key = str(pod.container_id)
            if (
                pod.owner != OWNER_IPAM
                or pod.network_name != conf.name
                or key in keep_keys
                or key.split("/", 1)[0] in keep_containers
            ):
                continue
            store.pods.delete(key)


def cmd_status(call: Call) -> None:
    """STATUS (spec 1.1): code 50 when some family of ``ipam.ranges`` has no free address left
    (allocations of every owner in the database count) or the database is unusable."""
    from podnet.plugins.podnet_ipam_conf import IpamConf

    conf = IpamConf(call.config)
    from podnet.ipam.status import check_ranges

    check_ranges(conf.data_dir, conf.busy_timeout, conf.ranges)


HANDLERS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check, "GC": cmd_gc, "STATUS": cmd_status}


def main() -> None:
    """Console script ``podnet-ipam``: one CNI call per process (:func:`podnet.cni.skel.main`)."""
    skel.main(PLUGIN, HANDLERS)
