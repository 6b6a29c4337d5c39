"""STATUS for plugins that allocate from ranges (podnet, podnet-ipam): one verdict, one place."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.ipam.allocator import Network


def check_ranges(data_dir: str, busy_timeout: float, ranges: Sequence[Network]) -> None:
    """Raise :class:`~podnet.errors.Unavailable` (code 50) when the database in
    ``data_dir`` is unusable or some family of ``ranges`` has no free address (allocations of
    every owner count); return when ADD can be served (spec 1.1 "STATUS")."""
    from podnet import errors
    from podnet.errors import CNIError
    from podnet.ipam.allocator import exhausted
    from podnet.store import open_store

    try:
        store = open_store(data_dir, busy_timeout=busy_timeout)
    except CNIError as err:
        raise errors.Unavailable(f"state database unusable: {err.msg}") from None
    with store:
        full = exhausted(ranges, store.pods.used_addresses)
    if full:
        raise errors.Unavailable(full)
