"""The bench's llamacpp-plain methods (tools/measure/llamacpp_plain.py): their names, the error
at the start where llama.cpp is missing, and the rows they give, with llama-completion replaced
by a fake that answers a canned stdout and log; where LLAMA_CPP_DIR names a llama.cpp build, the
whole path on the tiny target."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from minidflash.paths import PROMPTS_DIR
from minidflash.target import chat_ids, load_target, stop_ids
from minidflash.tools import common
from minidflash.tools.engines import llama_cpp_binaries as bins
from minidflash.tools.measure import bench, llamacpp_plain, methods
from minidflash.verifier import speculative_generate


@pytest.fixture(scope="module")
def tiny():
    return load_target()


def test_method_names_are_parsed():
    for kind in ("bf16", "q4_1", "f32", "q8_0"):
        m = methods.parse(f"llamacpp-plain/{kind}")
        assert (m.kind, m.gguf, m.dtype, m.config) == ("llamacpp", kind, None, None)
    # held against plain decoding in the run's dtype, not a bf16 copy of the target
    specs = ["plain", "plain/bf16", "llamacpp-plain/bf16"]
    assert methods.reference("llamacpp-plain/bf16", specs) == "plain"
    for bad in ("llamacpp-plain", "llamacpp-plain/fp16", "llamacpp/bf16", "llamacpp-plain/bf16/x",
                "llamacpp-plain/bf16@dir"):
        with pytest.raises(ValueError, match="llamacpp-plain/T"):
            methods.parse(bad)


def test_a_missing_llama_cpp_stops_the_bench_before_any_prompt(tmp_path, monkeypatch):
    decoded = []
    monkeypatch.setattr(methods, "run_methods", lambda *a, **k: decoded.append(a))
    monkeypatch.setenv(bins.ENV, str(tmp_path))                 # a folder without llama.cpp
    with pytest.raises(bins.LlamaCppNotFound, match=f"{bins.ENV}=") as e:
        bench.main(["--methods", "plain", "llamacpp-plain/bf16", "--n", "1",
                    "--max-new-tokens", "4"])
    assert bins.HOW_TO_GET in str(e.value) and decoded == []    # not even the warm-up
    monkeypatch.delenv(bins.ENV)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(bins.LlamaCppNotFound, match=f"{bins.ENV} is not set"):
        bench.main(["--methods", "plain", "llamacpp-plain/q4_1", "--n", "1"])
    assert decoded == []


def fake_tree(tmp_path):
    tree = tmp_path / "llama.cpp"
    exe = tree / "build" / "bin" / bins.PLAIN
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tree / bins.CONVERTER).write_text("")
    return tree


def test_q4_1_needs_a_packaged_gguf(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv(bins.ENV, str(fake_tree(tmp_path)))
    with pytest.raises(ValueError, match="has no packaged GGUF.*llamacpp-plain/bf16"):
        methods.load_method_drafters(["plain", "llamacpp-plain/q4_1"], tiny[0])


class FakeCompletion:
    """llama-completion answering ``texts`` in turn (None: our plain decode's text), its log
    listing the prompt's ids and ``eval time = EVAL_MS ms / RUNS runs``; records each command."""
    EVAL_MS, RUNS = 120.0, 9

    def __init__(self, tokenizer, texts=(), sigill_without_nr=False):
        self.tokenizer, self.texts, self.sigill = tokenizer, list(texts), sigill_without_nr
        self.commands = []

    def __call__(self, cmd, timeout=1800):
        cmd = [str(c) for c in cmd]
        self.commands.append(cmd)
        if self.sigill and "-nr" not in cmd:
            raise bins.IllegalInstruction("died of an illegal instruction")
        prompt, n = cmd[cmd.index("-p") + 1], int(cmd[cmd.index("-n") + 1])
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        text = self.texts.pop(0) if self.texts else None
        if text is None:                       # what our plain decoding gives
            new = speculative_generate(self.target, None, torch.tensor([ids]), block_size=1,
                                       max_new_tokens=n, stop_token_ids=self.stops).new_ids.tolist()
            stopped = new[-1] in self.stops
            text = self.tokenizer.decode(new, skip_special_tokens=True)
        else:
            stopped = False
        log = "".join(f"0.00.4 I {i:6d} -> 'x'\n" for i in ids) + (
            "common_perf_print: prompt eval time =  50.00 ms /  9 tokens\n"
            f"common_perf_print:        eval time =  {self.EVAL_MS:.2f} ms /  {self.RUNS} runs   "
            "(  13.33 ms per token,  75.00 tokens per second)\n")
        stdout = text + (" [end of text]\n" if stopped else "") + "\n\n"
        return subprocess.CompletedProcess(cmd, 0, stdout, log)


def fake_llama_cpp(tmp_path, monkeypatch, tiny, **kw):
    """A fake llama.cpp tree, the conversion replaced by an empty file, llama-completion by a
    FakeCompletion (returned)."""
    target, tokenizer = tiny
    monkeypatch.setenv(bins.ENV, str(fake_tree(tmp_path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def fake_typed_target(folder, out_dir, kind, converter, pre=None):
        out = out_dir / f"{Path(folder).name}.{kind}.gguf"
        out.write_text("")
        return out, {"command": f"convert {kind}"}
    monkeypatch.setattr(llamacpp_plain, "typed_target", fake_typed_target)
    fake = FakeCompletion(tokenizer, **kw)
    fake.target, fake.stops = target, stop_ids(tokenizer)
    monkeypatch.setattr(bins, "run", fake)
    return fake


def test_a_llama_cpp_row_is_timed_by_its_eval_time_and_compared_by_text(tmp_path, monkeypatch, tiny):
    target, tokenizer = tiny
    fake = fake_llama_cpp(tmp_path, monkeypatch, tiny, texts=[None] * 3 + ["something else"])
    specs = ["plain", "dflash:4", "llamacpp-plain/bf16"]
    drafters = methods.load_method_drafters(specs, target)
    runner = drafters["llamacpp-plain/bf16"]
    assert runner.name == "target/target.bf16.gguf" and not runner.no_repack
    assert len(fake.commands) == 1 and fake.texts == [None, None, "something else"]   # tried at setup
    rows = common.read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:3]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)                                   # llama.cpp runs at torch's count
    try:
        out = methods.run_methods(target, tokenizer, rows, specs, drafters, max_new_tokens=10,
                                  progress=False)
    finally:
        torch.set_num_threads(threads)
    for cmd in fake.commands[1:]:
        assert cmd[cmd.index("-t") + 1] == cmd[cmd.index("-tb") + 1] == "2"
        assert cmd[cmd.index("-n") + 1] == "10" and "--temp" in cmd
    ms = out["methods"]
    row = ms["llamacpp-plain/bf16"]
    tpot_ms = FakeCompletion.EVAL_MS / FakeCompletion.RUNS     # eval time per run
    assert row["tau"] == 1.0 and row["per_prompt"]["tpot_ms"] == pytest.approx([tpot_ms] * 3)
    assert row["tpot_ms"] == pytest.approx(tpot_ms)
    assert row["tokens_per_s"] == pytest.approx(1e3 / tpot_ms)
    assert row["draft_ms_per_step"] is None and row["passes_only_speedup"] is None
    # two prompts answered with our plain text, the third not: located, with its logit gap
    assert row["identical_count"] == 2 and not row["identical"]
    assert [d["prompt"] for d in row["divergences"]] == [2] and row["divergences"][0]["gap"] is not None
    lc = row["llamacpp"]
    assert lc["gguf"] == "target/target.bf16.gguf" and lc["conversion"] == "convert bf16"
    assert lc["command"].startswith("llama-completion -m ") and "-t 2" in lc["command"]
    assert lc["tokens_per_s"] == pytest.approx(1e3 * FakeCompletion.RUNS / FakeCompletion.EVAL_MS)
    assert lc["new_tokens"] == [FakeCompletion.RUNS + 1] * 3 and lc["texts_equal"] == 2
    assert lc["prompt_ids_match"] and lc["threads"] == 2 and not lc["no_repack"]
    assert row["new_tokens"] == 3 * (FakeCompletion.RUNS + 1)
    # every row: its speed over llama.cpp's, and the table prints it with tokens/s
    for spec, s in ms.items():
        assert s["speedup_vs_llamacpp"]["llamacpp-plain/bf16"] == pytest.approx(tpot_ms / s["tpot_ms"])
    assert llamacpp_plain.versus(ms["plain"]).startswith("  over llama.cpp bf16 ")
    assert "speedup_vs_llamacpp" not in methods.run_methods(
        target, tokenizer, rows[:1], ["plain"], {}, max_new_tokens=4, progress=False)["methods"]["plain"]


def test_an_illegal_instruction_at_setup_gives_no_repack(tmp_path, monkeypatch, tiny):
    target, tokenizer = tiny
    fake = fake_llama_cpp(tmp_path, monkeypatch, tiny, sigill_without_nr=True)
    runner = methods.load_method_drafters(["llamacpp-plain/f32"], target)["llamacpp-plain/f32"]
    assert runner.no_repack and "illegal instruction" in runner.why
    assert [("-nr" in c) for c in fake.commands] == [False, True]
    msgs = [{"role": "user", "content": "2+2?"}]
    got = runner.decode(tokenizer, msgs, chat_ids(tokenizer, msgs), 6)
    assert "-nr" in fake.commands[-1] and got["llama"]["no_repack"]
    assert "-nr" in str(runner) and "-nr" in runner.describe()


@pytest.mark.skipif(not os.environ.get(bins.ENV),
                    reason=f"{bins.ENV} is unset: no llama.cpp build to run (optional)")
def test_llama_cpp_decodes_the_tiny_target_in_the_bench(tmp_path, monkeypatch, tiny):
    target, tokenizer = tiny
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))         # the GGUF made afresh here
    specs = ["plain", "llamacpp-plain/f32"]
    drafters = methods.load_method_drafters(specs, target)
    rows = common.read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2]
    out = methods.run_methods(target, tokenizer, rows, specs, drafters, max_new_tokens=12,
                              progress=False)
    row = out["methods"]["llamacpp-plain/f32"]
    lc = row["llamacpp"]
    assert row["tau"] == 1.0 and row["tpot_ms"] > 0 and lc["prompt_ids_match"]
    assert all(2 <= n <= 12 for n in lc["new_tokens"]) and lc["gguf"] == "target/target.f32.gguf"
    assert f"-t {torch.get_num_threads()} " in lc["command"]
    print(f"llama.cpp f32 against our plain: {lc['texts_equal']}/2 texts equal")   # reported
