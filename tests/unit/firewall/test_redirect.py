"""podnet.firewall.redirect without root: linkerd's defaults, port parsing at its bounds, the
uid/gid rules at 1, what a save says is present, the cleanup script (mutation
testing of the pure core)."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from podnet.firewall import redirect as r


def test_defaults_are_linkerds() -> None:
    o = r.RedirectOptions()
    assert (o.incoming_proxy_port, o.outgoing_proxy_port, o.proxy_uid, o.proxy_gid) == (
        4143, 4140, 2102, 0)
    assert (o.inbound_ports_to_ignore, o.outbound_ports_to_ignore, o.subnets_to_ignore,
            o.ports_to_redirect) == ([], [], [], [])  # fmt: skip
    assert r.output_rules(o) == [
        "-m owner --uid-owner 2102 -m comment --comment proxy-init/ignore-proxy-user-id -j RETURN",
        "-o lo -m comment --comment proxy-init/ignore-loopback -j RETURN",
        "-p tcp -m comment --comment proxy-init/redirect-all-outgoing-to-proxy-port -j REDIRECT "
        "--to-ports 4140",
    ]
    assert r.redirect_rules(o, 4) == [
        "-p tcp -m comment --comment proxy-init/redirect-all-incoming-to-proxy-port -j REDIRECT "
        "--to-ports 4143"]


def test_options_keep_what_they_are_given() -> None:
    ports = r.parse_ports("80,90-99")
    nets = [ip_network("10.0.0.0/8"), ip_network("fd00::/8")]
    o = r.RedirectOptions(incoming_proxy_port=1, outgoing_proxy_port=2, proxy_uid=3, proxy_gid=4,
                          inbound_ports_to_ignore=ports, outbound_ports_to_ignore=ports[:1],
                          subnets_to_ignore=nets, ports_to_redirect=ports[1:])  # fmt: skip
    assert (o.incoming_proxy_port, o.outgoing_proxy_port, o.proxy_uid, o.proxy_gid) == (1, 2, 3, 4)
    assert [p.nft() for p in o.inbound_ports_to_ignore] == ["80", "90-99"]
    assert [p.nft() for p in o.outbound_ports_to_ignore] == ["80"]
    assert o.subnets_to_ignore == nets
    assert [p.nft() for p in o.ports_to_redirect] == ["90-99"]
    assert isinstance(o.inbound_ports_to_ignore, list) and o.inbound_ports_to_ignore is not ports


def test_uid_and_gid_one_get_rules_zero_does_not() -> None:
    one = r.RedirectOptions(proxy_uid=1, proxy_gid=1)
    assert r.output_rules(one)[:2] == [
        "-m owner --uid-owner 1 -m comment --comment proxy-init/ignore-proxy-user-id -j RETURN",
        "-m owner --gid-owner 1 -m comment --comment proxy-init/ignore-proxy-group-id -j RETURN"]
    text = r.nft_script(one)
    assert 'meta skuid 1 return comment "proxy-init/ignore-proxy-user-id"' in text
    assert 'meta skgid 1 return comment "proxy-init/ignore-proxy-group-id"' in text
    zero = r.RedirectOptions(proxy_uid=0, proxy_gid=0)
    assert r.output_rules(zero)[0] == "-o lo -m comment --comment proxy-init/ignore-loopback -j RETURN"
    assert "skuid" not in r.nft_script(zero) and "skgid" not in r.nft_script(zero)


def test_port_spec_bounds() -> None:
    assert r.PortSpec(1, 65535).iptables() == "1:65535"
    assert r.PortSpec(65535, 65535).nft() == "65535"
    for lo, hi in ((0, 1), (2, 1), (1, 65536), (65536, 65536)):
        with pytest.raises(ValueError) as err:
            r.PortSpec(lo, hi)
        assert str(err.value) == f"invalid port range {lo}-{hi}: ports are 1-65535, low <= high"


def test_parse_ports() -> None:
    assert [p.linkerd() for p in r.parse_ports(" 25 , ,80-90,")] == ["25", "80-90"]
    assert [p.linkerd() for p in r.parse_ports(["25", " 4190-4191 ", ""])] == ["25", "4190-4191"]
    assert [p.linkerd() for p in r.parse_ports(("1", "2"))] == ["1", "2"]
    assert r.parse_ports("") == []
    for bad in ("x-5", "5-", "-5", "a", "5-x"):
        with pytest.raises(ValueError) as err:
            r.parse_ports(f"1,{bad}")
        assert str(err.value) == f"invalid port or range {bad!r}"


def test_chunks_restart_counting_at_zero() -> None:
    ports = r.parse_ports(",".join(str(p) for p in range(1, 31)))
    assert [len(c) for c in r.chunks(ports)] == [15, 15]
    ranges = r.parse_ports("1-2,3-4,5-6,7-8,9-10,11-12,13-14,15,16-17")
    assert [[p.linkerd() for p in c] for c in r.chunks(ranges)] == [
        ["1-2", "3-4", "5-6", "7-8", "9-10", "11-12", "13-14", "15"], ["16-17"]]
    assert r.chunks([]) == []


SAVE = """*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:PROXY_INIT_REDIRECT - [0:0]
:OTHER - [0:0]
-A PREROUTING -m comment --comment proxy-init/install-proxy-init-prerouting -j PROXY_INIT_REDIRECT
-A OUTPUT -j OTHER
COMMIT
"""


def test_present() -> None:
    assert r.present(SAVE) == ({"PREROUTING"}, {"PROXY_INIT_REDIRECT"})
    assert r.present("") == (set(), set())


def test_cleanup_script() -> None:
    assert r.cleanup_script(set(), set()) is None
    assert r.cleanup_script({"PREROUTING"}, {"PROXY_INIT_REDIRECT"}) == (
        "*nat\n-D PREROUTING -m comment --comment proxy-init/install-proxy-init-prerouting "
        "-j PROXY_INIT_REDIRECT\n-F PROXY_INIT_REDIRECT\n-X PROXY_INIT_REDIRECT\nCOMMIT\n")
    assert r.cleanup_script({"OUTPUT"}, {"PROXY_INIT_REDIRECT", "PROXY_INIT_OUTPUT"}) == (
        "*nat\n-D OUTPUT -m comment --comment proxy-init/install-proxy-init-output "
        "-j PROXY_INIT_OUTPUT\n-F PROXY_INIT_REDIRECT\n-X PROXY_INIT_REDIRECT\n"
        "-F PROXY_INIT_OUTPUT\n-X PROXY_INIT_OUTPUT\nCOMMIT\n")
    assert r.cleanup_script(set(), {"PROXY_INIT_OUTPUT"}) == (
        "*nat\n-F PROXY_INIT_OUTPUT\n-X PROXY_INIT_OUTPUT\nCOMMIT\n")


def test_nft_script_handles_ipv6_by_default() -> None:
    text = r.nft_script(r.RedirectOptions())
    assert "ipv4-only" not in text
    assert text == r.nft_script(r.RedirectOptions(), ipv6=True)
    assert 'meta nfproto ipv6 return comment "proxy-init/ipv4-only"' in r.nft_script(
        r.RedirectOptions(), ipv6=False)
