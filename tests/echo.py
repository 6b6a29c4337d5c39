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


def client(proto: str, host: str, port: int, sport: int = 0) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(family, kind) as s:
        s.settimeout(2)
        if sport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", sport))
        if proto == "tcp":
            s.connect((host, port))
            print(s.recv(2048).decode())
        else:
            for _ in range(3):
                s.sendto(b"ping", (host, port))
                try:
                    print(s.recv(2048).decode())
                    return
                except TimeoutError:
                    continue
            raise SystemExit("udp: no answer")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
