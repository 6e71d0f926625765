#!/usr/bin/env python3
"""Writes a synthetic, CIFAR-shaped data set in the CIFAR-10 binary format.

    scripts/synth_cifar.py OUT_DIR [--train 1000] [--test 200] [--seed 42]

OUT_DIR gets data_batch_1.bin .. data_batch_5.bin (train split evenly) and test_batch.bin:
records of one label byte (0..9) and 3x32x32 pixel bytes, exactly what gradpress's cifar10
loader reads (dataset.name=cifar10, dataset.path=OUT_DIR). gradpress's built-in
dataset.name=synthetic makes 1x28x28 images, which VGG11 refuses (it needs 32x32), so the
slow-link report uses this for VGG11 where CIFAR-10 is not on the machine. It is learnable,
not CIFAR: class c is a fixed random 3x8x8 prototype upsampled 4x, plus uniform noise.
Timing (bytes and milliseconds per step) does not depend on the pixels; accuracy on it says
nothing about CIFAR-10. Standard library only (no numpy here).
"""
import argparse
import os
import random


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--train", type=int, default=1000)
    p.add_argument("--test", type=int, default=200)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    rng = random.Random(a.seed)
    protos = []
    for _ in range(10):
        small = [[[rng.randrange(256) for _ in range(8)] for _ in range(8)] for _ in range(3)]
        img = bytearray()
        for ch in range(3):
            for y in range(32):
                row = small[ch][y // 4]
                for x in range(32):
                    img.append(row[x // 4])
        protos.append(bytes(img))
    # noise: image = (2 * prototype + uniform noise) / 3, done with byte tables for speed
    mix = [bytes((2 * p + n) // 3 for n in range(256)) for p in range(256)]

    def record(label):
        noise = rng.randbytes(3072)
        proto = protos[label]
        return bytes([label]) + bytes(mix[proto[i]][noise[i]] for i in range(3072))

    os.makedirs(a.out, exist_ok=True)
    per = [a.train // 5 + (1 if i < a.train % 5 else 0) for i in range(5)]
    for i, n in enumerate(per, 1):
        with open(os.path.join(a.out, f"data_batch_{i}.bin"), "wb") as f:
            for _ in range(max(n, 1)):
                f.write(record(rng.randrange(10)))
    with open(os.path.join(a.out, "test_batch.bin"), "wb") as f:
        for _ in range(a.test):
            f.write(record(rng.randrange(10)))
    print(f"synth_cifar: wrote {a.train} training and {a.test} test records to {a.out}")


if __name__ == "__main__":
    main()
