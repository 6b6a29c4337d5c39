"""A ``physical`` network's member keys as the NB record holds them (no root, no OVN): the
record's JSON with ``members`` and ``status``, which records a node accepts from the shared
NB, and LXD's messages for member keys (lxd/networks.go ``networksPost``)."""

from __future__ import annotations

import pytest

from podnet.networks import ovnconfig
from podnet.networks.errors import NetworkError
from podnet.ovn import nb as nbmod


def test_record_keeps_members_and_status() -> None:
    """A pending record with two members' parents reads back as written; a record written
    without them (an earlier podnet's) keeps its exact JSON and reads as Created."""
    record = nbmod.Record("physical", "d", {"mtu": "1500"}, {"n2": {"parent": "eth2"},
                                                             "n1": {"parent": "eth1"}}, "Pending")
    again = nbmod.Record.loads(record.dumps())
    assert again == record and again is not None and again.pending
    assert '"members":{"n1":{"parent":"eth1"},"n2":{"parent":"eth2"}}' in record.dumps()
    old = '{"type":"physical","description":"","config":{"parent":"eth1"}}'
    legacy = nbmod.Record.loads(old)
    assert legacy is not None and legacy.status == "Created" and legacy.members == {}
    assert legacy.dumps() == old
    assert nbmod.Record.loads('{"type":"physical","status":"Gone"}') is None


@pytest.mark.parametrize(("record", "valid"), [
    (nbmod.Record("physical", "", {}, {"n1": {"parent": "eth1"}}, "Pending"), True),
    (nbmod.Record("physical", "", {"parent": "eth1"}), True),  # an earlier podnet's
    (nbmod.Record("physical", "", {}, {"n1": {"parent": "eth1;reboot"}}), False),
    (nbmod.Record("physical", "", {}, {"n1 x": {"parent": "eth1"}}), False),
    (nbmod.Record("physical", "", {}, {"n1": {"mtu": "1500", "parent": "eth1"}}), False),
    (nbmod.Record("physical", "", {}, {"n1": {}}), False),
    (nbmod.Record("ovn", "", {"network": "up0"}, {"n1": {"parent": "eth1"}}), False),
    (nbmod.Record("ovn", "", {"network": "up0"}, {}, "Pending"), False),
])  # fmt: skip
def test_which_records_a_node_accepts(record: nbmod.Record, valid: bool) -> None:
    """Another NB writer's member entry with a name or parent a tool could not carry, a key
    that is not a member's, or members on a type that has none, makes the record not podnet's
    (ignored, never acted on)."""
    assert nbmod._valid("up0", record) is valid


def test_member_keys_in_lxds_words() -> None:
    assert ovnconfig.validate_member("up0", "n1", {"parent": "eth1"}) == {"parent": "eth1"}
    with pytest.raises(NetworkError, match='Config key "ipv4.gateway" may not be used as member-specific key'):
        ovnconfig.validate_member("up0", "n1", {"parent": "eth1", "ipv4.gateway": "192.0.2.1/24"})
    with pytest.raises(NetworkError, match='Missing required "parent" config key'):
        ovnconfig.validate_member("up0", "n1", {})
    with pytest.raises(NetworkError, match="Invalid cluster member name"):
        ovnconfig.validate_member("up0", "../n1", {"parent": "eth1"})
    assert ovnconfig.validate_physical("up0", {"mtu": "1500"}) == {"mtu": "1500"}  # no parent
