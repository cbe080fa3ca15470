"""Reads a checkpoint's model.safetensors with Python's standard library alone: an independent
check that trainlab writes the safetensors layout other tools expect (8-byte little-endian header
length, JSON header, raw little-endian data that the offsets tile exactly)."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

EXPECTED = {
    "conv1.weight": [32, 3, 3, 3], "conv1.bias": [32],
    "conv2.weight": [64, 32, 3, 3], "conv2.bias": [64],
    "fc1.weight": [256, 4096], "fc1.bias": [256],
    "fc2.weight": [10, 256], "fc2.bias": [10],
}


def main() -> int:
    trainlab = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        subprocess.run([trainlab, "train", "--steps", "2", "--batch", "8", "--train-samples", "16",
                        "--eval-samples", "8", "--eval-batch", "8", "--save", ckpt],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(ckpt, "model.safetensors"), "rb") as f:
            blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    data = blob[8 + header_len:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), meta
    assert set(header) == set(EXPECTED), sorted(header)
    spans = []
    for name, entry in header.items():
        assert entry["dtype"] == "F32", (name, entry)
        assert entry["shape"] == EXPECTED[name], (name, entry)
        begin, end = entry["data_offsets"]
        assert end - begin == 4 * math.prod(entry["shape"]), (name, entry)
        values = struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])
        bound = 1.0 / math.sqrt(math.prod(EXPECTED[name.replace("bias", "weight")][1:]))
        assert all(math.isfinite(v) for v in values), name
        assert max(abs(v) for v in values) < 2 * bound, (name, max(abs(v) for v in values), bound)
        spans.append((begin, end))
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data), "tensors must cover the data section"
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "tensors must tile the data section"
    print(f"model.safetensors: {len(header)} tensors, {len(data)} data bytes, header {header_len} bytes: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
