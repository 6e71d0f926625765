"""One PyTorch training script, two ways to exchange gradients: DDP (Gloo) with torch's own
compression hooks, or gradpress.torch. scripts/compare.sh runs it on emulated links and
tabulates time to accuracy (docs/comparison.md); it also runs by hand:

    # DDP, PowerSGD rank 4, two workers on this machine:
    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
      /usr/bin/python3 examples/torch_compare.py --backend ddp --hook powersgd --rank-psgd 4 & done
    # gradpress, against a gradpress-server started with the same config:
    for r in 0 1; do RANK=$r WORLD_SIZE=2 GRADPRESS_SERVER=127.0.0.1:50051 \\
      PYTHONPATH=build/python:python /usr/bin/python3 examples/torch_compare.py \\
      --backend gradpress --config job.yaml & done

Workloads: `cnn`, ResNet-8 (He et al.'s CIFAR ResNet with one block per stage: gradpress's
built-in resnet8, the same parameter names) on Fashion-MNIST to --target test accuracy; `vgg11`, VGG11 on seeded random
CIFAR-shaped images (step time and bytes only). Every run uses the same seed, initial
weights, shard and order of the data, batch per worker, SGD with momentum and constant lr,
and one intra-op thread. The test set is evaluated every --eval-every steps; evaluation time
is not training time. Bytes are the host's network interfaces' counters (/proc/net/dev, all
but lo) from the end of the first step to the last: what the worker really sent and
received, headers and all, whichever library sent it. Rank 0 appends one JSON object to --out.
"""
import argparse
import datetime
import gzip
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's


class Block(torch.nn.Module):
    """ResNet-20's BasicBlock, option A shortcut (subsample, zero-pad channels)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        s = x[:, :, ::self.stride, ::self.stride] if self.stride > 1 else x
        if self.pad:
            s = F.pad(s, (0, 0, 0, 0, 0, self.pad))
        return torch.relu(y + s)


class ResNet(torch.nn.Module):
    """He et al.'s CIFAR ResNet (6n + 2 layers): n = 1 is gradpress's resnet8, n = 3 its resnet20,
    with the same parameter names (so compress.auto calibrates the same keys)."""

    def __init__(self, n=1, in_channels=1, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            layers.append(torch.nn.Sequential(*[Block(cin if i == 0 else cout, cout,
                                                      stride if i == 0 else 1)
                                                for i in range(n)]))
            cin = cout
        self.layer1, self.layer2, self.layer3 = layers
        self.linear = torch.nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                torch.nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.linear(F.adaptive_avg_pool2d(x, 1).flatten(1))


def vgg11(classes=10):
    layers, cin = [], 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(torch.nn.MaxPool2d(2))
        else:
            layers += [torch.nn.Conv2d(cin, v, 3, padding=1), torch.nn.ReLU()]
            cin = v
    return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(512, classes))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    t = torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)
    return t.unsqueeze(1) if dims == 3 else t.long()


def fashion_mnist(root, split):
    x = read_idx(os.path.join(root, f"{split}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(root, f"{split}-labels-idx1-ubyte.gz"))
    return (x.float() / 255 - MEAN) / STD, y


def net_bytes():
    """(sent, received) bytes of this network namespace's interfaces other than lo."""
    tx = rx = 0
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, rest = line.split(":", 1)
            if name.strip() == "lo":
                continue
            fields = rest.split()
            rx += int(fields[0])
            tx += int(fields[8])
    return tx, rx


def make_exchange(a, model, rank, world):
    """The backend's model and optimizer: DDP with its hook, or gradpress's optimizer."""
    if a.backend == "ddp":
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        # A rank that fails must not leave the others waiting for it for torch's 30 minutes.
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=a.timeout_s))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        if a.hook == "fp16":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif a.hook == "powersgd":
            # torch's defaults (error feedback, warm start); vanilla allreduce for the first
            # start_powerSGD_iter steps, as its docs advise.
            state = powerSGD_hook.PowerSGDState(process_group=None,
                                                matrix_approximation_rank=a.rank_psgd,
                                                start_powerSGD_iter=a.start_psgd)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
        return ddp, opt, dist.destroy_process_group
    import gradpress.torch as gp
    opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=a.lr,
                                                  momentum=a.momentum),
                                  model.named_parameters(), config=a.config)
    gp.broadcast_parameters(model, opt)
    return model, opt, opt.close


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["ddp", "gradpress"], required=True)
    ap.add_argument("--hook", choices=["none", "fp16", "powersgd"], default="none",
                    help="DDP's communication hook (torch's own)")
    ap.add_argument("--rank-psgd", type=int, default=1, help="PowerSGD's matrix rank")
    ap.add_argument("--start-psgd", type=int, default=100,
                    help="PowerSGD's start_powerSGD_iter (allreduce before it)")
    ap.add_argument("--config", help="gradpress: the job YAML the server runs")
    ap.add_argument("--workload", choices=["cnn", "vgg11"], default="cnn")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps")
    ap.add_argument("--target", type=float, default=0.88,
                    help="cnn: the test accuracy whose training time is reported (rank 0's "
                    "first evaluation at or above it)")
    ap.add_argument("--eval-every", type=int, default=100, help="steps between evaluations")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--timeout-s", type=int, default=600,
                    help="DDP: how long a collective waits for the other ranks")
    ap.add_argument("--label", default="", help="the run's name in --out")
    ap.add_argument("--out", help="rank 0 appends its JSON result here")
    a = ap.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if a.backend == "gradpress" and a.hook != "none":
        ap.error("--hook is DDP's; gradpress's codecs come from --config")
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)  # every backend starts from the same weights
    if a.workload == "cnn":
        model = ResNet(n=1)
        train_x, train_y = fashion_mnist(a.data, "train")
        test_x, test_y = fashion_mnist(a.data, "t10k")
    else:
        model = vgg11()
        g = torch.Generator().manual_seed(a.seed)
        train_x = torch.randn(4096, 3, 32, 32, generator=g)
        train_y = torch.randint(0, 10, (4096,), generator=g)
        test_x = test_y = None
    model, opt, close = make_exchange(a, model, rank, world)

    def evaluate():
        if test_x is None:
            return None
        model.eval()
        with torch.no_grad():
            correct = sum((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                          for i in range(0, len(test_x), 1000))
        model.train()
        return correct / len(test_x)

    per_rank = len(train_x) // world
    step, step_ms, evals, train_s = 0, [], [], 0.0
    reached, acc, bytes0 = None, None, None
    done = False
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed + epoch)
        mine = torch.randperm(len(train_x), generator=g)[rank::world][:per_rank]
        for b in range(0, per_rank - a.batch_size + 1, a.batch_size):
            idx = mine[b:b + a.batch_size]
            t = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(model(train_x[idx]), train_y[idx]).backward()
            opt.step()
            ms = (time.perf_counter() - t) * 1e3
            step += 1
            if step == 1:
                bytes0 = net_bytes()  # after setup and the first step's connections
            else:
                step_ms.append(ms)
                train_s += ms / 1e3
            if a.max_steps and step >= a.max_steps:
                done = True
            if step % a.eval_every == 0 or done:
                acc = evaluate()
                if acc is not None:
                    evals.append([step, round(train_s, 3), acc])
                    if reached is None and acc >= a.target:
                        reached = train_s  # every rank runs on: the same steps everywhere
            if done:
                break
        if done:
            break
    tx, rx = (x - x0 for x, x0 in zip(net_bytes(), bytes0))
    measured = max(1, len(step_ms))
    result = {
        "label": a.label or (a.backend if a.backend == "gradpress" else f"ddp-{a.hook}"),
        "backend": a.backend, "hook": a.hook, "rank_psgd": a.rank_psgd, "workload": a.workload,
        "workers": world, "steps": step, "median_step_ms": round(statistics.median(step_ms), 2)
        if step_ms else None, "tx_per_step": round(tx / measured), "rx_per_step": round(rx / measured),
        "train_s": round(train_s, 2), "final_acc": acc, "target": a.target if test_x is not None
        else None, "time_to_target_s": None if reached is None else round(reached, 2),
        "evals": evals,
    }
    if rank == 0:
        line = json.dumps(result)
        print(line, flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(line + "\n")
    close()


if __name__ == "__main__":
    main()
