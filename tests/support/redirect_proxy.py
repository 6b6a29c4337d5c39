"""A tiny transparent proxy for the redirect tests: listens on the inbound and outbound proxy
ports, reads each connection's original destination with SO_ORIGINAL_DST, logs it, connects
there and relays. Run it as the proxy user (uid 2102) so its own connections are not redirected.

    python redirect_proxy.py INBOUND_PORT OUTBOUND_PORT LOGFILE
"""

from __future__ import annotations

import socket
import struct
import sys
import threading

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h; IP6T_SO_ORIGINAL_DST has the same value


def original_dst(conn: socket.socket) -> tuple[str, int]:
    if conn.family == socket.AF_INET6:
        raw = conn.getsockopt(socket.IPPROTO_IPV6, SO_ORIGINAL_DST, 28)
        port = struct.unpack("!H", raw[2:4])[0]
        return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port
    raw = conn.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(port: int, kind: str, log: str, lock: threading.Lock, family: int) -> None:
    lsock = socket.socket(family, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        lsock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    lsock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    lsock.listen(64)
    while True:
        conn, _ = lsock.accept()
        host, dport = original_dst(conn)
        with lock, open(log, "a") as f:
            f.write(f"{kind} {host} {dport}\n")
        try:
            upstream = socket.create_connection((host, dport), timeout=3)
        except OSError:
            conn.close()
            continue
        threading.Thread(target=pipe, args=(conn, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, conn), daemon=True).start()


if __name__ == "__main__":
    inbound, outbound, logfile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    lock = threading.Lock()
    for fam in (socket.AF_INET, socket.AF_INET6):
        threading.Thread(target=serve, args=(inbound, "in", logfile, lock, fam), daemon=True).start()
        threading.Thread(target=serve, args=(outbound, "out", logfile, lock, fam), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
