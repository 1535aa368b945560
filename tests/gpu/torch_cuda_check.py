"""PyTorch CUDA tensors through the kvstore package: the in-process "device" store, and
kvstore.torch's allreduce-style path, against a float64 reference. Prints one line per check
and "SKIPPED" without a GPU; exits 1 on a mismatch.

    PYTHONPATH=DIR python3 torch_cuda_check.py [--seed N]
"""
import argparse
import random
import sys

import torch

import kvstore


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 31))
    args = parser.parse_args()
    print(f"seed {args.seed}, torch {torch.__version__}")
    if not torch.cuda.is_available():
        print("SKIPPED: torch sees no CUDA device")
        return 0
    gen = torch.Generator().manual_seed(args.seed)
    devices = torch.cuda.device_count()
    failures = 0
    kv = kvstore.create("device")
    for dtype in (torch.float32, torch.float16, torch.float64, torch.int64):
        for key, shape in enumerate([(7,), (300, 41), (1 << 20,), (3, 1 << 22)]):
            name = f"{dtype}-{key}"
            if dtype.is_floating_point:
                make = lambda: torch.randint(-64, 64, shape, generator=gen).to(dtype) / 8
            else:
                make = lambda: torch.randint(-1 << 40, 1 << 40, shape, generator=gen, dtype=dtype)
            kv.init(name, make().cuda())
            copies = [make() for _ in range(4)]
            reference = sum(c.double() for c in copies)
            kv.push(name, [c.cuda(i % devices) for i, c in enumerate(copies)])
            outs = [torch.full(shape, -77, dtype=dtype, device=f"cuda:{d}") for d in range(devices)]
            kv.pull(name, out=outs)
            for out in outs:
                error = (out.cpu().double() - reference).abs().max().item()
                ok = error == 0
                failures += not ok
                print(f"device store {dtype} {tuple(shape)} on {out.device}: max error {error}"
                      f" {'ok' if ok else 'MISMATCH'}")
    print("torch CUDA through kvstore:", "PASS" if failures == 0 else f"FAIL ({failures})")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
