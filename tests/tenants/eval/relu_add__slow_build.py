"""Honest relu(a + b) whose build takes as long as its test wants: at import
it says it has started (creates the file EVAL_TEST_BUILD_STARTED names) and
waits for the go-ahead (the file EVAL_TEST_BUILD_RELEASE names), 60 s at
most, as a long compile would hold its compile slot."""

import os
import time

import torch
import torch.nn as nn

with open(os.environ["EVAL_TEST_BUILD_STARTED"], "w"):
    pass
deadline = time.monotonic() + 60
while not os.path.exists(os.environ["EVAL_TEST_BUILD_RELEASE"]) and time.monotonic() < deadline:
    time.sleep(0.02)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)
