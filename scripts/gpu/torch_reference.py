#!/usr/bin/env python3
"""The same-run PyTorch reference of the CUDA codec bench (issue 32's "5x torch::topk" target).

Run on the GPU machine with its PyTorch (scripts/gpu/check.sh does):

    /opt/torch/.venv/bin/python3 scripts/gpu/torch_reference.py [--numel 25000000] [--repeats 20]

Times, on a CUDA tensor of N seeded N(0, 0.01^2) floats: torch.topk(g.abs(), k = N / 100),
the same followed by the gather of the signed values (what a top-k payload carries), a
device-to-device copy of the 4N bytes, and pinned device-to-host / host-to-device copies of
them. Each figure is the median of R timings after 2 warm-ups, by CUDA events around the
work on the current stream (torch_topk_wall_us: wall clock around topk plus a synchronize,
as gradpress-cuda-bench times its codecs). Prints one JSON line; GB/s are of the dense fp32
tensor (4N bytes / time). Exit status 77 without torch or a CUDA device, 2 on bad arguments.
"""
import argparse
import json
import statistics
import sys
import time

SKIPPED = 77
SEED = 20240601


def median_us(fn, repeats, events):
    """Median microseconds of fn() over `repeats` runs after 2 warm-ups."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        if events:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)  # ms -> us
        else:
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=25_000_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.numel < 100 or args.repeats < 5:
        parser.error("--numel must be >= 100 and --repeats >= 5")
    try:
        import torch
    except ImportError as e:
        print(f"torch_reference: no torch ({e}): skipped", file=sys.stderr)
        return SKIPPED
    if not torch.cuda.is_available():
        print("torch_reference: torch has no CUDA device: skipped", file=sys.stderr)
        return SKIPPED

    n, k, r = args.numel, max(1, args.numel // 100), args.repeats
    gen = torch.Generator().manual_seed(SEED)
    g = (torch.randn(n, generator=gen) * 0.01).cuda()
    dst = torch.empty_like(g)
    pinned = torch.empty(n, dtype=torch.float32, pin_memory=True)

    def topk_gather():
        idx = torch.topk(g.abs(), k).indices
        return idx, g.gather(0, idx)

    us = {
        "torch_topk_us": median_us(lambda: torch.topk(g.abs(), k), r, True),
        "torch_topk_wall_us": median_us(lambda: torch.topk(g.abs(), k), r, False),
        "torch_topk_gather_us": median_us(topk_gather, r, True),
        "d2d_us": median_us(lambda: dst.copy_(g), r, True),
        "d2h_pinned_us": median_us(lambda: pinned.copy_(g, non_blocking=True), r, True),
        "h2d_pinned_us": median_us(lambda: dst.copy_(pinned, non_blocking=True), r, True),
    }
    out = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numel": n,
        "k": k,
        "repeats": r,
    }
    for name, value in us.items():
        out[name] = round(value, 3)
        out[name[: -len("_us")] + "_gbps"] = round(4.0 * n / value / 1e3, 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
