"""podnet-redirect's option sets, one per golden file in golden/redirect (the options of
linkerd2-proxy-init: ports to ignore either way, subnets, the proxy's uid/gid and ports)."""

from __future__ import annotations

from ipaddress import ip_network

import paths
from podnet.firewall import redirect as r

GOLDEN = paths.GOLDEN / "redirect"

CASES = {
    "defaults": r.RedirectOptions(),
    "ignores": r.RedirectOptions(
        inbound_ports_to_ignore=r.parse_ports("4190,4191,25-27"),
        outbound_ports_to_ignore=r.parse_ports("443,6443"),
        subnets_to_ignore=[ip_network("10.0.0.0/8"), ip_network("fd00::/8")], proxy_gid=2103,
    ),
    "redirect_listed": r.RedirectOptions(ports_to_redirect=r.parse_ports("80,8080-8090"), proxy_uid=0),
    "custom_ports_no_uid": r.RedirectOptions(incoming_proxy_port=15006, outgoing_proxy_port=15001,
                                             proxy_uid=0, proxy_gid=1337,
                                             outbound_ports_to_ignore=r.parse_ports("1-1024")),
    "many_ports": r.RedirectOptions(inbound_ports_to_ignore=r.parse_ports(
        ",".join(str(p) for p in range(1000, 1012)) + ",2000-2001,3000-3001,4000")),
}
