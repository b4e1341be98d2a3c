"""DFlash itself, and nothing else: read these files in this order (about an hour).

1. ``paper.py``     the paper's defaults: block size 16, five layers, the loss decay (2 min)
2. ``mask.py``      who sees whom in the drafter's attention, the one rule (5 min);
   ``attention.py`` applies it (SDPA, or the kernel) (3 min)
3. ``drafter.py``   the block-diffusion drafter: target features fused, injected into every
                    layer's keys and values, one pass drafts a block (15 min)
4. ``verifier.py``  the one decode loop: propose -> verify -> accept -> commit, and its seams
                    (20 min)
5. ``trainer.py``   the training objective: anchors, labels, the loss weights, one step (15 min)
6. ``kernel.py``    the drafter's training attention as a Triton kernel that skips the tiles no
                    query sees (optional; needs Triton)

The core imports torch, transformers, einops, triton (the kernel) and itself. Everything around
it (loading and saving checkpoints, the decoding settings, trees, batches, the cost model, the
lean pass, exact mode, measurement) is the rest of the package, plugged into the loop's seams.
"""
