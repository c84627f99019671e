"""``experiments/plain_vs_generate.py``: our plain decoding against transformers ``generate``,
every implementation and dtype interleaved in rounds, on the tiny model."""

import pytest

from experiments import plain_vs_generate


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-plain"))


def test_every_setting_takes_a_turn_in_each_round_and_ratios_are_paired(tiny_dir, monkeypatch, capsys):
    calls = []
    speeds = iter([10.0, 5.0, 20.0, 8.0,  # round 1: fp32 ours, fp32 generate, bf16 ours, bf16 generate
                   10.0, 16.0, 4.0, 12.0,  # round 2 starts at fp32 generate
                   8.0, 12.0, 12.0, 4.0])  # round 3 starts at bf16 ours

    def timed(runner, method, prompts, max_new):
        calls.append((runner.wb.dtype_name, method.name))
        return next(speeds), [[1, 2]] * len(prompts)

    monkeypatch.setattr(plain_vs_generate, "tokens_per_s", timed)
    rc = plain_vs_generate.main(["--target", str(tiny_dir), "--prompts", "2", "--max-new-tokens", "4",
                                 "--dtypes", "fp32,bf16", "--rounds", "3", "--threads", "1"])
    assert rc == 0
    order = [("fp32", "vanilla"), ("fp32", "hf-greedy"), ("bf16", "vanilla"), ("bf16", "hf-greedy")]
    assert calls == order + order[1:] + order[:1] + order[2:] + order[:2]
    out = capsys.readouterr().out
    # by setting, round by round: fp32 ours 10, 12, 12 against generate 5, 10, 4: ratios 2.0, 1.2, 3.0
    assert "| fp32 | 12.0 (10.0–12.0) | 5.0 (4.0–10.0) | 2.00x (1.20–3.00x) | 2/2 |" in out
    # bf16 ours 20, 16, 8 against generate 8, 4, 12: 2.5, 4.0, 0.67; against fp32 ours 2.0, 1.33, 0.67
    assert "| bf16 | 16.0 (8.0–20.0) | 8.0 (4.0–12.0) | 2.50x (0.67–4.00x) | 2/2 |" in out
    assert "Each dtype against fp32, ours: bf16 1.33x (0.67–2.00x)." in out
    assert "3 rounds, the four settings interleaved" in out and "commit " in out
