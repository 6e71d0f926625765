#!/usr/bin/env python3
"""Exports a user-defined CNN (LeNet-5's shape, written here as any PyTorch user would) as
TorchScript for the C++ daemons: gradpress-worker and gradpress-sim then train it with any
method, e.g.

  /usr/bin/python3 examples/export_torchscript_cnn.py runs/cnn.pt
  scripts/run.sh configs/lenet_fmnist_m5.yaml --set 'model={name: torchscript, path: runs/cnn.pt}'

The module is saved in training mode with torch.jit.script(model).save(path); a frozen or
inference-optimised export has no trainable parameters and is refused (docs/models.md)."""
import sys

import torch
from torch import nn


class Cnn(nn.Module):
    """Two 5x5 convolutions with max pooling, then three linear layers: 1x28x28 -> 10 logits."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc3(torch.relu(self.fc2(x)))


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: export_torchscript_cnn.py OUT.pt")
    torch.manual_seed(42)
    torch.jit.script(Cnn()).save(argv[1])
    print(f"wrote {argv[1]}: {sum(p.numel() for p in Cnn().parameters())} parameters")


if __name__ == "__main__":
    main(sys.argv)
