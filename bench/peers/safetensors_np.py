"""safetensors files as numpy arrays, for the scripts that trade tensors with trainlab (grad-dump's
inputs and outputs, train --record's runs): F32, F64 and I64, the metadata under __metadata__."""
import json
import struct

import numpy as np

NP_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}[array.dtype]
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path, metadata=None):
    """{name: array}; `metadata`, a dict, receives the file's __metadata__ when given."""
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            if metadata is not None:
                metadata.update(entry)
            continue
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=NP_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return out
