"""Throughput against batch size: plain decoding and DFlash serving N requests at once.

The serving engines' question (paper's SGLang table, Qwen3-8B on MATH-500: DFlash's speedup
falls from 5.1x to 2.8x as concurrency grows from 1 to 32): where does speculation stop paying?
A batch of N rows makes every target pass N times wider; a DFlash verify of N blocks of B tokens
feeds N * B tokens, a plain step N. Once N * B tokens saturate the hardware, a verify costs
about B plain steps' worth of compute and DFlash keeps only what tau buys over that.

Per suite, for each batch size N the first ``n`` prompts are split into batches of N
(consecutive prompts). Each batch is decoded by plain decoding (block size 1) and by DFlash
(block size B), both through ``speculative_generate`` (N = 1: the single-sequence path; N > 1:
the ragged batch), methods and thread counts alternating batch by batch in one process.
Throughput = new tokens summed over rows / the batch's decode time (prefill excluded, as TPOT
is), summed over batches. At N = 1 the batched code path is timed too, to show what the ragged
bookkeeping costs where it is not needed. With ``--exact`` (exact mode, plain decoding and DFlash
both at W = B, the chain's block: one W, so that they agree) every row of a batch, plain's and
DFlash's, is also compared with plain decoding's answer for its prompt alone (N = 1, same thread
count): ``rows_as_batch_of_1``.

``python -m minidflash bench --batch-sizes 1 2 4 8 16 --threads 1 2 --n 16 --out data/results/batch_throughput.json``
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...batch import left_pad
from ...decoding_config import DecodingConfig
from ...files import save_figure
from ...target import chat_ids, stop_ids
from ...verifier import speculative_generate, speculative_generate_batch
from ..common import suite_prompts

# The paper's concurrency table (SGLang, one B200, Qwen3-8B, MATH-500, tau 8.01): DFlash's
# speedup over five concurrency settings from 1 to 32, in the table's order.
PAPER_CONCURRENCY = {"setting": "SGLang, B200, Qwen3-8B, MATH-500 (tau 8.01)",
                     "concurrency": "five settings from 1 to 32",
                     "speedup": [5.1, 4.5, 4.5, 3.9, 2.8]}


def decode_batch(target, drafter, prompts, block_size, max_new_tokens, stops, batched=None,
                 exact: bool | int = False):
    """(new tokens summed over rows, decode seconds, rows' outputs, rows' tau) of one batch
    (exact: in exact mode, at W rows if given, where a batch's rows are its batch of one's, bit
    for bit)."""
    draft = drafter if block_size > 1 else None
    if len(prompts) == 1 and not batched:
        results = [speculative_generate(target, draft, prompts[0], max_new_tokens=max_new_tokens,
                                        block_size=block_size, stop_token_ids=stops, tree=False,
                                        exact=exact)]
    else:
        ids, mask = left_pad(prompts)
        results = speculative_generate_batch(target, draft, ids, max_new_tokens=max_new_tokens,
                                             attention_mask=mask, block_size=block_size,
                                             stop_token_ids=stops, exact=exact)
    tokens = sum(r.num_new_tokens for r in results)
    seconds = max(r.decode_time for r in results)      # the batch ends with its last row
    return tokens, seconds, [r.new_ids for r in results], [r.tau for r in results]


def run_suite(target, tokenizer, drafter, rows, batch_sizes, threads, block_size,
              max_new_tokens, progress=True, exact: bool = False) -> dict:
    """{threads: {N: figures}} for one suite; see the module docstring."""
    stops = stop_ids(tokenizer)
    prompts = [chat_ids(tokenizer, r["messages"]) for r in rows]
    methods = {"plain": (1, False), "dflash": (block_size, False)}
    sums = {(t, N, m): [0, 0.0] for t in threads for N in batch_sizes
            for m in [*methods, "dflash_batched_path"]}
    taus = {(t, N): [] for t in threads for N in batch_sizes}
    identical = {(t, N): True for t in threads for N in batch_sizes}
    alone, as_alone = {}, {(t, N): True for t in threads for N in batch_sizes}
    jobs = [(N, j) for N in sorted(batch_sizes) for j in range(0, len(prompts) - N + 1, N)]
    for k, (N, j) in enumerate(tqdm(jobs, desc="batches", disable=not progress, leave=False)):
        group = prompts[j:j + N]
        order = list(methods) if k % 2 == 0 else list(methods)[::-1]
        if N == 1:
            order.append("dflash_batched_path")
        for t in (threads if k % 2 == 0 else threads[::-1]):
            torch.set_num_threads(t)
            outs = {}
            for m in order:
                B, batched = methods.get(m, (block_size, True))
                tokens, seconds, outs[m], tau = decode_batch(target, drafter, group, B,   # one W
                                                             max_new_tokens, stops, batched,
                                                             exact and block_size)
                sums[(t, N, m)][0] += tokens
                sums[(t, N, m)][1] += seconds
                if m == "dflash":
                    taus[(t, N)] += tau
            identical[(t, N)] &= all(torch.equal(a, b) for m in outs if m != "plain"
                                     for a, b in zip(outs["plain"], outs[m]))
            if N == 1:                                     # plain's answer alone, for the rows
                alone[(t, j)] = outs["plain"][0]
            elif exact and (t, j) in alone:                # exact mode: a row is its answer alone
                as_alone[(t, N)] &= all(torch.equal(out[i], alone[(t, j + i)])
                                        for out in outs.values() for i in range(N))
    out = {}
    for t in threads:
        out[str(t)] = {}
        for N in batch_sizes:
            rate = {m: sums[(t, N, m)][0] / sums[(t, N, m)][1] if sums[(t, N, m)][1] else None
                    for m in [*methods, "dflash_batched_path"]}
            fig = {"plain_tokens_per_s": rate["plain"], "dflash_tokens_per_s": rate["dflash"],
                   "ratio": rate["dflash"] / rate["plain"],
                   "tau": sum(taus[(t, N)]) / len(taus[(t, N)]),
                   "tokens": sums[(t, N, "plain")][0], "identical": identical[(t, N)],
                   "rows_as_batch_of_1": (as_alone[(t, N)] if exact and 1 in batch_sizes and N > 1
                                          else None),
                   "batches": len([1 for M, _ in jobs if M == N])}
            if N == 1:
                fig["dflash_batched_path_tokens_per_s"] = rate["dflash_batched_path"]
            out[str(t)][str(N)] = fig
    return out


def run(target, tokenizer, drafter, suites, batch_sizes, threads, n, block_size, max_new_tokens,
        command: str, after_suite=None, split: str = "test", exact: bool = False) -> dict:
    """The whole sweep; prints one line per (suite, threads, N) and calls after_suite(results)
    once each suite is done (the bench writes what it has, so a long run keeps its suites)."""
    if n < max(batch_sizes):
        raise ValueError(f"--n {n} prompts cannot fill a batch of {max(batch_sizes)}: use --n >= "
                         f"{max(batch_sizes)} (a multiple of every batch size keeps them equal).")
    results = {"command": command, "block_size": block_size,
               "p_min": DecodingConfig.of(drafter).p_min, "n": n, "split": split, "exact": exact,
               "max_new_tokens": max_new_tokens, "batch_sizes": batch_sizes, "threads": threads,
               "drafter_layers": drafter.config.num_hidden_layers,
               "throughput": "new tokens summed over a batch's rows / its decode time (no prefill)",
               "paper": PAPER_CONCURRENCY, "suites": {}}
    warm = [chat_ids(tokenizer, [{"role": "user", "content": "warm up"}])] * 2
    for t in threads:
        torch.set_num_threads(t)
        for B in (1, block_size):
            decode_batch(target, drafter, warm[:1], B, 16, [])
            decode_batch(target, drafter, warm, B, 16, [])
    t0 = time.time()
    for suite in suites:
        rows = suite_prompts(suite, split, n)
        results["suites"][suite] = r = run_suite(target, tokenizer, drafter, rows, batch_sizes,
                                                 threads, block_size, max_new_tokens,
                                                 exact=exact)
        for t, per in r.items():
            for N, f in per.items():
                print(f"{suite:>11}  {t} thread(s)  N={N:>2}  plain {f['plain_tokens_per_s']:6.0f} "
                      f"tok/s  DFlash {f['dflash_tokens_per_s']:6.0f} tok/s  ratio "
                      f"{f['ratio']:.2f}x  tau {f['tau']:.2f}  identical {f['identical']}"
                      + ("" if f["rows_as_batch_of_1"] is None
                         else f"  rows as batch of 1 {f['rows_as_batch_of_1']}"))
        results["wall_s"] = round(time.time() - t0, 1)
        if after_suite:
            after_suite(results)
    return results


def plot(results: dict, path: Path) -> None:
    """Summed tokens/s against N (one panel per suite) and DFlash / plain against N, the
    paper's concurrency speedups written beside."""
    from matplotlib.figure import Figure

    suites = list(results["suites"])
    fig = Figure(figsize=(5 * (len(suites) + 1), 4))
    axes = fig.subplots(1, len(suites) + 1)
    styles = {t: ls for t, ls in zip(map(str, results["threads"]), ["-", "--", ":", "-."])}
    for ax, suite in zip(axes, suites):
        for t, per in results["suites"][suite].items():
            Ns = [int(N) for N in per]
            for key, color, name in (("plain_tokens_per_s", "C7", "plain"),
                                     ("dflash_tokens_per_s", "C0", "DFlash")):
                ax.plot(Ns, [per[str(N)][key] for N in Ns], styles[t], color=color, marker="o",
                        label=f"{name}, {t} thread{'s' if t != '1' else ''}")
        ax.set(title=f"{suite}: tokens/s summed over the batch", xlabel="batch size N",
               ylabel="tokens / s", xscale="log")
        ax.set_xticks(results["batch_sizes"], [str(N) for N in results["batch_sizes"]])
        ax.legend(fontsize=8)
    ax = axes[-1]
    for i, suite in enumerate(suites):
        for t, per in results["suites"][suite].items():
            Ns = [int(N) for N in per]
            ax.plot(Ns, [per[str(N)]["ratio"] for N in Ns], styles[t], color=f"C{i + 1}",
                    marker="o", label=f"{suite}, {t} thread{'s' if t != '1' else ''}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(title="DFlash / plain (this CPU, tiny target)", xlabel="batch size N",
           ylabel="throughput ratio", xscale="log")
    ax.set_xticks(results["batch_sizes"], [str(N) for N in results["batch_sizes"]])
    paper = results["paper"]
    ax.text(0.02, 0.02, f"paper, {paper['setting']}:\n" + ", ".join(f"{s}x" for s in paper["speedup"])
            + f"\nover {paper['concurrency']}", transform=ax.transAxes, fontsize=7, va="bottom")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
