"""fp32 products of a few rows that read the weight once: the projections of a decode step.

Not a paper section: what a verify pass costs on a CPU without bf16 units. A target pass over
k tokens multiplies k rows by each weight; for a few rows its time is reading the weights (all
of them, every pass: SmolLM2-135M's are 540 MB in fp32). MKL reads them at its best for one row
(``F.linear``), lays them out again for more than one, and even laid out once (lean.py's packed
products) reads them more slowly for 2 to 8 rows than for one: that is most of what a verify
pass pays that a plain step does not (``python -m minidflash products``).

``product(rows, weight)`` is that product for 1..``MAX_ROWS`` rows in C++
(csrc/row_product.cpp): each thread takes a slice of the weight's rows and reads each weight
row once for all the input rows, fetching the next ones ahead, 8 lanes of fused multiply-adds.
A one-row product is as fast as MKL's or faster, and one of 2-8 rows costs little more
(data/results/products_smollm2_avx2_rows.json; a whole pass before and after:
step_profile_smollm2_float32_avx2_mkl4.json and _rows4.json). Every output is summed the same
way whatever the number of rows and wherever its row sits, so a row's bits never depend on the
other rows of the pass: a token's logits are the same bits in a plain step and in a verify pass
(exact.py's probe finds the rows standing alone).

It is built once, at first use, by torch's own extension builder (``torch.utils.cpp_extension``:
a C++ compiler and ninja, requirements.txt) into torch's extension cache, for CPUs with AVX2 and
FMA. Where it cannot be built the lean pass keeps MKL's products and says so once (a warning
with the reason); ``MINIDFLASH_ROW_PRODUCT=0`` keeps them without trying (to measure what this
buys).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import warnings
from pathlib import Path

import torch

MAX_ROWS = 8          # rows the kernel takes in one reading of the weight; more go to MKL
SOURCE = Path(__file__).parent / "csrc" / "row_product.cpp"
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]     # torch's OpenMP threads: at::parallel_for


def why_not() -> str | None:
    """Why this machine cannot run the kernel, or None where it can be built."""
    if os.environ.get("MINIDFLASH_ROW_PRODUCT", "1") == "0":
        return "MINIDFLASH_ROW_PRODUCT=0"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"an {platform.machine()} CPU (the kernel is x86 AVX2)"
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return f"torch's kernels run {torch.backends.cpu.get_cpu_capability()}, without AVX2"
    if not shutil.which(os.environ.get("CXX", "c++")):
        return "no C++ compiler (c++ or $CXX)"
    from torch.utils.cpp_extension import is_ninja_available
    if not is_ninja_available():
        return "no ninja (pip install -r requirements.txt)"
    return None


@functools.cache
def ready() -> bool:
    """Is the kernel built and loaded (building it the first time; a minute at most)?"""
    why = why_not()
    if why is None:
        try:
            from torch.utils.cpp_extension import load
            load("minidflash_row_product", [str(SOURCE)], extra_cflags=FLAGS,
                 extra_ldflags=["-fopenmp"], is_python_module=False)
            return True
        except Exception as e:             # a compiler error, a full disk: MKL's products then
            why = f"building it failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e!r}"
    if why != "MINIDFLASH_ROW_PRODUCT=0":
        warnings.warn(f"minidflash: fp32 products of a few rows stay MKL's ({why}): a verify pass "
                      "costs more here than it needs to (row_product.py).", stacklevel=2)
    return False


def fits(weight: torch.Tensor) -> bool:
    """Can ``product`` multiply rows by this weight (N, K): fp32, on the CPU, contiguous, K a
    multiple of 8, and the kernel built? (Asked once a weight: lean.py's products.)"""
    return (weight.dtype == torch.float32 and weight.device.type == "cpu"
            and weight.is_contiguous() and weight.shape[-1] % 8 == 0 and ready())


def takes(rows: torch.Tensor, weight: torch.Tensor) -> bool:
    """Can ``product`` multiply these fp32 CPU rows (M, K), 1 <= M <= MAX_ROWS, by this weight?"""
    return (1 <= rows.shape[0] <= MAX_ROWS and rows.dtype == torch.float32
            and rows.device.type == "cpu" and fits(weight))


def product(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``F.linear(rows, weight, bias)`` for rows (M, K) that ``takes`` allows: (M, N)."""
    y = torch.ops.minidflash.row_product(rows.contiguous(), weight)
    return y if bias is None else y + bias


def status() -> str:
    """What multiplies a few fp32 rows here, for a results file's ``machine``: "row_product"
    (this kernel) or "MKL" with the reason."""
    return "row_product" if ready() else f"MKL ({why_not() or 'the build failed'})"
