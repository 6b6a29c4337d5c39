"""An experiment, not a fix: podnet-portmap with the improvements docs/benchmarks.md proposes,
applied by monkeypatching a podnet source tree, to measure them end to end as extra cells of
``bench_add_del.py --suite portmap --variant FILE``.

Make a plugin file that patches before it runs (``SRC``: the measured tree's ``src``)::

    #!/work/main/.venv/bin/python3 -IS
    import sys
    sys.path.insert(0, SRC)
    sys.path.insert(0, "/work/main/bench")
    import portmap_variant
    portmap_variant.patch()
    from podnet.plugins.podnet_portmap import main
    main()

What it changes (each item is one proposal of the "podnet-portmap" section):

1. nftables: reads ``nft -j list maps inet`` (DEL), and on ADD also the postrouting chain
   (two ``nft`` processes started together), instead of ``nft -j list table``, whose size grows
   with every container's chain and rules. The container chains are taken to be the targets of
   the elements (DEL of a chain no element jumps to any more would need a retry when
   ``delete chain`` fails; the benchmark never takes that path).
2. nftables ADD: leaves out the idempotent base lines (``add table``/maps/chains, ``flush`` and
   refill of prerouting/output/hostports) when the four maps and the masquerade rule exist.
   (A real change should make sure the base chains' rules are there as well.)
3. iptables DEL: no separate ``iptables.usable`` probe (a full ``iptables-save`` per family)
   before the save the teardown itself takes.
4. iptables: cheap pre-filters before the character-by-character tokenizer — the jump target
   must match before ``same_rule`` compares two rules, and a rule must end with the container's
   chain name before ``tokens(rule)[-2:] == ["-j", chain]`` is worth computing.
5. Imports: ``_sha512`` instead of ``hashlib`` (which loads OpenSSL's libcrypto), and
   ``ContainerNet.from_cidr`` with ``_socket.inet_pton`` instead of ``ipaddress``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up: not at run time
    from typing import Any

_hint: list[str | None] = [None]


def patch() -> None:
    _patch_imports()
    _patch_nft()
    _patch_iptables()


def _patch_imports() -> None:
    try:
        import _sha512  # type: ignore[import-not-found]
    except ImportError:  # Python 3.12+: _sha2; leave hashlib alone
        return

    class _Hashlib:
        sha512 = staticmethod(_sha512.sha512)

    sys.modules.setdefault("hashlib", _Hashlib)  # type: ignore[arg-type]

    from podnet.values import ContainerNet

    def from_cidr(cls: Any, cidr: str) -> Any:
        import _socket

        ip, _, plen_text = cidr.partition("/")
        family = _socket.AF_INET6 if ":" in ip else _socket.AF_INET
        raw = _socket.inet_pton(family, ip)
        bits = len(raw) * 8
        plen = int(plen_text) if plen_text else bits
        mask = ((1 << bits) - 1) ^ ((1 << (bits - plen)) - 1)
        net = (int.from_bytes(raw, "big") & mask).to_bytes(len(raw), "big")
        version = 6 if family == _socket.AF_INET6 else 4
        return cls(version, _socket.inet_ntop(family, raw),
                   f"{_socket.inet_ntop(family, net)}/{plen}")  # fmt: skip

    ContainerNet.from_cidr = classmethod(from_cidr)  # type: ignore[method-assign,assignment]


def _patch_nft() -> None:
    import os

    from podnet import proc
    from podnet.cni.fastjson import loads
    from podnet.firewall import portmap_nft as pn

    def list_table() -> Any:
        started = [proc.spawn(["nft", "-j", "list", "maps", pn.FAMILY])]
        if os.environ.get("CNI_COMMAND") == "ADD":
            argv = ["nft", "-j", "list", "chain", pn.FAMILY, pn.TABLE, "postrouting"]
            started.append(proc.spawn(argv))
        items = []
        for spawned in started:
            rc, out, _ = spawned.wait()
            if rc != 0:
                continue  # no postrouting chain: no table (or an incomplete one)
            for item in loads(out).get("nftables", []):
                for kind in ("map", "rule"):
                    if kind in item and item[kind].get("table") == pn.TABLE:
                        items.append(item)
        listing = pn.Listing({"nftables": items} if items else None)
        listing.maps_seen = {i["map"]["name"] for i in items if "map" in i}  # type: ignore[attr-defined]
        listing.chains = {t for elements in listing.elements.values() for t in elements.values()}
        return listing

    original_base = pn.base_script

    def base_script(listing: Any, options: Any) -> list[str]:
        complete = set(pn.MAPS) <= getattr(listing, "maps_seen", set()) and (
            not options.snat or (1 << options.mark_masq_bit) in listing.masq_marks
        )
        return [] if complete else original_base(listing, options)

    pn.list_table = list_table
    pn.base_script = base_script


def _patch_iptables() -> None:
    from podnet.firewall import iptables
    from podnet.firewall import portmap_iptables as rules

    iptables.usable = lambda family: True  # the teardown's own save fails the same way

    slow_tokens = rules.tokens

    def same_rule(saved: str, wanted: str) -> bool:
        if saved.rsplit(" ", 1)[-1] != wanted.rsplit(" ", 1)[-1]:
            return False  # different jump target (or its last argument)
        return sorted(slow_tokens(saved)) == sorted(slow_tokens(wanted))

    def tokens(rule: str) -> list[str]:
        hint = _hint[0]
        if hint is not None and not rule.endswith(hint):
            return [rule]  # cannot end in "-j <chain>": what the callers test [-2:] for
        return slow_tokens(rule)

    def with_hint(fn: Any, cid_index: int) -> Any:
        def wrapped(*args: Any) -> Any:
            _hint[0] = rules.dnat_chain_name(args[cid_index - 1], args[cid_index])[7:]
            try:
                return fn(*args)
            finally:
                _hint[0] = None

        return wrapped

    rules.same_rule = same_rule
    rules.tokens = tokens
    rules.setup_script = with_hint(rules.setup_script, 3)  # (saved, options, network, cid, …)
    rules.teardown_script = with_hint(rules.teardown_script, 2)  # (saved, network, cid)
