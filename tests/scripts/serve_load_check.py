#!/usr/bin/env python3
"""Checks bench/serve_load.py against a real `dsv4 serve` (a tiny random-weight model): 12 streaming requests
from 6 clients all succeed and the report's numbers are consistent (tokens within max_tokens, every
percentile present, p50 <= p99, tokens/s positive); then, against a server with one slot and a queue of one,
8 clients at once get some requests refused with HTTP 429, and the tool still prints its report and exits
non-zero. Usage: serve_load_check.py DSV4_BIN MODEL"""
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

dsv4, model = sys.argv[1], sys.argv[2]
serve_load = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "serve_load.py")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


class Server:
    """`dsv4 serve` on a free loopback port; the port comes from its "listening on" line."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen([dsv4, "serve", "-m", model, "--port", "0", "--device", "cpu", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.url = None
        deadline = time.monotonic() + 120
        while self.url is None and time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break  # stdout closed: the server exited
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line)
        put(None)

    def stop(self):
        """SIGTERM, then a bounded wait; True when it exited 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30) == 0
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False


def load(url, *extra):
    p = subprocess.run([sys.executable, serve_load, "--url", url, "--json", *extra], capture_output=True, text=True,
                       timeout=300)
    try:
        rep = json.loads(p.stdout)
    except ValueError:
        rep = None
    return p, rep


# 1. Everything succeeds: 12 requests, 6 at a time, on 4 slots (so some wait in the queue).
srv = Server("--parallel", "4")
check(srv.url is not None, f"server with 4 slots is listening ({srv.url})")
if srv.url:
    p, rep = load(srv.url, "--clients", "6", "--requests", "12", "--max-tokens", "8")
    check(p.returncode == 0, f"serve_load exits 0 ({p.returncode}; stderr: {p.stderr[-500:]!r})")
    check(rep is not None, "the report is one JSON object")
    if rep:
        check(rep["ok"] == 12 and rep["failed"] == 0 and rep["failed_by"] == {},
              f"12 ok, 0 failed ({rep['ok']}, {rep['failed']}, {rep['failed_by']})")
        check(0 < rep["output_tokens"] <= 12 * 8, f"output tokens within 12 x max_tokens ({rep['output_tokens']})")
        for m in ("ttft_ms", "tpot_ms"):
            p50, p99 = rep.get(m + "_p50"), rep.get(m + "_p99")
            check(p50 is not None and p99 is not None and 0 <= p50 <= p99, f"{m}: 0 <= p50 <= p99 ({p50}, {p99})")
        check(rep["tokens_per_s"] > 0 and rep["wall_s"] > 0,
              f"aggregate tokens/s and wall time positive ({rep['tokens_per_s']}, {rep['wall_s']} s)")
        check(rep["tokens_per_s_per_stream"] is not None and rep["tokens_per_s_per_stream"] > 0,
              f"per-stream tokens/s positive ({rep['tokens_per_s_per_stream']})")
    # The plain-text report has its lines too.
    t = subprocess.run([sys.executable, serve_load, "--url", srv.url, "--clients", "2", "--requests", "2",
                        "--max-tokens", "4", "--warmup", "0"], capture_output=True, text=True, timeout=300)
    check(t.returncode == 0 and all(k in t.stdout for k in ("requests", "TTFT", "time/token", "tokens/s", "wall")),
          f"the text report ({t.returncode}): {t.stdout.splitlines()[2:3]}")
check(srv.stop(), "server stops on SIGTERM with exit 0")

# 2. A full queue: one slot, one waiting place, 8 clients sending at once: the rest are refused with 429. The
# requests are long enough (64-word prompts, 32 tokens) that 8 sends at once always find the slot and the queue
# taken.
srv = Server("--parallel", "1", "--max-queue", "1")
check(srv.url is not None, f"server with 1 slot and a queue of 1 is listening ({srv.url})")
if srv.url:
    p, rep = load(srv.url, "--clients", "8", "--requests", "8", "--max-tokens", "32", "--prompt-words", "64")
    check(p.returncode != 0, f"serve_load exits non-zero when requests fail ({p.returncode})")
    check("Traceback" not in p.stderr, "no traceback")
    check(rep is not None, "the report is still printed")
    if rep:
        refused = rep["failed_by"].get("http_429", 0)
        check(refused > 0 and rep["ok"] >= 1 and rep["ok"] + rep["failed"] == 8,
              f"some refused with 429, the rest ok ({rep['ok']} ok, {rep['failed_by']})")
    check("http_429" in p.stderr, f"the failures are summarized on stderr ({p.stderr.strip()[:200]!r})")
check(srv.stop(), "server stops on SIGTERM with exit 0")

if failures:
    sys.exit(1)
print("serve_load: ok")
