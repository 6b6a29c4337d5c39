"""A UDP datagram with the Don't Fragment bit (IPv6: no fragmentation) to the echo server
(tests/support/echo.py), for path-MTU checks without ``ping`` (run inside namespaces).

    python dfprobe.py HOST PORT SIZE     # SIZE bytes of UDP payload

Prints one line and exits with its status:

- ``answer <name> <peer>`` (0): the datagram fitted and the server answered (an IPv4 peer
  without the dual-stack server's ``::ffff:``);
- ``too-big mtu=<N>`` (3): EMSGSIZE — the sender's own link is smaller, or a router on the
  way sent "fragmentation needed" / "packet too big"; N is the path MTU the kernel now knows;
- ``timeout`` (4): three tries, no answer and no error;
- ``refused`` (5): ICMP port unreachable;
- ``error <text>`` (6): anything else (another ICMP error, say).
"""

from __future__ import annotations

import errno
import socket
import sys

IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_MTU = 10, 2, 14
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, IPV6_MTU = 23, 2, 24


def path_mtu(s: socket.socket, v6: bool) -> int:
    if v6:
        return s.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU)
    return s.getsockopt(socket.IPPROTO_IP, IP_MTU)


def probe(host: str, port: int, size: int) -> int:
    v6 = ":" in host
    with socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM) as s:
        if v6:
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
        else:
            s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        s.settimeout(2)
        s.connect((host, port))
        for _ in range(3):
            try:
                s.send(b"x" * size)
                name, _, peer = s.recv(2048).decode().partition(" ")
                print(f"answer {name} {peer.removeprefix('::ffff:')}")
                return 0
            except TimeoutError:
                continue
            except ConnectionRefusedError:
                print("refused")
                return 5
            except OSError as err:
                if err.errno == errno.EMSGSIZE:
                    print(f"too-big mtu={path_mtu(s, v6)}")
                    return 3
                print(f"error {err}")
                return 6
        print("timeout")
        return 4


if __name__ == "__main__":
    sys.exit(probe(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
