"""Which requests run: a first-come-first-served queue in front of a KV pool of fixed capacity.

Plain Python, no torch (as nano-vllm's scheduler and block manager). The engine submits each
request with its **worst case**: the slots it can ever hold at once (its prompt, every token it
may emit, and one step's verify block and draft scratch on top; ``Engine.slots_needed``). A
request is admitted only while the worst cases of everything admitted fit the capacity, so a
running request never runs out of slots in the middle of a step and nothing it holds is ever
taken back: there is no preemption. SGLang's scheduler admits against an *estimate* of the
tokens still to come (``new_token_ratio``) and retracts requests when it guessed wrong; the
reservation here is the whole worst case, which costs admitted batch size and needs no retract.

Admission is strictly in arrival order: when the oldest waiting request does not fit, the ones
behind it wait too (a smaller one does not overtake it), so none waits forever. A request
whose worst case exceeds the whole capacity could never run: ``submit`` refuses it.
"""

from __future__ import annotations

from collections import deque

from workbench.engine.request import Request


class Scheduler:
    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"the KV capacity must be a positive number of slots, got {capacity!r}")
        self.capacity = capacity
        self.waiting: deque[tuple[Request, int]] = deque()  # (request, its worst case), oldest first
        self.reserved: dict[int, int] = {}  # admitted request id -> its worst case in slots

    @property
    def free(self) -> int:
        """Slots no admitted request may still claim."""
        return self.capacity - sum(self.reserved.values())

    def check_fits(self, prompt_len: int, max_new_tokens: int, need: int) -> None:
        """ValueError when a request that holds up to ``need`` slots could never run."""
        if need > self.capacity:
            raise ValueError(f"a request of {prompt_len} prompt tokens and max_new_tokens={max_new_tokens} needs up "
                             f"to {need} KV slots (with one step's verify block and draft scratch), but the KV "
                             f"capacity is {self.capacity} slots: it could never run; shorten it or give the "
                             f"engine more kv_slots")

    def submit(self, r: Request, need: int) -> None:
        """Queue ``r``, which holds at most ``need`` slots at once; ValueError (before anything
        changes) when ``need`` exceeds the whole capacity."""
        self.check_fits(len(r.prompt_ids), r.max_new_tokens, need)
        self.waiting.append((r, need))

    def admit(self) -> list[Request]:
        """Move the oldest waiting requests into the batch while their worst cases fit."""
        admitted, free = [], self.free
        while self.waiting and self.waiting[0][1] <= free:
            r, need = self.waiting.popleft()
            self.reserved[r.rid] = need
            free -= need
            admitted.append(r)
        return admitted

    def retire(self, rid: int) -> None:
        """A finished request's reservation goes back (the engine frees its slots)."""
        del self.reserved[rid]

    def check(self, held: dict[int, int]) -> None:
        """Debug: every admitted request holds no more than it reserved (``held``: request id ->
        slots it holds now), and nothing not admitted holds any. AssertionError otherwise."""
        for rid, n in held.items():
            if rid not in self.reserved:
                raise AssertionError(f"request {rid} holds {n} slots but was never admitted")
            if n > self.reserved[rid]:
                raise AssertionError(f"request {rid} holds {n} slots, more than its worst case "
                                     f"{self.reserved[rid]}")
