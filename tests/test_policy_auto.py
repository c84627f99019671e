"""The ``auto`` policy (``engine/policy/auto.py``) with made-up step costs, so nothing here is timed: it
speculates when a verify is cheap and decodes plainly when it is dear, says why with numbers,
switches off and on as requests come and go without changing a greedy output, explores a
setting that lost early, and a bad candidate is one clear error."""

import pytest

from helpers import alone_outputs, random_prompts, tiny_pair
from workbench.engine.policy.auto import PRIOR_ACCEPT, Auto, Evidence, StepCost, prior_tokens
from workbench.engine.engine import Engine
from workbench.engine.policy import OFF, Choice, parse_policy, parse_setting
from workbench.engine.request import Request

MAX_NEW = 12
FLAT = StepCost(verify=((1, 10.0), (256, 11.0)), draft=((1, 0.1), (64, 0.2)))  # a GPU-like verify: tokens are free
STEEP = StepCost(verify=((1, 10.0), (2, 20.0), (256, 2560.0)))  # every token costs a decode step: speculation never pays
# Cheap up to 4 tokens (batch 1 under eagle2:4/3/2), dear past them: one request speculates, three do not.
KNEE = StepCost(verify=((1, 10.0), (4, 11.0), (8, 80.0), (256, 2560.0)))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny_auto"))


@pytest.fixture(scope="module")
def prompts():
    return random_prompts(4, 16, seed=5)


@pytest.fixture(scope="module")
def reference(pair, prompts):
    return alone_outputs(pair[0], prompts, MAX_NEW)


def test_step_cost_reads_the_points_as_measured():
    cost = StepCost(verify=((1, 10.0), (2, 8.0), (4, 20.0)))  # a dip at 2 (one row's slower BLAS path) is kept
    assert cost.verify_ms(1) == 10.0 and cost.verify_ms(2) == 8.0
    assert cost.verify_ms(3) == pytest.approx(14.0) and cost.verify_ms(8) == pytest.approx(44.0)  # last slope on
    assert cost.draft_ms(4) == 0.0  # no draft points: no draft forward (the n-gram lookup)
    tree = parse_setting("eagle2:4/3/2")  # verify 2 x 4 tokens; draft 2 rows, then 2 levels of 2 x 2
    assert FLAT.step_ms(tree, 2) == pytest.approx(FLAT.verify_ms(8) + FLAT.draft_ms(2) + 2 * FLAT.draft_ms(4))
    assert FLAT.step_ms(OFF, 3) == FLAT.verify_ms(3)
    with pytest.raises(ValueError, match="sizes must increase"):
        StepCost(verify=((4, 1.0), (2, 2.0)))
    with pytest.raises(ValueError, match="at least one verify point"):
        StepCost(verify=())


def _given(text: str, cost: StepCost) -> Auto:
    """``auto`` on made-up curves taken as they are (no correction by the tiny model's own clock)."""
    auto = parse_policy(text, cost=cost)
    auto.correct = False
    return auto


def _choices(records) -> list[str]:
    return [r.policy.choice for r in records if r.kind != "prefill"]


@pytest.mark.parametrize("cost,speculates", [(FLAT, True), (STEEP, False)])
def test_auto_speculates_only_where_the_verify_is_cheap(pair, prompts, reference, cost, speculates):
    target, head = pair
    eng = Engine(target, head, policy=_given("auto", cost), trace=True)
    eng.add_requests(prompts, MAX_NEW)
    records = []
    while not eng.done:
        records += eng.step_records()
    labels = _choices(records)
    assert any(c != "off" for c in labels) == speculates and (speculates or set(labels) == {"off"})
    assert [r.output_ids for r in eng.requests] == reference
    reason = next(r.policy.reason for r in records if r.kind != "prefill")
    assert "tok/step" in reason and " ms = " in reason and "tok/s > " in reason  # why, in numbers


def test_auto_goes_off_and_on_as_the_batch_moves_and_outputs_stay_plain(pair, prompts, reference):
    """One request alone speculates; three others join and the verify past 4 tokens is dear, so
    the step goes plain; they finish, and the first speculates again (its draft caught up)."""
    target, head = pair
    eng = Engine(target, head, policy=_given("auto:eagle2:4/3/2", KNEE), kv_slots=4096, trace=True)
    first = eng.submit(prompts[0], MAX_NEW)
    records = []
    for _ in range(3):
        records += eng.step_records()
    others = [eng.submit(p, 3) for p in prompts[1:]]
    while not eng.done:
        records += eng.step_records()
        eng.check_integrity()
    kinds = [r.kind for r in records if r.request == first.rid]
    runs = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert "spec" in runs and runs[runs.index("spec"):][:3] == ["spec", "decode", "spec"], runs
    assert first.output_ids == reference[0]
    assert [r.output_ids for r in others] == [ref[:3] for ref in reference[1:]]
    assert eng.table.allocator.num_free == eng.table.allocator.num_slots


def _request(rid: int, accepted: list[int]) -> Request:
    return Request(rid, [1, 2], max_new_tokens=100, output_ids=[5] * (1 + sum(accepted)), accept_lengths=accepted)


def test_estimates_start_at_the_prior_learn_and_fade_back():
    tree = parse_setting("eagle2:4/3/2")  # 3 levels, 3 drafts at most
    auto = Auto((tree,), cost=FLAT)
    r = _request(0, [])
    prior = 1 + PRIOR_ACCEPT + PRIOR_ACCEPT ** 2 + PRIOR_ACCEPT ** 3
    assert auto.expected_tokens(tree, [r]) == pytest.approx(prior) == prior_tokens(tree)  # nothing seen yet
    for _ in range(6):  # it accepts nothing: one token per step
        r.accept_lengths.append(1)
        auto.observe(Choice("auto", tree, ""), [r])
    learned = auto.expected_tokens(tree, [r])
    assert 1 < learned < 1.5
    for _ in range(3 * auto.horizon):  # off runs meanwhile: the request's own evidence fades to the pooled
        auto.observe(Choice("auto", OFF, ""), [r])
    recent = auto.expected_tokens(tree, [r])
    assert learned < recent < 1 + 0.5 * (prior - 1)  # under halfway back: not retried after a few dozen steps
    assert recent == pytest.approx(auto.pooled[tree].mean(prior, auto.prior_steps), abs=0.03)
    for _ in range(3 * auto.memory):  # a few hundred steps more: the pooled evidence has faded towards the prior
        auto.observe(Choice("auto", OFF, ""), [r])
    assert auto.expected_tokens(tree, [r]) > 1 + 0.5 * (prior - 1)  # over halfway back: it would be tried again
    assert Evidence(4.0, 2.0).mean(prior=6.0, weight=1.0) == pytest.approx(10 / 3)


def test_the_prior_reaches_only_the_levels_a_walk_can():
    assert prior_tokens(parse_setting("linear:1")) == pytest.approx(1 + PRIOR_ACCEPT)
    assert prior_tokens(parse_setting("eagle2:3/5/4")) == pytest.approx(1 + PRIOR_ACCEPT + PRIOR_ACCEPT ** 2)  # 2 drafts


class Clock:
    """A clock the test moves: each step takes ``ms[spec label]``."""

    def __init__(self):
        self.now, self.ms = 0.0, {}

    def __call__(self) -> float:
        return self.now


def _step(auto: Auto, clock: Clock, batch: list[Request], took_ms: dict[str, float]) -> str:
    choice = auto.choose(batch)
    clock.now += took_ms[choice.label] / 1e3
    if choice.spec.speculative:
        for r in batch:
            r.accept_lengths.append(2)
    auto.observe(choice, batch)
    return choice.label


def test_the_steps_own_clock_corrects_the_curves():
    """The curves say a tree step costs what a plain one does (FLAT): a tree wins on paper. Its
    steps really take four times as long, plain ones what the curves say, so once both were
    timed it goes off, with the correction in its reason."""
    tree = parse_setting("eagle2:4/3/2")
    clock = Clock()
    auto = Auto((tree,), cost=FLAT, clock=clock)
    batch = [_request(0, [])]
    took = {"eagle2:4/3/2": 4 * FLAT.step_ms(tree, 1), "off": FLAT.step_ms(OFF, 1)}
    labels = [_step(auto, clock, batch, took) for _ in range(6)]
    assert labels[0] == "eagle2:4/3/2" and labels[-1] == "off", labels
    # the prediction drafts the extend over the τ auto expects, a hair dearer than one row's: ~4,
    # less what drifted towards plain decoding's overhead (1) over the plain steps since
    drifted = 1 + 3 * (1 - 1 / auto.horizon) ** labels.count("off")
    assert auto.ratio(tree) == pytest.approx(drifted, rel=1e-3) and auto.ratio(OFF) == pytest.approx(1.0)
    assert auto.step_ms(tree, 1) == pytest.approx(drifted * FLAT.step_ms(tree, 1), rel=1e-3)
    still = Auto((tree,), cost=FLAT, clock=clock, correct=False)  # the curves as they are: it speculates on
    assert [_step(still, clock, [_request(1, [])], took) for _ in range(6)] == ["eagle2:4/3/2"] * 6


def test_a_setting_timed_once_in_a_slow_instant_is_tried_again():
    """The curves put plain decoding ahead of a tree that accepts nothing (one token a step for a
    dearer verify). Plain decoding's first step happens to take three times the curves' word, and
    the tree, timed at the curves' word, runs on; but an idle setting's overhead drifts back
    towards the running one's, so plain decoding is timed again within about ``horizon`` steps,
    found at the curves' word, and kept."""
    tree = parse_setting("eagle2:4/3/2")
    cost = StepCost(verify=((1, 10.0), (4, 13.0), (256, 300.0)))
    clock = Clock()
    auto = Auto((tree,), cost=cost, clock=clock)
    batch = [_request(0, [])]
    labels, slow_once = [], True
    for _ in range(60):
        choice = auto.choose(batch)
        ms = cost.step_ms(choice.spec, 1, 1.0)
        if not choice.spec.speculative and slow_once:
            ms, slow_once = 3 * ms, False
        clock.now += ms / 1e3
        if choice.spec.speculative:
            batch[0].accept_lengths.append(1)
        auto.observe(choice, batch)
        labels.append(choice.label)
    first_off = labels.index("off")
    assert "eagle2:4/3/2" in labels[first_off:first_off + 2], labels  # the slow plain step sent it back to the tree
    assert labels[-10:] == ["off"] * 10, labels
    # the gap of 2 (3x against 1x) shrinks by 1/horizon a step; plain decoding runs again once
    # it is under 0.18 (the tree's 1.3x dearer verify, and the 10 % a replacement must promise):
    # after horizon * ln(2 / 0.18), about 2.4 horizons
    assert labels.index("off", first_off + 1) - first_off <= 3 * auto.horizon, labels
    assert auto.overhead(OFF) == pytest.approx(auto.overhead(tree), rel=0.2)


def test_a_slower_machine_slows_every_setting_alike():
    """A tree that wins with its true overhead (1.2x the curves) runs on when the whole machine
    turns twice as slow for a while: the pace takes the slowdown, the tree's overhead stays, and
    plain decoding (never timed) does not start to look cheaper than the tree."""
    tree = parse_setting("eagle2:4/3/2")
    clock = Clock()
    auto = Auto((tree,), cost=FLAT, clock=clock)
    batch = [_request(0, [])]
    base = {"eagle2:4/3/2": 1.2 * FLAT.step_ms(tree, 1), "off": FLAT.step_ms(OFF, 1)}
    quick = [_step(auto, clock, batch, base) for _ in range(10)]
    slow = [_step(auto, clock, batch, {k: 2 * ms for k, ms in base.items()}) for _ in range(30)]
    assert set(quick + slow) == {"eagle2:4/3/2"}, quick + slow
    assert auto.overhead(tree) == pytest.approx(1.2, rel=0.05) and auto.pace == pytest.approx(2.0, rel=0.05)  # ~3 %
    assert auto.step_ms(tree, 1) == pytest.approx(2 * base["eagle2:4/3/2"], rel=0.05)


@pytest.mark.parametrize("size,better,moves", [(1, 1.03, False), (1, 1.06, False), (1, 1.25, True),
                                               (8, 1.03, False), (8, 1.06, True)])
def test_the_last_setting_stays_unless_another_promises_clearly_more(size, better, moves):
    """A chain ran last step; a tree that promises 3 % more does not replace it (the estimates
    move by more than that from step to step), one that promises 25 % more does. For a batch of
    8 the margin is 10 % / sqrt(8), 3.5 %: the tokens a step is expected to emit are a sum over 8
    requests, which moves less, and a tree that promises 6 % more replaces the chain there but
    not at one request."""
    chain, tree = parse_setting("linear:1"), parse_setting("eagle2:4/3/2")
    auto = Auto((chain, tree), cost=FLAT, clock=Clock())
    auto.last, auto.overheads[chain] = chain, 1.0  # the chain ran, and was timed
    batch = [_request(i, []) for i in range(size)]
    want = better * auto.expected_tokens(chain, batch) / size * auto.step_ms(tree, size) / auto.step_ms(chain, size)
    auto.pooled[tree] = Evidence(tokens=want * 1e4, steps=1e4)  # evidence enough to outweigh the prior
    choice = auto.choose(batch)
    assert choice.spec == (tree if moves else chain)
    margin = {1: "10.0%", 8: "3.5%"}[size]
    assert (f"stays: within {margin}" in choice.reason) != moves, choice.reason


def test_a_step_that_runs_a_prompt_through_the_draft_is_not_timed():
    """A newcomer's first speculative step also extends the draft over its whole prompt: that
    step's time says nothing about the setting, so neither its overhead nor the pace moves."""
    tree = parse_setting("eagle2:4/3/2")
    clock = Clock()
    auto = Auto((tree,), cost=FLAT, clock=clock)
    newcomer = _request(0, [])
    newcomer.pending_tokens = list(range(300))  # its prompt's pairs, pending since the prefill
    took = {"eagle2:4/3/2": 9 * FLAT.step_ms(tree, 1), "off": FLAT.step_ms(OFF, 1)}
    assert _step(auto, clock, [newcomer], took) == "eagle2:4/3/2"
    assert tree not in auto.overheads and auto.pace == 1.0
    newcomer.pending_tokens = [7, 8]  # an ordinary step after it: timed
    assert _step(auto, clock, [newcomer], {**took, "eagle2:4/3/2": 1.2 * FLAT.step_ms(tree, 1)}) == "eagle2:4/3/2"
    assert auto.overhead(tree) == pytest.approx(1.2, rel=1e-3)  # against the prediction at the τ expected


def test_no_request_is_expected_to_write_past_its_end():
    tree = parse_setting("eagle2:8/5/4")
    r = Request(0, [1], max_new_tokens=3, output_ids=[5, 6])
    assert Auto((tree,), cost=FLAT).expected_tokens(tree, [r]) == 1


@pytest.mark.parametrize("text,message", [
    ("auto:bogus", r"auto:bogus: unknown method 'bogus'"),
    ("auto:off", r"auto needs one or more speculative settings"),
    ("auto:linear:2,linear:2@ngram", r"must share one draft source"),
])
def test_bad_auto_candidates_are_one_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policy(text)


def test_auto_without_a_cost_says_how_to_get_one():
    auto = parse_policy("auto")
    assert [s.name for s in auto.settings()] == ["vanilla", "linear:1", "eagle2:4/3/2", "eagle2:8/5/4"]
    with pytest.raises(ValueError, match="measured step cost, and none was given"):
        auto.choose([_request(0, [])])


# ---- at 8 requests, with the step cost of docs/bench/archive/load-cpu-avx2-2026-12-06-1800.md -------------------
# The curves that record's ``auto`` weighed by, (tokens or rows, ms): given, nothing is timed here.
RECORD_VERIFY = ((1, 49.9), (2, 53.2), (4, 56.3), (8, 71.8), (16, 83.9), (32, 117.0), (64, 235.4))
RECORD_DRAFT = ((1, 3.0), (2, 3.8), (4, 2.8), (8, 4.4), (16, 5.4), (64, 11.7))
# What it measured at 8 requests in flight: TPOT p50 ms, τ, mean running batch (off: 44.9 tok/s, linear:1: 40.8)
OFF_AT_8 = dict(tpot=113.0, tau=1.0, batch=7.62)
LINEAR_AT_8 = dict(tpot=135.0, tau=1.40, batch=6.72)


def _per_request(forwards: StepCost, spec, measured: dict) -> float:
    """The overhead per request (none per step) that makes ``spec``'s step, at the measured mean
    batch and τ, take what was measured: a step emits τ tokens a request, one every TPOT."""
    step = measured["tpot"] * measured["tau"]
    return (step - forwards.step_ms(spec, measured["batch"], measured["tau"])) / measured["batch"]


def test_at_eight_requests_auto_weighs_the_step_cost_alone_and_picks_off_where_off_measured_faster():
    from workbench.cost_model import Overhead

    chain = parse_setting("linear:1")
    forwards = StepCost(RECORD_VERIFY, RECORD_DRAFT)
    plain, spec = _per_request(forwards, OFF, OFF_AT_8), _per_request(forwards, chain, LINEAR_AT_8)
    cost = StepCost(RECORD_VERIFY, RECORD_DRAFT, overhead=Overhead(plain_per_request=plain, spec_per_request=spec))
    assert cost.plain_ms(OFF_AT_8["batch"]) == pytest.approx(113.0)  # the overhead reproduces the record
    batch = [Request(rid, [1, 2], max_new_tokens=48) for rid in range(8)]
    auto = parse_policy("auto", cost=cost)  # the steps' clock on, as a load runs it: no step timed yet
    scored = auto.rates(batch)
    assert [s for s, _, _ in scored] == [OFF, *auto.candidates]
    for s, tokens, ms in scored:  # every candidate priced by StepCost and nothing else
        assert ms == cost.step_ms(s, 8, tokens / 8)
    assert auto.choose(batch).spec == OFF
    # the choice is the measured overhead's: were a speculative step's no dearer per request than
    # a plain one's, the chain of one would win at 8
    cheap = StepCost(RECORD_VERIFY, RECORD_DRAFT, overhead=Overhead(plain_per_request=plain, spec_per_request=plain))
    assert parse_policy("auto", cost=cheap).choose(batch).spec == chain


def test_a_tree_filled_in_part_is_priced_at_the_verify_its_steps_ran():
    """The n-gram lookup proposes only what matches: a 4/3/2 step that verified two tokens a request
    is priced at verify(2), not verify(4), once seen; idle, the estimate goes back to the full tree."""
    tree = parse_setting("eagle2:4/3/2@ngram")
    auto = Auto((tree,), cost=KNEE)
    r = _request(0, [])
    assert auto.expected_nodes(tree) == 4.0 and auto.expected_nodes(OFF) is None  # nothing seen: the full tree
    assert auto.step_ms(tree, 1) == pytest.approx(KNEE.step_ms(tree, 1))
    for _ in range(12):  # each step put one draft to the target: root + 1
        r.accept_lengths.append(1)
        r.drafts_verified.append(1)
        auto.observe(Choice("auto", tree, ""), [r])
    seen = auto.expected_nodes(tree)
    assert seen == pytest.approx((4 * 4.0 + 12 * 2.0) / (4 + 12))  # 12 steps of 2 against the prior's 4 steps of 4
    assert auto.step_ms(tree, 1) == pytest.approx(KNEE.step_ms(tree, 1, nodes=seen))
    assert KNEE.step_ms(tree, 1, nodes=seen) < KNEE.step_ms(tree, 1)
    for _ in range(3 * auto.horizon):  # off runs meanwhile: still what the run saw of it
        auto.observe(Choice("auto", OFF, ""), [r])
    assert auto.expected_nodes(tree) < 3.0
    for _ in range(3 * auto.memory):  # and, far slower, back towards the full tree
        auto.observe(Choice("auto", OFF, ""), [r])
    assert auto.expected_nodes(tree) > 3.0


def test_auto_prices_the_context_its_running_requests_read():
    """With a context term (``StepCost.kv``), the same batch of 8 costs more a step when its
    requests hold long prompts, by the cost model's own ``context_ms``, for plain decoding and the
    tree alike; a longer context so favours the setting that emits more a step."""
    from dataclasses import replace

    tree = parse_setting("eagle2:4/3/2")
    cost = replace(FLAT, kv=((1, 0.01),), prefix=128.0)  # one point: every count of new tokens alike
    auto = Auto((tree,), cost=cost)
    short = [Request(rid, [1] * 128, max_new_tokens=48) for rid in range(8)]
    long = [Request(rid, [1] * 640, max_new_tokens=48) for rid in range(8)]
    by_short = {s: ms for s, _, ms in auto.rates(short)}
    by_long = {s: ms for s, _, ms in auto.rates(long)}
    for s in (OFF, tree):
        assert by_long[s] - by_short[s] == pytest.approx(cost.context_ms(8, 640) - cost.context_ms(8, 128))
    assert cost.context_ms(1, 128) == 0.0 and cost.context_ms(8, 128) > 0  # the curve read one prefix, a batch eight


def test_a_first_step_faster_than_the_curves_is_the_machines_pace():
    """Curves measured in a slow spell: every step now takes 0.6x their word. The run's first timed
    step (the chain's, ahead on paper by its prior) sets the pace, not the chain's overhead, so
    plain decoding, never timed, is priced at the same pace; once the chain is seen to accept
    nothing, plain decoding runs. Taken as the chain's own overhead, the 0.6 made it look cheaper
    than plain decoding's untimed curves and it ran on every step."""
    chain = parse_setting("linear:1")
    cost = StepCost(verify=((1, 10.0), (2, 12.0), (256, 300.0)))  # no draft points: a free draft
    clock = Clock()
    auto = Auto((chain,), cost=cost, clock=clock)
    r = _request(0, [])
    labels = []
    for _ in range(16):
        choice = auto.choose([r])
        clock.now += 0.6 * cost.step_ms(choice.spec, 1) / 1e3
        if choice.spec.speculative:
            r.accept_lengths.append(1)  # the draft is always rejected: the bonus token alone
        auto.observe(choice, [r])
        labels.append(choice.label)
    assert labels[0] == "linear:1" and labels[-1] == "off", labels
    assert auto.pace == pytest.approx(0.6, rel=0.05) and auto.overhead(chain) == pytest.approx(1.0, rel=0.05)
    slow = Auto((chain,), cost=cost, clock=Clock())
    slow._time(chain, took_ms=2 * 12.0, predicted_ms=12.0)  # a first step slower than the curves: its overhead
    assert slow.pace == 1.0 and slow.overhead(chain) == 2.0


@pytest.mark.parametrize("size,better,speculates", [(1, 1.05, False), (1, 1.2, True), (8, 1.02, False),
                                                    (8, 1.05, False), (8, 1.2, True)])
def test_a_near_tie_with_plain_decoding_goes_to_plain_decoding(size, better, speculates):
    """A chain that promises only a little more than plain decoding (within ``plain``, 10 %, at
    every batch: unlike the margin between two settings it does not shrink with the batch) does
    not run, even where it ran last: speculation costs a batch what no step's price holds (its
    requests finish apart, so fewer prompts share a prefill step); one that promises clearly more
    does."""
    chain = parse_setting("linear:1")
    auto = Auto((chain,), cost=FLAT, clock=Clock())
    auto.last, auto.overheads[chain], auto.overheads[OFF] = chain, 1.0, 1.0  # the chain ran, both were timed
    batch = [_request(i, []) for i in range(size)]
    want = better * auto.step_ms(chain, size) / auto.step_ms(OFF, size)  # tokens a request, for `better` x off's rate
    auto.pooled[chain] = Evidence(tokens=want * 1e4, steps=1e4)
    choice = auto.choose(batch)
    assert choice.spec == (chain if speculates else OFF), choice.reason
    margin = "10.0%"
    assert (f"plain: speculation within {margin}" in choice.reason) != speculates, choice.reason


@pytest.mark.parametrize("field", ["stay", "plain"])
def test_a_negative_margin_is_refused_with_its_name(field):
    with pytest.raises(ValueError, match="stay and plain are shares"):
        Auto((parse_setting("linear:1"),), cost=FLAT, **{field: -0.1})


def test_a_speculative_step_is_charged_the_catch_up_its_requests_owe_a_steps_share():
    """A newcomer owes the draft its prompt (the catch-up curve beyond a step's extend), a request
    after plain steps the pairs they decoded (the draft curve beyond a step's), one that
    speculated last step nothing; each spread over the steps the request has left."""
    cost = StepCost(verify=((1, 10.0), (2, 11.0), (256, 300.0)), draft=((1, 1.0), (4, 1.0), (16, 2.0), (64, 5.0)),
                    catch_up=((32, 6.0), (512, 30.0)))
    auto = Auto((parse_setting("linear:1"),), cost=cost, clock=Clock())
    newcomer = Request(0, [1] * 512, max_new_tokens=41, output_ids=[5], pending_tokens=[1] * 512)
    behind = Request(1, [1, 2], max_new_tokens=41, output_ids=[5] * 11, pending_tokens=[1] * 16)
    caught_up = Request(2, [1, 2], max_new_tokens=41, output_ids=[5] * 11, pending_tokens=[1])
    tau = 2.0  # 40 tokens left: 20 steps; 30 left: 15 steps
    assert auto.owed_ms([newcomer], tau) == pytest.approx((30.0 - 1.0) / 20)
    assert auto.owed_ms([behind], tau) == pytest.approx((2.0 - 1.0) / 15)
    assert auto.owed_ms([caught_up], tau) == 0.0
    assert auto.owed_ms([newcomer, behind, caught_up], tau) == pytest.approx(29.0 / 20 + 1.0 / 15)
    auto.pace = 2.0  # a machine running slow: the catch-up, a draft forward, at its pace
    assert auto.owed_ms([behind], tau) == pytest.approx(2 * 1.0 / 15)


@pytest.mark.parametrize("owes", [False, True])
def test_what_a_newcomer_owes_the_draft_can_tip_a_near_tie_to_plain_decoding(owes):
    """A chain 12 % ahead of plain decoding by its step runs; the same chain for a newcomer whose
    long prompt the draft must first catch up on, with few tokens left to repay it, does not."""
    chain = parse_setting("linear:1")
    cost = StepCost(verify=((1, 10.0), (2, 12.0), (256, 300.0)), draft=((1, 0.5), (64, 2.0)),
                    catch_up=((32, 2.0), (512, 20.0)))
    auto = Auto((chain,), cost=cost, clock=Clock())
    auto.overheads[chain] = auto.overheads[OFF] = 1.0
    want = 1.12 * auto.step_ms(chain, 1, 1.5) / auto.step_ms(OFF, 1)  # tokens a step for 1.12x off's rate
    auto.pooled[chain] = Evidence(tokens=want * 1e4, steps=1e4)
    r = Request(0, [1] * 512, max_new_tokens=12, output_ids=[5], pending_tokens=[1] * 512 if owes else [5])
    choice = auto.choose([r])
    assert choice.spec == (OFF if owes else chain), choice.reason
