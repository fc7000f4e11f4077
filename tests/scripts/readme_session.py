#!/usr/bin/env python3
"""Runs the README's "A session" transcript and checks that its output is what dsv4 prints today.

Each `$ command` line of the block is run (in a scratch folder, with build/bin/dsv4 and ../shared pointing at
the real ones); what follows it up to the next `$` is the expected stdout then stderr. A `...` line stands
for any number of lines. Progress displays (lines redrawn with a carriage return) are left out. The numbers of the `prompt:` line
(timings, and the token count, as the model may end early on another device) may differ, and so may the
text `dsv4 run` writes on stdout: a random-weight model's words depend on the device and the float
summation order. With --write the block is rewritten from the actual output (parts elided with `...` are kept).

usage: tests/scripts/readme_session.py DSV4_BIN README.md SHARED_DIR [--write]
"""
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

TIMING = re.compile(r"\d+(\.\d+)?")


def session_block(text):
    start = text.index("## A session")
    open_fence = text.index("```\n", start) + 4
    close_fence = text.index("```\n", open_fence)
    return open_fence, close_fence


def parse(block):
    steps = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append([line[2:], []])
        elif steps:
            steps[-1][1].append(line)
    return steps


def clean(out):
    # Progress displays (lines redrawn with \r) are left out, as the transcript leaves them out.
    return [line for line in out.decode("utf-8", "replace").split("\n") if "\r" not in line]


def normalise(line):
    return TIMING.sub("N", line) if line.startswith("prompt:") else line


def matches(expected, actual):
    """Expected lines against actual ones, `...` matching any run of lines."""
    def go(i, j):
        if i == len(expected):
            return j == len(actual)
        if expected[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and normalise(expected[i]) == normalise(actual[j]) and go(i + 1, j + 1)
    return go(0, 0)


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    binary, readme, shared = Path(sys.argv[1]).resolve(), Path(sys.argv[2]), Path(sys.argv[3]).resolve()
    write = "--write" in sys.argv[4:]
    text = readme.read_text()
    a, b = session_block(text)
    steps = parse(text[a:b])
    if not steps:
        print("readme_session: no '$ ' commands in the README's session block", file=sys.stderr)
        return 1
    failures = 0
    new_block = []
    with tempfile.TemporaryDirectory() as work:
        for command, expected in steps:
            real = command.replace("build/bin/dsv4", shlex.quote(str(binary))).replace("../shared", shlex.quote(str(shared)))
            r = subprocess.run(real, shell=True, cwd=work, capture_output=True, timeout=600)
            out, err = clean(r.stdout), clean(r.stderr)
            # split("\n") leaves one empty string after a final newline
            out, err = out[:-1] if out and out[-1] == "" else out, err[:-1] if err and err[-1] == "" else err
            is_run = command.split()[1:2] == ["run"]
            actual = out + err
            if r.returncode != 0:
                print(f"FAIL: '{command}' exited with {r.returncode}:\n" + "\n".join(err), file=sys.stderr)
                failures += 1
            elif is_run:
                # The words are free (see above); the layout and the stats line are not.
                want = [line for line in expected if line.startswith("prompt:")]
                if [normalise(line) for line in want] != [normalise(line) for line in err if line.startswith("prompt:")]:
                    print(f"FAIL: '{command}': stats line\n  README: {want}\n  actual: {err}", file=sys.stderr)
                    failures += 1
            elif not matches(expected, actual):
                print(f"FAIL: '{command}'\n--- README\n" + "\n".join(expected) + "\n--- actual\n" + "\n".join(actual),
                      file=sys.stderr)
                failures += 1
            new_block.append("$ " + command)
            new_block.extend(expected if "..." in expected else actual)
            print(f"ok: {command}" if failures == 0 else f"checked: {command}")
    if write:
        readme.write_text(text[:a] + "\n".join(new_block) + "\n" + text[b:])
        print(f"readme_session: rewrote the session block of {readme}")
        return 0
    if failures:
        print(f"readme_session: {failures} of {len(steps)} commands differ from the README "
              f"(regenerate with: {sys.argv[0]} {sys.argv[1]} {sys.argv[2]} {sys.argv[3]} --write)", file=sys.stderr)
        return 1
    print(f"readme_session: all {len(steps)} commands print what the README shows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
