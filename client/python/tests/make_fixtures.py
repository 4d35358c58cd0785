"""Writes the safetensors files the mounted tests load: python3 make_fixtures.py DIR

client/python/gotest uploads DIR's tree to the bucket as it is (the keys are
the paths under DIR) and runs the tests with S3GDS_TEST_LOCAL=DIR, so each
file on the mount is compared with safetensors.torch.load_file of its copy.

ckpt/     valid files: every dtype this torch has, odd shapes (0-d, empty,
          length 1 dims), a data section of a few MiB, a header over 64 KiB,
          tensors at misaligned offsets, and a sharded checkpoint with its index
bad/      malformed files, each named for what is wrong with it
"""

import json
import os
import struct
import sys

import torch
from safetensors.torch import save_file

# safetensors name -> torch dtype, as far as this torch has them.
DTYPES = {
    name: getattr(torch, attr)
    for name, attr in [
        ("F64", "float64"), ("F32", "float32"), ("F16", "float16"), ("BF16", "bfloat16"),
        ("I64", "int64"), ("I32", "int32"), ("I16", "int16"), ("I8", "int8"), ("U8", "uint8"),
        ("BOOL", "bool"), ("U64", "uint64"), ("U32", "uint32"), ("U16", "uint16"),
        ("C64", "complex64"), ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
    ]
    if hasattr(torch, attr)
}

SHAPES = [(), (0,), (1,), (7,), (5, 3), (3, 0, 2), (2, 3, 5, 1), (1, 1, 13)]


def random_tensor(dtype, shape, gen):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point or dtype.is_complex:
        # Through float32: every bit pattern of the small floats is then a real value.
        base = torch.randn(shape, generator=gen, dtype=torch.complex64 if dtype.is_complex else torch.float32)
        return (base * 100).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(1 << 62)), min(info.max, 1 << 62)
    return torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64).to(dtype)


def all_dtypes(gen):
    tensors = {}
    for name, dtype in DTYPES.items():
        for shape in SHAPES:
            key = f"{name.lower()}.{'x'.join(map(str, shape)) or 'scalar'}"
            tensors[key] = random_tensor(dtype, shape, gen)
    tensors["big.f32"] = random_tensor(torch.float32, (1023, 771), gen)  # ~3 MiB, several daemon slots
    tensors["big.bf16"] = random_tensor(torch.bfloat16, (333, 1001), gen)
    return tensors


def write_raw(path, header, data, pad_to=8):
    """A safetensors file from a header dict and data bytes, as the format defines it."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % pad_to)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def misaligned(path, gen):
    """Tensors packed with no regard to alignment: U8[3] first puts the rest at odd offsets."""
    parts = [("u8", "U8", (3,)), ("f32", "F32", (2, 3)), ("f64", "F64", (5,)), ("i16", "I16", (3,)),
             ("bf16", "BF16", (4,)), ("i64", "I64", (2, 2)), ("f32b", "F32", (8,))]
    header, data = {"__metadata__": {"packed": "unaligned"}}, b""
    for name, code, shape in parts:
        t = random_tensor(DTYPES[code], shape, gen)
        b = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    write_raw(path, header, data)


def sharded(d, gen):
    os.makedirs(d, exist_ok=True)
    weight_map = {}
    for i in range(3):
        shard = f"model-{i + 1:05d}-of-00003.safetensors"
        tensors = {f"layers.{i}.{n}": random_tensor(dtype, shape, gen) for n, dtype, shape in [
            ("weight", torch.float32, (64, 33)), ("bias", torch.float16, (33,)),
            ("scale", torch.bfloat16, ()), ("mask", torch.bool, (7, 3)), ("ids", torch.int64, (11,))]}
        if i == 2:
            tensors["lm_head.weight"] = random_tensor(torch.float32, (129, 65), gen)
        save_file(tensors, os.path.join(d, shard), metadata={"format": "pt", "shard": str(i)})
        weight_map.update({k: shard for k in tensors})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)


def bad(d, gen):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "truncated_length.safetensors"), "wb") as f:
        f.write(b"\x10\x00\x00")  # not even the 8 bytes of the header length
    good = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    raw = json.dumps(good).encode()
    with open(os.path.join(d, "header_past_end.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw) + 1000) + raw + bytes(8))
    with open(os.path.join(d, "truncated_header.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw[:-3])
    write_raw(os.path.join(d, "offsets_out_of_range.safetensors"),
              {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(16))
    write_raw(os.path.join(d, "unknown_dtype.safetensors"),
              {"a": {"dtype": "F12", "shape": [2], "data_offsets": [0, 3]}}, bytes(3))
    write_raw(os.path.join(d, "shape_mismatch.safetensors"),
              {"w": {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, 20]}}, bytes(20))
    with open(os.path.join(d, "not_json.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 6) + b"{nope}" + bytes(4))
    save_file({"x": random_tensor(torch.float32, (3,), gen)}, os.path.join(d, "shard.safetensors"))
    with open(os.path.join(d, "index_missing.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {"x": "shard.safetensors", "y": "shard.safetensors"}}, f)


def main(out):
    gen = torch.Generator().manual_seed(20240601)
    ckpt = os.path.join(out, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    save_file(all_dtypes(gen), os.path.join(ckpt, "all_dtypes.safetensors"),
              metadata={"format": "pt", "note": "every dtype"})
    # Over 64 KiB of header: the loader's first read does not hold it all.
    save_file({f"blocks.{i:04d}.a_rather_long_parameter_name_to_grow_the_header": random_tensor(
        torch.float16, (i % 5,), gen) for i in range(1200)}, os.path.join(ckpt, "big_header.safetensors"))
    save_file({}, os.path.join(ckpt, "empty.safetensors"))
    misaligned(os.path.join(ckpt, "misaligned.safetensors"), gen)
    sharded(os.path.join(ckpt, "sharded"), gen)
    bad(os.path.join(out, "bad"), gen)


if __name__ == "__main__":
    main(sys.argv[1])
