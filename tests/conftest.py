import os

import torch

if not torch.cuda.is_available():  # run Triton kernels through the CPU interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One thread: the tests' tensors are tiny, and on a shared 2-core machine a second OpenMP
# thread spinning against other jobs made the suite ~20x slower.
torch.set_num_threads(1)
