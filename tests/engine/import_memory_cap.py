"""The IDX and CIFAR-10 importers stream their records (issue 49): under an address-space cap
(ulimit -v) only a little above what the tool needs to import a one-record source, an import of
files several times the cap's headroom finishes. Before streaming, a CIFAR-10 batch file was
held whole (and more): a 4 GiB file peaked at 7.2 GB and ended in std::bad_alloc under a cap.

The cap is found, not assumed: the smallest (to 8 MiB) under which a one-record import of the same
kind succeeds; the big import then runs under that cap plus 32 MiB, with 96 MiB source files.
An allocation that cannot fit (an 8000 x 8000 PNG decoded, under the cap of an 8 x 8 one) reads as
one line naming what was allocated and how much, never "internal error", nothing left at --out.

Usage: import_memory_cap.py TRAINLAB"""
import os
import resource
import struct
import subprocess
import sys
import tempfile
import zlib

MIB = 1 << 20
HEADROOM = 32 * MIB
BIG = 96 * MIB


def run(trainlab, args, cap):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run([trainlab, "make-dataset", *args], preexec_fn=limit, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def smallest_cap(trainlab, args, out):
    """The smallest address-space cap (to 8 MiB) under which `args` imports."""
    lo, hi = 16 * MIB, 16 * 1024 * MIB
    if run(trainlab, args + ["--out", out + "-probe"], hi).returncode != 0:
        sys.exit("import_memory_cap: the one-record import fails even under 16 GiB")
    while hi - lo > 8 * MIB:
        mid = (lo + hi) // 2
        ok = run(trainlab, args + ["--out", f"{out}-{mid}"], mid).returncode == 0
        lo, hi = (lo, mid) if ok else (mid, hi)
    return hi


def cifar(directory, records_per_train_file):
    os.makedirs(directory, exist_ok=True)
    record = bytes([3]) + bytes(range(256)) * 12
    for b in range(1, 6):
        with open(os.path.join(directory, f"data_batch_{b}.bin"), "wb") as f:
            f.write(record * (records_per_train_file if b == 1 else 1))
    with open(os.path.join(directory, "test_batch.bin"), "wb") as f:
        f.write(record + bytes([7]) + record[1:])


def idx(directory, train_images):
    os.makedirs(directory, exist_ok=True)
    image = bytes(range(256)) * 3 + bytes(16)  # 28 x 28
    for split, n in (("train", train_images), ("t10k", 2)):
        with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28))
            chunk = image * 4096
            for start in range(0, n, 4096):
                f.write(chunk[:len(image) * min(4096, n - start)])
        with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))


def png(path, side):
    """An RGB PNG of side x side pixels, all one grey: small on disk, side * side * 3 bytes decoded."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    row = b"\0" + bytes([120]) * (3 * side)
    compress = zlib.compressobj(9)
    data = b"".join(compress.compress(row) for _ in range(side)) + compress.flush()

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", data) + chunk(b"IEND", b""))


def main():
    trainlab = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory(prefix="import-cap-") as tmp:
        for kind, make, big_count in (("cifar10", cifar, BIG // 3073), ("idx", idx, BIG // 784)):
            small, big = os.path.join(tmp, kind + "-small"), os.path.join(tmp, kind + "-big")
            make(small, 1)
            make(big, big_count)
            common = ["--codec", "raw", "--shard-mb", "1"]
            cap = smallest_cap(trainlab, ["--from", f"{kind}:{small}"] + common, os.path.join(tmp, kind + "-out"))
            source_bytes = sum(os.path.getsize(os.path.join(big, f)) for f in os.listdir(big))
            result = run(trainlab, ["--from", f"{kind}:{big}", "--out", os.path.join(tmp, kind + "-big-out")] + common,
                         cap + HEADROOM)
            print(f"{kind}: one record imports under {cap / MIB:.0f} MiB; {source_bytes / MIB:.0f} MiB of source "
                  f"under {(cap + HEADROOM) / MIB:.0f} MiB: exit {result.returncode}")
            if result.returncode != 0:
                failures.append(f"{kind}: {source_bytes / MIB:.0f} MiB of source did not import under "
                                f"{(cap + HEADROOM) / MIB:.0f} MiB: {result.stderr.strip()}")
        # An allocation that cannot fit: an 8000 x 8000 RGB PNG (183 MiB decoded) under the cap of an 8 x 8 one
        # plus the headroom: one line naming what was allocated and how much, nothing left at --out.
        folder = os.path.join(tmp, "photos")
        for name, side in (("a/small.png", 8), ("b/small.png", 8)):
            png(os.path.join(folder, "train", name), side)
        common = ["--codec", "raw", "--shard-mb", "1", "--from", f"imagefolder:{folder}"]
        cap = smallest_cap(trainlab, common, os.path.join(tmp, "folder-out"))
        png(os.path.join(folder, "train", "b", "huge.png"), 8000)
        result = run(trainlab, common + ["--out", os.path.join(tmp, "folder-huge"), "--image-size", "8"], cap + HEADROOM)
        print(f"imagefolder: an 8000x8000 PNG under {(cap + HEADROOM) / MIB:.0f} MiB: exit {result.returncode}: "
              f"{result.stderr.strip()}")
        if (result.returncode == 0 or len(result.stderr.strip().splitlines()) != 1 or "internal error" in result.stderr
                or "decoding a PNG of 8000x8000 pixels" not in result.stderr or "183.1 MiB" not in result.stderr):
            failures.append("imagefolder: the failed allocation was not one line naming the PNG and 183.1 MiB")
        if os.path.exists(os.path.join(tmp, "folder-huge")):
            failures.append("imagefolder: a refused import left its --out behind")
    for f in failures:
        print("FAIL:", f)
    print("import_memory_cap: ok" if not failures else f"import_memory_cap: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
