"""Slices over the frame storage and its compressed tier, against a plain reference built from the steps written:
stacks, n-step returns, masks, anchors that never cross the cursor nor an episode's end; priorities as over a ring,
exact resume, refusals, the bytes kept per stored step; uniform draws that keep no per-row state, exact and uniform."""
import copy, tempfile
from pathlib import Path
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.errors import ExperienceReplayException, NoValidTransitions
from fastrl_replay.memory.core import Replay, Sampler, UniformSampler
from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
from fastrl_replay.memory.persist import load_memory
from fastrl_replay.memory.prioritized import PrioritizedSampler
from fastrl_replay.memory.sequence import (SequenceSampler, PrioritizedSequenceSampler, SequenceReplay,
                                           PrioritizedSequenceReplay)
from fastrl_replay.nstep import nstep_returns
from fastrl_replay.runs import _bytes_per_transition

SHAPE, GAMMA = (2, 3), 0.9

def frame(v): return np.full(SHAPE, v, np.uint8)

def stream(rng, n:int, n_envs:int) -> list[dict]:
    "`n` steps of `n_envs` interleaved environments, episodes of random lengths ending terminated or truncated"
    left, steps = {}, []
    for s in range(n):
        e = int(rng.integers(n_envs))
        if left.get(e, 0) == 0: left[e] = int(rng.integers(1, 13))
        left[e] -= 1
        end = left[e] == 0 and rng.random() < 0.8
        trunc = end and rng.random() < 0.4
        steps.append(dict(env=e, frame=s % 120 + 1, action=s, reward=float(rng.integers(-3, 4)),
                          terminated=end and not trunc, truncated=trunc, final=s % 120 + 130))
    return steps

def batch(steps:list) -> dict:
    return dict(state=np.stack([frame(x['frame']) for x in steps]), action=np.array([x['action'] for x in steps]),
                reward=np.array([x['reward'] for x in steps], np.float32),
                terminated=np.array([x['terminated'] for x in steps]),
                truncated=np.array([x['truncated'] for x in steps]),
                env_id=np.array([x['env'] for x in steps]), next_state=np.stack([frame(x['final']) for x in steps]))

class Reference:
    "Episodes as lists of serials, from the steps written; each step's transition and validity as the textbook says"
    def __init__(self, steps:list, M:int, S:int, n:int, padding:str):
        self.steps, self.M, self.S, self.n, self.padding = steps, M, S, n, padding
        self.lo = max(len(steps) - M, 0)
        self.eps, self.where, open_ = [], {}, {}  # episodes' serials; serial -> (episode, index); env -> episode
        for s, x in enumerate(steps):
            e = open_.get(x['env'])
            if e is None: e = open_[x['env']] = len(self.eps); self.eps.append([])
            self.where[s] = (e, len(self.eps[e])); self.eps[e].append(s)
            if x['terminated'] or x['truncated']: del open_[x['env']]
    def ended(self, e): return self.steps[self.eps[e][-1]]['terminated'] or self.steps[self.eps[e][-1]]['truncated']
    def valid(self, s) -> bool:
        "Whether serial `s` is stored and its transition can be built: its stack stored, its n-step window written"
        if s < self.lo or s >= len(self.steps): return False
        e, i = self.where[s]
        ep = self.eps[e]
        if any(ep[j] < self.lo for j in range(max(i - self.S + 1, 0), i + 1)): return False
        return (self.ended(e) and len(ep) - 1 <= i + self.n - 1) or i + self.n < len(ep)
    def obs(self, e, j, i0):
        "The frame at index `j` of episode `e` in a stack ending at or after its first step (`i0`: for 'first')"
        ep = self.eps[e]
        if j < 0: return frame(0) if self.padding == 'zero' else frame(self.steps[ep[0]]['frame'])
        if j < len(ep): return frame(self.steps[ep[j]]['frame'])
        last = self.steps[ep[-1]]
        return frame(last['final']) if last['truncated'] and not last['terminated'] else frame(0)
    def stack(self, e, i):
        x = np.stack([self.obs(e, j, i) for j in range(i - self.S + 1, i + 1)])
        return x[0] if self.S == 1 else x  # a stack of one is the frame, as the storage gives it
    def transition(self, s) -> dict:
        e, i = self.where[s]
        ep = self.eps[e]
        k = min(self.n, len(ep) - i)
        rew = np.array([self.steps[ep[i + j]]['reward'] for j in range(k)] + [0.] * (self.n - k))[None, :, None]
        disc = np.array([GAMMA] * (k - 1) + [0.] * (self.n - k + 1))[None]
        last = self.steps[ep[i + k - 1]]
        term = last['terminated']
        return dict(state=self.stack(e, i), next_state=self.stack(e, i + k), action=s,
                    reward=np.float32(nstep_returns(rew, disc)[0, 0]), discount=np.float32(GAMMA ** k), terminated=term)
    def slice(self, s, burn_in, seq_len) -> list:
        "The serials of the slice anchored at serial `s` (None: padding)"
        e, i = self.where[s]
        ep = self.eps[e]
        return [ep[j] if 0 <= j < len(ep) and self.valid(ep[j]) else None for j in range(i - burn_in, i + seq_len)]
    def anchors(self, burn_in, seq_len, stride, end) -> set:
        res = set()
        for s in range(self.lo, len(self.steps)):
            if not self.valid(s) or self.where[s][1] % stride: continue
            if end == 'stop' and None in self.slice(s, burn_in, seq_len): continue
            res.add(s % self.M)
        return res

def storage(compressed, M, S, n, padding):
    if compressed: return CompressedFrameStorage(SHAPE, M, block=3, stack_size=S, n_steps=n, gamma=GAMMA,
                                                 padding=padding, dictionary_frames=0)
    return FrameStorage(SHAPE, M, stack_size=S, n_steps=n, gamma=GAMMA, padding=padding)

def serial_of(row, adds, M): return adds - 1 - (adds - 1 - row) % M

def check_slices(mem, ref, burn_in, seq_len, bs=24):
    "Each sampled slice equals the reference's at its anchor: rows, mask, and each step's transition or zeros"
    b, rows = mem.sample(bs)
    rows, adds, M = rows.numpy(), len(ref.steps), ref.M
    assert tuple(b['state'].shape) == (bs, burn_in + seq_len, *((ref.S,) if ref.S > 1 else ()), *SHAPE)
    for i in range(bs):
        want = ref.slice(serial_of(rows[i, burn_in], adds, M), burn_in, seq_len)
        np.testing.assert_array_equal(b['mask'][i].numpy(), [w is not None for w in want])
        for t, w in enumerate(want):
            if w is None:
                assert rows[i, t] == -1
                for k in ('state', 'next_state', 'reward', 'action', 'discount'): assert not b[k][i, t].any()
                continue
            assert rows[i, t] == w % M
            x = ref.transition(w)
            np.testing.assert_array_equal(b['state'][i, t].numpy(), x['state'])
            np.testing.assert_array_equal(b['next_state'][i, t].numpy(), x['next_state'])
            assert b['action'][i, t, 0] == x['action'] and b['terminated'][i, t, 0] == x['terminated']
            assert b['reward'][i, t, 0] == x['reward'] and b['discount'][i, t, 0] == x['discount']

def check_lean(s, ref, want:set, stride:int):
    "Over frames, uniform: its test of drawn rows, each row's phase walked or from one pass, as the reference says"
    rows, adds = np.arange(len(s.storage)), len(ref.steps)
    assert set(np.flatnonzero(s._anchors_in(rows)[0]).tolist()) == want
    phase = [ref.where[serial_of(r, adds, ref.M)][1] % stride for r in rows]
    np.testing.assert_array_equal(s._phases(rows), phase)
    np.testing.assert_array_equal(s._phases(rows, budget=0), phase)
    if want: assert set(s.draw(64).tolist()) <= want

settings_ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))

@settings_
@given(seed=st.integers(0, 2 ** 16), M=st.integers(6, 20), S=st.integers(1, 3), n=st.integers(1, 3),
       seq_len=st.integers(1, 4), burn_in=st.integers(0, 2), stride=st.integers(1, 2),
       end=st.sampled_from(['stop', 'pad']),
       padding=st.sampled_from(['zero', 'first']), compressed=st.booleans(), n_envs=st.integers(1, 2),
       prioritized=st.booleans())
def test_slices_match_reference(seed, M, S, n, seq_len, burn_in, stride, end, padding, compressed, n_envs, prioritized):
    "Anchors and slices equal the reference after every add (wrap-around included), for both tiers and both ends"
    if burn_in + seq_len > M: return
    rng = np.random.default_rng(seed)
    steps = stream(rng, int(rng.integers(1, 3 * M)), n_envs)
    cls = PrioritizedSequenceSampler if prioritized else SequenceSampler
    mem = SequenceReplay.from_parts(storage(compressed, M, S, n, padding),
                                    cls(seq_len=seq_len, burn_in=burn_in, stride=stride, end=end, seed=seed),
                                    bs=8, warmup_sz=1)
    done = 0
    while done < len(steps):
        # single steps, and adds up to longer than the memory (which restarts step counts: stride 1 only)
        k = 1 if rng.random() < 0.5 else int(rng.integers(1, M + (3 if stride == 1 else 1)))
        mem + batch(steps[done:done + k]); done += k
        ref = Reference(steps[:done], M, S, n, padding)
        want = ref.anchors(burn_in, seq_len, stride, end)
        assert set(np.flatnonzero(mem.sampler.valid).tolist()) == want
        assert mem.n_valid == len(want)
        if not prioritized: check_lean(mem.sampler, ref, want, stride)
        if want: check_slices(mem, ref, burn_in, seq_len)
        if prioritized and want:
            b, rows = mem.sample()
            mem.update_td(torch.from_numpy(rng.random((8, seq_len)).astype(np.float32)), rows)

@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2 ** 16), M=st.integers(6, 20), seq_len=st.integers(1, 4), burn_in=st.integers(0, 2),
       end=st.sampled_from(['stop', 'pad']), compressed=st.booleans())
def test_priorities_as_over_a_ring(seed, M, seq_len, burn_in, end, compressed):
    "One environment, stacks of 1, 1-step returns, every episode ended: the same anchors, draws, weights, priorities"
    if burn_in + seq_len > M: return
    rng = np.random.default_rng(seed)
    steps = stream(rng, int(rng.integers(M, 3 * M)), 1)
    x = steps[-1]; x['terminated'], x['truncated'] = True, False  # no step waits for its next frame
    kw = dict(seq_len=seq_len, burn_in=burn_in, end=end, seed=seed)
    frames = SequenceReplay.from_parts(storage(compressed, M, 1, 1, 'zero'), PrioritizedSequenceSampler(**kw), bs=6,
                                       warmup_sz=1)
    ring = PrioritizedSequenceReplay(bs=6, max_sz=M, warmup_sz=1, **kw)
    frames + batch(steps)
    ring + dict(obs=torch.tensor([s['frame'] for s in steps]), done=torch.tensor([s['terminated'] or s['truncated']
                                                                                  for s in steps]))
    np.testing.assert_array_equal(frames.sampler.valid, ring.sampler.valid)
    if not ring.n_valid: return  # short episodes: no slice fits
    for _ in range(4):
        (bf, rf), (br, rr) = frames.sample(), ring.sample()
        torch.testing.assert_close(rf, rr); torch.testing.assert_close(bf['weight'], br['weight'])
        torch.testing.assert_close(bf['mask'], br['mask'])
        td = torch.from_numpy(rng.random((6, seq_len)).astype(np.float32))
        frames.update_td(td, rf); ring.update_td(td, rr)
        np.testing.assert_array_equal(frames.sampler.base, ring.sampler.base)
        torch.testing.assert_close(frames.td_errors, ring.td_errors)

def filled(compressed=True, prioritized=True, M=40, n=130, seed=0, **kw):
    "A slice memory over frames, fed `n` steps of two environments"
    cls = PrioritizedSequenceSampler if prioritized else SequenceSampler
    mem = SequenceReplay.from_parts(storage(compressed, M, 3, 2, 'zero'),
                                    cls(**{'seq_len': 4, 'burn_in': 2, **kw}, seed=seed), bs=6, warmup_sz=1)
    steps = stream(np.random.default_rng(seed), n, 2)
    return mem + batch(steps), steps

@pytest.mark.parametrize('compressed', [False, True])
@pytest.mark.parametrize('end', ['stop', 'pad'])
@pytest.mark.parametrize('prioritized', [False, True])
def test_resume_exact(compressed, end, prioritized):
    "A copy of the state, loaded into a new memory, samples, updates and goes on as the original"
    kw = dict(end=end, stride=2, prioritized=prioritized)
    mem, steps = filled(compressed, **kw)
    b, rows = mem.sample(); mem.update_td(torch.rand(6, 4), rows)
    state = copy.deepcopy(mem.state_dict())
    again, _ = filled(compressed, n=7, seed=3, **kw)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.sampler.phase, mem.sampler.phase)
    if prioritized: np.testing.assert_array_equal(again.sampler.ep_step[:len(mem)], mem.sampler.ep_step[:len(mem)])
    assert again.sampler.env_step == mem.sampler.env_step
    more = batch(stream(np.random.default_rng(9), 50, 2))
    for step in range(3):
        (b1, r1), (b2, r2) = mem.sample(), again.sample()
        torch.testing.assert_close(r1, r2)
        for k in b1: torch.testing.assert_close(b1[k], b2[k])
        td = torch.rand(6, 4)
        mem.update_td(td, r1); again.update_td(td, r2)
        np.testing.assert_array_equal(mem.sampler.base, again.sampler.base)
        sl = {k: v[step * 15:(step + 1) * 15] for k, v in more.items()}
        mem + sl; again + sl
        np.testing.assert_array_equal(mem.sampler.valid, again.sampler.valid)
        np.testing.assert_array_equal(mem.sampler.phase, again.sampler.phase)
    a, b = mem.state_dict()['sampler'], again.state_dict()['sampler']
    for k in ('heads', 'env_steps', 'td', 'written', 'handed'): np.testing.assert_array_equal(a[k], b[k])

def test_uniform_resumes_from_whole_steps():
    "A state holding whole steps in their episodes (as an earlier checkpoint) resumes a uniform sampler: steps % stride"
    mem, _ = filled(prioritized=False, stride=3, end='pad')
    state = copy.deepcopy(mem.state_dict())
    assert len(state['sampler']['heads']) and (state['sampler']['heads'][:, 1] < 3).all()  # it keeps phases
    state['sampler']['heads'][:, 1] += 3 * 7; state['sampler']['env_steps'][:, 2] += 3 * 5
    again, _ = filled(prioritized=False, stride=3, end='pad', n=7, seed=3)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.sampler.phase, mem.sampler.phase)
    torch.testing.assert_close(again.sample()[1], mem.sample()[1])
    for k in ('heads', 'env_steps'):
        np.testing.assert_array_equal(again.state_dict()['sampler'][k], mem.state_dict()['sampler'][k])

@pytest.mark.parametrize('prioritized', [False, True])
def test_save_load(prioritized):
    "`save` and `load_memory` over a compressed frame storage resume exactly"
    mem, _ = filled(prioritized=prioritized, stride=2)
    with tempfile.TemporaryDirectory() as d:
        mem.save(Path(d)/'m')
        again = load_memory(Path(d)/'m')
    (b1, r1), (b2, r2) = mem.sample(), again.sample()
    torch.testing.assert_close(r1, r2)
    for k in b1: torch.testing.assert_close(b1[k], b2[k])

@pytest.mark.parametrize('prioritized', [False, True])
def test_bad_input_leaves_memory_unchanged(prioritized):
    "Bad settings, updates and states are refused with the library's exception; the memory stays as it was"
    with pytest.raises(ExperienceReplayException, match='traj_key'):
        SequenceReplay.from_parts(storage(False, 20, 2, 1, 'zero'), SequenceSampler(traj_key='ep'), warmup_sz=1)
    with pytest.raises(ExperienceReplayException, match='does not fit'):
        SequenceReplay.from_parts(storage(True, 5, 2, 1, 'zero'), SequenceSampler(seq_len=6), warmup_sz=1)
    mem, _ = filled(prioritized=prioritized, stride=2)
    b, rows = mem.sample()
    before, phase = copy.deepcopy(mem.state_dict()), mem.sampler.phase
    for td, idx in ((torch.rand(6, 3), rows), (torch.rand(6, 4), rows[:, :3]), (torch.full((6, 4), np.nan), rows)):
        with pytest.raises(ExperienceReplayException): mem.update_td(td, idx)
    for k, v in (('heads', np.zeros((2, 3), np.int64)), ('heads', -np.ones((1, 2), np.int64)),
                 ('env_steps', np.zeros((2, 3), np.int32)), ('env_steps', None)):
        bad = copy.deepcopy(before); bad['sampler'][k] = v
        with pytest.raises(ExperienceReplayException, match=k): mem.load_state_dict(bad)
    with pytest.raises(ExperienceReplayException): mem + dict(state=np.zeros((2, 5), np.uint8))
    after = mem.state_dict()
    for k in ('td', 'written', 'handed', 'heads', 'env_steps') + (('base_priority',) if prioritized else ()):
        np.testing.assert_array_equal(np.asarray(after['sampler'][k]), np.asarray(before['sampler'][k]))
    assert after['storage']['add_count'] == before['storage']['add_count']
    np.testing.assert_array_equal(mem.sampler.phase, phase)
    again, _ = filled(prioritized=prioritized, stride=2, n=7, seed=3)
    again.load_state_dict(before)
    torch.testing.assert_close(mem.sample()[1], again.sample()[1])

def held(mem) -> int:
    "Bytes of the arrays and tensors the sampler holds, each counted once (as bench/sequence_bench.py counts them)"
    seen, total = set(), 0
    for v in vars(mem.sampler).values():
        if isinstance(v, torch.Tensor): key, n = v.untyped_storage().data_ptr(), v.untyped_storage().nbytes()
        elif isinstance(v, np.ndarray):
            while isinstance(v.base, np.ndarray): v = v.base
            key, n = v.__array_interface__['data'][0], v.nbytes
        else: continue
        if key not in seen: seen.add(key); total += n
    return total

def most_ended(steps:list, M:int) -> int:
    "The most episode ends among any `M` consecutive steps: the finished episodes a memory of `M` steps can hold"
    ends = np.array([x['terminated'] or x['truncated'] for x in steps], np.int64)
    return int(np.convolve(ends, np.ones(M, np.int64), 'valid').max())

@pytest.mark.parametrize('compressed', [False, True])
def test_bytes_per_stored_step(compressed):
    "No frame kept twice: the storage's bytes are the transition sampler's; a uniform slice sampler holds no more"
    steps = stream(np.random.default_rng(0), 300, 2)
    mems = {}
    for name, sampler in (('slices', SequenceSampler(seq_len=4, burn_in=2, seed=0)),
                          ('slices stride 3', SequenceSampler(seq_len=4, burn_in=2, stride=3, end='pad', seed=0)),
                          ('transitions', UniformSampler(seed=0)),
                          ('prioritized slices', PrioritizedSequenceSampler(seq_len=4, seed=0)),
                          ('prioritized transitions', PrioritizedSampler(seed=0))):
        mem = Replay(storage(compressed, 100, 4, 3, 'zero'), sampler, bs=4, warmup_sz=1) + batch(steps)
        mem.sample()
        mems[name] = mem, _bytes_per_transition(mem)
    slices, transitions = mems['slices'][0].state_dict(), mems['transitions'][0].state_dict()
    extra = sum(slices['sampler'][k].nbytes for k in ('heads', 'env_steps'))  # a few steps per environment
    assert extra <= 2 * 16 + 2 * 24
    assert mems['slices'][1] * 100 - mems['transitions'][1] * 100 == pytest.approx(extra, abs=10)
    assert mems['prioritized slices'][1] < mems['prioritized transitions'][1]
    assert held(mems['slices'][0]) == held(mems['transitions'][0])
    ends = mems['slices stride 3'][0].sampler._ends  # stride > 1: each stored finished episode's last step's phase
    assert 0 < ends.nbytes <= 8 * (2 * most_ended(steps, 100) + 8)
    assert held(mems['slices stride 3'][0]) == held(mems['transitions'][0]) + ends.nbytes

@pytest.mark.parametrize('stride', [1, 3])
def test_uniform_sampler_keeps_no_row_state(stride):
    "Over frames a uniform sampler's arrays per row are the base sampler's, after adds, draws, counts and a checkpoint"
    steps = stream(np.random.default_rng(0), 500, 3)
    mem = SequenceReplay.from_parts(storage(True, 200, 4, 3, 'zero'),
                                    SequenceSampler(seq_len=4, burn_in=2, stride=stride, seed=0), bs=4, warmup_sz=1)
    mem + batch(steps[:100])
    for x in steps[100:]:  # one step at a time, as a frame memory's `add` writes them
        row = mem.storage.add_step(frame(x['frame']), x['action'], x['reward'], x['terminated'],
                                   truncated=x['truncated'], next_observation=frame(x['final']), env_id=x['env'])
        mem.sampler.added(row, 1)
    mem.sample(); mem.n_valid; mem.state_dict()
    base = Sampler()
    base.attach(storage(True, 200, 4, 3, 'zero'))
    arrays = lambda s: {k for k, v in vars(s).items() if isinstance(v, (np.ndarray, torch.Tensor))}
    assert arrays(mem.sampler) - arrays(base) == {'_ends'}
    ends = mem.sampler._ends
    most = most_ended(steps, 200)
    assert (ends.nbytes == 0) if stride == 1 else (0 < ends.nbytes <= 8 * (2 * most + 8))

@pytest.mark.parametrize('rounds', [16, 0])
@pytest.mark.parametrize('end,stride,burn_in', [('stop', 1, 2), ('pad', 3, 0), ('stop', 2, 1)])
def test_uniform_draw_is_uniform_over_the_anchors(rounds, end, stride, burn_in):
    "Uniform slices over frames, drawn by rejection or (rounds=0) among a scan's anchors: each anchor as often"
    M, seq_len, per = 120, 3, 3000
    steps = stream(np.random.default_rng(1), 300, 2)
    sampler = SequenceSampler(seq_len=seq_len, burn_in=burn_in, stride=stride, end=end, seed=0)
    mem = SequenceReplay.from_parts(storage(True, M, 2, 2, 'zero'), sampler, bs=8, warmup_sz=1)
    for lo in range(0, len(steps), 40): mem + batch(steps[lo:lo + 40])  # no add drops a step: whole step counts
    want = sorted(Reference(steps, M, 2, 2, 'zero').anchors(burn_in, seq_len, stride, end))
    assert len(want) >= 8
    sampler.rounds = rounds
    counts = np.bincount(np.concatenate([sampler.draw(per * len(want) // 10) for _ in range(10)]), minlength=M)
    assert np.flatnonzero(counts).tolist() == want
    e = counts.sum() / len(want)
    chi2 = ((counts[want] - e) ** 2 / e).sum()
    k = len(want) - 1
    assert chi2 < k + 5 * np.sqrt(2 * k)  # the chi-square statistic of a uniform draw: mean k, deviation sqrt(2k)

@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2 ** 16), M=st.integers(6, 20), seq_len=st.integers(1, 4), burn_in=st.integers(0, 2),
       stride=st.integers(1, 2), end=st.sampled_from(['stop', 'pad']), over=st.sampled_from(['ring', 'frames']),
       prioritized=st.booleans())
def test_deferred_refresh_equals_eager(seed, M, seq_len, burn_in, stride, end, over, prioritized):
    "Anchors brought up to date after every add or only before a draw: the same anchors, draws, weights, priorities"
    if burn_in + seq_len > M: return
    rng = np.random.default_rng(seed)
    steps = stream(rng, int(rng.integers(1, 4 * M)), 2 if over == 'frames' else 1)
    cls = PrioritizedSequenceSampler if prioritized else SequenceSampler
    def make():
        kw = dict(seq_len=seq_len, burn_in=burn_in, stride=stride, end=end, seed=seed)
        if over == 'frames': return SequenceReplay.from_parts(storage(True, M, 2, 2, 'zero'), cls(**kw), bs=5,
                                                              warmup_sz=1)
        return (PrioritizedSequenceReplay if prioritized else SequenceReplay)(bs=5, max_sz=M, warmup_sz=1, **kw)
    def rows(part):
        if over == 'frames': return batch(part)
        return dict(obs=torch.tensor([x['frame'] for x in part]),
                    done=torch.tensor([x['terminated'] or x['truncated'] for x in part]))
    eager, lazy = make(), make()
    done = 0
    while done < len(steps):
        k = int(rng.integers(1, M + 2))
        for m in (eager, lazy): m + rows(steps[done:done + k])
        done += k
        eager.sampler.refresh()
        assert lazy.sampler._dirty or k == 0 or lazy.sampler.lean  # the lazy one waits for a draw (over frames a
        # uniform one keeps no anchors to bring up to date)
        if rng.random() < 0.4 or not eager.n_valid: continue
        (be, re), (bl, rl) = eager.sample(), lazy.sample()
        torch.testing.assert_close(re, rl)
        for c in be: torch.testing.assert_close(be[c], bl[c])
        td = torch.from_numpy(rng.random((5, seq_len)).astype(np.float32))
        eager.update_td(td, re); lazy.update_td(td, rl)
    for m in (eager, lazy): m.sampler.refresh()
    np.testing.assert_array_equal(eager.sampler.valid, lazy.sampler.valid)
    np.testing.assert_array_equal(eager.sampler.base, lazy.sampler.base)
    if prioritized: np.testing.assert_array_equal(eager.sampler.tree.leaves.numpy(), lazy.sampler.tree.leaves.numpy())
    for m in ([] if prioritized or over == 'frames' else [eager, lazy]):  # a uniform ring's anchors per block of rows
        want = np.bincount(np.flatnonzero(m.sampler._valid) // 64, minlength=len(m.sampler._counts))
        np.testing.assert_array_equal(m.sampler._counts, want)
    a, b = eager.state_dict()['sampler'], lazy.state_dict()['sampler']
    for key in a:
        if isinstance(a[key], (np.ndarray, torch.Tensor)):
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))

@pytest.mark.parametrize('stride', [1, 2])
def test_uniform_draw_without_anchors_raises(stride):
    "Three steps and slices of four: the uniform draw over frames finds no anchor, scans, and says so; nothing kept"
    mem = SequenceReplay.from_parts(storage(True, 20, 2, 1, 'zero'), SequenceSampler(seq_len=4, stride=stride, seed=0),
                                    warmup_sz=1)
    mem + batch(stream(np.random.default_rng(0), 3, 1))
    with pytest.raises(NoValidTransitions, match='none of the 3 stored rows'): mem.sample()
    assert mem.n_valid == 0 and not mem.sampler.valid.any()
    assert mem.sampler._anchors_in(np.arange(3))[0].sum() == 0
