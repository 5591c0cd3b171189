#!/usr/bin/env python3
"""Write the GGUF seed corpus for fuzz_gguf_info (tests/fuzz/corpus/gguf_info/).

Tiny hand-built GGUF headers (metadata only, a few hundred bytes each) covering every value
type, nested arrays, key orders, the architecture-dependent keys the reader looks for, and
a few malformed or truncated ones. Deterministic: rerun to regenerate."""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
       U64: "<Q", I64: "<q", F64: "<d"}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, i) for i in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, version=3, n_tensors=1, tensors=True, magic=b"GGUF"):
    out = magic + struct.pack("<IQQ", version, n_tensors, len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + val(t, v)
    if tensors:  # one tensor info, as a real file would have after the metadata
        out += s("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 64, 32)
        out += struct.pack("<IQ", 0, 0)
    return out


LLAMA = [
    ("general.architecture", STR, "llama"),
    ("general.name", STR, "tiny-llama"),
    ("llama.block_count", U32, 2),
    ("llama.context_length", U32, 128),
    ("llama.embedding_length", U32, 64),
    ("tokenizer.ggml.model", STR, "llama"),
    ("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "<s>", "</s>", "a", "b"])),
    ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.0, -2.0, -3.5, 1e30])),
    ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1])),
]

SEEDS = {
    "llama": gguf(LLAMA),
    "bert_pooled_keys_first": gguf([
        ("bert.pooling_type", U32, 1),
        ("bert.block_count", U32, 4),
        ("bert.context_length", U32, 512),
        ("general.architecture", STR, "bert"),
    ]),
    "reranker": gguf([
        ("general.architecture", STR, "qwen3"),
        ("qwen3.pooling_type", I32, 4),
        ("qwen3.classifier.output_labels", ARR, (STR, ["yes", "no"])),
        ("qwen3.block_count", U64, 28),
        ("qwen3.context_length", I64, 40960),
    ]),
    "v2_all_types": gguf([
        ("general.architecture", STR, "gpt2"),
        ("t.u8", U8, 255), ("t.i8", I8, -128), ("t.u16", U16, 65535), ("t.i16", I16, -32768),
        ("t.u32", U32, 2**32 - 1), ("t.i32", I32, -2**31), ("t.f32", F32, 1.5),
        ("t.bool", BOOL, True), ("t.u64", U64, 2**64 - 1), ("t.i64", I64, -2**63),
        ("t.f64", F64, -0.0), ("t.str", STR, ""),
        ("t.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"]), (ARR, [(BOOL, [])])])),
        ("gpt2.block_count", U16, 12), ("gpt2.context_length", U8, 255),
    ], version=2, n_tensors=0, tensors=False),
    "out_of_range_values": gguf([
        ("general.architecture", STR, "llama"),
        ("llama.block_count", U64, 2**40),
        ("llama.context_length", I64, -1),
        ("llama.pooling_type", U64, 2**63 + 5),
        ("llama.block_count", F32, 3.0),
    ]),
    "many_suffix_keys": gguf(
        [("x%d.block_count" % i, U8, i) for i in range(70)]
        + [("general.architecture", STR, "llama"), ("llama.block_count", U32, 7)],
        n_tensors=0, tensors=False),
    "long_name_arch": gguf([
        ("general.name", STR, "n" * 300),
        ("general.architecture", STR, "a" * 63),
    ], n_tensors=0, tensors=False),
    "arch_too_long": gguf([("general.architecture", STR, "a" * 64)], n_tensors=0, tensors=False),
    "truncated": gguf(LLAMA)[:150],
    "bad_magic": gguf(LLAMA[:2], magic=b"GGML"),
    "bad_version": gguf(LLAMA[:2], version=4),
    "hostile_counts": b"GGUF" + struct.pack("<IQQ", 3, 1, 2**63) + s("a.b") + struct.pack("<I", ARR)
    + struct.pack("<IQ", STR, 2**62),
    "empty": b"",
}


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus",
                                                           "gguf_info")
    os.makedirs(d, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(d, name + ".gguf"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
