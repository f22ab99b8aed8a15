#!/usr/bin/env python3
"""Round-trip time of single messages to an echo server that is nearly idle.

The grid measures throughput under full load; this measures what one
client sees when the server has nothing else to do, which is where a
leader/followers engine can leave work waiting for a thread that sleeps.

It starts the server (examples/echo_server by default, with the threads
and engine given), loads it for --warm seconds with --warm-conns busy
connections (so that every loop thread has led at least once), lets it go
idle for a second, then opens --conns connections one at a time and
sends one 100-byte message on each (the "first" figures), and afterwards
one more message on each ("later").  Every echo is checked.  Prints the
round trips in milliseconds, their median and highest, one line each.

  bench/light_latency.py --build build-release -t 2
  bench/light_latency.py --build build-release -t 2 -e epoll
  bench/light_latency.py --server 'bench/peers/epoll_echo -p {port}'

Exit status: 0, or 1 when the server did not start or an echo was wrong.
"""
import argparse
import os
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port, deadline):
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def echo(s, payload):
    """One message and its echo; returns the round trip in ms."""
    t = time.perf_counter()
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("server closed the connection")
        got += chunk
    ms = (time.perf_counter() - t) * 1000.0
    if got != payload:
        raise RuntimeError("echo differs from what was sent")
    return ms


def warm(port, seconds, errors):
    try:
        s = connect(port, time.monotonic() + 5)
        block = bytes(range(256)) * 16
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            echo(s, block)
        s.close()
    except Exception as e:  # reported by the main thread
        errors.append(e)


def line(name, values):
    print("%-6s ms: %s   median %.3f, highest %.3f" % (
        name, " ".join("%.2f" % v for v in values),
        statistics.median(values), max(values)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory")
    ap.add_argument("-t", "--threads", type=int, default=2,
                    help="echo_server loop threads (default 2)")
    ap.add_argument("-e", "--engine", default="auto", help="engine config")
    ap.add_argument("--server", help="another server command; {port} is "
                    "replaced by the port (then -t and -e are unused)")
    ap.add_argument("--conns", type=int, default=12)
    ap.add_argument("--warm", type=float, default=1.0)
    ap.add_argument("--warm-conns", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.3,
                    help="seconds between two messages (default 0.3)")
    a = ap.parse_args()

    port = free_port()
    if a.server:
        cmd = shlex.split(a.server.replace("{port}", str(port)))
    else:
        cmd = [os.path.join(a.build, "examples", "echo_server"), "-p",
               str(port), "-t", str(a.threads), "-e", a.engine,
               "-b", "127.0.0.1"]
    env = dict(os.environ)
    env.pop("PX_ENGINE", None)
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env)
    try:
        errors = []
        connect(port, time.monotonic() + 10).close()
        th = [threading.Thread(target=warm, args=(port, a.warm, errors))
              for _ in range(a.warm_conns)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        if errors:
            raise errors[0]
        time.sleep(1.0)
        payload = b"x" * 100
        socks, first, later = [], [], []
        for _ in range(a.conns):
            s = connect(port, time.monotonic() + 5)
            socks.append(s)
            first.append(echo(s, payload))
            time.sleep(a.gap)
        for s in socks:
            later.append(echo(s, payload))
            time.sleep(a.gap)
        for s in socks:
            s.close()
        print("server: %s" % " ".join(cmd))
        line("first", first)
        line("later", later)
        return 0
    except Exception as e:
        print("light_latency: %s" % e, file=sys.stderr)
        return 1
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=5)
        except subprocess.TimeoutExpired:
            srv.kill()


if __name__ == "__main__":
    sys.exit(main())
