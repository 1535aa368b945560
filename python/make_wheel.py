#!/usr/bin/env python3
"""Writes the kvstore wheel (PEP 427) from the package's .py files and the built module.

Usage: make_wheel.py --out FILE.whl --version V --python 3.11 FILE.py... _kvstore.so
Run by the //python:wheel genrule; the files land in kvstore/ inside the wheel.
"""
import argparse
import base64
import hashlib
import os
import zipfile


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--python", required=True)
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    tag = "cp" + args.python.replace(".", "")
    dist = f"kvstore-{args.version}.dist-info"
    entries = []
    for path in args.files:
        with open(path, "rb") as f:
            entries.append((f"kvstore/{os.path.basename(path)}", f.read()))
    entries.append((f"{dist}/METADATA", (
        "Metadata-Version: 2.1\n"
        "Name: kvstore\n"
        f"Version: {args.version}\n"
        "Summary: The KVStore parameter server from Python, with MXNet's mx.kv API\n"
        f"Requires-Python: =={args.python}.*\n"
        "Requires-Dist: numpy\n").encode()))
    entries.append((f"{dist}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: kvstore make_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}-{tag}-linux_x86_64\n").encode()))
    record = [record_line(n, d) for n, d in entries] + [f"{dist}/RECORD,,"]
    entries.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)


if __name__ == "__main__":
    main()
