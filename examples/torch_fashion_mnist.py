"""A user's own PyTorch CNN (LeNet-5's layers) trained on Fashion-MNIST as a gradpress worker.

With gradpress.launch (the server and 2 workers, stopped together; docs/python.md):

    PYTHONPATH=build/python:python /usr/bin/python3 -m gradpress.launch --workers 2 \\
        configs/lenet_fmnist_m5.yaml examples/torch_fashion_mnist.py --epochs 1

or by hand: start a server with the job's config, then one copy of this script per worker:

    build/server/gradpress-server --config configs/lenet_fmnist_m5.yaml \\
        --listen 127.0.0.1:50051 --workers 2 & server=$!
    workers=()
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 GRADPRESS_SERVER=127.0.0.1:50051 PYTHONPATH=build/python:python \\
        /usr/bin/python3 examples/torch_fashion_mnist.py --config configs/lenet_fmnist_m5.yaml \\
        --epochs 1 & workers+=($!)
    done
    wait "${workers[@]}"; kill $server

Reads Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). Each worker trains
on its shard of every epoch (a seeded permutation, rank r takes every world-th image) and
prints the test accuracy per epoch, then bytes and times per step. With --worker-data the
batches are gradpress-worker's own (gp.worker_data: the job's dataset, shard and order), for
a like-for-like comparison with the C++ worker. Every epoch ends with end_epoch (method 6's
rule, the dynamic ladder's decision from the test accuracy and the loss on the first 4096
training images, DGC's warm-up density).
"""
import argparse
import gzip
import math
import os
import time

import torch
import torch.nn.functional as F

import gradpress.torch as gp

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as the C++ worker normalises it


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(16 * 5 * 5, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc3(torch.relu(self.fc2(x)))


def read_idx(path):
    """An IDX file (gzip): uint8 images [N, 1, 28, 28] or labels [N]."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    t = torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)
    return t.unsqueeze(1) if dims == 3 else t.long()


def load(root, split):
    images = read_idx(os.path.join(root, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, f"{split}-labels-idx1-ubyte.gz"))
    return (images.float() / 255 - MEAN) / STD, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="the job YAML the server was started with (default: "
                    "gradpress.launch's, $GRADPRESS_CONFIG)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--lr-schedule", choices=["none", "cosine"], default="none",
                    help="cosine: lr * (1 + cos(pi * step / all steps)) / 2 each step, as "
                    "gradpress-worker's train.lr_schedule cosine")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--run-dir", default=os.environ.get("GRADPRESS_RUN_DIR"),
                    help="metrics.jsonl and summary.json go here (default: gradpress.launch's "
                    "run directory, $GRADPRESS_RUN_DIR)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--worker-data", action="store_true",
                    help="gradpress-worker's batches of the job's dataset (gp.worker_data)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train_x, train_y = load(a.data, "train")
    test_x, test_y = load(a.data, "t10k")
    probe_x, probe_y = train_x[:4096], train_y[:4096]  # the dynamic ladder's images
    model = Net()
    opt = gp.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum),
        model.named_parameters(), config=a.config, run_dir=a.run_dir)
    gp.broadcast_parameters(model, opt)
    rank, world = opt.rank, opt.world_size
    per_rank = len(train_x) // world
    per_epoch = (per_rank + a.batch_size - 1) // a.batch_size
    steps, stats, started = 0, [], time.monotonic()
    for epoch in range(a.epochs):
        if a.worker_data:  # the C++ worker's shard and order of this epoch
            (xs, ys), (test_x, test_y) = gp.worker_data(a.config, rank, world, epoch)
            mine = torch.arange(len(ys))
        else:
            g = torch.Generator().manual_seed(a.seed + epoch)
            xs, ys = train_x, train_y
            mine = torch.randperm(len(train_x), generator=g)[rank::world][:per_rank]
        model.train()
        for b in range(0, len(mine), a.batch_size):
            idx = mine[b:b + a.batch_size]
            if a.lr_schedule == "cosine":
                x = min(max(steps / per_epoch / a.epochs, 0.0), 1.0)  # as gradpress-worker
                for group in opt.param_groups:
                    group["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * x))
            opt.zero_grad()
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            stats.append(opt.stats())
            steps += 1
            if a.max_steps and steps >= a.max_steps:
                break
        model.eval()
        with torch.no_grad():
            correct = sum((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                          for i in range(0, len(test_x), 1000))
            probe = sum(F.cross_entropy(model(probe_x[i:i + 256]), probe_y[i:i + 256],
                                        reduction="sum").item()
                        for i in range(0, len(probe_x), 256)) / len(probe_x)
        acc = opt.end_epoch(epoch, correct / len(test_x), train_loss=probe)
        print(f"worker {rank} epoch {epoch} loss {loss.item():.4f} test_acc {acc:.4f}",
              flush=True)
        if a.max_steps and steps >= a.max_steps:
            break
    opt.close()
    later = stats[1:] or stats  # step 0 includes the wait for every worker to start

    def mean(k):
        return sum(s[k] for s in later) / len(later)
    print(f"worker {rank}: {steps} steps in {time.monotonic() - started:.1f} s; per step: "
          f"{mean('bytes_up'):.0f} B up, {mean('bytes_down'):.0f} B down, step {mean('step_ms'):.2f}"
          f" ms, compute {mean('compute_ms'):.2f} ms, exposed comm {mean('exposed_comm_ms'):.2f} ms",
          flush=True)


if __name__ == "__main__":
    main()
