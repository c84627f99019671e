"""Requests that come and go, and a speculation policy per step (``engine/scheduler.py``,
``engine/policy/``): greedy output equals plain decoding for every request whatever arrives,
leaves, waits for room or switches speculation off and on; no slot leaks or is shared; the
head's draft catches up after plain steps; sampling keeps the target's distribution."""

import random

import pytest
import torch

from helpers import LOSSLESS_ALPHA as ALPHA, LOSSLESS_DRAWS, LOSSLESS_PROMPT as PROMPT, LOSSLESS_VOCAB as VOCAB
from helpers import alone_outputs, fresh_prefill, lossless_pvalue, random_prompts, tiny_pair
from workbench.attention.batch import extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.drafts.base import DraftSource
from workbench.engine.drafts.exit import ExitSource
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.ngram import NgramSource
from workbench.engine.engine import Engine
from workbench.engine.policy import OFF, Adaptive, BatchRange, Choice, Off, Schedule, parse_policy
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.models.draft import random_head

SOURCES = {"head": HeadSource(), "ngram": NgramSource(), "exit": ExitSource(1)}
MAX_NEW = 14


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A 3-layer tiny target (exit:1 leaves it two layers) and a head."""
    return tiny_pair(tmp_path_factory.mktemp("tiny_continuous"), num_layers=3)


@pytest.fixture(scope="module")
def prompts():
    return random_prompts(8, 16, seed=21)


@pytest.fixture(scope="module")
def reference(pair, prompts):
    return alone_outputs(pair[0], prompts, MAX_NEW)


class Scripted:
    """A test policy: decode step k runs ``script[k]``; past its end, the last one (``cycle``:
    the script again)."""

    name = "scripted"

    def __init__(self, script: list[SpecConfig], cycle: bool = False):
        self.script, self.cycle, self.calls = script, cycle, 0

    def settings(self) -> tuple[SpecConfig, ...]:
        return tuple(dict.fromkeys(self.script))

    def choose(self, batch: list[Request]) -> Choice:
        k = self.calls % len(self.script) if self.cycle else min(self.calls, len(self.script) - 1)
        spec = self.script[k]
        self.calls += 1
        return Choice(self.name, spec, f"decode step {self.calls}")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        pass


def batch_schedule(source: DraftSource) -> Schedule:
    """Batch 1: a tree, 2: plain decoding, 3 and more: a chain. Requests coming and going move
    the batch size, so running requests switch speculation off and on."""
    return Schedule((BatchRange(1, 1, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=source)), BatchRange(2, 2, OFF),
                     BatchRange(3, None, SpecConfig.linear(3, draft=source))))


def capacity_for(target, head, policy_of, prompts, max_new, fits: int) -> int:
    """A KV capacity that holds the ``fits`` largest worst cases together: the rest must wait."""
    probe = Engine(target, head, policy=policy_of())  # sizes nothing: for slots_needed only
    needs = sorted((probe.slots_needed(len(p), n) for p, n in zip(prompts, max_new)), reverse=True)
    return sum(needs[:fits])


def run_arrivals(eng: Engine, prompts, max_new, seed: int):
    """Submit the prompts in a seeded random order, a seeded random number (0-2) before each
    step; step until everything has run, checking the slots after every step. Returns request
    id -> prompt index, the records, and whether any request ever waited."""
    rng = random.Random(seed)
    queue = list(range(len(prompts)))
    rng.shuffle(queue)
    prompt_of, records, waited = {}, [], False
    while queue or not eng.done:
        for _ in range(min(len(queue), rng.choice([0, 0, 1, 2]))):
            i = queue.pop()
            prompt_of[eng.submit(prompts[i], max_new[i]).rid] = i
        records += eng.step_records()
        eng.check_integrity()
        waited |= bool(eng.waiting)
    return prompt_of, records, waited


def assert_all_slots_back(eng: Engine) -> None:
    a = eng.table.allocator
    assert a.num_free == a.num_slots and not eng.table.tables and not eng.scheduler.reserved
    eng.check_integrity()


@pytest.mark.parametrize("seed", [3, 4])  # seeded scenarios in which some request goes on, off, on
@pytest.mark.parametrize("source", list(SOURCES))
def test_arrivals_departures_and_switches_are_lossless(pair, prompts, reference, source, seed):
    target, head = pair
    rng = random.Random(seed)
    max_new = [rng.randint(1, MAX_NEW) for _ in prompts]  # 1: finished by its prefill
    policy_of = lambda: batch_schedule(SOURCES[source])  # noqa: E731
    cap = capacity_for(target, head, policy_of, prompts, max_new, fits=3)
    eng = Engine(target, head, policy=policy_of(), kv_slots=cap, trace=True)
    prompt_of, records, waited = run_arrivals(eng, prompts, max_new, seed)
    assert waited, "the capacity never made a request wait"
    for r in eng.requests:
        i = prompt_of[r.rid]
        assert r.output_ids == reference[i][: max_new[i]], f"request {r.rid} (prompt {i})"
    assert_all_slots_back(eng)
    # every record names its step's requests and the policy's choice; a prefill runs only newcomers
    kinds: dict[int, list[str]] = {}
    for rec in records:
        assert rec.request in rec.batch and rec.policy.name == "schedule"
        if rec.kind == "prefill":
            assert rec.policy.choice == "prefill" and str(rec.request) in rec.policy.reason
            assert rec.request not in kinds, "a request was prefilled twice, or stepped before its prefill"
        else:
            size, at = len(rec.batch), "" if source == "head" else f"@{SOURCES[source].name}"
            assert rec.policy.choice == ("eagle2:6/3/2" + at if size == 1 else "off" if size == 2 else "linear:3" + at)
            assert rec.policy.reason.startswith(f"batch {size} in ")
            assert rec.kind == ("decode" if size == 2 else "spec")
        kinds.setdefault(rec.request, []).append(rec.kind)
    switched = ["spec", "decode", "spec"]
    assert any(_contains(k, switched) for k in kinds.values()), "no request saw speculation go off and on again"
    assert any(any(r.drafts_accepted) for r in eng.requests), "no draft was ever accepted"


def _contains(seq: list[str], pattern: list[str]) -> bool:
    """Does ``seq`` hold ``pattern`` as a subsequence of its runs (spec ... decode ... spec)?"""
    it = iter(seq)
    return all(any(x == p for x in it) for p in pattern)


@pytest.mark.parametrize("source", list(SOURCES))
def test_on_off_on_mid_request_is_lossless(pair, prompts, reference, source):
    target, head = pair
    on = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=SOURCES[source])
    eng = Engine(target, head, policy=Scripted([on, on, OFF, OFF, OFF, on, OFF, on]))
    eng.add_requests(prompts[:4], MAX_NEW)
    eng.run()
    assert [r.output_ids for r in eng.requests] == reference[:4]
    assert [n == 0 for n in eng.requests[0].drafts_accepted[2:5]] == [True] * 3  # the plain steps drafted nothing
    assert_all_slots_back(eng)


def test_a_fused_head_catches_up_too(pair, prompts, reference):
    """A fused head's pending features are the wide ones (the residual stream beside f_t): the
    plain steps keep those."""
    target, _ = pair
    head = random_head(target, 1, std=0.3, fuse_layers=(0,))
    on = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)
    eng = Engine(target, head, policy=Scripted([on, OFF, OFF, on, OFF, on]))
    eng.add_requests(prompts[:3], MAX_NEW)
    eng.run()
    assert [r.output_ids for r in eng.requests] == reference[:3]


def test_the_head_catches_up_after_plain_steps(pair):
    """After on, off (3 steps), on: the head's KV of every committed position but the pending
    ones equals a fresh head run on a fresh prefill's features: nothing committed while off
    was skipped or written twice."""
    target, head = pair
    on = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)
    eng = Engine(target, head, policy=Scripted([on, on, OFF, OFF, OFF, on, on]))
    eng.add_requests(random_prompts(2, 16, seed=8), 60)
    for step in range(1 + 7):
        eng.step()
        if step == 5:  # after the third plain step: its pairs wait, the draft KV has not moved
            assert all(len(r.pending_tokens) >= 3 and r.draft_length + len(r.pending_tokens) == eng.table.length(r.rid)
                       for r in eng.requests)
    for r in eng.requests:
        seq = r.prompt_ids + r.output_ids[:-1]  # the last output (the next root) has no KV yet
        slots = eng.table.slots(r.rid)
        _, fresh_slots, hidden = fresh_prefill(target, seq)
        dkv = head.new_kv_pool(len(seq))
        head(hidden, extend_batch(tokens=[seq[1:] + [r.output_ids[-1]]], prefix_slots=[[]], new_slots=[fresh_slots],
                                  device="cpu"), dkv)
        done = len(seq) - len(r.pending_tokens)
        assert done == r.draft_length > len(r.prompt_ids) + 3  # the extend after the plain steps ran
        torch.testing.assert_close(eng.draft_kv.k[0][slots[:done]], dkv.k[0][fresh_slots[:done]], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(eng.draft_kv.v[0][slots[:done]], dkv.v[0][fresh_slots[:done]], atol=1e-4, rtol=1e-4)


def test_a_plain_step_copies_none_of_the_earlier_pending_features(pair, prompts, reference):
    """A long run of plain steps under a head: each adds its pair's one feature row beside the
    earlier ones and copies none of them (concatenating them every step made the run quadratic
    in its length); the extend after the run reads them joined, once, and the output is plain
    decoding's."""
    target, head = pair
    on = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)
    eng = Engine(target, head, policy=Scripted([on] + [OFF] * 10 + [on]))
    (r,) = eng.add_requests(prompts[:1], MAX_NEW)
    eng.step()  # the prefill
    eng.step()  # a speculative step: the pending pairs are its root and accepted drafts
    for _ in range(10):
        before = list(r._feature_parts)
        eng.step()
        if r.finished:
            break
        assert len(r._feature_parts) == len(before) + 1 and r._feature_parts[-1].shape[0] == 1
        assert all(now is then for now, then in zip(r._feature_parts, before))  # the earlier rows untouched
        assert sum(p.shape[0] for p in r._feature_parts) == len(r.pending_tokens)
    assert len(r.pending_tokens) > 5  # the run was long enough to tell
    eng.run()
    assert r.output_ids == reference[0]


def test_a_request_that_can_never_fit_is_refused(pair, prompts, reference):
    target, head = pair
    spec = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)
    eng = Engine(target, head, spec, kv_slots=60)
    first = eng.submit(prompts[0], MAX_NEW)
    need = eng.slots_needed(50, MAX_NEW)
    with pytest.raises(ValueError, match=f"needs up to {need} KV slots .* the KV capacity is 60 slots"):
        eng.submit([3] * 50, MAX_NEW)
    with pytest.raises(ValueError, match="capacity is 60 slots"):  # all or nothing: prompts[2] is not queued
        eng.add_requests([prompts[2], [3] * 50], MAX_NEW)
    second = eng.submit(prompts[1], MAX_NEW)
    eng.run()
    assert [r.rid for r in eng.requests] == [first.rid, second.rid] == [0, 1]
    assert [r.output_ids for r in eng.requests] == reference[:2]
    assert_all_slots_back(eng)


def test_add_requests_is_the_one_batch_case(pair, prompts, reference):
    target, head = pair
    spec = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)
    eng = Engine(target, head, spec)
    with pytest.raises(RuntimeError, match="kv_slots"):
        eng.submit(prompts[0], MAX_NEW)
    first = eng.add_requests(prompts[:3], MAX_NEW)
    assert eng.capacity == sum(eng.slots_needed(len(p), MAX_NEW) for p in prompts[:3])  # exactly the batch
    assert eng.running == first and not eng.waiting  # admitted at once: prefilled by the next step
    later = eng.add_requests(prompts[3:5], MAX_NEW)  # the pool is full: they wait for room
    assert eng.waiting == later
    eng.run()
    assert [r.output_ids for r in eng.requests] == reference[:5]
    assert_all_slots_back(eng)


@pytest.mark.parametrize("text, message", [
    ("schedule:1-3=off,3+=linear:2", "overlap: 3\\+ starts inside an earlier range \\(batch 3 would have two"),
    ("schedule:1=off,2+=linear:2,4+=off", "overlap: 2\\+ is open-ended but ranges follow it"),
    ("schedule:1=off,3+=linear:2", "gap: batch 2 has no setting"),
    ("schedule:1=off,4+=linear:2", "gap: batch 2-3 has no setting"),
    ("schedule:2+=linear:2", "gap: batch 1 has no setting"),
    ("schedule:1-4=off", "batches from 5 up have no setting \\(end with an open range, 5\\+\\)"),
    ("schedule:3-1=off,4+=off", "range 3-1 is empty"),
    ("schedule:1=off,2+", "write LO-HI=SETTING"),
    ("schedule:1=eagle2:6/3/2,2+=linear:3@ngram", "share one draft source .*got head, ngram:1-12"),
    ("schedule:1=beam,2+=off", "unknown method 'beam'.*or off"),
    ("adaptive:off,linear:3", "off is no rung"),
    ("sometimes", "unknown speculation policy 'sometimes'"),
    ("fixed", "name one, fixed:NAME"),
])
def test_bad_policies_get_clear_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policy(text)


def test_policy_grammar_and_choices():
    s = parse_policy("schedule:3+=linear:3,1-2=off")
    assert [(r.lo, r.hi) for r in s.ranges] == [(1, 2), (3, None)]  # any order in, sorted
    batch = [Request(i, [3], 4) for i in range(5)]
    assert (s.choose(batch[:2]).label, s.choose(batch[:2]).reason) == ("off", "batch 2 in 1-2")
    assert (s.choose(batch).label, s.choose(batch).reason) == ("linear:3", "batch 5 in 3+")
    assert parse_policy("fixed", SpecConfig.linear(2)).choose(batch).label == "linear:2"
    assert parse_policy("fixed:vanilla").choose(batch).label == "off" and isinstance(parse_policy("off"), Off)
    with pytest.raises(ValueError, match="a spec .* or a policy .*, not both"):
        Engine(None, None, SpecConfig(), policy=Off())


def test_a_setting_the_policy_did_not_list_is_refused(pair, prompts):
    target, head = pair

    class Sneaky(Scripted):
        def settings(self):
            return (OFF,)

    eng = Engine(target, head, policy=Sneaky([SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)]))
    eng.add_requests(prompts[:1], MAX_NEW)
    eng.step()  # the prefill asks no policy
    with pytest.raises(ValueError, match=r"policy scripted chose eagle2:6/3/2, which its settings\(\) do not list"):
        eng.step()


def _observed(policy: Adaptive, accepted: int, steps: int) -> list[str]:
    reasons = []
    for _ in range(steps):
        batch = [Request(0, [3], 99, drafts_accepted=[accepted])]
        choice = policy.choose(batch)
        policy.observe(choice, batch)
        reasons.append(f"{choice.label}|{choice.reason}")
    return reasons


def test_adaptive_climbs_and_descends_with_hysteresis():
    ladder = (SpecConfig.linear(1), SpecConfig.linear(3), SpecConfig("eagle2", num_steps=4, topk=2, num_draft_tokens=8))
    p = Adaptive(ladder, warmup=3, interval=2, weight=0.5, up=0.75, down=0.35)
    _observed(p, 1, 2)
    assert p.rung == 0  # still warming up
    _observed(p, 1, 1)
    assert p.rung == 1 and "up from linear:1" in p.reason  # 1 accepted of depth 1
    _observed(p, 2, 8)  # 2 of depth 3: between 0.35 x 3 and 0.75 x 3, it stays
    assert p.rung == 1 and p.reason.endswith("stays")
    _observed(p, 0, 1)  # the moving average halves to 1.0, below 0.35 x 3: one rung down
    assert p.rung == 0 and p.reason == "mean accepted 1.00 < 0.35 x 3: down from linear:3"
    assert _observed(p, 1, 1) == ["linear:1|mean accepted 1.00 < 0.35 x 3: down from linear:3; warm-up 0/3"]


def test_adaptive_policy_runs_lossless(pair, prompts, reference):
    target, head = pair
    ladder = (SpecConfig.linear(1), SpecConfig.linear(3), SpecConfig("eagle2", num_steps=4, topk=2, num_draft_tokens=8))
    eng = Engine(target, head, policy=Adaptive(ladder, start=1, warmup=2, interval=1, up=0.5, down=0.4), trace=True)
    eng.add_requests(prompts[:4], MAX_NEW)
    chosen = set()
    while not eng.done:
        chosen |= {t["policy"]["choice"] for t in eng.step()}
    assert [r.output_ids for r in eng.requests] == reference[:4]
    assert len(chosen - {"prefill"}) > 1, f"the policy never moved: {chosen}"
    assert_all_slots_back(eng)


# ---- sampling: the target's distribution for requests that join and leave ------------------------
N = LOSSLESS_DRAWS


def test_sampling_with_arrivals_matches_target(tmp_path_factory):
    """N requests of PROMPT (the χ² set-up of helpers.py: the exact joint law of the first 3
    tokens of a tiny target over 8 tokens) join in seeded random waves, run 3-5 tokens each under a
    KV capacity that holds about 400 at once, and cycle through a tree, plain decoding and a
    leviathan chain from one decode step to the next. The χ² test fails falsely with probability
    ALPHA = 1e-3 when every request's output follows the target."""
    target, head = tiny_pair(tmp_path_factory.mktemp("tiny8_continuous"), vocab_size=VOCAB, head_std=0.5)
    params = SamplingParams(temperature=1.0, seed=31)
    policy_of = lambda: Scripted([SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), OFF, SpecConfig.linear(3, "leviathan")],  # noqa: E731
                                 cycle=True)
    rng = random.Random(5)
    max_new = [rng.randint(3, 5) for _ in range(N)]
    cap = capacity_for(target, head, policy_of, [PROMPT] * N, max_new, fits=400)
    policy = policy_of()
    eng = Engine(target, head, sampling=params, policy=policy, kv_slots=cap, debug=False)
    assert _waves(eng, max_new, rng), "the capacity never made a request wait"
    assert policy.calls >= 3, "fewer decode steps than settings: the policy never cycled"
    assert_all_slots_back(eng)
    accepted = sum(sum(r.drafts_accepted) for r in eng.requests)
    assert accepted > N // 10, "too few drafts accepted for the test to mean anything"
    p = lossless_pvalue(target, [r.output_ids for r in eng.requests], params)
    assert p > ALPHA, f"chi-square p = {p:.2e}: the output distribution differs from the target's"


def _waves(eng: Engine, max_new: list[int], rng: random.Random) -> bool:
    """Submit the requests in waves of 0-300 before each step; step until all have run.
    Returns whether any request ever waited for room."""
    left, waited = list(max_new), False
    while left or not eng.done:
        for _ in range(min(len(left), rng.randint(0, 300))):
            eng.submit(PROMPT, left.pop())
        eng.step()
        waited |= bool(eng.waiting)
    return waited
