"""Reading named tensors of a Hugging Face checkpoint into numpy, bf16 included.

safetensors' own numpy reader refuses bf16 (numpy has no such dtype), and JAX's reader goes through numpy.
The format is an 8-byte header length, a JSON header (name -> dtype, shape, byte offsets), then the bytes;
ml_dtypes (shipped with JAX) supplies bfloat16. The emitted JAX module carries a copy of this function so it
stays standalone; the StableHLO runtime imports it."""

from __future__ import annotations


def read_safetensors(directory, names):
    """{name: numpy array} for each name, read (memory-mapped) from directory/*.safetensors. A name
    "tensor[start:stop]" is those rows of the tensor's first axis (one part of a fused tensor). Each tensor is a
    mapping of its own, so the file's pages leave the process with the arrays that read them: a caller that pops
    each array as it uses it holds the checkpoint one tensor at a time, not whole beside its weights."""
    import json
    import re
    from pathlib import Path

    import ml_dtypes
    import numpy as np

    dtypes = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I32": np.int32, "I64": np.int64}
    parts = {name: re.fullmatch(r"(.*)\[(\d+):(\d+)\]", name) for name in names}
    tensor_of = {name: part.group(1) if part else name for name, part in parts.items()}
    wanted, found = set(tensor_of.values()), {}
    for file in sorted(Path(directory).glob("*.safetensors")):
        with open(file, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
        for name, info in header.items():
            if name in wanted:
                begin, end = info["data_offsets"]
                dtype = np.dtype(dtypes[info["dtype"]])
                count = (end - begin) // dtype.itemsize
                flat = (np.memmap(file, dtype=dtype, mode="r", offset=8 + header_len + begin, shape=(count,))
                        if count else np.zeros(0, dtype))  # fmt: skip
                found[name] = flat.reshape(info["shape"])
    missing = sorted(wanted - found.keys())
    if missing:
        raise KeyError(f"{directory}: the checkpoint lacks tensor {missing[0]}")
    return {name: found[tensor_of[name]][int(part.group(2)) : int(part.group(3))] if part else found[name]
            for name, part in parts.items()}  # fmt: skip
