"""The notebooks' helpers (``workbench/lessons``): what each figure and takeaway sentence is
computed from, tested on plain numbers and tiny random models."""

import datetime
import tempfile
from types import SimpleNamespace

import nbformat
import pytest
import torch

from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.sampling import SamplingParams
from workbench.lessons import figures, takeaways
from workbench.lessons.ancestors import ancestors, branch_tokens
from workbench.lessons.chi_square import chi_square_pvalue, total_variation
from workbench.cost_model import Curve
from workbench.lessons.draft_law import draft_next_token_law
from workbench.lessons.exact_law import next_token_laws, sequence_counts, sequence_law
from workbench.lessons.lossless import (acceptance_parts, chain_rule_law, skip_residual_law,
                                        target_only_law)
from workbench.lessons.chain_model import chain_alpha, expected_tokens, held_out_check
from workbench.lessons.divergence import divergence, first_difference, top2_margin
from workbench.lessons.machine import head_label, machine_label
from workbench.lessons.settings import label, lesson_prompts, measure_settings
from workbench.lessons.start import load_quietly
from tools.notebooks import out_of_sync, paired, read_script, sources
from workbench.timing import spread
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint


def curve(sizes, ms) -> Curve:
    return Curve(tuple(zip(sizes, ms)))


@pytest.fixture(scope="module")
def tiny():
    target = load_target(make_tiny_checkpoint(tempfile.mkdtemp(), vocab_size=8, seed=0))
    return target, random_head(target, seed=1, std=0.1)


def test_machine_label_names_cpu_cores_torch_date_dtype_and_threads():
    line = machine_label(datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc), dtype="bf16", threads=1)
    assert line.startswith("Ran on ") and "cores" in line and torch.__version__ in line
    from workbench.cpu_choices import cpu_flags, cpu_kind
    assert f" with {cpu_kind(cpu_flags())} (" in line  # the CPU's kind, as the benchmark records name it
    assert "2026-01-02 03:04 UTC" in line and line.endswith("; bf16, 1 torch thread")
    assert machine_label(dtype="fp32", threads=2).endswith("; fp32, 2 torch threads")
    assert machine_label().endswith(f"no model loaded, {torch.get_num_threads()} torch thread"
                                    + ("" if torch.get_num_threads() == 1 else "s"))


def test_the_header_names_the_model_and_head_never_their_folders(monkeypatch, capsys):
    assert head_label("/home/me/checkout/workbench/assets/eagle-smollm2-135m, 4096 hot draft tokens") == \
        "eagle-smollm2-135m, 4096 hot draft tokens"
    assert head_label("random (seed 0)") == "random (seed 0)"
    from workbench import pipeline

    def noisy_load(dtype):
        import sys

        print("[fetch    0.0s] already present: /root/.cache/workbench/SmolLM2-135M-Instruct", file=sys.stderr)
        print("warning: the triton kernel failed its check; using torch", file=sys.stderr)
        return SimpleNamespace(dtype_name=dtype)

    monkeypatch.setattr(pipeline.Workbench, "load", staticmethod(noisy_load))
    assert load_quietly("fp32").dtype_name == "fp32"
    out = capsys.readouterr()
    assert out.out == "warning: the triton kernel failed its check; using torch\n" and out.err == ""


def test_figures_store_a_png_only_when_asked(monkeypatch):
    import plotly.io as pio

    before = pio.renderers.default
    monkeypatch.setenv("BROWSER_PATH", "/opt/some/chrome")
    try:
        assert figures.configure(images=False) == "plotly_mimetype"
        assert figures.configure(images=True) == "plotly_mimetype+png"
    finally:
        pio.renderers.default = before


def test_figures_without_a_browser_say_what_to_install(monkeypatch):
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    from pathlib import Path

    from workbench.viz import png

    monkeypatch.setattr(png, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.setattr(png.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="chromium"):
        figures.configure(images=True)


def test_spread_is_median_and_range():
    s = spread([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.low, s.high, s.runs) == (2.5, 1.0, 10.0, 4)
    assert str(spread([2.0])) == "2 (2–2, 1 runs)"
    assert spread([1.0, 2.0, 4.0]).with_unit("ms") == "2 ms (1–4 ms over 3 runs)"
    r = spread([4.0, 6.0]).ratio(spread([1.0, 2.0]))
    assert (r.low, r.high) == (2.0, 6.0)
    with pytest.raises(ValueError, match="at least one"):
        spread([])


def test_cost_curve_interpolates_and_never_extrapolates():
    curve = Curve.from_rows([{"tokens": 4, "ms": 20.0}, {"tokens": 1, "ms": 10.0}, {"tokens": 8, "ms": 40.0}])
    assert curve.at(1) == 10.0 and curve.at(2.5) == 15.0 and curve.at(6) == 30.0
    assert curve.at(10) == 50.0  # a prediction extends the last slope
    with pytest.raises(ValueError, match="outside the measured range"):
        curve.at(9, extrapolate=False)  # a sentence about the shape reads only what was measured
    with pytest.raises(ValueError, match="increase"):
        Curve(((1, 1.0), (1, 2.0)))


def test_ancestors_walk_up_to_the_root():
    parents = [-1, 0, 0, 1, 3]
    assert ancestors(parents, 4) == [0, 1, 3, 4] and ancestors(parents, 0) == [0]
    trace = {"tree": {"nodes": [{"token": 10 + i, "parent": p} for i, p in enumerate(parents)]}}
    assert branch_tokens(trace, 4) == [10, 11, 13, 14]
    with pytest.raises(ValueError, match="not in a tree"):
        ancestors(parents, 5)
    with pytest.raises(ValueError, match="cycle"):
        ancestors([1, 0], 0)


def test_chi_square_accepts_the_law_and_rejects_another():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    draws = torch.multinomial(probs, 4000, replacement=True, generator=gen)
    counts = torch.bincount(draws, minlength=4)
    # a correct sampler fails at level 1e-3 with probability 1e-3; the seed makes it deterministic
    assert chi_square_pvalue(counts, probs) > 1e-3
    assert chi_square_pvalue(counts, torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)) < 1e-6
    assert total_variation(torch.tensor([2.0, 1.0, 1.0, 0.0]), probs) == pytest.approx(0.125)
    assert chi_square_pvalue(torch.tensor([1.0, 9.0]), torch.tensor([0.0, 1.0])) == 0.0  # mass where p = 0
    with pytest.raises(ValueError, match="sum to 1"):
        chi_square_pvalue(counts, probs * 2)


def test_acceptance_parts_and_both_rules_give_p():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.2, 0.1, 0.5])
    parts = acceptance_parts(p, q)
    assert parts.accept_prob == pytest.approx(0.5)
    torch.testing.assert_close(parts.residual, torch.tensor([0.6, 0.2, 0.2, 0.0], dtype=torch.float64))
    torch.testing.assert_close(chain_rule_law(p, q), p.double())
    for children in ([0], [3, 1], [2, 0, 1], [0, 1, 2, 3]):
        torch.testing.assert_close(target_only_law(p, children), p.double())
    wrong = skip_residual_law(p, q)
    assert float((wrong - p.double()).abs().max()) > 0.05 and float(wrong.sum()) == pytest.approx(1.0)
    torch.testing.assert_close(skip_residual_law(p, p), p.double())  # harmless only when q = p
    with pytest.raises(ValueError, match="probability vector"):
        acceptance_parts(p, q * 2)
    with pytest.raises(ValueError, match="distinct"):
        target_only_law(p, [1, 1])


def test_sequence_law_is_the_chain_of_next_token_laws(tiny):
    target, _ = tiny
    params = SamplingParams(temperature=1.0)
    law = sequence_law(target, [3, 5], params, 2)  # [8, 8]
    assert law.shape == (8, 8) and float(law.sum()) == pytest.approx(1.0)
    first = next_token_laws(target, [[3, 5]], params)[0]
    torch.testing.assert_close(law.sum(1), first, atol=1e-6, rtol=1e-5)  # fp32 forwards, batched differently
    torch.testing.assert_close(law[4] / law[4].sum(), next_token_laws(target, [[3, 5, 4]], params)[0],
                               atol=1e-6, rtol=1e-5)
    counts = sequence_counts([[1, 2, 7], [1, 2], [0, 0]], 8, 2)
    assert counts[1, 2] == 2 and counts[0, 0] == 1 and float(counts.sum()) == 3
    with pytest.raises(ValueError, match="too many"):
        sequence_law(target, [3], params, 6)


def test_draft_law_is_what_the_engine_drafts(tiny):
    target, head = tiny
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=2, topk=3, num_draft_tokens=4),
                 sampling=SamplingParams(), trace=True)
    (req,) = eng.add_requests([[3, 5, 1, 6]], 4)
    eng.step()  # prefill
    (step,) = eng.step()
    q = draft_next_token_law(target, head, req.prompt_ids + req.output_ids[:1], SamplingParams(temperature=1.0))
    level1 = [c for c in step["draft"]["candidates"] if c["level"] == 1]
    for c in level1:
        assert float(q[c["token"]]) == pytest.approx(c["prob"], abs=1e-4)
    assert sorted(c["token"] for c in level1) == sorted(torch.topk(q, 3).indices.tolist())
    with pytest.raises(ValueError, match="at least 2 tokens"):
        draft_next_token_law(target, head, [3], SamplingParams(temperature=1.0))


def test_takeaway_sentences_follow_the_numbers():
    assert takeaways.trend(1.0, 0.9) == "shrinks" and takeaways.trend(1.0, 1.01) == "hardly changes"
    assert takeaways.batch_sentence([1, 2, 4], [1.2, 1.1, 1.05]) == "it stays above 1 over this range"
    assert takeaways.batch_sentence([1, 2, 4], [1.2, 0.9, 0.8]).startswith("from batch 2 on")
    assert "every batch size" in takeaways.batch_sentence([1, 2], [0.9, 0.8])
    assert takeaways.batch_sentence([1, 2, 4, 8], [1.2, 0.9, 1.1, 0.8]).endswith("at batch 2, 8")
    assert takeaways.lossless_verdict([0.3, 0.5], 1e-3).startswith("match")
    assert "1-in-1000" in takeaways.lossless_verdict([0.3, 1e-5], 1e-3)
    assert takeaways.plural(1) == "" and takeaways.plural(2) == "s"


def test_float_differences_are_said_with_their_tolerance_and_only_zero_is_equal():
    from workbench.lessons.start import DTYPE_WHY

    assert takeaways.within(0.0) == "equal, bit for bit"
    said = takeaways.within(5e-6)
    assert said.startswith("within") and f"{takeaways.FP32_ATOL:.0e}" in said and "5.0e-06" in said
    assert takeaways.within(3e-4).startswith("beyond") and "equal" not in takeaways.within(5e-6)
    with pytest.raises(ValueError):
        takeaways.within(-1.0)
    assert "exactly" not in DTYPE_WHY["fp32"] and "tolerance" in DTYPE_WHY["fp32"]  # the first line of every fp32 notebook


def test_exit_sweep_figure_gives_each_measure_its_own_axis_from_zero():
    from workbench.lessons.draft_routes import exit_sweep_figure

    rows = [dict(layers=n, alpha=a, c=c, speedup=s, speedup_predicted=sp) for n, a, c, s, sp in
            [(6, 0.0, 0.455, 0.363, 0.346), (18, 0.196, 0.849, 0.304, 0.316), (28, 0.708, 1.159, 0.506, 0.520)]]
    fig = exit_sweep_figure(rows, 3, "fp32", 30)
    assert sorted(k for k in fig.layout if k.startswith("yaxis")) == ["yaxis", "yaxis2"]
    axes = [fig.layout.yaxis, fig.layout.yaxis2]
    assert all(a.overlaying is None for a in axes)  # two panels, no axis laid over another
    assert all(a.range[0] == 0 for a in axes)  # both start at 0
    by = {t.meta: t for t in fig.data}
    assert {by["speedup"].yaxis, by["predicted"].yaxis} == {"y"} and {by["alpha"].yaxis, by["c"].yaxis} == {"y2"}
    assert axes[0].range[1] > 1 and axes[1].range[1] > 1.159  # plain decoding's 1× and the dearest c fit in
    assert all("text" not in (t.mode or "") for t in fig.data)  # no numbers printed over the lines
    notes = [a for a in fig.layout.annotations if a.yref in ("y", "y2")]
    assert {(a.yref, a.y) for a in notes} == {("y", 1), ("y2", 1)}  # one note per panel, on its own 1-line
    assert list(fig.layout.xaxis.tickvals) == [6, 18, 28]


def test_regime_and_bend_come_from_the_cost_curve():
    sizes = (1, 2, 4, 8, 16, 32)
    flat = curve(sizes, (10.0, 10.1, 10.2, 10.3, 10.5, 11.0))
    proportional = curve(sizes, tuple(10.0 * n for n in sizes))
    knee = curve(sizes, (10.0, 10.2, 10.5, 11.0, 20.0, 40.0))  # flat up to 8, then doubles per doubling
    assert takeaways.elasticity(proportional, 2, 8) == pytest.approx(1.0)
    assert takeaways.regime(flat, 32).name == "memory-bound" and "nearly free" in takeaways.regime(flat, 32).sentence()
    assert takeaways.regime(proportional, 8).name == "compute-bound"
    assert "every verify node costs" in takeaways.regime(proportional, 8).sentence()
    assert takeaways.regime(knee, 8).name == "memory-bound" and takeaways.regime(knee, 32).name == "between the two regimes"
    steep = curve(sizes + (64, 128, 256), (10.0, 10.2, 10.5, 11.0, 12.0, 14.0, 28.0, 56.0, 112.0))
    assert takeaways.regime(steep, 8).name == "memory-bound" and takeaways.regime(steep, 256).name == "compute-bound"
    assert takeaways.regime(knee, 8).ratio == pytest.approx(1.1)
    assert takeaways.bend(knee) == 8 and takeaways.bend(flat) is None and takeaways.bend(proportional) == 1
    noisy = curve(sizes, (10.0, 10.2, 20.0, 10.5, 20.0, 40.0))  # one steep segment at 2→4 is noise
    assert takeaways.bend(noisy) == 8
    with pytest.raises(ValueError, match="outside the measured range"):
        takeaways.regime(flat, 64)


def test_differences_inside_the_noise_are_called_level():
    decode = spread([5.0, 5.2, 5.6])
    assert takeaways.compare(spread([4.9, 5.1, 5.3]), decode) == "level within noise"  # verify(2) "below" verify(1)
    assert takeaways.compare(spread([6.0, 6.1]), decode) == "above"
    assert takeaways.compare(spread([4.0, 4.5]), decode) == "below"
    assert takeaways.versus(5.5, decode) == "level within noise" and takeaways.versus(5.7, decode) == "above"
    assert takeaways.versus(4.0, decode) == "below"
    assert takeaways.compare_means([2, 3, 2, 3], [3, 2, 3, 2]) == "level within noise"
    assert takeaways.compare_means([4, 4, 5, 4, 5], [1, 2, 1, 1, 2]) == "above"
    assert takeaways.compare_means([1, 2, 1, 1, 2], [4, 4, 5, 4, 5]) == "below"
    with pytest.raises(ValueError, match="at least 2"):
        takeaways.compare_means([1], [1, 2])


def test_the_chain_model_is_fitted_on_half_the_steps_and_checked_on_the_other():
    assert chain_alpha([4, 1, 2], 3) == pytest.approx(4 / 6)  # 3 + 0 + 1 successes; failures at steps 2 and 3
    assert chain_alpha([4, 4], 3) == 1.0 and expected_tokens(1.0, 3) == 4.0
    assert expected_tokens(0.5, 3) == pytest.approx(1.875)
    # even steps always accept everything, odd steps never: fitting on the even ones cannot predict the odd ones
    check = held_out_check([4, 1, 4, 1, 4, 1, 4, 2], 3)
    assert (check.alpha, check.predicted, check.fit_steps, check.held_steps) == (1.0, 4.0, 4, 4)
    assert check.measured == 1.25 and check.verdict().startswith("over-predicts them by 2.75")
    same = held_out_check([2, 2, 3, 3, 2, 2, 3, 3], 3)
    assert same.verdict().startswith("is level with them within noise")
    with pytest.raises(ValueError, match="at least 4"):
        held_out_check([2, 3, 2], 3)
    with pytest.raises(ValueError, match="accepts 1..4"):
        chain_alpha([5], 3)


def _fake_workbench(outputs: dict, seconds: dict):
    """generate() returns one request whose output and accept lengths depend on the setting."""

    def generate(prompt_ids, spec, sampling, max_new_tokens, on_step=None):
        out = outputs[label(spec)][:max_new_tokens]
        lengths = [] if not spec.speculative else [2] * (len(out) // 2) + [1] * (len(out) % 2)
        if on_step is not None:
            on_step([], 0.1)  # the prefill: 0.1 s to the first token
        return [SimpleNamespace(output_ids=out, accept_lengths=lengths, drafts_accepted=[a - 1 for a in lengths])], \
            seconds[label(spec)]

    return SimpleNamespace(generate=generate, encode=lambda text: [len(text)])


def test_settings_are_measured_once_for_every_notebook_that_quotes_them():
    chain = SpecConfig.linear(3)
    wb = _fake_workbench({"vanilla": list(range(20)), label(chain): list(range(20))},
                         {"vanilla": 2.0, label(chain): 1.0})
    prompts = {"coding": [1, 2], "math_reasoning": [3]}
    got = measure_settings(wb, [SpecConfig("vanilla"), chain], prompts, rounds=2)
    assert list(got) == ["vanilla", "linear:3"]
    assert got["vanilla"].tau == 1.0 and got["linear:3"].tau == 2.0
    assert got["linear:3"].tau_of("coding") == 2.0 and got["vanilla"].tau_of("coding") == 1.0
    assert got["linear:3"].walk_lengths["coding"] == got["linear:3"].accept_lengths["coding"]  # nothing was cut
    assert got["linear:3"].speedup.median == 2.0 and got["linear:3"].tok_s.median == 20.0
    assert got["linear:3"].outputs["math_reasoning"] == list(range(20))
    assert got["linear:3"].equal_to_plain == 2 and got["linear:3"].speedup.runs == 2
    assert got["linear:3"].spread("ttft_ms").median == pytest.approx(100.0)
    assert got["linear:3"].spread("tpot_ms").median == pytest.approx(900.0 / 19)  # (1 s - 0.1 s) over 19 tokens
    with pytest.raises(ValueError, match="must be vanilla"):
        measure_settings(wb, [chain], prompts, rounds=1)
    with pytest.raises(ValueError, match="no vanilla does"):
        measure_settings(wb, [SpecConfig("vanilla"), (chain, SamplingParams(temperature=1.0))], prompts, rounds=1)
    words = SimpleNamespace(encode=lambda text: [len(text)])
    prompts = lesson_prompts(words)
    assert list(prompts) == ["coding", "translation", "math_reasoning"]
    from workbench.measure.specbench import load_questions

    coding = [q.turns[0] for q in load_questions() if q.category == "coding"]
    assert prompts["coding"] == [min(len(t) for t in coding)]


def test_a_divergence_is_shown_with_the_targets_margin(tiny):
    target, _ = tiny
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1 and first_difference([1, 2], [1, 2, 3]) == 2
    (best, second), margin = top2_margin(target, [3, 5, 1])
    law = next_token_laws(target, [[3, 5, 1]], SamplingParams(temperature=1.0))[0]
    assert best == int(law.argmax()) and best != second and margin >= 0
    d = divergence(target, [3, 5], [1, 2, 7], [1, 4])
    assert (d.position, d.plain, d.other) == (1, 2, 4) and d.top == top2_margin(target, [3, 5, 1])[0]
    assert divergence(target, [3, 5], [1, 2], [1, 2]) is None


SCRIPT = '''# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
# ---

# %% [markdown]
# # A lesson

# %%
print(1 + 1)
'''


def test_any_numbered_script_is_paired_and_checked(tmp_path):
    (tmp_path / "09_new_lesson.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text("x = 1\n")  # not a notebook: no NN_ prefix
    (script,) = sources(tmp_path)
    assert script.name == "09_new_lesson.py" and paired(script).name == "09_new_lesson.ipynb"
    assert "missing" in out_of_sync(script)
    nb = read_script(script)
    assert [c.id for c in nb.cells] == ["cell-00", "cell-01"] and nb.metadata["jupytext"]["formats"]
    nbformat.write(nb, paired(script))
    assert out_of_sync(script) is None
    script.write_text(SCRIPT.replace("1 + 1", "2 + 2"))
    assert out_of_sync(script) == "cell 1 differs between 09_new_lesson.py and 09_new_lesson.ipynb"


def test_check_says_so_when_every_pair_is_in_step(tmp_path, monkeypatch, capsys):
    from tools import notebooks

    (tmp_path / "09_new_lesson.py").write_text(SCRIPT)
    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", tmp_path)
    monkeypatch.setattr(notebooks, "sources", lambda directory=tmp_path: sorted(tmp_path.glob("09_*.py")))
    assert notebooks.main(["check"]) == 1 and "missing" in capsys.readouterr().err
    nbformat.write(read_script(tmp_path / "09_new_lesson.py"), tmp_path / "09_new_lesson.ipynb")
    assert notebooks.main(["check"]) == 0
    assert capsys.readouterr().out.strip() == "1 notebook in step with its script"


def test_notebooks_are_chosen_by_number_name_or_path():
    from tools.notebooks import _select

    first = sources()[0]
    assert _select([first.name[:2]])[0] == first
    assert _select([f"notebooks/{first.name}", str(first.with_suffix(".ipynb"))]) == [first]
    with pytest.raises(SystemExit, match="no notebook matches"):
        _select(["99_nothing"])


def test_block_rule_lesson_names_a_gain_only_where_the_ranges_separate(tmp_path):
    from workbench.testing.tiny import make_tiny_app_model
    from workbench.lessons.block_rule import RuleRun, expectation_sentence, gain_sentence, rule_runs
    from workbench.pipeline import Workbench

    apart = [RuleRun("leviathan", taus=[1.5, 1.6]), RuleRun("block", taus=[1.7, 1.8])]
    assert "a gain" in gain_sentence(apart) and "block τ 1.70–1.80" in gain_sentence(apart)
    overlap = [RuleRun("leviathan", taus=[1.5, 1.75]), RuleRun("block", taus=[1.7, 1.8])]
    assert "overlap" in gain_sentence(overlap) and "a gain" not in gain_sentence(overlap)
    assert "above block's" in gain_sentence([RuleRun("leviathan", taus=[2.0]), RuleRun("block", taus=[1.0])])

    wb = Workbench.load(target=str(make_tiny_app_model(tmp_path, seed=1)), draft="random:1", dtype="fp32")
    runs = rule_runs(wb, [wb.encode("Why do cats purr?")], num_steps=3, seeds=(0, 1), max_new=8)
    assert [r.rule for r in runs] == ["leviathan", "block"]
    for r in runs:
        assert len(r.taus) == 2 and all(1.0 <= t <= 4.0 for t in r.taus) and r.steps > 0
        assert set(r.expected) == {"target-only", "leviathan", "block"}
    assert expectation_sentence(runs).count("expected accepted drafts per step") == 2
    with pytest.raises(ValueError, match="temperature > 0"):
        rule_runs(wb, [[1, 2]], num_steps=3, seeds=(0,), max_new=4, temperature=0.0)


def test_the_two_token_example_adds_up():
    from workbench.analysis.chain_rules import exact_expected_accepted, output_law, target_law
    from workbench.lessons.block_rule import example_rows, two_token_pair

    pair = two_token_pair()
    rows = example_rows(pair)
    assert [r["drafts"] for r in rows] == ["aa", "ab", "ba", "bb"]
    assert sum(r["P(drafts) under q"] for r in rows) == pytest.approx(1.0)
    aa = rows[0]  # w1 = 0.5/0.8, w2 = min(1, w1 * 0.9/0.6) = 0.9375 = h2
    assert (aa["w1"], aa["w2"], aa["h2"]) == pytest.approx((0.625, 0.9375, 0.9375))
    for rule in ("leviathan", "block"):
        mean = sum(r["P(drafts) under q"] * sum(k * r[f"{rule} P(k={k})"] for k in range(3)) for r in rows)
        assert mean == pytest.approx(exact_expected_accepted(pair, 2, rule))
        torch.testing.assert_close(output_law(pair, 2, 2, rule), target_law(pair, 2), rtol=0, atol=1e-12)
    assert exact_expected_accepted(pair, 2, "block") > exact_expected_accepted(pair, 2, "leviathan") + 0.05


def test_a_prediction_is_said_against_its_measured_range():
    measured = spread([1.0, 1.1, 1.2])
    inside = takeaways.gap(1.05, measured)
    assert inside == ("predicted 1.05×, measured 1.10× (1.00–1.20× over 3 runs): the prediction lies inside the "
                      "measured range")
    above = takeaways.gap(1.32, measured)
    assert "20% above the measured median, beyond the range" in above
    assert "10% below" in takeaways.gap(0.99, measured)
    # outside by less than the digits shown: not "0% below, beyond the range" beside a printed edge
    edge = takeaways.gap(1.538, spread([1.541, 1.55, 1.58]))
    assert edge == ("predicted 1.54×, measured 1.55× (1.54–1.58× over 3 runs): the prediction lies just outside the "
                    "measured range, 1.538× against its lowest round's 1.541×")
    assert takeaways.gap(1.584, spread([1.50, 1.55, 1.582])).endswith("against its highest round's 1.582×")
    assert takeaways.gap(60.0, spread([50.0, 55.0]), "ms", 1).startswith("predicted 60.0 ms, measured 52.5 ms "
                                                                          "(50.0–55.0 ms over 2 runs): the prediction is 14% above")
    pairs = {"a": (1.05, measured), "b": (1.5, measured)}
    assert takeaways.gaps_sentence(pairs) == ("1 of 2 predictions lie inside their measured range; the widest gap "
                                              "is at b, +36% of the measured median")
    assert takeaways.gaps_sentence({"a": (1.05, measured)}).startswith("1 of 1")
    with pytest.raises(ValueError):
        takeaways.gaps_sentence({})


def test_the_threads_of_the_notebooks_and_the_readme_are_said_with_both_costs():
    both = takeaways.threads_sentence(1, 2, {1: 64.7, 2: 49.9})
    assert "at 1 torch thread;" in both and "README's figures are at 2" in both
    assert "64.7 ms at 1 and 49.9 ms at 2" in both and "(1.30× as long at 1)" in both
    assert "not measured on this machine at 2" in takeaways.threads_sentence(1, 2, {1: 64.7, 2: None})
    assert takeaways.threads_sentence(2, 2, {2: 50.0}).startswith("These numbers are at 2 torch threads, as the README's")


def test_leviathan_theorem_and_its_corollary_on_alpha_and_c():
    from workbench.lessons.chain_model import best_gamma, improvement_factor, some_gamma_helps

    assert improvement_factor(0.0, 3, 0.0) == pytest.approx(1.0)  # a free draft that is never right: no gain
    assert improvement_factor(0.8, 1, 0.1) == pytest.approx(1.8 / 1.1)  # γ = 1: (1 + α) / (1 + c)
    assert improvement_factor(0.8, 3, 0.05) == pytest.approx((1 - 0.8 ** 4) / (0.2 * 1.15))
    for alpha, c in ((0.7, 0.3), (0.3, 0.7), (0.5, 0.5), (0.9, 0.05)):
        assert some_gamma_helps(alpha, c) == (best_gamma(alpha, c)[1] > 1)  # the corollary: iff α > c
    assert best_gamma(0.9, 0.05)[0] > best_gamma(0.5, 0.05)[0]  # better drafts pay for longer chains
    helps = takeaways.theorem_sentence(24, 0.7, 0.3, 3, 1.2)
    assert "α > c, so some γ helps" in helps and "agrees with the measurement" in helps
    assert "no γ helps" in takeaways.theorem_sentence(6, 0.1, 0.4, 3, 0.5)
    assert "disagrees" in takeaways.theorem_sentence(24, 0.7, 0.3, 3, 0.8)
    with pytest.raises(ValueError):
        improvement_factor(0.5, 0, 0.1)


def test_where_c_passes_one_is_computed_from_the_sweep():
    assert takeaways.c_passes_one([6, 18, 28], [0.45, 0.85, 0.95]).startswith("c stays below 1 at every exit")
    assert takeaways.c_passes_one([6, 18, 28], [0.45, 1.05, 1.16]).startswith("c passes 1 from 18 layers on (1.05)")
    assert takeaways.c_passes_one([6, 18], [1.1, 1.2]).startswith("c passes 1 at every exit")
    assert "not monotone" in takeaways.c_passes_one([6, 18, 28], [1.1, 0.9, 1.2])


def test_predictions_come_from_the_one_cost_model():
    from workbench.cost_model import Overhead, StepCost
    from workbench.engine.drafts.exit import ExitSource
    from workbench.lessons.predictions import at_context, memory_bound, with_draft

    cost = StepCost(((1, 10.0), (2, 12.0), (4, 16.0), (8, 24.0)), ((1, 1.0), (2, 1.5)),
                    overhead=Overhead(1.0, 0.5, 2.0, 0.5), verify_range=((9, 11), (11, 13), (15, 17), (23, 25)))
    chain = SpecConfig.linear(3)
    flat = memory_bound(cost)
    assert flat.verify_ms(4) == flat.verify_ms(1) == 10.0 and flat.draft == cost.draft and not flat.overhead.measured
    # a chain of 3 at τ 2.5: verify(4) flat at 10, the extend over 2.5 rows 1.75, two more levels of 1 row each
    assert flat.predict(chain, 2.5).speedup == pytest.approx(2.5 * 10.0 / (10.0 + 1.75 + 2 * 1.0))
    assert flat.predict(chain, 2.5).speedup > cost.predict(chain, 2.5).speedup  # the measured verify(4) costs more
    longer = at_context(cost, {1: 20.0, 4: 30.0})
    assert longer.verify_ms(1) == 20.0 and longer.verify_ms(4) == 30.0 and longer.draft == cost.draft
    assert longer.overhead == cost.overhead and longer.verify_range == ()
    with pytest.raises(ValueError, match="decode step"):
        at_context(cost, {4: 30.0})

    class FakeWb:  # what Timers reads of a Workbench: its target's layers
        target = SimpleNamespace(config=SimpleNamespace(num_layers=30))

    exit15 = with_draft(cost, FakeWb(), ExitSource(15))
    assert exit15.draft_ms(2) == pytest.approx(6.0) and exit15.verify == cost.verify  # 15 of 30 layers
    with pytest.raises(ValueError, match="network of its own"):
        from workbench.engine.drafts.head import HeadSource

        with_draft(cost, FakeWb(), HeadSource())


def test_a_speedup_in_tokens_per_second_is_predicted_with_each_answers_prefill():
    """The notebooks' measured speedup is a mean over answers of tokens/s, prefill included; the
    prediction set beside it prices the same: each answer's prefill, the draft's catch-up over
    its prompt and (n - 1) / τ decode steps at its own τ, at one request."""
    from workbench.cost_model import StepCost
    from workbench.lessons.predictions import answers_speedup

    cost = StepCost(((1, 10.0), (2, 12.0), (4, 16.0)), ((1, 1.0), (2, 1.5)), prefill=((10, 50.0), (20, 100.0)),
                    catch_up=((10, 5.0), (20, 8.0)))
    chain = SpecConfig.linear(1)
    step = lambda tau: 12.0 + cost.draft_ms(tau)  # noqa: E731  verify(2) and the extend over τ rows
    plain = [11 / (50.0 + 10 * 10.0), 21 / (100.0 + 20 * 10.0)]
    spec = [11 / (50.0 + 10 / 1.2 * step(1.2) + (5.0 - cost.draft_ms(1.2))),
            21 / (100.0 + 20 / 1.8 * step(1.8) + (8.0 - cost.draft_ms(1.8)))]
    got = answers_speedup(cost, chain, [10, 20], [11, 21], [1.2, 1.8])
    assert got == pytest.approx(sum(spec) / sum(plain))
    pooled = answers_speedup(cost, chain, [10, 20], [11, 21], [1.5, 1.5])
    assert got != pytest.approx(pooled)  # each answer at its own τ: a pooled τ is another prediction
    assert 1 < pooled < cost.predict(chain, 1.5).speedup  # the prefill is not shortened: below the steps' own
    with pytest.raises(ValueError, match="one output length and one τ per prompt"):
        answers_speedup(cost, chain, [10, 20], [11, 21], [1.5])


def test_a_curve_without_a_bend_says_so_with_its_last_size():
    flat = curve((1, 2, 4, 8), (10.0, 10.1, 10.2, 10.3))
    assert takeaways.bend_sentence(flat).startswith("The cost never starts to follow N within 8 tokens")
    knee = curve((1, 2, 4, 8, 16), (10.0, 10.1, 10.2, 20.0, 40.0))
    assert takeaways.bend_sentence(knee).startswith("From N = 4 on")


def test_the_step_cost_at_other_threads_is_read_from_the_cache_never_measured(tmp_path, monkeypatch):
    from workbench.cache_file import add_entry
    from workbench.lessons.predictions import cached_at_threads
    from workbench.measure import step_cost as sc

    here = "CPU | torch 2 | 1 threads | fp32 | target 30x576 vocab 49152 | head 10 params | linear a/b fused"
    monkeypatch.setattr(sc, "_cache_key", lambda wb, source: here)
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    entry = lambda ms: {"verify": [[n, ms * (1 + n / 64)] for n in sc.VERIFY_SIZES],  # noqa: E731
                        "draft": [[r, 1.0] for r in sc.DRAFT_ROWS], "overhead": {}, "measured": f"{ms}",
                        "overhead_timing": sc.OVERHEAD_TIMING}
    path = tmp_path / sc.CACHE_FILE
    add_entry(path, here, value=entry(60.0), tag="[test]", what="a step cost")
    assert cached_at_threads(None, None, 2) is None  # only this process's threads are cached: nothing measured
    add_entry(path, here.replace("1 threads", "2 threads").replace("linear a/b", "linear c/d"), value=entry(45.0),
              tag="[test]", what="a step cost")
    add_entry(path, here.replace("1 threads", "2 threads").replace("fp32", "bf16"), value=entry(30.0), tag="[test]",
              what="a step cost")
    two = cached_at_threads(None, None, 2)
    assert two is not None and two.verify_ms(1) == pytest.approx(45.0 * (1 + 1 / 64))  # its own order, same dtype
    assert cached_at_threads(None, None, 1).verify_ms(1) == pytest.approx(60.0 * (1 + 1 / 64))


def test_the_structure_sentence_says_which_tree_loses_more_steps_to_what_it_left_undrafted():
    dynamic = {"budget": 1, "frontier": 1, "draft": 6, "depth": 2}
    static = {"shape": 5, "draft": 4, "depth": 1}
    assert takeaways.stop_shares(dynamic) == {"structure": 0.2, "depth": 0.2, "draft": 0.6}
    said = takeaways.structure_sentence(8, dynamic, static)
    assert "at 20% of its 10 steps" in said and "at 50% of 10: fewer stops" in said
    assert ": more stops" in takeaways.structure_sentence(8, static | {"budget": 9}, dynamic)
    assert takeaways.stop_shares({}) == {"structure": 0.0, "depth": 0.0, "draft": 0.0}


def test_the_causes_point_to_widening_or_deepening():
    said = takeaways.widen_or_deepen_sentence("lower half", {"width": 3, "frontier": 1, "depth": 2, "draft": 4})
    assert "of 10 steps, 40% stopped where a wider tree" in said and "20% at the last level" in said
    assert said.endswith("point to widening.")
    assert takeaways.widen_or_deepen_sentence("x", {"depth": 5, "budget": 1}).endswith("point to deepening.")
    assert takeaways.widen_or_deepen_sentence("x", {}) == "x: no speculative step."


def test_the_readme_record_is_the_one_its_table_block_names(tmp_path, monkeypatch):
    import json
    import re
    from pathlib import Path

    from workbench.lessons import predictions

    root = Path(__file__).resolve().parents[1]
    named = re.search(r"<!-- bench-table (\S+) -->", (root / "README.md").read_text()).group(1)
    assert predictions.readme_record() == named and (root / named).exists()
    assert predictions.record_threads() == json.loads((root / named).read_text())["meta"]["machine"]["torch_threads"]


def test_the_same_work_timed_twice_is_level_or_said_as_a_difference_not_a_gain():
    from workbench.timing import Spread

    level = takeaways.same_work_sentence(Spread(1.06, 0.97, 1.18, 3), "prefill")
    assert level == "1.06× per round, paired, range 0.97–1.18: level within noise, as the same prefill should be"
    apart = takeaways.same_work_sentence(Spread(1.06, 1.02, 1.18, 3), "prefill")
    assert apart.startswith("1.06× per round, paired, range 1.02–1.18: faster in every round, though the prefill")
    assert "not as a gain" in apart
    assert "slower in every round" in takeaways.same_work_sentence(Spread(0.9, 0.85, 0.95, 3), "prefill")
