"`ExperienceReplay` against `ListMemory` under random adds, slices, samples and TD updates."
import torch
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from fastrl_replay.core import BD
from fastrl_replay.memory.experience_replay import ExperienceReplay
from reference import ListMemory

def rows_of(start, n):
    "`n` rows whose `step` counts from `start`, with a 2-wide float column derived from it"
    step = torch.arange(start, start + n)
    return BD(step=step[:, None], x=torch.stack([step * 0.5, -step * 1.0], 1).float())

class ReplayMachine(RuleBasedStateMachine):
    @initialize(max_sz=st.integers(1, 12), bs=st.integers(1, 8), seed=st.integers(0, 2**16), data=st.data())
    def setup(self, max_sz, bs, seed, data):
        warmup_sz = data.draw(st.integers(0, max_sz))
        self.er = ExperienceReplay(bs=bs, max_sz=max_sz, warmup_sz=warmup_sz, seed=seed)
        self.ref, self.next_step = ListMemory(max_sz), 0

    @rule(data=st.data())
    def add(self, data):
        n = data.draw(st.integers(1, 3 * self.ref.max_sz))
        b = rows_of(self.next_step, n)
        self.next_step += n
        self.er + b
        self.ref.add({'step': int(s), 'td_error': 0.0} for s in b['step'].flatten())

    @precondition(lambda self: len(self.ref) > 0)
    @rule(data=st.data())
    def slice(self, data):
        n = len(self.ref)
        sl = slice(data.draw(st.integers(-n, n)), data.draw(st.integers(-n, n)), data.draw(st.sampled_from([None, 1, 2, 3])))
        rows = self.ref.rows[sl]
        if not rows: return
        sub = self.er[sl]
        assert len(sub) == len(rows) and sub.pointer == len(rows)
        assert sub.memory['step'].flatten().tolist() == [r['step'] for r in rows]
        assert sub.memory['td_error'].flatten().tolist() == [r['td_error'] for r in rows]

    @precondition(lambda self: len(self.ref) >= max(self.er.warmup_sz, 1))
    @rule()
    def sample(self):
        b, idxs = self.er.sample()
        assert idxs.shape == (self.er.bs,) and bool(((idxs >= 0) & (idxs < len(self.ref))).all())
        assert b['step'].flatten().tolist() == [self.ref.rows[i]['step'] for i in idxs.tolist()]
        assert torch.equal(b['x'], torch.stack([b['step'][:, 0] * 0.5, -b['step'][:, 0] * 1.0], 1).float())
        self.ref.sampled_rows(idxs.tolist())  # an update that comes after their rows are overwritten is skipped

    @precondition(lambda self: len(self.ref) > 0)
    @rule(data=st.data())
    def update_td(self, data):
        n = len(self.ref)
        idxs = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))
        tds = data.draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=len(idxs), max_size=len(idxs)))
        as_list = data.draw(st.booleans())
        self.er.update_td(torch.tensor(tds) if not as_list else tds, idxs if as_list else torch.tensor(idxs))
        self.ref.update_td(tds, idxs)

    @rule()
    def below_warmup_sample_raises(self):
        if len(self.ref) < max(self.er.warmup_sz, 1):
            try: self.er.sample()
            except Exception as e: assert type(e).__name__ == 'WarmupNotReached'
            else: raise AssertionError('sample below warm-up did not raise')

    @invariant()
    def agrees(self):
        assert len(self.er) == len(self.ref) and self.er.pointer == self.ref.pointer
        if len(self.ref):
            assert self.er.memory['step'].flatten().tolist() == [r['step'] for r in self.ref.rows]
            assert self.er.memory['td_error'].flatten().tolist() == [r['td_error'] for r in self.ref.rows]

ReplayMachine.TestCase.settings = settings(max_examples=500, stateful_step_count=25, deadline=None)
TestReplayMachine = ReplayMachine.TestCase
