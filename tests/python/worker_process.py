"""One gradpress.torch worker of a test (tests/python/test_training.py): trains
gp_testlib.SmallNet on its deterministic batches and saves its weights and stats."""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import gp_testlib  # noqa: E402
import gradpress.torch as gp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rank", type=int)  # else $RANK, $WORLD_SIZE, $GRADPRESS_SERVER
    ap.add_argument("--world-size", type=int)
    ap.add_argument("--server")
    ap.add_argument("--run-dir")
    ap.add_argument("--push")
    ap.add_argument("--unused", action="store_true")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--die-after", type=int,
                    help="after this step: save model and optimizer state to --checkpoint, "
                    "then exit 3 at once (no close, as if killed)")
    ap.add_argument("--checkpoint", help="the state file of --die-after / --resume")
    ap.add_argument("--resume", action="store_true",
                    help="a restarted worker: load --checkpoint, rejoin, go on from its step")
    ap.add_argument("--incarnation", type=int, default=1)
    ap.add_argument("--end-epoch", action="store_true",
                    help="after the steps: end_epoch(0, accuracy 0.5 + 0.1 * rank)")
    ap.add_argument("--gil-check", help="a directory: rank 1 waits in step 0 for a file that a "
                    "Python thread of rank 0 writes while rank 0 waits inside step()")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = gp_testlib.make_model(a.unused)
    opt = gp.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum),
        model.named_parameters(), config=a.config, push=a.push, rank=a.rank,
        world_size=a.world_size, server=a.server, run_dir=a.run_dir, incarnation=a.incarnation)
    first = 0
    if a.resume:  # the user's own checkpoint: weights, optimizer and codec state
        ckpt = torch.load(a.checkpoint)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        first = ckpt["opt"]["gradpress"]["step"]
    won = gp.broadcast_parameters(model, opt)
    rank = opt.rank
    in_step = threading.Event()
    if a.gil_check and rank == 0:
        def signal():  # runs only if step() lets go of the GIL while it waits for rank 1
            in_step.wait()
            # Not a wait for a condition: it lets the main thread get into step()'s wait (for
            # rank 1, which waits for the file below). Writing it needs the GIL back.
            time.sleep(0.1)
            with open(os.path.join(a.gil_check, "go"), "w") as f:
                f.write("rank 0 is waiting inside step()\n")
        threading.Thread(target=signal, daemon=True).start()
    stats, losses = [], []
    for step in range(first, a.steps):
        x, y = gp_testlib.batch(rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if a.gil_check and rank == 1 and step == 0:
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(a.gil_check, "go")):
                assert time.monotonic() < deadline, "rank 0 held the GIL inside step()"
                time.sleep(0.01)
        in_step.set()
        opt.step()
        stats.append(opt.stats())
        losses.append(loss.item())
        if step == a.die_after:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, a.checkpoint)
            os._exit(3)
    before_epoch = {n: p.detach().clone() for n, p in model.named_parameters()}
    adopted = opt.end_epoch(0, 0.5 + 0.1 * rank) if a.end_epoch else None
    sd = opt.state_dict()
    opt.load_state_dict(sd)  # the codec state goes back in as it came out
    assert opt.state_dict()["gradpress"]["codec_state"] == sd["gradpress"]["codec_state"]
    unused_grad = None if model.unused is None else model.unused.weight.grad.clone()
    opt.close()
    torch.save({"weights": {n: p.detach().clone() for n, p in model.named_parameters()},
                "stats": stats, "losses": losses, "won": won, "rank": rank,
                "state": sd["gradpress"], "unused_grad": unused_grad,
                "before_epoch": before_epoch, "adopted": adopted}, a.out)
    print(f"worker {rank}: done")


if __name__ == "__main__":
    main()
