"""The llama.cpp tool (engines/llama_cpp.py, engines/llama_cpp_binaries.py and the command,
measure/llama_cpp_bench.py): finding llama.cpp (and the error when it is missing), reading what
its binaries print, and, where a llama.cpp build is found (and
sentencepiece, which its converter imports), the whole path on one prompt."""

import json
import stat
from pathlib import Path

import pytest

from minidflash.paths import TINY_TARGET_DIR
from minidflash.tools.engines import llama_cpp as engine
from minidflash.tools.engines import llama_cpp_binaries as bins
from minidflash.tools.measure import llama_cpp_bench as lc

# The end of a real `llama-speculative-simple ... --spec-type draft-dflash` log (stderr).
SPEC_LOG = """\
0.06.646.424 I common_speculative_impl_draft_dflash: - block_size=16, mask_token_id=16, n_extract=3, sample_from_anchor=true
2.17.323.682 I encoded  109 tokens in    3.014 seconds, speed:   36.170 t/s
2.17.323.683 I decoded   66 tokens in    3.664 seconds, speed:   18.013 t/s
2.17.323.684 I 
2.17.323.684 I n_draft   = 15
2.17.323.684 I n_predict = 66
2.17.323.685 I n_drafted = 543
2.17.323.685 I n_accept  = 26
2.17.323.685 I accept    = 4.788%
2.17.323.727 I spec common_specu: statistics     draft-dflash: #calls(b,g,a) =    1     40     40, #gen drafts =     40, #acc drafts =    12, #gen tokens =    543, #acc tokens =    26, #mean acc len = 2.89, #acc rate/pos = (0.667, 0.556), dur(b,g,a) = 0.003, 427.161, 0.013 ms
"""

# The end of a real `llama-completion --verbose-prompt` log: prompt ids, then the perf lines.
PLAIN_LOG = """\
0.00.449.206 I llama_completion: number of tokens in prompt = 4
0.00.449.214 I      1 -> '<|im_start|>'
0.00.449.219 I   9690 -> 'system'
0.00.449.224 I    198 -> '
'
0.00.449.229 I   2683 -> 'You'
0.02.053.939 I common_perf_print: prompt eval time =    1018.73 ms /   109 tokens (    9.35 ms per token,   107.00 tokens per second)
0.02.053.940 I common_perf_print:        eval time =    2368.44 ms /    63 runs   (   37.59 ms per token,    26.60 tokens per second)
"""


def executable(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# ---------------------------------------------------------------- finding llama.cpp

def test_binaries_are_found_under_LLAMA_CPP_DIR_or_on_PATH(tmp_path):
    tree = tmp_path / "llama.cpp"
    exe = executable(tree / "build" / "bin" / bins.SPECULATIVE)
    (tree / bins.CONVERTER).write_text("")
    assert bins.find_binary(bins.SPECULATIVE, {bins.ENV: str(tree)}) == exe
    assert bins.find_converter({bins.ENV: str(tree)}) == tree / bins.CONVERTER
    # no variable: PATH, and the converter two folders above a binary found there
    env = {"PATH": str(exe.parent)}
    assert bins.find_binary(bins.SPECULATIVE, env) == exe
    assert bins.find_converter(env) == (tree / bins.CONVERTER).resolve()


def test_missing_llama_cpp_says_what_is_missing_and_how_to_get_it(tmp_path):
    with pytest.raises(bins.LlamaCppNotFound) as e:
        bins.find_binary(bins.PLAIN, {"PATH": str(tmp_path)})
    msg = str(e.value)
    assert bins.PLAIN in msg and bins.ENV in msg and "not on PATH" in msg
    assert "cmake" in msg and "draft-dflash" in msg and "llama-cpp-python==0.3.36" in msg
    executable(tmp_path / "build" / "bin" / bins.PLAIN)    # a tree without the converter
    with pytest.raises(bins.LlamaCppNotFound, match=bins.CONVERTER):
        bins.find_converter({bins.ENV: str(tmp_path)})
    missing = f"{bins.ENV}=.* has no executable {bins.BENCH}"
    with pytest.raises(bins.LlamaCppNotFound, match=missing):
        bins.find_binary(bins.BENCH, {bins.ENV: str(tmp_path)})


def test_a_non_executable_file_is_not_a_binary(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / bins.PLAIN).write_text("")
    with pytest.raises(bins.LlamaCppNotFound):
        bins.find_binary(bins.PLAIN, {bins.ENV: str(tmp_path)})


def test_the_command_stops_at_the_missing_binary_before_loading_anything(tmp_path, monkeypatch):
    monkeypatch.setenv(bins.ENV, str(tmp_path))
    with pytest.raises(bins.LlamaCppNotFound, match=bins.PLAIN):
        lc.main(["--suites", "gsm8k", "--n", "1"])


def test_the_command_decodes_the_test_part_unless_told_and_records_which(monkeypatch):
    """--split: the test part of each suite by default (the dev prompts are where choices are
    made), the dev part or all when asked; the results JSON names the split and the prompts."""
    from pathlib import Path

    from minidflash.tools.common import suite_prompts

    seen = []
    decoded = {"plain": {"eval_ms": 100.0, "runs": 10, "tokens_per_s": 100.0},
               "prompt_ids_match": True,
               "speculative": {"3": {"n_predict": 12, "decode_s": 0.1, "tau": 2.0,
                                     "tokens_per_s": 120.0, "parting": None}}}
    monkeypatch.setattr(lc, "find_binary", lambda name: Path(name))
    monkeypatch.setattr(lc, "find_converter", lambda: Path(bins.CONVERTER))
    monkeypatch.setattr(lc, "gguf_files", lambda drafter, name, target, converter, **kw: (
        Path("t.gguf"), Path("d.gguf"), {"tensors": 14}, None))
    monkeypatch.setattr(lc, "decode_prompt", lambda s, suite, i, row: (
        seen.append(row["id"]), (decoded, 0))[1])
    argv = ["--target", str(TINY_TARGET_DIR), "--suites", "gsm8k", "--n", "2", "--n-max", "3"]
    for split in ("test", "dev", "all"):
        seen.clear()
        r = lc.main(argv + ([] if split == "test" else ["--split", split]))
        assert seen == [row["id"] for row in suite_prompts("gsm8k", split, 2)]
        assert r["split"] == split and r["suites"]["gsm8k"]["summary"]["prompts"] == 2
    assert r["suites"]["gsm8k"]["prompts_used"] == "gsm8k all part, prompts 1-2 of the file"
    assert seen != [row["id"] for row in suite_prompts("gsm8k", "test", 2)]


# ---------------------------------------------------------------- reading llama.cpp

def test_tau_is_tokens_per_kept_target_pass():
    s = bins.parse_speculative(SPEC_LOG)
    assert (s["n_predict"], s["n_accept"], s["n_drafted"], s["n_draft"]) == (66, 26, 543, 15)
    # each kept pass adds accepted + 1 to n_predict and accepted to n_accept: 40 passes
    assert s["passes"] == 40 and s["tau"] == pytest.approx(66 / 40)
    assert s["tokens_per_s"] == pytest.approx(66 / 3.664)
    assert s["prompt_tokens"] == 109
    assert (s["draft_calls"], s["draft_ms"]) == (40, 427.161)       # the drafter's own time (-lv 4)
    no_stats = bins.parse_speculative(SPEC_LOG.rsplit("\n", 2)[0])
    assert no_stats["draft_calls"] is None and no_stats["tau"] == s["tau"]


def test_an_unfinished_speculative_log_is_refused():
    with pytest.raises(ValueError, match="n_accept"):
        bins.parse_speculative(SPEC_LOG.replace("n_accept  = 26", ""))


def test_plain_speed_is_read_from_the_eval_line_not_the_prompt_line():
    p = bins.parse_plain(PLAIN_LOG)
    assert p["runs"] == 63 and p["tokens_per_s"] == pytest.approx(63 / 2.36844)
    with pytest.raises(ValueError, match="eval time"):
        bins.parse_plain(PLAIN_LOG.splitlines()[-2])         # only the prompt's line


def test_prompt_ids_are_read_from_the_verbose_prompt_listing():
    assert bins.prompt_ids(PLAIN_LOG) == [1, 9690, 198, 2683]  # a newline piece spans two lines


def test_the_texts_are_cut_out_of_stdout():
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert bins.speculative_text("\n\n" + prompt + "Hello!\n\n\n\n", prompt) == "Hello!"
    with pytest.raises(ValueError, match="extra BOS"):
        bins.speculative_text("\n\n<|im_start|>" + prompt + "Hello!\n\n\n\n", prompt)
    assert bins.plain_text("Hello! [end of text]\n\n\n") == ("Hello!", True)
    assert bins.plain_text("Hello there\n\n") == ("Hello there", False)
    with pytest.raises(ValueError, match="finish"):
        bins.plain_text("Hello")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(TINY_TARGET_DIR)


def test_parting_finds_the_first_differing_token(tokenizer):
    plain = "12 + 7 = 19 and 3 + 4 = 7"
    assert lc.parting(tokenizer, plain, plain, plain_stopped=True) is None
    # plain cut by the token limit: the speculative text may run one token further
    assert lc.parting(tokenizer, plain[:-2], plain, plain_stopped=False) is None
    # ... but not when plain stopped by itself
    assert lc.parting(tokenizer, plain[:-2], plain, plain_stopped=True)["plain"] == "<end>"
    a = tokenizer(plain, add_special_tokens=False)["input_ids"]
    for i in (0, 3, len(a) - 1):                              # change token i only
        other = next(t for t in range(len(tokenizer)) if t != a[i] and
                     tokenizer(tokenizer.decode(a[:i] + [t] + a[i + 1:]),
                               add_special_tokens=False)["input_ids"] == a[:i] + [t] + a[i + 1:])
        spec = tokenizer.decode(a[:i] + [other] + a[i + 1:])
        p = lc.parting(tokenizer, plain, spec, plain_stopped=True)
        assert p["token"] == i and p["ids"] == [a[i], other] and p["prefix"] == a[:i]


def test_step_costs_are_passes_in_decode_steps():
    records = bins.parse_bench('[{"n_threads": 1, "n_prompt": 16, "n_gen": 0, "avg_ts": 200.0, '
                               '"stddev_ts": 1.0}, {"n_threads": 1, "n_prompt": 4, "n_gen": 0, '
                               '"avg_ts": 80.0, "stddev_ts": 1.0}, {"n_threads": 1, "n_prompt": 0, '
                               '"n_gen": 32, "avg_ts": 50.0, "stddev_ts": 1.0}]')
    c = bins.step_costs(records)["1"]
    assert c["decode_ms"] == pytest.approx(20.0)
    # 16 tokens at 200/s: 80 ms = 4 steps of 20 ms; 4 tokens at 80/s: 50 ms = 2.5 steps
    assert c["verify_steps"] == pytest.approx({"4": 2.5, "16": 4.0})
    with pytest.raises(ValueError, match="tg"):
        bins.step_costs(records[:2])


def test_commands_are_greedy_and_take_the_prompt_as_it_is():
    tools = {bins.PLAIN: "llama-completion", bins.SPECULATIVE: "llama-speculative-simple"}
    plain = bins.plain_command(tools, "t.gguf", "PROMPT", 64)
    spec = bins.speculative_command(tools, "t.gguf", "d.gguf", "PROMPT", 64, 7, no_repack=True)
    for cmd in (plain, spec):
        assert cmd[cmd.index("--temp") + 1] == "0" and "--no-escape" in cmd
        assert cmd[cmd.index("-p") + 1] == "PROMPT" and "-f" not in cmd
    assert "-no-cnv" in plain                                  # no second chat template
    assert spec[spec.index("--spec-type") + 1] == "draft-dflash" and "-nr" in spec
    assert spec[spec.index("--spec-draft-n-max") + 1] == 7


def test_each_n_max_runs_with_each_p_min():
    tools = {bins.SPECULATIVE: "llama-speculative-simple"}
    a = lc.arguments(["--n-max", "3", "7", "--p-min", "0", "0.5"])
    assert lc.settings(a) == [("3", 3, 0.0), ("3/p0.5", 3, 0.5), ("7", 7, 0.0), ("7/p0.5", 7, 0.5)]
    cut = bins.speculative_command(tools, "t.gguf", "d.gguf", "PROMPT", 64, 7, p_min=0.5)
    assert cut[cut.index("--spec-draft-p-min") + 1] == 0.5
    assert "--spec-draft-p-min" not in bins.speculative_command(tools, "t", "d", "P", 64, 7)
    with pytest.raises(SystemExit):                  # one line from argparse, no traceback
        lc.arguments(["--p-min", "1.5"])


def test_a_draft_vocabulary_goes_into_the_gguf_as_d2t_and_head_rows(tmp_path):
    gguf = pytest.importorskip("gguf")
    import numpy as np
    src, out = tmp_path / "d.gguf", tmp_path / "d.d2t.gguf"
    w = gguf.GGUFWriter(src, "dflash")
    w.add_uint32("dflash.block_size", 8)
    w.add_array("dflash.target_layers", [2, 15, 28])
    w.add_string("tokenizer.ggml.model", "gpt2")
    fc = np.arange(12, dtype=np.float32).reshape(3, 4)
    w.add_tensor("fc.weight", fc)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    ids, rows = [7, 2, 40], np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    record = bins.with_draft_vocab(src, out, ids, rows)
    assert record["tensors"] == 3 and record["draft_vocab"] == 3
    r = gguf.GGUFReader(out)
    assert r.fields["general.architecture"].contents() == "dflash"
    assert r.fields["dflash.block_size"].contents() == 8
    assert r.fields["dflash.target_layers"].contents() == [2, 15, 28]
    assert r.fields["tokenizer.ggml.model"].contents() == "gpt2"
    t = {x.name: x for x in r.tensors}
    np.testing.assert_array_equal(t["fc.weight"].data, fc)
    np.testing.assert_array_equal(t["output.weight"].data, rows)      # row i scores ids[i]
    assert list(t["output.weight"].shape) == [4, 3]                   # ne: {n_embd, K}
    assert t["d2t"].tensor_type == gguf.GGMLQuantizationType.I64
    assert t["d2t"].data.tolist() == ids                             # absolute target ids
    with pytest.raises(ValueError, match="already has"):
        bins.with_draft_vocab(out, tmp_path / "again.gguf", ids, rows)
    with pytest.raises(ValueError, match="do not match"):
        bins.with_draft_vocab(src, tmp_path / "bad.gguf", ids[:2], rows)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["d.d2t.gguf", "d.gguf"]
    # a q8_0 drafter's head rows are q8_0 too (32-value blocks, one scale each)
    wide = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    bins.with_draft_vocab(src, tmp_path / "q.gguf", ids, wide, "q8_0")
    head = {x.name: x for x in gguf.GGUFReader(tmp_path / "q.gguf").tensors}["output.weight"]
    assert head.tensor_type == gguf.GGMLQuantizationType.Q8_0
    back = gguf.quants.dequantize(head.data, gguf.GGMLQuantizationType.Q8_0)
    assert back.shape == (3, 64) and abs(back - wide).max() < 0.02


# ---------------------------------------------------------------- with a llama.cpp build

def llama_cpp_found() -> str | None:
    try:
        bins.find_binary(bins.SPECULATIVE), bins.find_binary(bins.PLAIN), bins.find_converter()
    except bins.LlamaCppNotFound:
        return None
    return "found"


@pytest.mark.skipif(llama_cpp_found() is None,
                    reason=f"no llama.cpp build ({bins.ENV} unset and nothing on PATH): optional")
def test_llama_cpp_converts_the_shipped_drafter_and_decodes_with_it(tmp_path):
    # llama.cpp's converter (its gguf-py) imports sentencepiece, which requirements.txt leaves out
    pytest.importorskip("sentencepiece", reason="llama.cpp's converter (convert_hf_to_gguf.py) "
                        "needs sentencepiece: pip install sentencepiece")
    r = lc.main(["--suites", "gsm8k", "--n", "1", "--max-new-tokens", "16", "--n-max", "3",
                 "--p-min", "0", "0.5", "--no-repack", "--gguf-dir", str(tmp_path)])
    # the shipped drafter, 3 layers: 11 tensors a layer + fc, hidden norm, norm; its draft
    # vocabulary added as two tensors (the head rows and d2t)
    assert r["conversion"]["tensors"] == 36
    dv = r["conversion"]["draft_vocab"]
    assert (dv["tensors"], dv["draft_vocab"]) == (38, 8192)
    row = r["suites"]["gsm8k"]["prompts"][0]
    assert row["prompt_ids_match"]                             # no extra BOS, no second template
    for name in ("3", "3/p0.5"):
        s = row["speculative"][name]
        assert s["n_drafted"] > 0 and 1 <= s["tau"] <= 4 and s["n_predict"] >= 16
        assert s["draft_calls"] > 0 and s["draft_ms"] > 0
    # the cut only shortens drafts
    assert row["speculative"]["3/p0.5"]["n_drafted"] <= row["speculative"]["3"]["n_drafted"]


def test_a_log_cut_short_is_read_again(monkeypatch):
    # llama.cpp's log thread can lose the last lines at exit: the run is repeated, not misread
    import subprocess
    logs = iter([SPEC_LOG.split("n_accept")[0], SPEC_LOG])
    monkeypatch.setattr(bins, "run", lambda cmd: subprocess.CompletedProcess(cmd, 0, "", next(logs)))
    read = lambda q: bins.parse_speculative(q.stderr)
    s, reruns = bins.decode(["llama-speculative-simple"], read)
    assert reruns == 1 and s["tau"] == pytest.approx(66 / 40)
    monkeypatch.setattr(bins, "run", lambda cmd: subprocess.CompletedProcess(cmd, 0, "", "cut"))
    with pytest.raises(ValueError, match="n_draft"):
        bins.decode(["llama-speculative-simple"], lambda q: bins.parse_speculative(q.stderr))


def test_a_pre_tokenizer_is_named_only_when_its_regex_is_llama_cpps(tmp_path):
    # the tiny target's tokenizer splits with Qwen2's regex, which llama.cpp calls "qwen2"
    assert bins.split_regex(TINY_TARGET_DIR) == bins.PRE_TOKENIZER_REGEX["qwen2"]
    bins.check_pre_tokenizer(TINY_TARGET_DIR, "qwen2")
    with pytest.raises(ValueError, match="known here"):
        bins.check_pre_tokenizer(TINY_TARGET_DIR, "llama3")
    other = json.loads((TINY_TARGET_DIR / "tokenizer.json").read_text())
    split = other["pre_tokenizer"]["pretokenizers"][0]
    split["pattern"]["Regex"] = split["pattern"]["Regex"].replace(r"\p{N}|", r"\p{N}{1,3}|")
    (tmp_path / "tokenizer.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="does not split text"):
        bins.check_pre_tokenizer(tmp_path, "qwen2")


def test_a_target_type_is_made_once_and_never_left_half_written(tmp_path, monkeypatch):
    """``--target-type``: f32 / bf16 / q8_0 by the converter's --outtype, Q4_0 by llama-quantize
    from the f32 copy; each written under a temporary name, renamed when whole, and reused."""
    made = []

    def fake_convert(model_dir, out, converter=None, target_dir=None, pre=None, outtype="f32"):
        assert Path(out).suffix == ".tmp"
        Path(out).write_text(outtype)
        made.append(("convert", outtype))
        return {"command": f"convert --outtype {outtype}"}

    def fake_run(cmd):
        assert cmd[0] == Path(bins.QUANTIZE) and cmd[-1] == "Q4_0" and Path(cmd[2]).suffix == ".tmp"
        Path(cmd[2]).write_text("q4_0 of " + Path(cmd[1]).read_text())
        made.append(("quantize", Path(cmd[1]).name))

    monkeypatch.setattr(engine, "convert", fake_convert)
    monkeypatch.setattr(engine, "run", fake_run)
    monkeypatch.setattr(engine, "find_binary", lambda name: Path(name))
    target_dir = tmp_path / "SmolLM2"
    q4, how = engine.typed_target(target_dir, tmp_path, "Q4_0", Path("conv.py"))
    assert q4 == tmp_path / "SmolLM2.Q4_0.gguf" and q4.read_text() == "q4_0 of f32"
    assert made == [("convert", "f32"), ("quantize", "SmolLM2.f32.gguf")]
    assert "llama-quantize" in how["command"] and not list(tmp_path.glob("*.tmp"))
    again, how = engine.typed_target(target_dir, tmp_path, "Q4_0", Path("conv.py"))
    assert again == q4 and len(made) == 2 and "kept" in how["command"]
    bf16, _ = engine.typed_target(target_dir, tmp_path, "bf16", Path("conv.py"))
    assert bf16.read_text() == "bf16" and made[-1] == ("convert", "bf16")
