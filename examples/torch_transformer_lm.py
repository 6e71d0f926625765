"""A user's own transformer language model on real text (Debian's fortunes) as a gradpress worker.

A byte-level causal LM (2 pre-norm blocks, d_model 128, 4 heads, context 64; 470,784
parameters) trained with a plain loop (Adam, warm-up then cosine) through
gradpress.torch.DistributedOptimizer. The job, codecs included, is the
launch's (docs/python.md):

    # uncompressed gradients both ways (method 3)
    PYTHONPATH=build/python:python /usr/bin/python3 -m gradpress.launch --workers 2 \\
        examples/torch_transformer_lm.yaml examples/torch_transformer_lm.py --steps 400
    # method 5: top-k 1% then 16-level QSGD both ways, error feedback
    PYTHONPATH=build/python:python /usr/bin/python3 -m gradpress.launch --workers 2 \\
        --push "topk ratio=0.01 error_feedback=true then=qsgd levels=16" \\
        --pull "topk ratio=0.01 error_feedback=true then=qsgd levels=16" \\
        examples/torch_transformer_lm.yaml examples/torch_transformer_lm.py --steps 400

(--steps 400 is a third of an epoch, a quick look; docs/python.md has both runs at 400 to
23,600 steps, 20 epochs.)

Data: the fortune files of Debian's `fortunes` package (/usr/share/games/fortunes, the files
without .dat/.u8), cut into fortunes at the `%` lines; a seeded shuffle puts 95% of them in
the training text and 5% in the validation text (the same split on every rank). Each rank
draws its own random windows (seeded by --seed and its rank). At the end every rank prints the
mean payload bytes per step up and down (DistributedOptimizer.stats()), and rank 0 the
validation loss (nats per byte, over every whole window of the validation text).
"""
import argparse
import math
import os
import random
import time

import torch
import torch.nn.functional as F

import gradpress.torch as gp

FORTUNES = "/usr/share/games/fortunes"


def read_fortunes(root):
    """Every fortune of the package's text files, as bytes, in a fixed order."""
    files = sorted(f for f in os.listdir(root) if not f.endswith((".dat", ".u8")) and
                   os.path.isfile(os.path.join(root, f)))
    if not files:
        raise SystemExit(f"no fortune files in {root}: apt-get install fortunes")
    out = []
    for name in files:
        with open(os.path.join(root, name), "rb") as f:
            text = f.read()
        out += [x.strip(b"\n") + b"\n" for x in text.split(b"\n%\n") if x.strip()]
    return out


def split(fortunes, seed, val_fraction=0.05):
    """(train, validation) byte tensors: a seeded shuffle of the fortunes, 95 / 5."""
    order = list(range(len(fortunes)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(len(order) * val_fraction))
    def join(ix):
        return torch.frombuffer(bytearray(b"".join(fortunes[i] for i in ix)), dtype=torch.uint8)
    return join(order[n_val:]).long(), join(order[:n_val]).long()


class Block(torch.nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention, then a 4x MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class ByteLM(torch.nn.Module):
    def __init__(self, context=64, d=128, heads=4, layers=2, vocab=256):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)
        # True above the diagonal: a position sees itself and the past only.
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1))
        for name, p in self.named_parameters():
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))


def batch(data, context, size, g):
    """`size` random windows of `data`: inputs and next-byte targets, [size, context]."""
    start = torch.randint(0, len(data) - context - 1, (size,), generator=g)
    rows = start[:, None] + torch.arange(context + 1)
    w = data[rows]
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate(model, data, context, size=256):
    """Mean cross entropy (nats per byte) over every whole window of `data`."""
    model.eval()
    n = (len(data) - 1) // context
    total = 0.0
    for b in range(0, n, size):
        rows = (torch.arange(b, min(b + size, n)) * context)[:, None] + torch.arange(context + 1)
        w = data[rows]
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                 reduction="sum").item()
    model.train()
    return total / (n * context)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="the job YAML (default: gradpress.launch's, "
                    "$GRADPRESS_CONFIG)")
    ap.add_argument("--data", default=FORTUNES)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=16, help="windows per worker per step")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                    help="Adam (default) or SGD with momentum, stepping on the averaged gradients")
    ap.add_argument("--lr", type=float, help="the peak learning rate (default 3e-3 for Adam, "
                    "0.3 for SGD)")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum")
    ap.add_argument("--warmup", type=int, default=50, help="steps of linear warm-up, then cosine")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--run-dir", default=os.environ.get("GRADPRESS_RUN_DIR"),
                    help="metrics.jsonl and summary.json (default: the launch's run directory)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    train, val = split(read_fortunes(a.data), a.seed)
    torch.manual_seed(a.seed)  # the same initial weights everywhere (the server's win anyway)
    model = ByteLM(context=a.context)
    if a.optimizer == "sgd":
        inner = torch.optim.SGD(model.parameters(), lr=a.lr or 0.3, momentum=a.momentum)
    else:
        inner = torch.optim.Adam(model.parameters(), lr=a.lr or 3e-3)
    opt = gp.DistributedOptimizer(inner, model.named_parameters(), config=a.config,
                                  run_dir=a.run_dir)
    gp.broadcast_parameters(model, opt)
    rank, world = opt.rank, opt.world_size

    def lr_at(step):
        if step < a.warmup:
            return (step + 1) / a.warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - a.warmup) / max(1, a.steps - a.warmup)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"{len(train)} training bytes, {len(val)} validation bytes; {params} parameters "
              f"({params * 4} dense bytes); {world} workers x {a.batch_size} windows of "
              f"{a.context}", flush=True)
    g = torch.Generator().manual_seed(a.seed * 1000 + rank)  # this rank's own batches
    up = down = 0
    started = time.monotonic()
    for step in range(a.steps):
        x, y = batch(train, a.context, a.batch_size, g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        opt.step()
        sched.step()
        s = opt.stats()
        up, down = up + s["bytes_up"], down + s["bytes_down"]
    wall = time.monotonic() - started
    opt.close()
    print(f"worker {rank}: {a.steps} steps in {wall:.1f} s; final train_loss {loss.item():.4f}; "
          f"per step: {up / a.steps:.0f} B up, {down / a.steps:.0f} B down", flush=True)
    if rank == 0:  # every worker holds the same weights: one evaluation is enough
        print(f"val_loss {evaluate(model, val, a.context):.4f} after {a.steps} steps "
              f"({a.steps * world * a.batch_size * a.context} training bytes seen); per step "
              f"{up / a.steps:.0f} B up, {down / a.steps:.0f} B down", flush=True)


if __name__ == "__main__":
    main()
