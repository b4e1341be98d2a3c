"""Data-parallel training (torchrun + torch.distributed): two gloo processes, each on half of
every global batch, train exactly the drafter that one process trains on the whole batch.

The same train() runs under ``torchrun --nproc_per_node K`` on K GPUs with NCCL; here the two
ranks are spawned on the CPU with gloo, as torchrun would start them (WORLD_SIZE, RANK, ...).
"""

import socket

import torch
import torch.multiprocessing as mp

from minidflash import trainer
from tests.helpers import tiny_target


def toy_data(n=8):
    """A random target and n of its greedy answers, all of one length: every rank's share of a
    batch then carries the same loss weight, so the mean over ranks is the full batch's mean."""
    target = tiny_target(3, vocab=61, layers=4)
    torch.manual_seed(0)
    data = []
    for _ in range(n):
        p = torch.randint(1, 59, (1, 6))
        ids = target.generate(p, do_sample=False, max_new_tokens=30, min_new_tokens=30,
                              pad_token_id=0, attention_mask=torch.ones_like(p))[0]
        data.append({"ids": ids, "response_start": 6})
    return target, data


class Tok:
    """What train() asks of a tokenizer: the pad id and token ids (any token: the mask id)."""
    pad_token_id = 0

    def convert_tokens_to_ids(self, token):
        return 60


def config(out, drafter="dflash"):
    return trainer.TrainConfig(drafter=drafter, num_layers=1, block_size=8, anchors_per_seq=6,
                               steps=4, batch_size=4, lr=3e-3, eval_every=4, out=str(out))


def worker(rank, world, port, out, results):
    import os
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    target, data = toy_data()
    for kind in ("dflash", "ar"):
        run = trainer.train(config(f"{out}/{kind}", kind), target, Tok(), data, progress=False)
        torch.save({"state": run["drafter"].state_dict(), "history": run["history"]},
                   f"{results}/{kind}-rank{rank}.pt")
    torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_train_what_one_process_trains(tmp_path, monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    mp.spawn(worker, args=(2, free_port(), str(tmp_path / "ddp"), str(tmp_path)), nprocs=2)
    target, data = toy_data()
    for kind in ("dflash", "ar"):
        one = trainer.train(config(tmp_path / "one" / kind, kind), target, Tok(), data,
                            progress=False)
        ranks = [torch.load(tmp_path / f"{kind}-rank{r}.pt") for r in (0, 1)]
        for name, want in one["drafter"].state_dict().items():
            assert torch.equal(ranks[0]["state"][name], ranks[1]["state"][name]), (kind, name)
            torch.testing.assert_close(ranks[0]["state"][name], want, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"{kind} {name}: {m}")
        # the logged loss is the whole batch's (mean over ranks), not rank 0's half
        torch.testing.assert_close(ranks[0]["history"]["loss"], one["history"]["loss"],
                                   rtol=1e-5, atol=0)
        assert ranks[0]["history"] == ranks[1]["history"]
        assert (tmp_path / "ddp" / kind / "model.safetensors").exists()   # written by rank 0
