"""Run by test_files.py in a fresh interpreter: moves a file of SIZE random
bytes into sandbox SANDBOX and back with the streaming calls, and prints
JSON with the sha256 of each side and the process's peak resident memory
before and after the transfers (its high-water mark, KiB, reset to the
current use first), so that the growth measures the transfers alone;
then, as the control that the measure sees memory use, the same around
reading the file whole with the bytes API.

    python3 bigfile.py SANDBOX SIZE DIR
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import agentbox  # noqa: E402


def peak_kib() -> int:
    """The process's peak resident memory, KiB: the high-water mark of its
    memory (VmHWM). getrusage's ru_maxrss is the same mark, but never below
    the parent's at exec (Linux keeps the larger across exec, so a child of
    pytest starts at pytest's size); both are given, the check uses this."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak() -> None:
    """Sets the peak to the current resident memory (Linux's clear_refs
    "5" resets the high-water mark), so that a transient use before does
    not hide what comes after."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def sha_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def main() -> None:
    ref, size, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    src, back = os.path.join(d, "src.bin"), os.path.join(d, "back.bin")
    with open(src, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            f.write(os.urandom(n))
            left -= n
    want = sha_file(src)
    sb = agentbox.Client().get(ref)
    # Warm up every code path once with a small file, so that what the
    # big transfers add is their own memory.
    with open(src, "rb") as f:
        sb.files.write("/root/warm.bin", f.read(1 << 20))
    with open(back, "wb") as f:
        sb.files.download("/root/warm.bin", f)
    reset_peak()
    before = peak_kib()

    with open(src, "rb") as f:
        up = sb.files.write("/root/big.bin", f, mode=0o600)
    guest = sb.exec(["sha256sum", "/root/big.bin"]).stdout.decode().split()[0]
    with open(back, "wb") as f:
        down = sb.files.download("/root/big.bin", f)
    after = peak_kib()
    rusage_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # The control: the bytes API holds the whole file, and the measure sees it.
    reset_peak()
    at_control = peak_kib()
    whole = sb.files.read("/root/big.bin")
    whole_ok = hashlib.sha256(whole).hexdigest() == want
    del whole
    after_bytes = peak_kib()
    print(
        json.dumps(
            {
                "want": want,
                "guest": guest,
                "back": sha_file(back),
                "up_size": up.size,
                "up_mode": up.mode,
                "down_size": down.size,
                "down_mode": down.mode,
                "back_size": os.path.getsize(back),
                "peak_before_kib": before,
                "peak_after_kib": after,
                "ru_maxrss_after_kib": rusage_after,
                "bytes_read_ok": whole_ok,
                "peak_before_control_kib": at_control,
                "peak_after_bytes_kib": after_bytes,
            }
        )
    )


if __name__ == "__main__":
    main()
