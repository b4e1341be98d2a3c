"""Answers kept as token ids (tools/make_data/answers.py) and their features from one teacher-forced pass
(train_data.feature_pass): the pass must give what the full forward gives, stop where it says it
stops, and the shards must come back as they went in, or not be there at all."""

import json

import pytest
import torch

from minidflash import train_data
from minidflash.tools.make_data import answers
from minidflash.tools.train import train_drafter
from minidflash.tools.engines import llama_cpp_binaries as bins
from tests.helpers import tiny_target


def rows_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"ids": torch.randint(3, 97, (n,), generator=g), "response_start": n // 3}
            for n in lengths]


def close_in_fp16(a, b):
    """Equal up to the fp16 rounding of the kept features (a batched pass may move the last bit)."""
    return torch.allclose(a.float(), b.half().float(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("layer_ids,topk", [([0, 1, 2], 0), ([0, 2, 3], 4)])
def test_feature_pass_equals_one_full_forward_per_row(layer_ids, topk):
    """Length-sorted, right-padded batches: every row's features (and top-k logits at its answer
    positions) are those of a forward over that row alone (``target_pass``)."""
    target = tiny_target()
    data = rows_of([40, 91, 17, 64, 120])
    made = train_data.feature_pass(target, data, layer_ids, topk, batch_tokens=200, progress=False)
    for d, m in zip(data, made):
        n, lo = len(d["ids"]), d["response_start"]
        f, top = train_data.target_pass(target, d["ids"][None], layer_ids, topk)
        assert m["features"].shape == (n - 1, len(layer_ids) * 64)
        assert close_in_fp16(m["features"], f[0, :n - 1])
        assert torch.equal(m["ids"], d["ids"]) and m["response_start"] == lo
        if topk:
            assert m["topk_ids"].shape == (n - lo, topk)
            assert torch.equal(m["topk_ids"].long(), top[1][0, lo - 1:n - 1])
            assert torch.allclose(m["topk_logits"].float(), top[0][0, lo - 1:n - 1], atol=1e-2)
            # and the trainer's reader places them where target_pass puts them
            values, ids = train_data.answer_topk(m, topk, n)
            assert torch.equal(ids[lo - 1:n - 1], top[1][0, lo - 1:n - 1])


def test_feature_pass_stops_after_the_deepest_layer_read():
    target = tiny_target()
    ran = []
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
             for i, layer in enumerate(target.model.layers)]
    hooks.append(target.get_output_embeddings().register_forward_hook(lambda m, a, o: ran.append("head")))
    try:
        train_data.feature_pass(target, rows_of([30, 50]), [1, 2], progress=False)
        assert sorted(set(ran)) == [0, 1, 2]
        ran.clear()
        train_data.feature_pass(target, rows_of([30, 50]), [1, 2], topk=2, progress=False)
        assert "head" in ran and 3 in ran          # soft labels need the whole target
    finally:
        for h in hooks:
            h.remove()


def test_length_batches_cover_every_row_once_within_the_budget():
    lengths = [5, 300, 17, 17, 90, 2, 64, 64, 64, 250]
    groups = train_data.length_batches(lengths, 256)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 256


def test_shards_come_back_as_they_went_in(tmp_path):
    rows = rows_of([12, 40, 7])
    path = answers.shard_path(tmp_path, 3)
    answers.save_shard(path, rows, "abc")
    assert path.name == "shard-003.safetensors" and not list(tmp_path.glob("*.part"))
    back = answers.load_shard(path)
    assert [(r["ids"].tolist(), r["response_start"]) for r in back] == \
           [(r["ids"].tolist(), r["response_start"]) for r in rows]


def test_load_answers_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m minidflash answers"):
        answers.load_answers(tmp_path)
    answers.save_shard(answers.shard_path(tmp_path, 1), rows_of([20]), "k")
    (tmp_path / answers.MANIFEST).write_text(json.dumps({"recipe": {}, "shards": {"1": {}}}))
    with pytest.raises(ValueError, match="not all there"):
        answers.load_answers(tmp_path)


@pytest.mark.parametrize("reply,expected", [
    ({"tokens": [7, 8, 9], "stop_type": "eos"}, [7, 8, 9, 2]),       # the end token left out
    ({"tokens": [7, 8, 2], "stop_type": "eos"}, [7, 8, 2]),          # ... or kept: not twice
    ({"tokens": [7, 8, 9, 5], "stop_type": "limit"}, [7, 8, 9, 5]),
    ({"tokens": [7, 0, 9], "stop_type": "limit"}, [7, 0]),           # cut at a stop id
])
def test_server_answer_ends_like_generate(monkeypatch, reply, expected):
    sent = {}
    monkeypatch.setattr(bins, "post", lambda port, path, body: sent.update(body) or reply)
    assert bins.server_answer(1, [1, 2, 3], 4, [2, 0]) == expected
    assert sent["prompt"] == [1, 2, 3] and sent["n_predict"] == 4 and sent["temperature"] == 0


def test_train_reads_kept_answers_and_caches_their_features(tmp_path, monkeypatch):
    """``train --answers DIR --features offline``: no regeneration, one feature pass per shard
    cached (a second run reads the cache), and the drafter trains."""
    folder = tmp_path / "answers"
    folder.mkdir()
    shards = {}
    for s in range(2):
        answers.save_shard(answers.shard_path(folder, s), rows_of([60, 80, 70], seed=s), str(s))
        shards[str(s)] = {"answers": 3}
    (folder / answers.MANIFEST).write_text(json.dumps({"recipe": {}, "shards": shards}))
    monkeypatch.setattr(train_drafter, "CACHE_DIR", tmp_path / "cache")
    calls = []
    real = train_data.feature_pass
    monkeypatch.setattr(train_drafter, "feature_pass", lambda *a, **k: calls.append(1) or real(*a, **k))
    argv = ["--target", "data/target", "--answers", str(folder), "--features", "offline",
            "--steps", "2", "--batch-size", "2", "--eval-every", "1", "--block-size", "8",
            "--out", str(tmp_path / "d")]
    info = train_drafter.main(argv)
    assert len(calls) == 2 and len(list((tmp_path / "cache").glob("features-*.pt"))) == 2
    assert info["data"]["answers"] == str(folder)
    assert (tmp_path / "d" / "model.safetensors").is_file()
    train_drafter.main(argv[:-1] + [str(tmp_path / "d2")])
    assert len(calls) == 2                          # read from the cache
    # bf16 features are other features: their own cache entries, near the fp32 ones, recorded
    info = train_drafter.main(argv[:-1] + [str(tmp_path / "d3"), "--feature-dtype", "bfloat16"])
    assert len(calls) == 4 and len(list((tmp_path / "cache").glob("features-*.pt"))) == 4
    assert info["data"]["feature_dtype"] == "bfloat16"
    from minidflash.target import load_target
    target, _ = load_target("data/target")
    layer_ids = [1, 3, 4]
    exact = train_drafter.answer_features(target, folder, None, layer_ids, progress=False)
    # a cache with the target's top-k serves a run that needs fewer (or none), never more
    made = len(calls)
    soft = train_drafter.answer_features(target, folder, None, layer_ids, topk=4, progress=False)
    assert len(calls) == made + 2 and soft[0]["topk_logits"].shape[1] == 4
    fewer = train_drafter.answer_features(target, folder, None, layer_ids, topk=2, progress=False)
    assert len(calls) == made + 2 and "topk_logits" in fewer[0]
    train_drafter.answer_features(target, folder, None, layer_ids, topk=8, progress=False)
    assert len(calls) == made + 4
    cheap = train_drafter.answer_features(target, folder, None, layer_ids, progress=False,
                                          dtype="bfloat16")
    for a, b in zip(cheap, exact):
        assert torch.equal(a["ids"], b["ids"])
        err = (a["features"].float() - b["features"].float()).norm() / b["features"].float().norm()
        assert 0 < err < 0.05



def test_train_reads_several_answer_folders_in_order(tmp_path, monkeypatch, capsys):
    """``train --answers A B``: A's shards then B's; --use-shards counts across them; the
    folders are recorded."""
    monkeypatch.setattr(train_drafter, "CACHE_DIR", tmp_path / "cache")
    folders = []
    for name, lengths in (("a", [[60, 80], [70, 65]]), ("b", [[90, 75, 85]])):
        folder = tmp_path / name
        folder.mkdir()
        for s, ls in enumerate(lengths):
            answers.save_shard(answers.shard_path(folder, s), rows_of(ls, seed=s), str(s))
        (folder / answers.MANIFEST).write_text(json.dumps(
            {"recipe": {}, "shards": {str(s): {} for s in range(len(lengths))}}))
        folders.append(str(folder))
    seen = {}
    monkeypatch.setattr(train_drafter, "train", lambda cfg, t, tok, data, info: (
        seen.update(data=data, info=info), {"info": info})[1])
    argv = ["--target", "data/target", "--answers", *folders, "--out", str(tmp_path / "d")]
    train_drafter.main(argv)
    assert [len(d["ids"]) for d in seen["data"]] == [60, 80, 70, 65, 90, 75, 85]
    assert seen["info"]["data"]["answers"] == folders
    train_drafter.main(argv + ["--use-shards", "3", "--features", "offline"])
    assert [len(d["ids"]) for d in seen["data"]] == [60, 80, 70, 65, 90, 75, 85]
    assert all("features" in d for d in seen["data"])
    train_drafter.main(argv + ["--use-shards", "2"])
    assert [len(d["ids"]) for d in seen["data"]] == [60, 80, 70, 65]
    # a folder named twice weighs double; its features are made once (the cache serves the rest)
    calls = []
    real = train_data.feature_pass
    monkeypatch.setattr(train_drafter, "feature_pass", lambda *a, **k: calls.append(1) or real(*a, **k))
    train_drafter.main(["--target", "data/target", "--answers", folders[1], folders[0], folders[1],
                        "--features", "offline", "--target-layer-ids", "0,2,4",
                        "--out", str(tmp_path / "d")])
    assert [len(d["ids"]) for d in seen["data"]] == [90, 75, 85, 60, 80, 70, 65, 90, 75, 85]
    assert len(calls) == 3 and all("features" in d for d in seen["data"])
    # DIR:A-B reads that folder's shards A to B only (a replay of old answers beside new ones)
    train_drafter.main(["--target", "data/target", "--answers", folders[1], folders[0] + ":1-1",
                        "--out", str(tmp_path / "d")])
    assert [len(d["ids"]) for d in seen["data"]] == [90, 75, 85, 70, 65]
    assert seen["info"]["data"]["answers"] == [folders[1], folders[0] + ":1-1"]
    train_drafter.main(["--target", "data/target", "--answers", folders[0] + ":0",
                        "--out", str(tmp_path / "d")])
    assert [len(d["ids"]) for d in seen["data"]] == [60, 80]
    for bad, says in ((":1-3", "shards [2, 3] are not in"), (":1-0", "is empty")):
        with pytest.raises(SystemExit):
            train_drafter.main(["--target", "data/target", "--answers", folders[0] + bad,
                                "--out", str(tmp_path / "d")])
        assert says in capsys.readouterr().err

def test_torch_answers_are_each_prompts_own_greedy_answer():
    """The batched decode (rows of different lengths, finished rows leaving) gives every prompt
    the answer generate() gives it alone, stop token included, and cuts at max_new_tokens."""
    target = tiny_target()
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(3, 97, (n,), generator=g) for n in (5, 23, 11, 17, 8)]
    alone = [target.generate(input_ids=r[None], attention_mask=torch.ones(1, len(r), dtype=torch.long),
                             do_sample=False, max_new_tokens=12, pad_token_id=0)[0, len(r):]
             for r in rows]
    stop = int(alone[2][4])                      # a token some answer reaches: that row stops early
    expect = []
    for a in alone:
        hit = (a == stop).nonzero()
        expect.append(a[:int(hit[0]) + 1] if len(hit) else a)
    made = answers.torch_answers(target, rows, 12, [stop], batch_size=3)
    assert any(len(e) < 12 for e in expect)
    for r, e, m in zip(rows, expect, made):
        assert m["response_start"] == len(r)
        assert torch.equal(m["ids"][:len(r)], r)
        assert torch.equal(m["ids"][len(r):], e)


def test_coverage_counts_on_the_data_and_measures_on_the_held_out():
    def row(answer):
        return {"ids": torch.tensor([9, 9] + answer), "response_start": 2}
    data = [row([1, 1, 1, 2]), row([1, 3])]               # counts: 1 x4, 2 x1, 3 x1
    held = [row([1, 4, 4, 2])]
    got = answers.coverage(data, held, ks=(1, 2), vocab_size=10)
    assert got["1"] == {"in_sample": round(4 / 6, 5), "held_out": 0.25}       # {1}
    assert got["2"] == {"in_sample": round(5 / 6, 5), "held_out": 0.5}        # {1, 2}: tie to the lower id


def test_the_command_makes_shards_resumes_and_refuses_another_recipe(tmp_path):
    """``python -m minidflash answers``: the shards asked for, a manifest that says what made
    them, the fp32 copy's answers agreeing with the fp32 target everywhere, nothing made twice,
    and a clear error for a folder of another recipe."""
    out = tmp_path / "answers"
    argv = ["--target", "data/target", "--out", str(out), "--n-math", "5", "--n-code", "3",
            "--n-prose", "2", "--prose-source", "docstrings", "--shards", "3",
            "--max-new-tokens", "12", "--dtype", "float32", "--threads", "1"]
    first = answers.main(argv + ["--make-shards", "2", "--check", "7"])
    manifest = json.loads((out / answers.MANIFEST).read_text())
    assert sorted(manifest["shards"]) == ["0", "1"] and first["answers"] == 7   # 10 prompts: 4 + 3
    assert manifest["shards"]["0"]["engine"] == "torch" and manifest["shards"]["0"]["dtype"] == "float32"
    assert first["check"]["token_agreement"] == 1.0          # exact arithmetic: the same answers
    made = answers.load_answers(out)
    assert all(len(r["ids"]) - r["response_start"] <= 12 for r in made)
    before = answers.shard_path(out, 0).read_bytes()
    again = answers.main(argv + ["--coverage", "8"])        # resumes: only shard 2 is made
    assert again["this_run"]["shards"] == [2] and again["answers"] == 10
    assert answers.shard_path(out, 0).read_bytes() == before
    assert set(again["coverage"]["8"]) == {"in_sample", "held_out"}
    timed = answers.main(argv + ["--make-shards", "0", "--time-features", "--feature-dtype", "bfloat16"])
    assert timed["feature_pass"]["shards"] == [2] and "this_run" not in timed
    assert 0 < timed["feature_pass"]["relative_error_mean"] < 0.05
    assert 0 < timed["feature_pass"]["end_to_end_answer_tokens_per_s"] < timed["feature_pass"]["text_answer_tokens_per_s"]
    with pytest.raises(ValueError, match="another recipe"):
        answers.main(argv[:-6] + ["--max-new-tokens", "20", "--dtype", "float32", "--threads", "1"])
