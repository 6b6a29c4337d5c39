"""Tiny TCP+UDP echo peer used by the end-to-end tests (run inside namespaces).

    python echo.py serve NAME PORT       # answers NAME and the peer's address on TCP and UDP
    python echo.py tcp HOST PORT         # prints the answer
    python echo.py udp HOST PORT [SPORT]   # from a fixed source port (same conntrack entry)
"""

from __future__ import annotations

import socket
import sys
import threading


def serve(name: str, port: int) -> None:
    tcp = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    tcp.bind(("::", port))
    tcp.listen(64)
    udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    udp.bind(("::", port))

    def udp_loop() -> None:
        while True:
            _, peer = udp.recvfrom(2048)
            udp.sendto(f"{name} {peer[0]}".encode(), peer)

    threading.Thread(target=udp_loop, daemon=True).start()
    print("ready", flush=True)
    while True:
        conn, peer = tcp.accept()
        with conn:
            conn.sendall(f"{name} {peer[0]}".encode())


#: What the client prints, instead of an answer, when none came; exit status 3.
TIMEOUT, REFUSED, UNREACHABLE = "<timeout>", "<refused>", "<unreachable>"


def client(proto: str, host: str, port: int, sport: int = 0) -> None:
    """Print the server's answer (exit 0), or exactly one of TIMEOUT (no answer within 2 s per
    try), REFUSED (a TCP RST, or an ICMP port unreachable on UDP's connected socket),
    UNREACHABLE (no route, ICMP host/network unreachable) or ``<error ERRNO>`` (exit 3)."""
    import errno

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(family, kind) as s:
        s.settimeout(2)
        if sport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", sport))
        try:
            s.connect((host, port))  # UDP too: ICMP errors then surface as ECONNREFUSED
            if proto == "tcp":
                print(s.recv(2048).decode())
                return
            for _ in range(3):
                s.send(b"ping")
                try:
                    print(s.recv(2048).decode())
                    return
                except TimeoutError:
                    continue
            raise TimeoutError
        except TimeoutError:
            outcome = TIMEOUT
        except ConnectionRefusedError:
            outcome = REFUSED
        except OSError as err:
            unreachable = (errno.EHOSTUNREACH, errno.ENETUNREACH)
            outcome = UNREACHABLE if err.errno in unreachable else f"<error {errno.errorcode.get(err.errno or 0, err.errno)}>"
    print(outcome)
    raise SystemExit(3)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
