"""The nftables backend: apply a script in one transaction, read map elements back."""

from __future__ import annotations

from podnet import proc
from podnet.cni.errors import KernelError
from podnet.firewall import hostports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.store.db import PortMapping


def start(script: str) -> proc.Spawned:
    """Start ``nft -f -`` with ``script``; collect with :func:`finish`."""
    return proc.spawn(["nft", "-f", "-"], script.encode())


def start_list_chain(chain: str) -> proc.Spawned:
    """Start ``nft list chain inet podnet <chain>`` (a probe: it fails when the table is gone)."""
    return proc.spawn(["nft", "list", "chain", hostports.FAMILY, hostports.TABLE, chain])


def finish(spawned: proc.Spawned, what: str) -> None:
    """Wait for an ``nft`` run; :class:`KernelError` (104) naming ``what`` on failure."""
    rc, _, err = spawned.wait()
    if rc != 0:
        raise KernelError(f"nft failed to {what}", err.strip())


def apply(script: str, what: str) -> None:
    """Apply ``script`` atomically (nft runs a file as one transaction)."""
    finish(start(script), what)


def try_apply(script: str) -> bool:
    """Apply ``script``; False instead of an error (for incremental updates with a fallback)."""
    rc, _, _ = start(script).wait()
    return rc == 0


def map_elements(name: str) -> set[str] | None:
    """Elements of map ``name`` of table inet podnet as normalised ``element()`` strings; None
    when the table or map is missing."""
    try:
        out = proc.run(["nft", "list", "map", hostports.FAMILY, hostports.TABLE, name])
    except proc.ToolError:
        return None
    start_at = out.find("elements = {")
    if start_at < 0:
        return set()
    body = out[start_at + len("elements = {") : out.find("}", start_at)]
    return {" ".join(e.split()) for e in body.split(",") if e.strip()}


def expected_element(m: PortMapping) -> str:
    """How nft prints the element of ``m`` (addresses in canonical form)."""
    return " ".join(hostports.element(m).split())
