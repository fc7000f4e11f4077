#!/usr/bin/env python3
"""Load generator for `dsv4 serve`: N concurrent streaming chat requests, and what they saw.

Each of --clients threads takes requests from a shared counter until --requests have been sent. A request is
one POST /v1/chat/completions with "stream": true and "stream_options": {"include_usage": true}, over its own
connection, with a random prompt of about --prompt-words words (the same prompts for the same --seed, so runs
repeat; different prompts per request, so the prefix cache does not answer them). --warmup requests run first,
one at a time, and are not timed. It measures, per request:

  TTFT                time from sending the request to the first chunk that carries output
                      (content, reasoning_content or tool_calls)
  output tokens       completion_tokens of the final usage chunk (else the number of output chunks)
  time per token      (end - first output) / (tokens - 1), for requests of 2+ tokens; end = the [DONE] event

and reports: requests ok and failed (by HTTP status, e.g. http_429 when the queue is full; transport errors;
an error event inside the stream; a malformed stream), TTFT and time per output token at p50 and p99 (nearest
rank: the value at rank ceil(p/100 * n) of the n sorted values), aggregate output tokens/s (the output tokens
of the requests that succeeded / wall time from the first timed send to the last end), per-stream tokens/s
(the mean over requests of 2+ tokens of tokens / (end - first output)) and the wall time.

    dsv4 serve -m model.gguf --parallel 8 &
    bench/serve_load.py --clients 8 --requests 32 --max-tokens 128
    bench/serve_load.py --url http://host:8080 --clients 16 --json

Prints a few aligned lines, or with --json one JSON object with the same numbers. Exits 1 when any timed
request failed (the failures summarized on stderr), 2 when the server cannot be asked for its model.
Python 3 standard library only.
"""
import argparse
import http.client
import json
import math
import os
import random
import sys
import threading
import time
import urllib.parse

# Prompt words: common English, so a prompt tokenizes to about one token per word.
WORDS = ("the of and to in is was that for on with as by at from his her they this have had not are but which one "
         "all were when there can more an their time would about if out up into so some what other than then them "
         "these two may first any like over such only new years people way could great little world after work "
         "water long day year number sound house place every city river light night story music answer question "
         "small large early late cold warm green blue red stone paper window garden market letter engine signal "
         "table field forest winter summer morning evening history science number animal mountain ocean island").split()


def parse_args(argv):
    p = argparse.ArgumentParser(description="Drive `dsv4 serve` with concurrent streaming chat requests and report "
                                            "TTFT, time per output token and tokens/s.")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL (default: %(default)s)")
    p.add_argument("--clients", type=int, default=8, help="concurrent streams (default: %(default)s)")
    p.add_argument("--requests", type=int, default=None, help="timed requests in all (default: --clients)")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request (default: %(default)s)")
    p.add_argument("--prompt-words", type=int, default=32, help="words per random prompt (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts (and of sampling) (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; 0: greedy (default)")
    p.add_argument("--model", default=None, help="model id (default: the first id of GET /v1/models)")
    p.add_argument("--api-key", default=os.environ.get("DSV4_API_KEY"), help="bearer key (default: $DSV4_API_KEY)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests first, one at a time (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    a = p.parse_args(argv)
    if a.requests is None:
        a.requests = a.clients
    for name in ("clients", "requests", "max_tokens", "prompt_words"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.warmup < 0 or a.timeout <= 0 or a.temperature < 0:
        p.error("--warmup, --timeout and --temperature must not be negative (--timeout: positive)")
    u = urllib.parse.urlsplit(a.url)
    if u.scheme not in ("http", "https") or not u.hostname:
        p.error(f"--url must be http://HOST[:PORT] or https://...: {a.url!r}")
    return a


class Target:
    """Where requests go: one new connection per request."""

    def __init__(self, url, api_key, timeout):
        u = urllib.parse.urlsplit(url)
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.base = u.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def connect(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)


def first_model(target):
    conn = target.connect()
    try:
        conn.request("GET", target.base + "/v1/models", headers=target.headers)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"GET /v1/models: HTTP {r.status}: {body[:300].decode(errors='replace')}")
        return json.loads(body)["data"][0]["id"]
    finally:
        conn.close()


def make_prompt(seed, index, n_words):
    # Per request its own generator: the prompts do not depend on which thread sends which request.
    rng = random.Random(seed * 1000003 + index)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def chunk_has_output(chunk):
    for choice in chunk.get("choices") or []:
        d = choice.get("delta") or {}
        if d.get("content") or d.get("reasoning_content") or d.get("tool_calls"):
            return True
    return False


def run_request(target, body, deadline_s):
    """One streaming request. Returns a dict: kind ('ok', 'http_NNN', 'transport', 'stream_error', 'bad_stream'),
    send, first, end (perf_counter seconds; first is None without output), tokens, error."""
    out = {"kind": "ok", "send": None, "first": None, "end": None, "tokens": 0, "error": ""}
    conn = target.connect()
    try:
        payload = json.dumps(body).encode()
        out["send"] = time.perf_counter()
        deadline = out["send"] + deadline_s
        conn.request("POST", target.base + "/v1/chat/completions", body=payload, headers=target.headers)
        r = conn.getresponse()
        if r.status != 200:
            text = r.read().decode(errors="replace")
            out["end"] = time.perf_counter()
            try:
                text = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                pass
            out.update(kind=f"http_{r.status}", error=text[:300])
            return out
        deltas, usage_tokens, done = 0, None, False
        while True:
            line = r.readline()
            now = time.perf_counter()
            if not line:
                break
            if now > deadline:
                raise TimeoutError(f"no [DONE] within --timeout {deadline_s:g} s")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event: lines
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                raise ValueError(f"a chunk that is not a JSON object: {data[:100]!r}")
            if "error" in chunk:
                err = chunk["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                out.update(kind="stream_error", error=str(msg)[:300])
                continue
            if chunk_has_output(chunk):
                deltas += 1
                if out["first"] is None:
                    out["first"] = now
            if isinstance(chunk.get("usage"), dict):
                usage_tokens = chunk["usage"].get("completion_tokens")
        out["end"] = time.perf_counter()
        out["tokens"] = usage_tokens if isinstance(usage_tokens, int) else deltas
        if not done and out["kind"] == "ok":
            out.update(kind="transport", error="the stream ended before [DONE]")
    except (OSError, http.client.HTTPException) as e:
        # OSError covers refused connections and socket timeouts (TimeoutError).
        out["end"] = time.perf_counter()
        out.update(kind="transport", error=f"{type(e).__name__}: {e}"[:300])
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        # A chunk that is not JSON or not shaped like a chat.completion.chunk.
        out["end"] = time.perf_counter()
        out.update(kind="bad_stream", error=f"{type(e).__name__}: {e}"[:300])
    finally:
        conn.close()
    return out


def request_body(a, model, index):
    body = {"model": model, "messages": [{"role": "user", "content": make_prompt(a.seed, index, a.prompt_words)}],
            "max_tokens": a.max_tokens, "temperature": a.temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if a.temperature > 0:
        body["seed"] = a.seed * 1000003 + index
    return body


def run_load(a, target, model):
    """The timed requests, --clients at a time; returns their results in request order."""
    results = [None] * a.requests
    lock = threading.Lock()
    next_index = [0]
    # All clients send their first request together, so the first wave really is --clients streams at once.
    start = threading.Barrier(a.clients)

    def client():
        start.wait()
        while True:
            with lock:
                i = next_index[0]
                if i >= a.requests:
                    return
                next_index[0] += 1
            results[i] = run_request(target, request_body(a, model, a.warmup + i), a.timeout)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def percentile(values, p):
    """Nearest rank: the value at rank ceil(p/100 * n) of the sorted values; None when there are none."""
    if not values:
        return None
    s = sorted(values)
    return s[max(1, math.ceil(p / 100.0 * len(s))) - 1]


def summarize(a, model, results):
    ok = [r for r in results if r["kind"] == "ok"]
    failed = {}
    for r in results:
        if r["kind"] != "ok":
            failed[r["kind"]] = failed.get(r["kind"], 0) + 1
    ttft = [(r["first"] - r["send"]) * 1e3 for r in ok if r["first"] is not None]
    multi = [r for r in ok if r["first"] is not None and r["tokens"] >= 2 and r["end"] > r["first"]]
    tpot = [(r["end"] - r["first"]) * 1e3 / (r["tokens"] - 1) for r in multi]
    stream_rates = [r["tokens"] / (r["end"] - r["first"]) for r in multi]
    sends = [r["send"] for r in results if r["send"] is not None]
    ends = [r["end"] for r in results if r["end"] is not None]
    wall = max(ends) - min(sends) if sends and ends else 0.0
    tokens = sum(r["tokens"] for r in ok)

    def ms(x):
        return None if x is None else round(x, 3)

    return {
        "url": a.url, "model": model, "clients": a.clients, "requests": a.requests, "max_tokens": a.max_tokens,
        "prompt_words": a.prompt_words, "temperature": a.temperature, "warmup": a.warmup,
        "ok": len(ok), "failed": len(results) - len(ok), "failed_by": dict(sorted(failed.items())),
        "output_tokens": tokens,
        "ttft_ms_p50": ms(percentile(ttft, 50)), "ttft_ms_p99": ms(percentile(ttft, 99)),
        "tpot_ms_p50": ms(percentile(tpot, 50)), "tpot_ms_p99": ms(percentile(tpot, 99)),
        "tokens_per_s": round(tokens / wall, 3) if wall > 0 else 0.0,
        "tokens_per_s_per_stream": round(sum(stream_rates) / len(stream_rates), 3) if stream_rates else None,
        "wall_s": round(wall, 3),
    }


def text_report(rep):
    def f(x, unit=""):
        return "-" if x is None else f"{x:.2f}{unit}"

    fails = ", ".join(f"{k} x{v}" for k, v in rep["failed_by"].items())
    rows = [
        ("server", f"{rep['url']}  model {rep['model']}"),
        ("load", f"{rep['clients']} clients, {rep['requests']} requests, max_tokens {rep['max_tokens']}, "
                 f"~{rep['prompt_words']} prompt words"),
        ("requests", f"{rep['ok']} ok, {rep['failed']} failed" + (f" ({fails})" if fails else "")),
        ("TTFT", f"p50 {f(rep['ttft_ms_p50'], ' ms')}   p99 {f(rep['ttft_ms_p99'], ' ms')}"),
        ("time/token", f"p50 {f(rep['tpot_ms_p50'], ' ms')}   p99 {f(rep['tpot_ms_p99'], ' ms')}"),
        ("tokens/s", f"{f(rep['tokens_per_s'])} aggregate ({rep['output_tokens']} output tokens), "
                     f"{f(rep['tokens_per_s_per_stream'])} per stream"),
        ("wall", f"{rep['wall_s']:.2f} s"),
    ]
    return "\n".join(f"{k:<11} {v}" for k, v in rows)


def main(argv):
    a = parse_args(argv)
    target = Target(a.url, a.api_key, a.timeout)
    try:
        model = a.model or first_model(target)
    except (OSError, http.client.HTTPException, RuntimeError, ValueError, KeyError, IndexError) as e:
        print(f"serve_load: cannot ask {a.url} for its model: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    for k in range(a.warmup):
        r = run_request(target, request_body(a, model, k), a.timeout)
        if r["kind"] != "ok":
            print(f"serve_load: warmup request {k} failed ({r['kind']}): {r['error']}", file=sys.stderr)
    results = run_load(a, target, model)
    rep = summarize(a, model, results)
    print(json.dumps(rep) if a.json else text_report(rep))
    if rep["failed"]:
        print(f"serve_load: {rep['failed']} of {rep['requests']} requests failed", file=sys.stderr)
        for kind in rep["failed_by"]:
            first = next(r for r in results if r["kind"] == kind)
            print(f"  {kind} x{rep['failed_by'][kind]}: {first['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
