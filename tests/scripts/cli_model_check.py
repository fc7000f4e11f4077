"""End-to-end checks of the model subcommands (run with /usr/bin/python3, standard library only).

usage: cli_model_check.py DSV4_BIN SHARED_DIR WORK_DIR [CHAT_TOKENS]
- `dsv4 logits` rejects bad input with a message and a non-zero exit (ids out of range, an empty list,
  --mtp on a file without an MTP block, a missing model file);
- `dsv4 logits` output has the documented size;
- `dsv4 run` on a tiny synthetic model with the real vocabulary prints the same text twice for the same seed
  (and a different text for another seed).
"""
import json, os, subprocess, sys

dsv4, shared, work = sys.argv[1], sys.argv[2], sys.argv[3]
# Tokens per chat answer: enough that the first answer is still streaming when Ctrl-C comes 3 s in, few
# enough that the second answer ends well inside the time limit (sanitizer builds decode ~50x slower).
chat_tokens = sys.argv[4] if len(sys.argv) > 4 else "4000"
os.makedirs(work, exist_ok=True)
failures = []

def run(args, **kw):
    # Random-weight models can emit byte tokens that do not form valid UTF-8: decode leniently.
    return subprocess.run([dsv4] + args, capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=600, **kw)

def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)

flash = os.path.join(shared, "golden", "flash-mini", "model.gguf")
pro = os.path.join(shared, "golden", "pro-mini", "model.gguf")
toks = os.path.join(work, "tokens.json")
out = os.path.join(work, "out.f32")

def logits(model, ids, extra=()):
    json.dump(ids, open(toks, "w"))
    if os.path.exists(out):
        os.remove(out)
    return run(["logits", "-m", model, "--tokens", toks, "-o", out] + list(extra))

r = logits(flash, [1, 2, 3, 4, 5])
expect(r.returncode == 0 and os.path.getsize(out) == 5 * 1024 * 4, "logits writes [5, 1024] float32")
r = logits(flash, [1, 2, 3], ["--mtp"])
expect(r.returncode == 0 and os.path.getsize(out) == 2 * 1024 * 4, "logits --mtp writes [len-1, vocab]")
r = logits(flash, [1, 5000])
expect(r.returncode != 0 and "out of range" in r.stderr, "token id out of range is rejected: " + r.stderr.strip()[-80:])
r = logits(flash, [])
expect(r.returncode != 0 and "empty" in r.stderr, "empty token list is rejected: " + r.stderr.strip()[-80:])
r = logits(pro, [1, 2, 3], ["--mtp"])
expect(r.returncode != 0 and "MTP" in r.stderr, "--mtp without an MTP block is rejected: " + r.stderr.strip()[-80:])
r = logits(os.path.join(work, "missing.gguf"), [1])
expect(r.returncode != 0 and "missing.gguf" in r.stderr, "a missing model file is named: " + r.stderr.strip()[-80:])
with open(toks, "w") as f:
    f.write("[1, 2, \"x\"]")
r = run(["logits", "-m", flash, "--tokens", toks, "-o", out])
expect(r.returncode != 0 and "tokens file" in r.stderr, "a malformed tokens file is rejected")

tiny = os.path.join(work, "tiny.gguf")
if not os.path.exists(tiny):
    r = run(["synth", "--preset", "tiny", "--seed", "3", "--vocab",
             os.path.join(shared, "fixtures", "tokenizer", "deepseek_v3", "vocab.gguf"), "-o", tiny])
    expect(r.returncode == 0, "synth tiny with the real vocabulary")
outs = []
for seed in ("42", "42", "43"):
    r = run(["run", "-m", tiny, "-p", "Tell me a story about a lighthouse.", "-n", "16", "--seed", seed, "--temp", "1.0"])
    expect(r.returncode == 0 and "generation:" in r.stderr, "run -n 16 --seed " + seed + " succeeds and reports speed")
    outs.append(r.stdout)
expect(outs[0] == outs[1] and len(outs[0].strip()) > 0, "run prints the same text twice for the same seed")
expect(outs[0] != outs[2], "run prints another text for another seed")
r = run(["run", "-m", tiny, "-p", "plain text", "-n", "4", "--raw", "--temp", "0"])
expect(r.returncode == 0, "run --raw (greedy) succeeds")

# Speculative decoding with the MTP block: greedy text unchanged, the acceptance line printed; sampled runs
# finish; a model without an MTP block and a malformed value are refused with the reason.
plain = run(["run", "-m", tiny, "-p", "plain text", "-n", "24", "--raw", "--temp", "0"])
for spec in ("mtp", "mtp:3"):
    r = run(["run", "-m", tiny, "-p", "plain text", "-n", "24", "--raw", "--temp", "0", "--speculative", spec])
    expect(r.returncode == 0 and r.stdout == plain.stdout, "run --speculative " + spec + " prints the greedy text")
    expect("speculation: " in r.stderr and "tokens per step" in r.stderr, "run --speculative " + spec + " reports acceptance")
r = run(["run", "-m", tiny, "-p", "plain text", "-n", "16", "--temp", "0.8", "--seed", "5", "--speculative", "mtp:2"])
expect(r.returncode == 0 and "generation:" in r.stderr, "sampled run --speculative mtp:2 finishes")
pro = os.path.join(shared, "golden", "pro-mini", "model.gguf")
r = run(["bench", "-m", pro, "--prompt", "8", "--gen", "2", "--speculative", "mtp"])
expect(r.returncode != 0 and "no MTP block" in r.stderr, "--speculative on a model without an MTP block: " + r.stderr.strip()[-200:])
r = run(["run", "-m", tiny, "-p", "x", "-n", "2", "--speculative", "mtp:0"])
expect(r.returncode != 0 and "mtp:K" in r.stderr, "a malformed --speculative value is refused")

# dsv4 chat: multi-turn over stdin, /reset, and Ctrl-C stopping an answer but not the program. The Ctrl-C goes
# once the answer streams (its first bytes after the "> " prompt), not after a fixed delay: on a loaded machine
# the model may still be loading then, before chat takes over SIGINT.
import signal, threading, time
chat = subprocess.Popen([dsv4, "chat", "-m", tiny, "-n", chat_tokens, "--seed", "1", "-c", "8192"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
streams = {"out": bytearray(), "err": bytearray()}
def drain(pipe, key):
    for chunk in iter(lambda: pipe.read1(4096), b""):
        streams[key] += chunk
readers = [threading.Thread(target=drain, args=(chat.stdout, "out")),
           threading.Thread(target=drain, args=(chat.stderr, "err"))]
for t in readers:
    t.start()
chat.stdin.write("Tell me a very long story.\n".encode())
chat.stdin.flush()
deadline = time.monotonic() + 300
def answering():
    at = streams["out"].find(b"> ")
    return at >= 0 and len(streams["out"]) > at + 2
while not answering() and chat.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
expect(answering(), "chat starts streaming an answer")
chat.send_signal(signal.SIGINT)
time.sleep(1.0)
try:
    chat.stdin.write("/reset\nAnother question?\n/exit\n".encode())
    chat.stdin.close()
    chat.wait(timeout=600)
except (subprocess.TimeoutExpired, BrokenPipeError):
    chat.kill()
    chat.wait()
for t in readers:
    t.join()
out = streams["out"].decode("utf-8", "replace")
err = streams["err"].decode("utf-8", "replace")
expect(chat.returncode == 0, "chat exits 0 after Ctrl-C during an answer and /exit (rc %s)" % chat.returncode)
expect("(stopped)" in err, "Ctrl-C stops the current answer")
expect("(conversation cleared)" in out, "/reset clears the conversation")
expect(err.count("generation:") >= 2, "chat answers again after the interrupted turn")

print(f"{len(failures) == 0 and 'all' or len(failures)} {'checks passed' if not failures else 'checks failed'}")
sys.exit(1 if failures else 0)
