"""Draft routes side by side (notebook 10): the same tree, verify and walk, with drafts from the
EAGLE head, an n-gram lookup in the request's own tokens, the target's own first N layers, or a
separate draft model.

``run_route`` decodes prompts one at a time (batch 1) and keeps every trace; ``exit_sweep``
measures, for a chain of γ drafts from ``exit:N``, what Leviathan et al.'s α/c model needs: the
acceptance rate α (fitted on half the steps, ``chain_model``), the draft's cost c against a decode
step (medians of the traces' own phase timings), τ, and the speedup over plain decoding measured
and predicted by the cost model (``StepCost.predict`` at the measured τ, the exit's draft cost
derived from the one measured verify curve: ``predictions.with_draft``); ``exit_sweep_figure``
draws the sweep. ``random_draft_model`` builds the one draft model a notebook can run on the
shipped target: none ships (see its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons import smoke
from workbench.lessons.chain_model import held_out_check
from workbench.metrics import traces_tau
from workbench.viz.style import OKABE_ITO, base_layout


@dataclass
class RouteRun:
    """One configuration over a prompt set: its traces, outputs and what they add up to."""

    spec: SpecConfig
    traces: list[list[dict]]  # per prompt, every step (prefill first)
    outputs: list[list[int]]

    @property
    def steps(self) -> list[dict]:
        """The decode or verify steps of every prompt (the prefills left out)."""
        return [t for run in self.traces for t in run if t["kind"] != "prefill"]

    @property
    def tau(self) -> float:
        return traces_tau(self.steps) if self.spec.speculative else 1.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens over the summed phase times of the steps (prefill excluded)."""
        ms = sum(sum(t["timing_ms"].values()) for t in self.steps)
        return 1e3 * sum(len(t["emitted"]) for t in self.steps) / ms

    def phase_ms(self, *phases: str) -> float:
        """Median over steps of the summed ``timing_ms`` of ``phases``."""
        return median(sum(t["timing_ms"].get(p, 0.0) for p in phases) for t in self.steps)

    def equal(self, reference: "RouteRun") -> int:
        """How many prompts emitted exactly the reference's tokens."""
        return sum(a == b for a, b in zip(self.outputs, reference.outputs, strict=True))


def run_route(wb, spec: SpecConfig, prompts: list[list[int]], max_new: int) -> RouteRun:
    """Greedy decoding of each prompt alone with ``spec``, traced (fewer new tokens at smoke size,
    ``workbench.lessons.smoke``)."""
    max_new = smoke.new_tokens(max_new)
    traces, outputs = [], []
    for ids in prompts:
        steps: list[dict] = []
        (req,), _ = wb.generate([ids], spec, SamplingParams(), max_new, trace_sink=steps.append)
        traces.append(steps)
        outputs.append(list(req.output_ids))
    return RouteRun(spec, traces, outputs)


def exit_sweep(wb, layers: list[int], prompts: list[list[int]], gamma: int, max_new: int, cost,
               vanilla: RouteRun | None = None) -> list[dict]:
    """Per N in ``layers``: a chain of ``gamma`` drafts from ``exit:N`` on ``prompts``, with α,
    c, τ and the measured speedup over ``vanilla`` (run here when not given), beside the speedup
    ``cost`` (this machine's ``StepCost``) predicts at the measured τ."""
    from workbench.engine.drafts.exit import ExitSource
    from workbench.lessons.predictions import with_draft

    vanilla = vanilla or run_route(wb, SpecConfig("vanilla"), prompts, max_new)
    decode_ms = vanilla.phase_ms("decode_ms", "logits_ms")
    rows = []
    for n in layers:
        spec = SpecConfig.from_knobs("linear", num_steps=gamma, draft=f"exit:{n}")
        run = run_route(wb, spec, prompts, max_new)
        fit = held_out_check([len(t["accept"]["path"]) for t in run.steps], gamma)  # the walk's, cut or not
        draft_ms = run.phase_ms("draft_extend_ms", "draft_tree_ms")
        rows.append({"layers": n, "alpha": fit.alpha, "c": draft_ms / gamma / decode_ms, "tau": run.tau,
                     "tau_predicted": fit.predicted, "speedup": run.tokens_per_s / vanilla.tokens_per_s,
                     "speedup_predicted": with_draft(cost, wb, ExitSource(n)).predict(spec, run.tau).speedup,
                     "equal": run.equal(vanilla), "prompts": len(prompts)})
    return rows


def exit_sweep_figure(rows: list[dict], gamma: int, dtype: str, num_layers: int, height: int = 420):
    """``exit_sweep`` rows as two panels over the layers the draft runs: left, the speedup over
    plain decoding, measured and predicted, with plain decoding's 1×; right, the acceptance rate
    α and the draft's cost c (one draft forward over a decode step), with c = 1. Two panels, not
    a second axis laid over the first: each has its own scale and gridlines, and both start at
    0, so a point's height reads as its value. Nothing is written beside the points."""
    from plotly.subplots import make_subplots

    layers = [r["layers"] for r in rows]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("speedup over plain decoding (×)", "acceptance rate α and draft cost c"))
    fig.update_annotations(font_size=12)  # the two panel titles, under the figure's own
    fig.add_scatter(x=layers, y=[r["speedup"] for r in rows], mode="lines+markers", name="measured speedup",
                    line=dict(color=OKABE_ITO["blue"]), meta="speedup", row=1, col=1)
    fig.add_scatter(x=layers, y=[r["speedup_predicted"] for r in rows], mode="lines+markers",
                    name="speedup predicted from α and c", line=dict(color=OKABE_ITO["orange"], dash="dash"),
                    meta="predicted", row=1, col=1)
    fig.add_scatter(x=layers, y=[r["alpha"] for r in rows], mode="lines+markers", name="acceptance rate α",
                    line=dict(color=OKABE_ITO["bluish_green"]), meta="alpha", row=1, col=2)
    fig.add_scatter(x=layers, y=[r["c"] for r in rows], mode="lines+markers",
                    name="draft cost c (one draft forward / a decode step)",
                    line=dict(color=OKABE_ITO["vermillion"], dash="dot"), meta="c", row=1, col=2)
    left_top = 1.1 * max(1.0, *(r[k] for r in rows for k in ("speedup", "speedup_predicted")))
    right_top = 1.1 * max(1.0, *(r[k] for r in rows for k in ("alpha", "c")))
    for col, top, what in ((1, left_top, "plain decoding"), (2, right_top, "c = 1: a draft forward costs a decode step")):
        fig.add_hline(y=1, line=dict(color=OKABE_ITO["grey"], dash="dot", width=1), row=1, col=col)
        fig.add_annotation(x=layers[0], y=1, text=what, showarrow=False, xanchor="left", yanchor="bottom",
                           font=dict(size=11, color="#555"), row=1, col=col)
        fig.update_yaxes(range=[0, top], row=1, col=col)
    fig.update_layout(**base_layout(f"A chain of {gamma} drafts from the target's first N layers ({dtype}, batch 1)",
                                    height))
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0),
                      margin=dict(b=130))
    fig.update_xaxes(title=f"layers the draft runs (of {num_layers})", tickvals=layers)
    return fig


def random_draft_model(wb, directory, num_layers: int = 1, hidden_size: int = 64, seed: int = 0):
    """``wb`` with a separate draft model (``model:DIR``) of random weights and the target's
    vocabulary, saved in ``directory``: the same target (not loaded again), the draft loaded
    beside it. Returns (that ``Workbench``, its ``ModelSource``).

    No real draft model ships for the default target: a draft model must share the target's
    tokenizer and be much cheaper than it, and SmolLM2-135M is the smallest model of its family.
    A random draft runs the whole route (its own KV, an extend per step, the tree, the verify,
    the walk) and its output still equals plain decoding; only its acceptance is near zero."""
    from dataclasses import replace

    from workbench.engine.drafts.model import ModelSource
    from workbench.models.linear import apply_linear_order
    from workbench.testing.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(directory, vocab_size=wb.target.config.vocab_size, hidden_size=hidden_size,
                                num_layers=num_layers, seed=seed)
    source = ModelSource(str(path))
    source.check_target(wb.target.config)
    draft = source.load(wb.target)
    apply_linear_order(draft, wb.linear_order)
    return replace(wb, draft=draft, draft_source=source.name), source
