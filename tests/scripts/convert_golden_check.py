"""Converts the official-layout flash-mini BF16 checkpoint with `dsv4 convert` and runs the golden acceptance
check (shared/tools/golden_check.py) on the result: a copy of golden/flash-mini whose model.gguf is the
converted file, so the converted model's logits meet the same thresholds as the golden model's.

Usage: python3 convert_golden_check.py PATH/TO/dsv4 SHARED_DIR
"""
import os, shutil, subprocess, sys, tempfile

def main(dsv4, shared):
    golden = os.path.join(shared, "golden", "flash-mini")
    ckpt = os.path.join(shared, "fixtures", "checkpoint", "flash-mini", "bf16")
    tmp = tempfile.mkdtemp(prefix="dsv4_convert_golden_")
    try:
        for name in os.listdir(golden):
            if name != "model.gguf":
                os.symlink(os.path.join(golden, name), os.path.join(tmp, name))
        out = os.path.join(tmp, "model.gguf")
        r = subprocess.run([dsv4, "convert", "-q", ckpt, "-o", out], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print("FAIL dsv4 convert:", r.stderr[-500:])
            return 1
        return subprocess.run([sys.executable, os.path.join(shared, "tools", "golden_check.py"), dsv4, tmp]).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
