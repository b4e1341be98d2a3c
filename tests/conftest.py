import os
import tempfile

import torch

# A decode prices its steps on this CPU's measured curves where `budget machine` kept some
# (minidflash/prices.py): the tests and notebooks read an empty cache of their own instead, so a
# reader's measurements never change what they print.
os.environ["MINIDFLASH_PRICES"] = tempfile.mkdtemp(prefix="minidflash-prices-")

if not torch.cuda.is_available():  # run Triton kernels through the CPU interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One thread: the tests' tensors are tiny, and on a shared 2-core machine a second OpenMP
# thread spinning against other jobs made the suite ~20x slower.
torch.set_num_threads(1)
