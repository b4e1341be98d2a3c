import os

import torch

if not torch.cuda.is_available():  # run Triton kernels through the CPU interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
