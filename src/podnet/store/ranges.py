"""The ranges pods' addresses come from: cni-kindnet's ``ipam_ranges`` table with podnet's
``range_options`` (``ipMasq``) as ``store.ranges`` (:class:`podnet.store.Store`)."""

from __future__ import annotations

from podnet.store.conn import Queries

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Protocol

    from podnet.store.conn import _Conn

    class Pods(Protocol):
        """What the ranges ask of ``store.pods`` (:class:`podnet.store.pods.Pods`)."""

        def used_addresses(self, family: int) -> set[str]: ...


class Ranges(Queries):
    """Queries of ``ipam_ranges`` over the store's connection."""

    __slots__ = ("pods",)

    def __init__(self, conn: Callable[[], _Conn], path: str, pods: Pods) -> None:
        super().__init__(conn, path)
        self.pods = pods  # whether a pod holds an address in a range

    # -- ranges -------------------------------------------------------------------------
    def all(self) -> list[tuple[int, str, str | None, bool]]:
        """All ``ipam_ranges`` rows: ``(id, subnet, description, ip_masq)``."""
        rows = self.conn.execute(
            "SELECT r.id, r.subnet, r.description, COALESCE(o.ip_masq, 1) FROM ipam_ranges r "
            "LEFT JOIN range_options o ON o.range_id = r.id ORDER BY r.id"
        ).fetchall()
        return [(i, s, d, bool(m)) for i, s, d, m in rows]

    def _insert_range(self, subnet: str, description: str, *, ip_masq: bool) -> None:
        cur = self.conn.execute(
            "INSERT INTO ipam_ranges (subnet, description) VALUES (?, ?)", (subnet, description)
        )
        self.conn.execute(
            "INSERT INTO range_options (range_id, ip_masq) VALUES (?, ?)",
            (cur.lastrowid, int(ip_masq)),
        )

    def known_subnets(self) -> list[tuple[str, str]]:
        """Every prefix the node's store hands addresses from: ``(CIDR, whose)`` for each range
        (``range 10.244.0.0/24 (network podnet)``) and each bridge network's subnet
        (``the subnet of bridge network "br0"``)."""
        out = [(subnet, f"range {subnet} ({description or 'podnet'})")
               for _, subnet, description, _ in self.all()]  # fmt: skip
        rows = self.conn.execute(
            "SELECT n.name, c.value FROM networks n JOIN networks_config c ON c.network_id = n.id "
            "WHERE c.key IN ('ipv4.address', 'ipv6.address') "
            "ORDER BY n.name, c.key"
        ).fetchall()
        from podnet import checked

        for name, value in rows:
            try:
                net = checked.interface(value).network
            except checked.BadValue:
                continue  # auto / none
            out.append((str(net), f'the subnet {net} of bridge network "{name}"'))
        return out

    def _refuse_overlap(self, subnets: Sequence[str], description: str) -> None:
        """Code 7 naming both when one of ``subnets`` (new to the store) overlaps a known range
        or bridge subnet: two allocators would hand out one address, and one's gateway would
        be the other's pod."""
        from podnet import checked
        from podnet.errors import InvalidConfig

        known = [(checked.network(cidr, strict=False), whose)
                 for cidr, whose in self.known_subnets()]  # fmt: skip
        for subnet in subnets:
            net = checked.network(subnet)
            problem = checked.pod_range_problem(net)
            if problem:
                raise InvalidConfig(f"range {subnet} ({description}): {problem}")
            for other, whose in known:
                shared = other == net and whose.startswith("range ")  # the same range, shared
                if other.version == net.version and not shared and net.overlaps(other):
                    raise InvalidConfig(
                        f"range {subnet} ({description}) overlaps {whose} in {self.path}: "
                        "ranges and bridge subnets of one node may not overlap"
                    )

    def _range_in_use(self, subnet: str) -> bool:
        """Whether a pod row (of any owner) holds an address in ``subnet``."""
        from podnet import checked

        net = checked.network(subnet)
        return any(checked.ip(a) in net for a in self.pods.used_addresses(net.version))

    def add(self, subnets: Sequence[str], description: str) -> bool:
        """Record ranges not yet known (canonical CIDRs), with ``ip_masq`` off: an IPAM plugin
        serves them for another main plugin, which owns their egress. Known ranges and their
        options are left alone. True if anything was added (inside :meth:`write`). Code 7 when
        a new range overlaps a known range or bridge subnet (:meth:`_refuse_overlap`)."""
        known = {subnet for _, subnet, _, _ in self.all()}
        new = [subnet for subnet in subnets if subnet not in known]
        if new:
            self._refuse_overlap(new, description)
        for subnet in new:
            self._insert_range(subnet, description, ip_masq=False)
        return bool(new)

    def sync(self, subnets: Sequence[str], ip_masq: bool, description: str) -> bool:
        """Record the config's ranges (canonical CIDRs) and their ipMasq; True if anything changed.

        Ranges of other configs sharing the database are left alone. Code 7 when a new range
        overlaps a known range or bridge subnet (:meth:`_refuse_overlap`); also when it would
        change the ``ip_masq`` of a range pods are in — the masquerade of pods another config
        made (a podnet-ipam range, recorded without a masquerade decision, takes its first
        main plugin's).
        """
        known = {subnet: (rid, masq) for rid, subnet, _, masq in self.all()}
        new = [subnet for subnet in subnets if subnet not in known]
        if new:
            self._refuse_overlap(new, description)
        owners = {subnet: whose for _, subnet, whose, _ in self.all()}
        for subnet in subnets:
            whose = owners.get(subnet) or ""
            if subnet in known and known[subnet][1] != ip_masq and \
                    not whose.endswith("(podnet-ipam)") and self._range_in_use(subnet):
                from podnet.errors import InvalidConfig

                raise InvalidConfig(
                    f"range {subnet} ({whose}) has ipMasq {str(known[subnet][1]).lower()} and "
                    f"pods in it: {description} cannot change that (once no pod is left in it, "
                    "it can)"
                )
        changed = False
        for subnet in subnets:
            if subnet not in known:
                self._insert_range(subnet, description, ip_masq=ip_masq)
                changed = True
            elif known[subnet][1] != ip_masq:
                self.conn.execute(
                    "INSERT INTO range_options (range_id, ip_masq) VALUES (?, ?) "
                    "ON CONFLICT (range_id) DO UPDATE SET ip_masq = excluded.ip_masq",
                    (known[subnet][0], int(ip_masq)),
                )
                changed = True
        return changed

    def delete(self, subnets: Sequence[str]) -> None:
        """Forget the ranges ``subnets`` (canonical CIDRs) and their options (inside
        :meth:`write`): a ptp network deleted with no pods left in them."""
        self.conn.executemany("DELETE FROM ipam_ranges WHERE subnet = ?", [(s,) for s in subnets])

    def restore(self, before: Sequence[tuple[int, str, str | None, bool]]) -> None:
        """Put ``ipam_ranges`` back as :meth:`ranges` returned it (inside :meth:`write`): ranges
        added since are deleted, changed ``ip_masq`` values restored. For a failed ADD undoing
        its own records."""
        known = {rid: masq for rid, _, _, masq in before}
        for rid, _, _, masq in self.all():
            if rid not in known:
                self.conn.execute("DELETE FROM ipam_ranges WHERE id = ?", (rid,))
            elif masq != known[rid]:
                self.conn.execute("UPDATE range_options SET ip_masq = ? WHERE range_id = ?",
                                  (int(known[rid]), rid))  # fmt: skip
