"""``python -m minidflash products``: every product of a pass timed each way at every row count,
and whether each way's rows are the bits of its 16-row product."""

import json

import pytest

from minidflash import row_product
from minidflash.target import load_target
from minidflash.tools.measure import products


def test_a_pass_has_the_targets_products():
    config = load_target()[0].config
    shapes = products.shapes_of(config)
    assert shapes[0] == (config.head_dim * (config.num_attention_heads
                                            + 2 * config.num_key_value_heads), config.hidden_size)
    assert shapes[2] == (2 * config.intermediate_size, config.hidden_size)


def test_every_way_at_every_row_count(tmp_path, capsys):
    out = products.main(["--threads", "1", "--repeats", "1", "--out", str(tmp_path / "p.json")])
    r = out["threads"]["1"]
    kernel = {"row_product"} if row_product.why_not() is None else set()
    assert set(r["ms"]) == {"F.linear", "mkl", "onednn", "bf16 -> fp32"} | kernel
    assert all(r["same_rows"][n] for n in kernel)      # a row's bits its own, 8 rows at a time
    assert all(set(by) == {"1", "2", "4", "8", "16"} and min(by.values()) > 0
               for by in r["ms"].values())
    assert all(isinstance(v, bool) for v in r["same_rows"].values())
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["machine"]["isa"] and saved["dtype"] == "float32"
    assert "rows as in 16" in capsys.readouterr().out


def test_a_bad_value_is_one_line(capsys):
    with pytest.raises(SystemExit):
        products.main(["--repeats", "0"])
    assert "--repeats" in capsys.readouterr().err
