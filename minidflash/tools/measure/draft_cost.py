"""``bench --draft-cost``: the cost of one drafter call against the tokens it drafts (the paper's
figure 3).

It times one drafter call against the number of drafted tokens (1..16) for the AR drafter and
DFlash drafters of 1, 3 and 5 layers (random weights: the cost of a pass does not depend on
them), over a cached context, as the paper's figure 3 does.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...ar_drafter import ARDrafter, make_ar_config
from ...core.drafter import DFlashDrafter, make_drafter_config
from ...decoding import clock, crop_cache
from ..common import save_figure


@torch.no_grad()
def draft_cost(target, context: int = 256, max_tokens: int = 16, repeats: int = 15,
               dflash_layers=(1, 3, 5)) -> dict:
    """Median ms of one drafter call against drafted tokens 1..max_tokens (figure 3 of the paper).

    AR: k tokens = k passes. DFlash: k tokens = one pass over a block of k + 1.
    """
    torch.manual_seed(0)
    ids = torch.randint(0, 200, (1, context + 1))
    cfg = target.config
    drafters = {"AR (1 layer)": ARDrafter(make_ar_config(cfg)).eval()}
    for L in dflash_layers:
        drafters[f"DFlash ({L} layer{'s' if L > 1 else ''})"] = DFlashDrafter(make_drafter_config(
            cfg, num_hidden_layers=L, block_size=max_tokens + 1, mask_token_id=5, num_features=3)).eval()
    out = {"context": context, "tokens": list(range(1, max_tokens + 1)),
           "threads": torch.get_num_threads(), "ms": {name: [] for name in drafters}}
    caches, feats = {}, {}
    for name, d in drafters.items():      # the context but its last token, once
        feats[name] = torch.randn(1, context, len(d.target_layer_ids) * cfg.hidden_size)
        caches[name] = d.new_cache()
        d.draft(target, ids[:, context - 1], feats[name][:, :-1], context - 1, caches[name], 2,
                context_ids=ids[:, :context - 1])
    for k in out["tokens"]:
        ts = {name: [] for name in drafters}
        for _ in range(repeats):           # drafters alternate call by call: same machine state
            for name, d in drafters.items():   # one committed token, then k drafted
                t0 = clock(ids.device)
                d.draft(target, ids[:, context], feats[name][:, -1:], context, caches[name], k + 1,
                        context_ids=ids[:, context - 1:context])
                ts[name].append(clock(ids.device) - t0)
                crop_cache(caches[name], context - 1)
        for name in drafters:
            out["ms"][name].append(1e3 * sorted(ts[name])[repeats // 2])
    return out



def plot_draft_cost(cost: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.subplots()
    for name, ms in cost["ms"].items():
        ax.plot(cost["tokens"], ms, "o-" if name.startswith("AR") else "s-", label=name)
    ax.set(xlabel="drafted tokens", ylabel="ms per drafter call",
           title=f"draft cost, context {cost['context']}, {cost['threads']} thread(s)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
