#!/usr/bin/env python3
"""The fault injector of scripts/netem.sh: a TCP proxy that delays and resets connections.

    scripts/faultproxy.py --listen 127.0.0.1:7000 --connect 10.213.0.1:50051 \
        --delay-ms 20 --jitter-ms 5 --reset-prob 0.001 [--seed 1]

tc netem does not exist in this kernel, so delay and loss come from here. Every chunk read
from one side is written to the other side no earlier than delay (+ uniform jitter, order
kept) after it arrived, in each direction: a one-way latency that does not cap throughput
(chunks in flight are queued, not serialised). The bandwidth cap is not this program's job
(tc tbf on the veth links).

"Loss" for gRPC over TCP: TCP retransmits lost packets, so an application only ever sees a
lost packet as extra delay, or, when the connection gives up, as a reset. This proxy
emulates the second kind only: with probability --reset-prob per forwarded chunk (a read of
up to 64 KiB) it closes both sockets with RST (SO_LINGER 0), and the gRPC client sees
UNAVAILABLE and retries. It does not drop individual packets; packet loss as such is not
emulated (the kernel has no netem), only its visible effects: delay (--delay-ms /
--jitter-ms) and resets.

SIGUSR1 resets every open connection at once (scripts/soak.sh's "connection resets" fault).
Stops on SIGTERM/SIGINT. Prints one line per reset and a summary on exit to stderr.
"""
import argparse
import collections
import random
import signal
import socket
import struct
import sys
import threading
import time

CHUNK = 64 * 1024


def parse_addr(s):
    host, _, port = s.rpartition(":")
    return host or "127.0.0.1", int(port)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.conns = 0
        self.resets = 0
        self.bytes = 0


def hard_close(sock):
    """Closes with RST. SHUT_RD first wakes this socket's reader thread (a close() alone
    would leave it blocked in recv, holding the socket open, and send nothing)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class Link:
    """One proxied connection: two directions, each a reader thread and a writer thread."""

    def __init__(self, a, b, args, rng, stats):
        self.a, self.b, self.args, self.rng, self.stats = a, b, args, rng, stats
        self.dead = threading.Event()
        self.lock = threading.Lock()

    def alive(self):
        return not self.dead.is_set()

    def kill(self, reset):
        with self.lock:
            if self.dead.is_set():
                return
            self.dead.set()
        for s in (self.a, self.b):
            if reset:
                hard_close(s)
            else:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def start(self):
        for src, dst in ((self.a, self.b), (self.b, self.a)):
            q = collections.deque()
            cv = threading.Condition()
            threading.Thread(target=self.reader, args=(src, q, cv), daemon=True).start()
            threading.Thread(target=self.writer, args=(dst, q, cv), daemon=True).start()

    def reader(self, src, q, cv):
        last_due = 0.0
        while not self.dead.is_set():
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            delay = self.args.delay_ms
            if self.args.jitter_ms > 0:
                delay += self.rng.uniform(0, self.args.jitter_ms)
            due = max(time.monotonic() + delay / 1000.0, last_due)  # keep order
            last_due = due
            with cv:
                q.append((due, data))
                cv.notify()
            if not data:
                return

    def writer(self, dst, q, cv):
        while True:
            with cv:
                while not q and not self.dead.is_set():
                    cv.wait(0.5)
                if self.dead.is_set():
                    return
                due, data = q.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:  # orderly end of this direction
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    self.kill(False)
                return
            if self.args.reset_prob > 0 and self.rng.random() < self.args.reset_prob:
                with self.stats.lock:
                    self.stats.resets += 1
                print("faultproxy: reset a connection (injected)", file=sys.stderr, flush=True)
                self.kill(True)
                return
            try:
                dst.sendall(data)
            except OSError:
                self.kill(False)
                return
            with self.stats.lock:
                self.stats.bytes += len(data)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    p.add_argument("--connect", required=True, help="HOST:PORT to forward to")
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay per direction")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="extra uniform [0, J) delay")
    p.add_argument("--reset-prob", type=float, default=0.0,
                   help="probability per forwarded chunk (<= 64 KiB) of resetting the connection")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    if args.delay_ms < 0 or args.jitter_ms < 0 or not 0 <= args.reset_prob <= 1:
        p.error("delay and jitter must be >= 0 and reset-prob in [0, 1]")
    rng = random.Random(args.seed)
    stats = Stats()

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(parse_addr(args.listen))
    srv.listen(64)
    print(f"faultproxy: {args.listen} -> {args.connect}, delay {args.delay_ms} ms "
          f"(+ jitter < {args.jitter_ms} ms), reset probability {args.reset_prob} per chunk",
          file=sys.stderr, flush=True)

    def stop(*_):
        print(f"faultproxy: stopping: {stats.conns} connections, {stats.bytes} bytes "
              f"forwarded, {stats.resets} resets injected", file=sys.stderr, flush=True)
        sys.exit(0)

    links = []  # the accept loop's; SIGUSR1 runs on the same (main) thread

    def reset_all(*_):
        live = [link for link in links if link.alive()]
        links[:] = live
        for link in live:
            link.kill(True)
        with stats.lock:
            stats.resets += len(live)
        print(f"faultproxy: reset {len(live)} connections (SIGUSR1)", file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGUSR1, reset_all)
    while True:
        client, _ = srv.accept()
        try:
            upstream = socket.create_connection(parse_addr(args.connect), timeout=10)
            upstream.settimeout(None)
        except OSError as e:
            print(f"faultproxy: cannot connect to {args.connect}: {e}", file=sys.stderr, flush=True)
            hard_close(client)
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with stats.lock:
            stats.conns += 1
        link = Link(client, upstream, args, rng, stats)
        links[:] = [x for x in links if x.alive()] + [link]
        link.start()


if __name__ == "__main__":
    main()
