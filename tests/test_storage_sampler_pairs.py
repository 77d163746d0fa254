"""Every storage × sampler pair (column, frame, compressed frame) × (uniform, prioritized, LaBER) against the same reference models.

The references are the existing ones: `reference.ListMemory` (the ring of rows), `test_circular.NaiveMemory` (full stacked n-step
transitions from the whole history), `test_prioritized.Reference` (priorities, TD errors, draw counts and skipped late updates)."""
import copy
from dataclasses import dataclass
import numpy as np, pytest, torch
from scipy.stats import chi2 as chi2_dist
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.memory.core import Replay, ExperienceReplayException, WarmupNotReached, NoValidTransitions, UniformSampler
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay, PrioritizedSampler
from fastrl_replay.memory.laber import LaBERExperienceReplay, LaBERSampler
from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
from fastrl_replay.compat.reagent import CircularReplayBuffer
from reference import ListMemory
from test_experience_replay_stateful import rows_of
from test_prioritized import Reference, chi2 as chi2_stat
from test_circular import NaiveMemory, frame, final_frame, ZERO, OBS, ENDS

# --- the pairs ------------------------------------------------------------------------------------------------------

STORAGES, SAMPLERS = ('column', 'frame'), ('uniform', 'prioritized', 'laber')
PRIO = dict(alpha=1., eps=1e-3, beta=0.5, beta_steps=0, weight_norm='memory')  # the same settings over both storages
LABER = dict(m=4, variant='mean', eps=0.5)
U64 = lambda *v: np.array(v, dtype=np.ulonglong)
COLUMN_KEYS = {'step', 'x'}  # the sampler keeps the TD errors: a sample holds the rows
FRAME_KEYS = {'state', 'action', 'reward', 'next_state', 'discount', 'terminated', 'truncated', 'horizon', 'env_id', 'episode_id'}

def keys_of(b) -> list:
    "The identity of each row of a sampled batch: its step (columns) or its serial, read off its newest frame (frames)"
    if 'step' in b: return b['step'][:, 0].tolist()
    s = b['state']
    return ((s[:, -1, 0] if s.ndim == 3 else s[:, 0]) - 1).tolist()

class Score:
    "A LaBER score that is a known function of a column: key % 4 (the step, or the action, which is serial % 4); it keeps the large batches it scored"
    def __init__(self): self.seen = []
    def of(self, b): return (b['step'][:, 0] if 'step' in b else b['action'][:, 0]).remainder(4).double()
    def __call__(self, b):
        s = self.of(b)
        self.seen.append((keys_of(b), s.clone()))
        return s

@dataclass(frozen=True)
class Pair:
    storage: str
    sampler: str
    def __repr__(self): return f'{self.storage}-{self.sampler}'
    @property
    def frames(self) -> bool: return self.storage in ('frame', 'zframe')

    def make(self, max_sz, bs=4, warmup_sz=1, seed=0, stack=2, n=2, gamma=0.9, padding='zero', **kw):
        "The memory of this pair: its thin class where there is one, else `Replay(FrameStorage(...), LaBERSampler(...))`"
        if self.sampler == 'prioritized': kw = {**PRIO, **kw}
        if self.sampler == 'laber': kw = {**LABER, 'score': Score(), **kw}
        if self.storage == 'column':
            cls = dict(uniform=ExperienceReplay, prioritized=PrioritizedExperienceReplay, laber=LaBERExperienceReplay)[self.sampler]
            return cls(bs=bs, max_sz=max_sz, warmup_sz=warmup_sz, seed=seed, **kw)
        if self.storage == 'zframe':  # frames in compressed blocks of 3 rows, ending a zstd block after their first 2 (reads decode up to the
            # part they need): blocks open, close and wrap within a few adds; a dictionary is tried once the ring is full, and its training
            # fails on so few frames: the blocks go on without one
            sampler = dict(uniform=lambda: UniformSampler(seed=seed), prioritized=lambda: PrioritizedSampler(**kw, seed=seed),
                           laber=lambda: LaBERSampler(**kw, seed=seed))[self.sampler]()
            return Replay(CompressedFrameStorage(OBS, max_sz, block=3, part=2, stack_size=stack, n_steps=n, gamma=gamma, observation_dtype=np.int32,
                                                 padding=padding, dictionary_frames=max_sz, dictionary_size=256), sampler, bs, warmup_sz)
        if self.sampler == 'laber':
            return Replay(FrameStorage(OBS, max_sz, stack, n, gamma, observation_dtype=np.int32, padding=padding),
                          LaBERSampler(**kw, seed=seed), bs, warmup_sz)
        return CircularReplayBuffer(OBS, stack, max_sz, bs, update_horizon=n, gamma=gamma, observation_dtype=np.int32,
                                    padding=padding, prioritized=self.sampler == 'prioritized', warmup_sz=warmup_sz, seed=seed, **kw)

PAIRS = [Pair(s, p) for s in (*STORAGES, 'zframe') for p in SAMPLERS]  # the distribution tests below run on STORAGES: 'zframe' shares their sampling

@pytest.fixture(scope='module', params=PAIRS, ids=repr)
def pair(request): return request.param

def script_steps(start, k):
    "`k` deterministic frame steps from serial `start`: two interleaved environments, terminations and truncations"
    return [((s // 3) % 2, 'term' if s % 7 == 4 else 'trunc' if s % 7 == 6 else '', s % 5 - 2) for s in range(start, start + k)]

# --- a memory and its references, fed the same rows ------------------------------------------------------------------

class Twin:
    "A memory of `pair` and the reference models fed the same rows, checked against them"
    def __init__(self, pair, max_sz, stack=2, n=2, gamma=0.9, padding='zero', **kw):
        self.pair, self.C, self.kw = pair, max_sz, dict(stack=stack, n=n, gamma=gamma, padding=padding, **kw)
        self.mem = pair.make(max_sz, **self.kw)
        self.ring = ListMemory(max_sz)  # row -> the step (columns) or serial (frames) it holds, and its TD error
        self.naive = NaiveMemory(stack, n, gamma, padding) if pair.frames else None
        self.prioritized = pair.sampler == 'prioritized'
        p = {**PRIO, **kw}
        self.ref = Reference(max_sz, p['alpha'], p['eps'])  # hand-out times and stale updates; priorities and draw counts where the sampler keeps them
        self.counts = pair.sampler != 'uniform'
        self.added = 0

    def remake(self):
        "A new memory with the same construction (a new LaBER score object, same function)"
        return self.pair.make(self.C, **self.kw)

    # -- feeding
    def batch(self, spec, start=None):
        "Rows to add: `spec` rows (columns), or `spec` script steps or an explicit list of (env, end, reward) steps (frames)"
        start = self.added if start is None else start
        if not self.pair.frames: return rows_of(start, spec)
        steps = script_steps(start, spec) if isinstance(spec, int) else spec
        rows = []
        for j, (env, end, r) in enumerate(steps):
            s, (term, trunc) = start + j, ENDS[end]
            rows.append((frame(s, env), s % 4, np.float32(r / 4), term, trunc, env, final_frame(s, env) if trunc else ZERO))
        st_, a, rw, te, tr, e, nx = zip(*rows)
        return dict(state=np.stack(st_), action=np.array(a)[:, None], reward=np.array(rw, np.float32)[:, None],
                    terminated=np.array(te)[:, None], truncated=np.array(tr)[:, None], env_id=np.array(e)[:, None],
                    next_state=np.stack(nx))

    def add(self, spec):
        b = self.batch(spec)
        self.mem + b
        k = len(b['step'] if 'step' in b else b['state'])
        if self.pair.frames:
            for env, term, trunc, r in zip(b['env_id'][:, 0], b['terminated'][:, 0], b['truncated'][:, 0], b['reward'][:, 0]):
                self.naive.add(int(env), float(r), bool(term), bool(trunc))
        self.ring.add({'key': s, 'td_error': 0.} for s in range(self.added, self.added + k))
        self.ref.add(k)
        self.added += k
        return b

    # -- what the references say
    def expected_valid(self) -> np.ndarray:
        "Per stored row: whether it is a transition (frames: complete, and every step it reads still stored)"
        if not self.pair.frames: return np.ones(len(self.ring), bool)
        lo = self.added - self.C
        trs = [self.naive.transition(r['key']) for r in self.ring.rows]
        return np.array([tr is not None and min(tr['reads']) >= lo for tr in trs], bool)

    def expected_priorities(self) -> np.ndarray:
        "The tree's leaves: the reference priority of each valid stored row, 0 elsewhere"
        n, out = len(self.ring), np.zeros(self.C)
        out[:n] = np.where(self.expected_valid(), self.ref.prio[:n], 0.)
        return out

    def expected_td(self) -> np.ndarray:
        if self.prioritized: return self.ref.td[:len(self.ring)]
        return np.array([r['td_error'] for r in self.ring.rows], np.float32)

    def actual_td(self) -> np.ndarray:
        return self.mem.td_errors.numpy()

    def check_state(self):
        m, n = self.mem, len(self.ring)
        assert len(m) == n and m.storage.pointer % self.C == self.ring.pointer % self.C
        np.testing.assert_array_equal(self.actual_td(), self.expected_td())
        if self.pair.frames: np.testing.assert_array_equal(m.storage.valid(np.arange(n)), self.expected_valid())
        if self.prioritized:
            np.testing.assert_allclose(m.sampler.get_priority(np.arange(self.C)).numpy(), self.expected_priorities(), rtol=1e-12, atol=0)
            assert m.sampler.max_priority == pytest.approx(self.ref.maxp, rel=1e-12)
        assert m.sampler.n_stale == self.ref.stale  # every sampler skips the updates of rows overwritten since handed out
        if self.counts: np.testing.assert_array_equal(m.sampler.sample_counts[:n].numpy(), self.ref.counts[:n])

    def check_rows(self, b, rows):
        "Every row of a sampled batch equals the reference's row at its storage index"
        keys = [self.ring.rows[r]['key'] for r in rows]
        extra = {'weight'} if self.pair.sampler != 'uniform' else set()
        if not self.pair.frames:
            assert set(b.keys()) == COLUMN_KEYS | extra
            s = torch.tensor(keys, dtype=torch.int64)
            assert b['step'][:, 0].tolist() == keys
            assert torch.equal(b['x'], torch.stack([s * 0.5, -s * 1.0], 1).float())
            np.testing.assert_array_equal(self.mem.sampler.td_errors[rows].numpy(), self.expected_td()[rows])
            return
        assert set(b.keys()) == FRAME_KEYS | extra
        trs = {k: self.naive.transition(k) for k in set(keys)}
        for k in ('state', 'next_state'): np.testing.assert_array_equal(b[k].numpy(), np.stack([trs[s][k] for s in keys]))
        for k, dt in (('reward', np.float32), ('discount', np.float32), ('terminated', np.bool_), ('truncated', np.bool_),
                      ('horizon', np.int64), ('env_id', np.int64), ('episode_id', np.int64)):
            assert b[k].shape == (len(rows), 1) and b[k].numpy().dtype == dt, k
            np.testing.assert_array_equal(b[k][:, 0].numpy(), np.array([trs[s][k] for s in keys], dt), err_msg=k)
        assert b['action'][:, 0].tolist() == [s % 4 for s in keys]

    # -- operations, each mirrored into the references
    def sample(self, bs):
        "Sample and check the batch; None where sampling must raise (checked) or cannot draw"
        m, n, valid = self.mem, len(self.ring), self.expected_valid()
        if n < max(m.warmup_sz, 1):
            with pytest.raises(WarmupNotReached): m.sample(bs)
            return None
        if not valid.any():
            with pytest.raises(NoValidTransitions): m.sample(bs)
            return None
        if self.prioritized:
            P = self.expected_priorities()
            if P.sum() == 0:  # every valid row has priority 0
                if self.pair.frames: return None  # raises NoValidTransitions: see test_every_priority_zero_raises_the_same_on_both_storages
                with pytest.raises(ExperienceReplayException, match='every row has priority 0'): m.sample(bs)
                return None
        score = getattr(m.sampler, 'score', None)
        if isinstance(score, Score): score.seen.clear()
        b, idxs = m.sample(bs)
        rows = idxs.numpy()
        assert idxs.dtype == torch.int64 and idxs.shape == (bs,)
        assert ((rows >= 0) & (rows < n)).all() and valid[rows].all() and m.storage.valid(rows).all()
        self.check_rows(b, rows)
        if self.prioritized:  # drawn rows have mass; weights (p / smallest p in the memory) ** -beta
            assert (P[rows] > 0).all()
            w = (P[rows] / P[P > 0].min()) ** -PRIO['beta']
            torch.testing.assert_close(b['weight'][:, 0], torch.from_numpy(w).float(), rtol=1e-6, atol=0)
        if isinstance(score, Score):  # one large batch of valid stored rows, the kept rows among them, mean-normalized weights
            (large, s), = score.seen
            assert len(large) == m.sampler.m * bs
            lr = [k % self.C for k in large]
            assert all(self.ring.rows[r]['key'] == k and valid[r] for r, k in zip(lr, large))
            assert set(keys_of(b)) <= set(large)
            eps = m.sampler.eps
            total = (s + eps).sum()
            w = ((s + eps) / total).mean() / ((score.of(b) + eps) / total)
            torch.testing.assert_close(b['weight'][:, 0], w.float(), rtol=1e-6, atol=0)
        self.ref.sampled_rows(rows.tolist())
        self.last = b
        return idxs

    def update(self, tds, idxs, container='tensor'):
        rows = [int(i) for i in idxs]
        arg = {'tensor': idxs if isinstance(idxs, torch.Tensor) else torch.tensor(rows, dtype=torch.int64),
               'list': rows, 'u64': np.array(rows, dtype=np.ulonglong)}[container]
        self.mem.update_td(torch.tensor(tds, dtype=torch.float32), arg)
        fresh = [not 0 <= self.ref.sampled[i] < self.ref.written[i] for i in rows]
        self.ref.update(tds, rows)
        if not self.prioritized:
            self.ring.update_td([float(np.float32(t)) for t, f in zip(tds, fresh) if f], [i for i, f in zip(rows, fresh) if f])

    def set(self, rows, prios):
        self.mem.sampler.set_priority(rows, prios)
        self.ref.set(rows, prios)

# --- 1. differential: every sampled row is the reference's row, for every pair ---------------------------------------

@st.composite
def configs(draw, frames):
    C = draw(st.integers(1, 10))
    cfg = dict(max_sz=C, warmup_sz=draw(st.integers(0, C)), seed=draw(st.integers(0, 2**16)))
    if frames: cfg.update(stack=draw(st.integers(1, 3)), n=draw(st.integers(1, 3)), gamma=draw(st.sampled_from([0.5, 0.9])),
                          padding=draw(st.sampled_from(['zero', 'first'])))
    return cfg

TDS = lambda k: st.lists(st.floats(-50, 50, width=32), min_size=k, max_size=k)

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_sample_matches_the_reference(pair, data):
    """Under random adds (wrapping, whole batches), samples, TD updates (fresh, late, of arbitrary rows; as tensors, lists or
    unsigned arrays) and set priorities: sampled rows equal the reference's, indices are valid rows, weights are the closed
    form, and TD errors, priorities, draw counts and skipped updates follow the references"""
    t = Twin(pair, **data.draw(configs(pair.frames)))
    envs = data.draw(st.integers(1, 2))
    step = st.tuples(st.integers(0, envs - 1), st.sampled_from(['', '', '', 'term', 'trunc', 'both']), st.integers(-8, 8))
    ops = ['add', 'add', 'sample', 'sample', 'sample', 'update', 'late', 'late', 'rows'] + (['set'] if t.prioritized else [])
    pending = []
    for _ in range(data.draw(st.integers(3, 30))):
        op = data.draw(st.sampled_from(ops))
        n = len(t.ring)
        if op == 'add' or n == 0:
            t.add(data.draw(st.lists(step, min_size=1, max_size=2 * t.C + 1)) if pair.frames else data.draw(st.integers(1, 2 * t.C + 1)))
        elif op == 'sample':
            idxs = t.sample(data.draw(st.integers(1, 6)))
            if idxs is not None: pending.append(idxs)
        elif op in ('update', 'late') and pending:
            idxs = pending.pop(0 if op == 'late' else -1)
            t.update(data.draw(TDS(len(idxs))), idxs, data.draw(st.sampled_from(['tensor', 'list', 'u64'])))
        elif op == 'rows':  # rows never sampled, repeated ones included: the last write wins
            rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))
            t.update(data.draw(TDS(len(rows))), rows, data.draw(st.sampled_from(['tensor', 'list', 'u64'])))
        elif op == 'set':
            rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
            t.set(rows, data.draw(st.lists(st.one_of(st.just(0.), st.floats(1e-3, 10)), min_size=len(rows), max_size=len(rows))))
        t.check_state()

# --- 2. sampler distributions over the valid rows of both storages ---------------------------------------------------

def filled(pair, bs, **kw):
    "10 rows after 13 adds; frames: serials 3-12, of which 3 (its stack lost serial 2), 11 and 12 (incomplete) are not transitions"
    t = Twin(pair, 10, bs=bs, warmup_sz=1, seed=11, stack=2, n=2, **kw)
    t.add([(0, 'term' if s == 4 else 'trunc' if s == 9 else '', s % 5 - 2) for s in range(13)] if pair.frames else 13)
    valid = np.flatnonzero(t.expected_valid()).tolist()
    assert valid == ([0, 4, 5, 6, 7, 8, 9] if pair.frames else list(range(10)))
    t.check_state()
    return t, valid

def critical(k): return chi2_dist.ppf(0.999, k - 1)  # chi-square at p = 0.001 for k categories (24.32 for 8, as in test_prioritized)

@pytest.mark.parametrize('sampler', ['uniform', 'laber'])
@pytest.mark.parametrize('storage', STORAGES)
def test_uniform_draws_are_uniform_over_valid_rows(storage, sampler):
    "The uniform sampler, and LaBER with a constant score, draw every valid row equally often and no other"
    kw = dict(score=lambda b: torch.ones(len(keys_of(b)))) if sampler == 'laber' else {}
    t, valid = filled(Pair(storage, sampler), bs=1000, **kw)
    counts = np.zeros(10)
    for _ in range(5): counts += np.bincount(t.mem.sample()[1].numpy(), minlength=10)
    assert counts.sum() == 5000 and counts[np.setdiff1d(np.arange(10), valid)].sum() == 0
    assert (counts[valid] > 0).all()
    p = np.full(len(valid), 1 / len(valid))
    assert chi2_stat(counts[valid], p) < critical(len(valid))

@pytest.mark.parametrize('stratified', [True, False])
@pytest.mark.parametrize('storage', STORAGES)
def test_prioritized_draws_follow_priorities_over_valid_rows(storage, stratified):
    """Priorities set directly and from TD errors, on valid and not-yet-valid rows: draws follow them over the valid rows
    only, and a row that becomes valid is drawn at the priority it was given while it was not"""
    t, valid = filled(Pair(storage, 'prioritized'), bs=1000, stratified=stratified)
    t.set([0, 2, 4, 6, 8], [3., 0.5, 9., 1.5, 2.])  # row 2 holds serial 12 on frames: not a transition yet
    t.update([-1., 4., 2.5, 0., 6.], [1, 3, 5, 7, 9])  # priority |td| + eps (alpha 1); rows 1, 3 are not transitions on frames
    P = t.expected_priorities()
    given_ = np.array([3., 1.001, 0.5, 4.001, 9., 2.501, 1.5, 0.001, 2., 6.001])
    np.testing.assert_allclose(P, given_ if storage == 'column' else np.where(np.isin(np.arange(10), valid), given_, 0.), rtol=1e-12)

    def draws():
        counts = np.zeros(10)
        for _ in range(10):
            idxs = t.sample(1000)
            counts += np.bincount(idxs.numpy(), minlength=10)
        live = P > 0
        assert counts[~live].sum() == 0
        assert chi2_stat(counts[live], P[live] / P[live].sum()) < critical(int(live.sum()))
        if stratified: assert (np.abs(counts - P / P.sum() * 10_000) <= 2 * 10).all()  # at most two slices off per batch
        t.check_state()
    draws()
    t.add([(0, 'term', 1)] if storage == 'frame' else 1)  # overwrites row 3; frames: serials 11, 12 complete, serial 4 loses its stack
    P = t.expected_priorities()
    if storage == 'frame':
        np.testing.assert_array_equal(np.flatnonzero(P > 0), [0, 1, 2, 3, 5, 6, 7, 8, 9])
        assert P[[1, 2, 3, 4]].tolist() == [pytest.approx(1.001), 0.5, 9., 0.]  # given while invalid; entry priority = max
    else: assert P[3] == 9.
    draws()

@pytest.mark.parametrize('storage', STORAGES)
def test_laber_keeps_rows_in_proportion_to_score_plus_eps(storage):
    "Within each large batch, the kept rows follow (score + eps): chi-square over rows of the expected counts given the large batches"
    t, valid = filled(Pair(storage, 'laber'), bs=64, eps=0.5)
    score, bs = t.mem.sampler.score, 64
    obs, exp = {}, {}
    for _ in range(100):
        score.seen.clear()
        b, idxs = t.mem.sample()
        (large, s), = score.seen
        q = ((s + 0.5) / (s + 0.5).sum()).numpy()
        for k, qk in zip(large, q): exp[k] = exp.get(k, 0.) + bs * qk
        for k in keys_of(b): obs[k] = obs.get(k, 0) + 1
    assert set(obs) <= set(exp) and sorted(k % 10 for k in exp) == valid
    keys = sorted(exp)
    o, e = np.array([obs.get(k, 0) for k in keys], float), np.array([exp[k] for k in keys])
    assert o.sum() == 6400 and e.sum() == pytest.approx(6400)
    assert chi2_stat(o, e / e.sum()) < critical(len(keys))
    by_score = np.array([o[[k % 4 == c for k in keys]].sum() for c in range(4)])
    large_share = np.array([sum(k % 4 == c for k in exp) for c in range(4)]) / len(exp)  # over the distinct rows
    assert by_score[0] / 6400 < 0.5 * large_share[0]  # and the score matters: score-0 rows are kept far below their share

# --- 3. late updates: the staleness guard on both storages ----------------------------------------------------------

@pytest.mark.parametrize('storage,backend', [('column', None), ('column', 'torch'), ('frame', None)])
def test_late_update_of_an_overwritten_row_is_skipped(storage, backend):
    kw = dict(tree_backend=backend) if backend else {}
    t = Twin(Pair(storage, 'prioritized'), 6, bs=3, alpha=1., eps=1e-9, **kw)
    t.add([(0, 'term' if s in (2, 5) else '', 1) for s in range(6)] if storage == 'frame' else 6)
    assert t.expected_valid().all()
    m = t.mem
    t.set([4], [8.])  # the entry priority of new rows is now 8
    t.set(range(6), [1., 1., 0., 1., 0., 0.])
    idxs = t.sample(3)
    assert idxs.tolist() == [0, 1, 3]  # stratified over three equal masses
    t.add([(0, '', 1), (0, 'term', 1)] if storage == 'frame' else 2)  # rows 0 and 1 now hold new steps, valid transitions
    assert t.expected_valid()[[0, 1, 3]].all()
    m.update_td(torch.tensor([50., 60., 2.]), idxs); t.ref.update([50., 60., 2.], [0, 1, 3])
    assert m.sampler.n_stale == 2
    assert m.sampler.get_priority([0, 1, 3]).tolist() == [8., 8., (2. + 1e-9) ** 1.]  # entry priority kept
    assert t.actual_td()[[0, 1, 3]].tolist() == [0., 0., 2.]  # the stale errors are not written
    assert m.sampler.max_priority == 8.  # and do not raise the entry priority
    t.check_state()
    t.set([3], [0.])
    again = t.sample(2)
    assert again.tolist() == [0, 1]  # sampled since they were written: their updates apply again
    t.update([7., -9.], again)
    assert m.sampler.get_priority([0, 1]).tolist() == [(7. + 1e-9) ** 1., (9. + 1e-9) ** 1.]
    assert t.actual_td()[[0, 1]].tolist() == [7., -9.] and m.sampler.n_stale == 2
    t.check_state()

# --- 4. state_dict round trips --------------------------------------------------------------------------------------

def scripted(pair, max_sz=8):
    "A memory of `pair` after adds (wrapping), samples, fresh and late TD updates and, prioritized, set priorities"
    t = Twin(pair, max_sz, bs=5, warmup_sz=2, seed=3, stack=2, n=2)
    t.add(7)
    i1 = t.sample(5)
    assert i1 is not None
    t.update([0.5, -1., 2., 3., -0.25], i1)
    t.add(5)
    i2 = t.sample(5)
    assert i2 is not None
    if t.prioritized: t.set([1, 4], [2.5, 0.75])
    t.add(2)
    t.update([4., 1., -6., 0.125, 2.], i1)  # late: some of these rows were overwritten
    t.update([1., 2., 3., 4., 5.], i2, 'list')
    assert t.sample(3) is not None  # a sample in flight
    t.check_state()
    return t

def assert_same_state(a, b, path='state'):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a: assert_same_state(a[k], b[k], f'{path}.{k}')
    elif isinstance(a, torch.Tensor): assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for j, (x, y) in enumerate(zip(a, b)): assert_same_state(x, y, f'{path}[{j}]')
    else: assert a == b, (path, a, b)

def assert_same_batch(a, b):
    assert a.keys() == b.keys()
    for k in a.keys(): assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k

def test_state_dict_round_trip(pair):
    "A memory made the same way and loaded with a deep copy of the state draws what the original draws, before and after more adds"
    t = scripted(pair)
    new = t.remake()
    new.load_state_dict(copy.deepcopy(t.mem.state_dict()))
    assert_same_state(new.state_dict(), t.mem.state_dict())
    for bs in (5, 2):
        b, idxs = new.sample(bs)
        assert torch.equal(t.sample(bs), idxs)  # the original's draw, checked against the references
        assert_same_batch(t.last, b)
    more = t.add(3)
    new + more
    b, idxs = new.sample(4)
    assert torch.equal(t.sample(4), idxs)
    assert_same_batch(t.last, b)
    t.update([1., -2., 3., 0.5], idxs); new.update_td(torch.tensor([1., -2., 3., 0.5]), idxs)
    t.check_state()
    assert_same_state(new.state_dict(), t.mem.state_dict())
    b, idxs = new.sample()
    assert torch.equal(t.sample(t.mem.bs), idxs)
    assert_same_batch(t.last, b)

def test_state_of_another_max_sz_is_refused_and_changes_nothing(pair):
    t, twin = scripted(pair), scripted(pair)
    before = copy.deepcopy(t.mem.state_dict())
    for other in (scripted(pair, max_sz=7), scripted(pair, max_sz=9)):
        with pytest.raises(ExperienceReplayException, match='max_sz'): t.mem.load_state_dict(copy.deepcopy(other.mem.state_dict()))
        assert_same_state(t.mem.state_dict(), before)
    t.check_state()
    b, idxs = twin.mem.sample()
    assert torch.equal(t.sample(t.mem.bs), idxs)
    assert_same_batch(t.last, b)

SAMPLER_SWAPS = [  # two memories of the same kind and max_sz whose samplers differ
    ('frame: uniform state into prioritized', lambda: Pair('frame', 'uniform'), lambda: Pair('frame', 'prioritized')),
    ('frame: uniform Replay state into LaBER Replay', lambda: 'frame-replay-uniform', lambda: Pair('frame', 'laber')),
    ('column: uniform ExperienceReplay state into one with a PrioritizedSampler', lambda: 'column-uniform', lambda: 'column-prioritized')]

def swap_memory(which):
    "A memory for the sampler-swap test, after the scripted steps"
    if isinstance(which, Pair): return scripted(which).mem
    if which == 'frame-replay-uniform':
        m = Replay(FrameStorage(OBS, 8, 2, 2, 0.9, observation_dtype=np.int32), UniformSampler(seed=3), 5, 2)
        m + Twin(Pair('frame', 'uniform'), 8).batch(14)
        return m
    m = ExperienceReplay(5, 8, 2, sampler=UniformSampler(seed=3) if which == 'column-uniform' else PrioritizedSampler(seed=3))
    return m + rows_of(0, 14)

@pytest.mark.parametrize('what,source,target', SAMPLER_SWAPS, ids=[w for w, *_ in SAMPLER_SWAPS])
def test_state_with_another_sampler_is_refused_and_changes_nothing(what, source, target):
    src, dst = swap_memory(source()), swap_memory(target())
    assert type(src) is type(dst) and src.max_sz == dst.max_sz and type(src.sampler) is not type(dst.sampler)
    before = copy.deepcopy(dst.state_dict())
    with pytest.raises(ExperienceReplayException): dst.load_state_dict(copy.deepcopy(src.state_dict()))
    assert_same_state(dst.state_dict(), before)

# --- 5. bad input leaves every pair exactly as it was --------------------------------------------------------------

def bad_batch(t, what):
    "A batch for `t` that does not fit"
    b = {k: (v.clone() if isinstance(v, torch.Tensor) else v.copy()) for k, v in t.batch(3).items()}
    if what == 'shape':
        if t.pair.frames: b['state'] = np.zeros((3, 5), np.int32)
        else: b['x'] = torch.zeros(3, 3)
    elif what == 'rows': b['action' if t.pair.frames else 'x'] = b['action' if t.pair.frames else 'x'][:2]
    elif what == 'nan':  # in the last row: nothing of the batch may be written
        if t.pair.frames: b['reward'][2, 0] = np.nan
        else: b['td_error'] = torch.tensor([[0.], [1.], [float('nan')]])
    return b

BAD = {
    'wrong-shaped batch': lambda t: t.mem + bad_batch(t, 'shape'),
    'columns of different lengths': lambda t: t.mem + bad_batch(t, 'rows'),
    'NaN in the last row of a batch': lambda t: t.mem + bad_batch(t, 'nan'),
    'NaN TD error': lambda t: t.mem.update_td(torch.tensor([1., float('nan')]), torch.tensor([0, 1])),
    'inf TD error after the cast': lambda t: t.mem.update_td(np.array([1e39, 1.]), [2, 3]),
    'NaN TD error, unsigned indices': lambda t: t.mem.update_td(torch.tensor([float('nan')]), U64(1)),
    'index == len': lambda t: t.mem.update_td(torch.ones(2), torch.tensor([0, len(t.mem)])),
    'negative index': lambda t: t.mem.update_td(torch.ones(2), [-1, 0]),
    'unsigned index == len': lambda t: t.mem.update_td(torch.ones(2), U64(0, len(t.mem))),
    'unsigned index 2**64 - 1': lambda t: t.mem.update_td(torch.ones(1), U64(2**64 - 1)),
    'TD errors of another shape': lambda t: t.mem.update_td(torch.ones(3), torch.tensor([0, 1])),
    'float indices': lambda t: t.mem.update_td(torch.ones(2), torch.tensor([0., 1.])),
    'sample of 0 rows': lambda t: t.mem.sample(0),
}
BAD_PRIORITIES = {
    'negative priority': lambda t: t.mem.sampler.set_priority([0, 1], [1., -2.]),
    'NaN priority': lambda t: t.mem.sampler.set_priority([0, 1], [1., float('nan')]),
    'priority index out of range': lambda t: t.mem.sampler.set_priority(U64(0, 8), [1., 2.]),
    'one priority for two indices': lambda t: t.mem.sampler.set_priority([0, 1], [1.]),
}

def check_unchanged(pair, call):
    "`call` raises on a scripted memory of `pair`, which then holds, draws and takes rows exactly as an untouched twin does"
    t, twin = scripted(pair), scripted(pair)
    before = copy.deepcopy(t.mem.state_dict())
    with pytest.raises(ExperienceReplayException): call(t)
    assert_same_state(t.mem.state_dict(), before)
    t.check_state()
    b, idxs = twin.mem.sample()
    assert torch.equal(t.sample(t.mem.bs), idxs)
    assert_same_batch(t.last, b)
    t.add(2); twin.add(2)
    assert_same_state(t.mem.state_dict(), twin.mem.state_dict())

@pytest.mark.parametrize('case', list(BAD))
def test_bad_input_changes_nothing(pair, case): check_unchanged(pair, BAD[case])

@pytest.mark.parametrize('case', list(BAD_PRIORITIES))
@pytest.mark.parametrize('storage', STORAGES)
def test_bad_priorities_change_nothing(storage, case): check_unchanged(Pair(storage, 'prioritized'), BAD_PRIORITIES[case])

def test_unsigned_indices_in_range_are_accepted(pair):
    "np.ulonglong indices (cpprb's) write exactly what int64 indices write"
    a, b = scripted(pair), scripted(pair)
    rows, tds = [3, 0, 3, 7], [1.5, -2., 4., 0.25]
    a.update(tds, rows, 'u64')
    b.mem.update_td(torch.tensor(tds), torch.tensor(rows))
    if a.prioritized:
        a.set(U64(5, 6), [0.5, 3.])
        b.mem.sampler.set_priority(torch.tensor([5, 6]), [0.5, 3.])
        assert a.mem.sampler.get_priority(U64(5, 6)).tolist() == b.mem.sampler.get_priority([5, 6]).tolist()
    a.check_state()
    assert_same_state(a.mem.state_dict(), b.mem.state_dict())
    bb, idxs = b.mem.sample()
    assert torch.equal(a.sample(a.mem.bs), idxs)
    assert_same_batch(a.last, bb)

# --- behaviours that must not differ between the storages -----------------------------------------

@pytest.mark.parametrize('storage', ['column', 'frame'])
def test_every_priority_zero_raises_the_same_on_both_storages(storage):
    t, valid = filled(Pair(storage, 'prioritized'), bs=4)
    t.set(range(10), [0.] * 10)
    with pytest.raises(ExperienceReplayException, match='every row has priority 0'): t.mem.sample()

@pytest.mark.parametrize('storage', ['column', 'frame'])
def test_raw_weights_of_uniform_priorities_are_one(storage):
    "alpha = 0 makes every priority 1: sampling is uniform over the valid rows, so the importance weights are all 1"
    t, valid = filled(Pair(storage, 'prioritized'), bs=64, alpha=0., weight_norm=None, beta=0.5)
    b, idxs = t.mem.sample()
    torch.testing.assert_close(b['weight'], torch.ones(64, 1), rtol=1e-6, atol=0)
    torch.testing.assert_close(t.mem.sampler.weights(idxs), torch.ones(64, 1), rtol=1e-6, atol=0)
