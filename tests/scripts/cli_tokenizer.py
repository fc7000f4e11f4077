#!/usr/bin/env python3
"""`dsv4 tokenize` / `dsv4 detokenize` end to end (standard library only).

usage: cli_tokenizer.py DSV4_BIN VOCAB_GGUF CASES_JSONL {cases,bytes,errors}
  cases:  fixture cases through both commands: exact JSON line out of tokenize, exact bytes out of detokenize
  bytes:  arbitrary bytes (invalid UTF-8 included) survive tokenize -> detokenize unchanged
  errors: bad ids / bad JSON / missing model give a message on stderr and a non-zero exit
"""
import json
import random
import subprocess
import sys

failures = []


def run(binary, args, stdin):
    p = subprocess.run([binary] + args, input=stdin, capture_output=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def tokenize(binary, model, data, *flags):
    rc, out, err = run(binary, ["tokenize", "-m", model, *flags], data)
    check(rc == 0, "tokenize exit %d: %s" % (rc, err.decode(errors="replace")))
    return out


def detokenize(binary, model, ids_json):
    rc, out, err = run(binary, ["detokenize", "-m", model], ids_json)
    check(rc == 0, "detokenize exit %d: %s" % (rc, err.decode(errors="replace")))
    return out


def mode_cases(binary, model, cases):
    # Every case with special tokens, line breaks, non-Latin scripts or edge whitespace, plus a few others.
    picked = [c for c in cases if any(s in c["text"] for s in ("<｜", "\n", "\r", "😀", "你", "  "))]
    picked += cases[:3] + cases[-2:]
    for c in picked:
        text = c["text"].encode("utf-8")
        want = (json.dumps(c["ids"], separators=(",", ":")) + "\n").encode()
        got = tokenize(binary, model, text)
        check(got == want, "tokenize %r: got %r want %r" % (c["text"][:60], got[:200], want[:200]))
        got = detokenize(binary, model, json.dumps(c["ids"]).encode())
        check(got == c["decoded"].encode("utf-8"), "detokenize of %r: got %r" % (c["text"][:60], got[:200]))
    # --no-special: the same text becomes plain tokens that still decode to it.
    special = "<｜User｜>".encode("utf-8")
    ids = json.loads(tokenize(binary, model, special, "--no-special"))
    check(len(ids) > 1, "--no-special kept the special token: %r" % ids)
    check(detokenize(binary, model, json.dumps(ids).encode()) == special, "--no-special round trip")
    # --bos prepends the file's BOS, which decodes to its text.
    ids = json.loads(tokenize(binary, model, b"hi", "--bos"))
    check(detokenize(binary, model, json.dumps(ids[:1]).encode()) == "<｜begin▁of▁sentence｜>".encode("utf-8"),
          "--bos did not prepend the BOS token: %r" % ids)


def mode_bytes(binary, model, _cases):
    rng = random.Random(11)
    samples = [b"", b"\xff", b"ab\xfe\xffcd", b"\xe4\xbd", b"caf\xc3", b"\x00\x01\x02 nul bytes",
               bytes(range(256)), "trailing newline\n".encode()]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) for _ in range(6)]
    for s in samples:
        ids = tokenize(binary, model, s)
        check(ids.endswith(b"\n") and ids.count(b"\n") == 1, "tokenize output is not one line: %r" % ids[:100])
        got = detokenize(binary, model, ids)
        check(got == s, "bytes round trip: %r -> %r" % (s[:60], got[:60]))


def mode_errors(binary, model, _cases):
    for bad, needle in [(b"[129280]", b"129280"), (b"[1, -1]", b"-1"), (b"[4294967296]", b"4294967296"),
                        (b'["a"]', b"not an integer"), (b"[1.5]", b"not an integer"), (b"not json", b"JSON"),
                        (b'{"ids": [1]}', b"not an array")]:
        rc, out, err = run(binary, ["detokenize", "-m", model], bad)
        check(rc != 0, "detokenize %r exited 0" % bad)
        check(needle in err, "detokenize %r: stderr %r lacks %r" % (bad, err, needle))
        check(out == b"", "detokenize %r wrote to stdout: %r" % (bad, out))
    rc, _, err = run(binary, ["tokenize", "-m", model + ".missing"], b"x")
    check(rc != 0 and b".missing" in err, "missing model: rc %d, stderr %r" % (rc, err))
    rc, _, _ = run(binary, ["tokenize"], b"x")
    check(rc != 0, "tokenize without -m exited 0")


def main():
    binary, model, cases_path, mode = sys.argv[1:5]
    with open(cases_path, encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    {"cases": mode_cases, "bytes": mode_bytes, "errors": mode_errors}[mode](binary, model, cases)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
