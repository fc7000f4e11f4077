#!/usr/bin/env python3
"""End-to-end check of `dsv4 prompt`: for every case of the official-encoder fixture, write the messages to a
file, run the CLI with the case's options as flags and compare stdout with the expected prompt byte for byte.
Cases whose system message carries tools are run a second time with the tools passed through --tools.
Also checks that inputs the encoder rejects give a non-zero exit and no output.

usage: cli_prompt_check.py DSV4_BIN ENCODE_CASES_JSON
"""
import json
import os
import subprocess
import sys
import tempfile


def run(binary, args):
    return subprocess.run([binary, "prompt"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)


def flags_for(options):
    flags = []
    if options.get("thinking_mode") == "thinking":
        flags.append("--thinking")
    if options.get("drop_thinking") is False:
        flags.append("--keep-thinking")
    if options.get("reasoning_effort"):
        flags += ["--reasoning-effort", options["reasoning_effort"]]
    unknown = set(options) - {"thinking_mode", "drop_thinking", "reasoning_effort"}
    if unknown:
        raise SystemExit(f"fixture option(s) the CLI has no flag for: {sorted(unknown)}")
    return flags


def main():
    binary, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    failures = []
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, value):
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(value, f, ensure_ascii=False)
            return path

        for i, case in enumerate(cases):
            label = f"{case['name']} {json.dumps(case['options'])}"
            flags = flags_for(case["options"])
            variants = [(write(f"m{i}.json", case["messages"]), [])]
            msgs = case["messages"]
            if msgs and msgs[0].get("role") == "system" and "tools" in msgs[0]:
                stripped = [dict(m) for m in msgs]
                tools = stripped[0].pop("tools")
                variants.append((write(f"m{i}_notools.json", stripped), ["--tools", write(f"t{i}.json", tools)]))
            for path, extra in variants:
                r = run(binary, ["--messages", path] + flags + extra)
                checked += 1
                if case["error"] is not None:
                    if r.returncode == 0:
                        failures.append(f"{label}: expected an error ({case['error']}), got exit 0")
                    continue
                want = case["prompt"].encode("utf-8")
                if r.returncode != 0:
                    failures.append(f"{label} {extra}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
                elif r.stdout != want:
                    failures.append(f"{label} {extra}: output differs\n  want {want!r}\n  got  {r.stdout!r}")

        # Rejected inputs: the official encoder raises on a developer message without content.
        bad = write("bad.json", [{"role": "developer", "content": ""}, {"role": "user", "content": "u"}])
        r = run(binary, ["--messages", bad])
        if r.returncode == 0 or r.stdout or not r.stderr:
            failures.append(f"rejected input: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")
        broken = os.path.join(tmp, "broken.json")
        with open(broken, "w") as f:
            f.write("[{")
        r = run(binary, ["--messages", broken])
        if r.returncode == 0 or r.stdout:
            failures.append(f"invalid JSON: exit {r.returncode}, stdout {r.stdout!r}")
        checked += 2

    for f in failures:
        print("FAIL", f)
    print(f"cli_prompt: {checked - len(failures)}/{checked} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
