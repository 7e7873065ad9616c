"""Helpers the benchmarks that start servers share: a free local port, and waiting for a
server to listen on one."""
import socket, time


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close(); return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")
