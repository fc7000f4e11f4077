"""End-to-end checks of `dsv4 perplexity` (run with /usr/bin/python3, standard library only).

usage: cli_perplexity_check.py DSV4_BIN SHARED_DIR WORK_DIR
- on the flash-mini golden token sequence in exact mode (--quant-sim off), the printed perplexity and mean
  NLL equal the ones computed here from the official reference's exact_fp32 logits, within the bound the
  golden README's max |dlogit| <= 2e-3 implies (a token's logprob moves by at most twice that);
- a text file on a tiny synthetic model with the real vocabulary scores every token after the BOS once
  (the count `dsv4 tokenize --bos` gives, minus one), in one window or several;
- windows of one length (each a prompt chunk from position 0, replayed as a step graph from the third on) give
  the numbers of a run with --no-graphs, bit for bit;
- bad input is a clear error with exit code 1, never a crash.
"""
import array, json, math, os, subprocess, sys

dsv4, shared, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
failures = []

def run(args, stdin=None):
    return subprocess.run([dsv4] + args, capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=600, input=stdin)

def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)

golden = os.path.join(shared, "golden", "flash-mini")
model = os.path.join(golden, "model.gguf")
m = json.load(open(os.path.join(golden, "manifest.json")))
P, D = m["prefill_len"], m["decode_len"]
V = m["config"]["vocab_size"]
ids = m["tokens"][:P + D]
toks = os.path.join(work, "golden_tokens.json")
json.dump(ids, open(toks, "w"))

def rows(name, n):
    a = array.array("f")
    with open(os.path.join(golden, name), "rb") as f:
        a.fromfile(f, n * V)
    if sys.byteorder != "little":
        a.byteswap()
    return a

# Reference: rows 0..P-1 of the prefill then the decode rows are one causal run; row t predicts token t+1.
pre, dec = rows("exact_fp32.prefill.f32", P), rows("exact_fp32.decode.f32", D)
nll = 0.0
for t in range(1, P + D):
    src, r = (pre, t - 1) if t - 1 < P else (dec, t - 1 - P)
    row = src[r * V:(r + 1) * V]
    mx = max(row)
    lse = mx + math.log(sum(math.exp(x - mx) for x in row))
    nll -= row[ids[t]] - lse
ref_mean = nll / (P + D - 1)
tol = 2 * 2e-3  # golden/README.md: exact mode max |dlogit| <= 2e-3 on every row

r = run(["perplexity", "-m", model, "--tokens", toks, "--quant-sim", "off", "--json", "--device", "cpu"])
expect(r.returncode == 0, "golden perplexity runs: " + r.stderr.strip()[-200:])
if r.returncode == 0:
    out = json.loads(r.stdout)
    expect(out["tokens"] == P + D - 1, "every token after the first is scored (%s)" % out["tokens"])
    expect(abs(out["mean_nll"] - ref_mean) <= tol,
           "mean NLL %.9f equals the reference's %.9f (bound %g)" % (out["mean_nll"], ref_mean, tol))
    expect(abs(math.log(out["perplexity"]) - ref_mean) <= tol,
           "perplexity %.6f equals the reference's %.6f" % (out["perplexity"], math.exp(ref_mean)))
    expect("window 1/1" in r.stderr, "progress goes to stderr")
# The plain output says the same.
r = run(["perplexity", "-m", model, "--tokens", toks, "--quant-sim", "off", "-q"])
lines = r.stdout.splitlines()
expect(r.returncode == 0 and len(lines) == 3 and lines[0].startswith("perplexity: ") and
       abs(math.log(float(lines[0].split()[1])) - ref_mean) <= tol and "tokens scored: %d" % (P + D - 1) in lines[2],
       "plain output: perplexity, mean NLL, token count: %r" % lines)

# Windows of one length each prefill one chunk from position 0: from the third on they replay the recording
# captured by the second (step graphs), with the numbers of a run without them, bit for bit.
same = ["perplexity", "-m", model, "--tokens", toks, "--ctx", "48", "--stride", "24", "--prefill-chunk", "48", "--json",
        "-q", "--device", "cpu"]
r, r_plain = run(same), run(same + ["--no-graphs"])
expect(r.returncode == 0 and r_plain.returncode == 0 and json.loads(r.stdout)["windows"] > 3 and
       json.loads(r.stdout) == json.loads(r_plain.stdout),
       "windows replayed as step graphs equal windows run as issued: %s / %s" % (r.stdout.strip(), r_plain.stdout.strip()))

# A text file on a model with a tokenizer.
tiny = os.path.join(work, "tiny.gguf")
if not os.path.exists(tiny):
    r = run(["synth", "--preset", "tiny", "--seed", "5", "-q", "--vocab",
             os.path.join(shared, "fixtures", "tokenizer", "deepseek_v3", "vocab.gguf"), "-o", tiny])
    expect(r.returncode == 0, "synth tiny model: " + r.stderr.strip()[-200:])
text = os.path.join(work, "text.txt")
body = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity.\n") * 3
open(text, "w", encoding="utf-8").write(body)
r = run(["tokenize", "-m", tiny, "--bos"], stdin=body)
n = len(json.loads(r.stdout))
for extra, windows in ((["--ctx", "512"], 1), (["--ctx", "40", "--stride", "20"], None)):
    r = run(["perplexity", "-m", tiny, "-f", text, "--json", "-q"] + extra)
    ok = r.returncode == 0
    out = json.loads(r.stdout) if ok else {}
    expect(ok and out["tokens"] == n - 1 and out["perplexity"] > 1 and (windows is None or out["windows"] == windows)
           and (windows is not None or out["windows"] > 1),
           "text file %s: %d tokens scored of %d: %s" % (" ".join(extra), out.get("tokens", -1), n, r.stderr.strip()[-200:]))

# Bad input: exit code 1 and a message naming the problem.
empty = os.path.join(work, "empty.txt")
open(empty, "w").close()
one = os.path.join(work, "one.json")
json.dump([5], open(one, "w"))
cases = [
    (["-f", os.path.join(work, "missing.txt")], "cannot open text file"),
    (["-f", empty], "is empty"),
    (["-f", text], "tokenize"),  # the golden model has no tokenizer
    (["--tokens", one], "nothing to score"),
    (["--tokens", toks, "--ctx", "1"], "--ctx must be at least 2"),
    (["--tokens", toks, "--ctx", "10", "--stride", "11"], "exceeds --ctx"),
    (["--tokens", toks, "--ctx", str(m["config"]["max_seq_len"] + 1)], "exceeds the model's context"),
    ([], "-f FILE"),
]
for extra, needle in cases:
    r = run(["perplexity", "-m", model, "-q"] + extra)
    expect(r.returncode == 1 and needle in r.stderr, "%s -> %s" % (" ".join(extra) or "(no input)", r.stderr.strip()[-120:]))
r = run(["perplexity", "-m", model, "-f", text, "--tokens", toks])
expect(r.returncode > 0 and "excludes" in r.stderr, "-f and --tokens together are refused: " + r.stderr.strip()[-120:])
r = run(["perplexity", "-m", os.path.join(work, "missing.gguf"), "--tokens", toks])
expect(r.returncode == 1 and "missing.gguf" in r.stderr, "a missing model is named: " + r.stderr.strip()[-120:])

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all perplexity checks passed")
