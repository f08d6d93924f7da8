#!/usr/bin/env python3
"""Reads GGUF files we wrote with llama.cpp's Python `gguf` package (gguf.GGUFReader) and prints
their keys and tensors; any parse problem, misaligned or out-of-file tensor, or unreadable tensor
data fails loudly (exit 1). It is a check of our writer against an independent reader, outside the
C++ test suite:

  AR_KEEP_GGUF=/tmp/gguf_keep build/tests/test_gguf_writer
  /work/arvenv/bin/python tools/check_gguf_py.py /tmp/gguf_keep/*/*.gguf

Options: --quiet prints one line per file; --expect KEY=VALUE (repeatable) checks a scalar key.
"""
import argparse
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("the `gguf` package is missing: run with a Python that has it (e.g. /work/arvenv/bin/python)")


def scalar_text(field):
    value = field.contents()
    if isinstance(value, list):
        head = ", ".join(repr(v) for v in value[:6])
        return f"[{head}{', ...' if len(value) > 6 else ''}] ({len(value)} items)"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def check_tensors(path, reader):
    size = os.path.getsize(path)
    alignment = reader.alignment
    problems = []
    for t in reader.tensors:
        if t.data_offset % alignment:
            problems.append(f"tensor {t.name}: data offset {t.data_offset} not aligned to {alignment}")
        if t.data_offset + t.n_bytes > size:
            problems.append(f"tensor {t.name}: bytes [{t.data_offset}, {t.data_offset + t.n_bytes}) beyond the file ({size})")
        data = np.asarray(t.data)
        if data.nbytes != t.n_bytes:
            problems.append(f"tensor {t.name}: {data.nbytes} bytes readable, {t.n_bytes} declared")
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) and not np.all(np.isfinite(data)):
            problems.append(f"tensor {t.name}: non-finite values")
    return problems


def check_expectations(reader, expects):
    problems = []
    for e in expects:
        key, _, want = e.partition("=")
        field = reader.get_field(key)
        if field is None:
            problems.append(f"key {key}: missing")
        elif str(field.contents()) != want:
            problems.append(f"key {key}: {field.contents()!r}, expected {want}")
    return problems


def check_file(path, quiet, expects):
    reader = gguf.GGUFReader(path, "r")  # raises on any structural problem
    problems = check_tensors(path, reader) + check_expectations(reader, expects)
    if not quiet:
        print(f"== {path}")
        for name, field in reader.fields.items():
            types = "/".join(t.name for t in field.types)
            print(f"  {name} [{types}] = {scalar_text(field)}")
        for t in reader.tensors:
            print(f"  tensor {t.name} {t.tensor_type.name} {list(map(int, t.shape))} offset {t.data_offset} bytes {t.n_bytes}")
    kv = len(reader.fields)
    print(f"{path}: {'FAIL' if problems else 'ok'} ({kv} fields, {len(reader.tensors)} tensors, alignment {reader.alignment})")
    for p in problems:
        print(f"  {p}")
    return not problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    ok = True
    for path in args.files:
        try:
            ok = check_file(path, args.quiet, args.expect) and ok
        except Exception as e:  # a parse failure is the finding: report it, with the file
            print(f"{path}: FAIL: {type(e).__name__}: {e}")
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
