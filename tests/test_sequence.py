"""Sequence replay against a plain reference: slices never cross the write cursor, follow the end-of-episode policy,
carry exact masks and the storage's rows; priorities, updates, checkpoints and refusals."""
import threading
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.errors import ExperienceReplayException, NoValidTransitions
from fastrl_replay.memory.core import Replay
from fastrl_replay.memory.experience_replay import ColumnStorage, ExperienceReplay
from fastrl_replay.memory.persist import load_memory
from fastrl_replay.memory.sequence import (SequenceSampler, PrioritizedSequenceSampler, SequenceReplay,
                                           PrioritizedSequenceReplay, sequence_returns)

class Reference:
    "The rows a ring of `M` holds, each with its write number, episode number and step in its episode, as plain lists"
    def __init__(self, M): self.M, self.g, self.rows, self.pointer, self.episode, self.last_end = M, 0, [], 0, -1, True
    def add(self, ends:list):
        n, M = len(ends), self.M
        keep = ends[-M:]
        restart = not self.rows or len(keep) == M  # no stored row before the first kept one: its count starts there
        self.g += n - len(keep)
        for j, e in enumerate(keep):
            if self.last_end or (j == 0 and restart): self.episode, step = self.episode + 1, 0
            else: step = self.rows[-1][2] + 1
            self.rows.append((self.g, self.episode, step)); self.g += 1; self.last_end = e
        self.rows = self.rows[-M:]
        self.pointer = (self.pointer + n) % M
    def oldest(self): return self.pointer if len(self.rows) == self.M else 0
    def row_of_age(self, a): return (self.oldest() + a) % self.M
    def anchors(self, seq_len, burn_in, stride, end) -> set:
        "The storage rows that anchor a slice"
        res, n = set(), len(self.rows)
        for a, (g, ep, step) in enumerate(self.rows):
            if step % stride: continue
            if end == 'stop':
                lo, hi = a - burn_in, a + seq_len
                if lo < 0 or hi > n or any(self.rows[i][1] != ep for i in range(lo, hi)): continue
            res.add(self.row_of_age(a))
        return res
    def slice(self, anchor, seq_len, burn_in) -> tuple[list, list]:
        "The write numbers and mask of the slice at storage row `anchor`"
        a = (anchor - self.oldest()) % self.M
        ep = self.rows[a][1]
        gs, mask = [], []
        for t in range(-burn_in, seq_len):
            ok = 0 <= a + t < len(self.rows) and self.rows[a + t][1] == ep
            gs.append(self.rows[a + t][0] if ok else -1); mask.append(ok)
        return gs, mask

def batch(g0:int, ends:list, h:int=3) -> dict:
    "Rows numbered from `g0` with episode ends `ends` and a per-step state `h` of width `h` equal to the number"
    n = len(ends)
    g = torch.arange(g0, g0 + n, dtype=torch.int64)
    return dict(g=g[:, None], obs=g[:, None].float() * 2, h=g[:, None].float().expand(n, h).clone(),
                done=torch.tensor(ends, dtype=torch.bool)[:, None])

settings_ = dict(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
geometry = st.tuples(st.integers(1, 5), st.integers(0, 3), st.integers(1, 3), st.sampled_from(['stop', 'pad']))
adds = st.lists(st.integers(1, 14), min_size=1, max_size=8)  # rows per add

@settings(**settings_)
@given(geometry, adds, st.integers(12, 30), st.booleans(), st.integers(0, 2**31))
def test_slices_match_the_reference(geo, add_list, M, prioritized, seed):
    "Anchors, rows, masks, values and state columns of every sample equal the reference's; no slice crosses the cursor"
    seq_len, burn_in, stride, end = geo
    M = max(M, seq_len + burn_in)
    cls = PrioritizedSequenceReplay if prioritized else SequenceReplay
    m = cls(bs=16, max_sz=M, warmup_sz=1, seq_len=seq_len, burn_in=burn_in, stride=stride, end=end, state_keys=('h',),
            seed=seed % 1000)
    ref, g0 = Reference(M), 0
    rng = np.random.default_rng(seed)
    for n in add_list:
        ends = list(rng.random(n) < 0.2)
        m + batch(g0, ends); ref.add(ends); g0 += len(ends)
        want = ref.anchors(seq_len, burn_in, stride, end)
        assert set(np.flatnonzero(m.sampler.valid).tolist()) == want and m.n_valid == len(want)
        if not want:
            with pytest.raises(NoValidTransitions): m.sample()
            continue
        b, idxs = m.sample()
        rows = idxs.numpy()
        stored = m.memory['g'][:, 0]
        for k in range(len(rows)):
            anchor = int(rows[k, burn_in])
            assert anchor in want
            gs, mask = ref.slice(anchor, seq_len, burn_in)
            assert b['mask'][k].tolist() == mask
            assert rows[k].tolist() == [r if ok else -1 for r, ok in zip(rows[k].tolist(), mask)]
            valid = [i for i, ok in enumerate(mask) if ok]
            assert [int(stored[rows[k, i]]) for i in valid] == [gs[i] for i in valid]  # the storage's rows
            assert b['g'][k, :, 0].tolist() == [max(x, 0) if ok else 0 for x, ok in zip(gs, mask)]  # padding as zeros
            assert np.all(np.diff([gs[i] for i in valid]) == 1)  # consecutive writes: no jump over the cursor
            assert torch.equal(b['h'][k], torch.full((3,), float(gs[valid[0]])))  # state at the first stored step
            if end == 'stop': assert all(mask)
        assert b['g'].shape == (16, seq_len + burn_in, 1) and b['h'].shape == (16, 3)
        if prioritized: assert b['weight'].shape == (16, 1)

def test_episode_ids_tell_episodes_apart():
    "With `traj_key`, a new id starts an episode: the same slices as end flags give"
    ends = [False, False, True, False, True, False, False, False, True, False]
    ids = np.cumsum([0] + ends[:-1])
    a = SequenceReplay(bs=8, max_sz=10, warmup_sz=1, seq_len=2, seed=0) + batch(0, ends)
    b = SequenceReplay(bs=8, max_sz=10, warmup_sz=1, seq_len=2, traj_key='ep', seed=0)
    b + dict(batch(0, ends), ep=torch.from_numpy(ids)[:, None])
    assert a.sampler.ep_step.tolist() == b.sampler.ep_step.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 0]
    assert torch.equal(a.sample()[1], b.sample()[1])

def test_one_step_slices_are_transitions():
    "With seq_len=1 every stored row anchors a slice, and a slice is the row itself: the transition sampler's case"
    m = SequenceReplay(bs=64, max_sz=20, warmup_sz=1, seed=0) + batch(0, [i % 7 == 6 for i in range(27)])
    assert m.n_valid == 20
    b, idxs = m.sample()
    assert torch.equal(b['obs'][:, 0], m.memory['obs'][idxs[:, 0]]) and b['mask'].all()
    assert len(set(idxs[:, 0].tolist())) > 15

def test_pad_pads_and_stop_stops():
    "Episodes of 3 and 5 steps: 'stop' never starts a 4-step slice in the first; 'pad' does, masked after its end"
    ends = [False, False, True, False, False, False, False, True]
    stop = SequenceReplay(bs=32, max_sz=8, warmup_sz=1, seq_len=4, end='stop', seed=0) + batch(0, ends)
    assert np.flatnonzero(stop.sampler.valid).tolist() == [3, 4]
    pad = SequenceReplay(bs=32, max_sz=8, warmup_sz=1, seq_len=4, end='pad', stride=2, seed=0) + batch(0, ends)
    assert np.flatnonzero(pad.sampler.valid).tolist() == [0, 2, 3, 5, 7]
    b, idxs = pad.sample()
    at = {int(r[0]): (m.tolist(), r.tolist()) for r, m in zip(idxs, b['mask'])}
    assert at[2] == ([True, False, False, False], [2, -1, -1, -1])
    assert at[5] == ([True, True, True, False], [5, 6, 7, -1])

def test_the_cursor_cuts_slices():
    "Rows 0-5 overwritten by 10-15 in a ring of 10: the rows of one episode across the cursor never form a slice"
    m = SequenceReplay(bs=64, max_sz=10, warmup_sz=1, seq_len=3, burn_in=1, seed=0) + batch(0, [False] * 16)
    b, idxs = m.sample()
    g = b['g'][:, :, 0]
    assert (g.diff(dim=1) == 1).all() and g.min() >= 6  # only steps 6..15, each slice consecutive
    assert m.n_valid == 10 - 3 - 1 + 1

@settings(**settings_)
@given(st.integers(1, 4), st.integers(0, 2), st.sampled_from(['stop', 'pad']), st.integers(0, 2**31), st.booleans())
def test_priorities_follow_a_plain_reference(seq_len, burn_in, end, seed, per_step):
    "A slice's priority: (eta * max + (1 - eta) * mean of its steps' |TD| + eps) ** alpha; new ones enter at the top"
    M, eta, alpha, eps = 24, 0.7, 0.8, 1e-3
    m = PrioritizedSequenceReplay(bs=6, max_sz=M, warmup_sz=1, seq_len=seq_len, burn_in=burn_in, end=end, eta=eta,
                                  alpha=alpha, eps=eps, seed=seed % 997)
    rng = np.random.default_rng(seed)
    base, top, g0 = {}, 1., 0
    for _ in range(6):
        n = int(rng.integers(1, 9))
        before = set(np.flatnonzero(m.sampler.valid).tolist())
        written = {(m.pointer + j) % M for j in range(n)} if len(m) else set(range(n))
        m + batch(g0, list(rng.random(n) < 0.15)); g0 += n
        now = set(np.flatnonzero(m.sampler.valid).tolist())
        for a in now:  # a slice holding a row just written is new
            rows = {(a + d) % M for d in range(-burn_in, seq_len)} if end == 'stop' else {a}
            if a not in before or rows & written: base[a] = top
        if not now: continue
        _, idxs = m.sample()
        td = torch.from_numpy(rng.normal(size=(6, seq_len) if per_step else (6,)).astype(np.float32))
        m.update_td(td, idxs)
        rows = idxs.numpy()
        for k in range(6):
            learn = rows[k, burn_in:]
            x = np.abs(td[k].numpy()) if per_step else np.full(seq_len, abs(td[k].item()))
            x = x[learn >= 0].astype(np.float64)
            p = (eta * x.max() + (1 - eta) * x.mean() + eps) ** alpha
            base[int(rows[k, burn_in])] = p
            top = max(top, p)
        want = np.array([base.get(a, 0.) if a in now else 0. for a in range(M)])
        np.testing.assert_allclose(m.sampler.tree.leaves.numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(m.sampler.tree.total, want.sum(), rtol=1e-9)
        assert m.max_priority == pytest.approx(top)

def test_step_td_errors_land_on_their_rows():
    "Per-step TD errors are kept on the slice's rows, a per-slice value on each of its learning steps; padding none"
    ends = [False, False, True, False, False, False, False, True]
    m = SequenceReplay(bs=2, max_sz=8, warmup_sz=1, seq_len=4, end='pad', seed=0) + batch(0, ends)
    idxs = torch.tensor([[2, -1, -1, -1], [4, 5, 6, 7]])
    m.update_td(torch.tensor([[1., 2., 3., 4.], [5., 6., 7., 8.]]), idxs)
    assert m.td_errors.tolist() == [0., 0., 1., 0., 5., 6., 7., 8.]
    m.update_td(torch.tensor([-9., 3.]), idxs)
    assert m.td_errors.tolist() == [0., 0., -9., 0., 3., 3., 3., 3.]

def test_late_updates_are_skipped():
    "An update for slices whose rows were overwritten since the sample is skipped, by write generations or by marks"
    for gens in (True, False):
        m = PrioritizedSequenceReplay(bs=4, max_sz=12, warmup_sz=1, seq_len=3, seed=0) + batch(0, [False] * 12)
        b, idxs, g = m.sample(generations=True)
        assert g.shape == idxs.shape and (g[idxs < 0] == -1).all()
        leaves = m.sampler.tree.leaves.clone()
        m + batch(12, [False] * 12)  # every row rewritten
        new = m.sampler.tree.leaves.clone()
        if gens: m.update_td(torch.ones(4, 3), idxs, g)
        else: m.update_td(torch.ones(4, 3), idxs)
        assert m.n_stale == 12 and torch.equal(m.sampler.tree.leaves, new) and (m.td_errors == 0).all()

def state_equal(a:dict, b:dict):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict): state_equal(x, y)
        elif isinstance(x, (torch.Tensor, np.ndarray)): assert np.array_equal(np.asarray(x), np.asarray(y)), k
        else: assert x == y, k

@pytest.mark.parametrize('prioritized', [False, True])
@pytest.mark.parametrize('how', ['state_dict', 'save'])
def test_resume_is_exact(prioritized, how, tmp_path):
    "A memory restored from its state or its checkpoint samples and updates exactly as the original goes on to"
    cls = PrioritizedSequenceReplay if prioritized else SequenceReplay
    make = lambda: cls(bs=5, max_sz=40, warmup_sz=1, seq_len=4, burn_in=2, end='pad', stride=2, state_keys=('h',),
                       seed=3)
    rng = np.random.default_rng(0)
    m, g0 = make(), 0
    for _ in range(5):
        ends = list(rng.random(13) < 0.1); m + batch(g0, ends); g0 += 13
        _, idxs = m.sample(); m.update_td(torch.from_numpy(rng.normal(size=(5, 4)).astype(np.float32)), idxs)
    if how == 'state_dict': r = make(); r.load_state_dict(m.state_dict())
    else: m.save(tmp_path/'ck'); r = load_memory(tmp_path/'ck')
    assert type(r) is cls
    state_equal(r.state_dict(), m.state_dict())
    for step in range(4):
        for x in (m, r): x + batch(g0, [step == 2] * 3)
        g0 += 3
        (b1, i1), (b2, i2) = m.sample(), r.sample()
        assert torch.equal(i1, i2) and all(torch.equal(b1[k], b2[k]) for k in b1)
        td = torch.from_numpy(rng.normal(size=(5, 4)).astype(np.float32))
        m.update_td(td, i1); r.update_td(td, i2)
    state_equal(r.state_dict(), m.state_dict())

@pytest.mark.parametrize('kwargs, says', [
    (dict(seq_len=0), 'seq_len'), (dict(burn_in=-1), 'burn_in'), (dict(stride=0), 'stride'), (dict(end='wrap'), 'end'),
    (dict(seq_len=1.5), 'seq_len'), (dict(end_key=3), 'end_key'), (dict(state_keys='h'), 'state_keys'),
    (dict(seq_len=30, burn_in=15), 'does not fit')])
def test_bad_settings_are_refused(kwargs, says):
    for cls in (SequenceReplay, PrioritizedSequenceReplay):
        with pytest.raises(ExperienceReplayException, match=says): cls(max_sz=40, warmup_sz=1, **kwargs)

@pytest.mark.parametrize('kwargs', [dict(eta=1.5), dict(alpha=-1), dict(eps=0), dict(weight_norm='rows')])
def test_bad_priority_settings_are_refused(kwargs):
    with pytest.raises(ExperienceReplayException, match=list(kwargs)[0]):
        PrioritizedSequenceReplay(max_sz=40, warmup_sz=1, **kwargs)

def test_other_storages_are_refused():
    "Slices need rows in write order on the CPU: a storage that evicts by its own rule is refused"
    class Keep:  # a writer that keeps the first rows
        def attach(self, storage): self.storage = storage
    with pytest.raises(ExperienceReplayException, match='in the order they were written'):
        Replay(ColumnStorage(10, writer=Keep()), SequenceSampler(seq_len=2), warmup_sz=1)

@pytest.mark.parametrize('prioritized', [False, True])
def test_bad_input_leaves_the_memory_as_it_was(prioritized):
    cls = PrioritizedSequenceReplay if prioritized else SequenceReplay
    m = cls(bs=3, max_sz=20, warmup_sz=1, seq_len=3, burn_in=1, end='pad', seed=0) + batch(0, [False, False, True] * 4)
    _, idxs = m.sample()
    before = m.state_dict()
    snapshot = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in before['storage'].items()}
    def bad(f):
        with pytest.raises(ExperienceReplayException): f()
        state_equal(m.state_dict()['sampler'], before['sampler'])
        assert m.state_dict()['storage'].keys() == snapshot.keys() and len(m) == 12
    bad(lambda: m + {k: v for k, v in batch(12, [False]).items() if k != 'done'})  # no episode column
    bad(lambda: m + dict(batch(12, [False]), done=torch.tensor([[0.5]])))  # floats as flags
    bad(lambda: m.update_td(torch.ones(3, 2), idxs))  # one value per learning step is (3, 3)
    bad(lambda: m.update_td(torch.ones(3, 3), idxs[:, :3]))  # rows of a slice of 4
    bad(lambda: m.update_td(torch.full((3, 3), float('nan')), idxs))
    bad(lambda: m.update_td(torch.ones(3, 3), idxs + 100))
    bad(lambda: m.update_td(torch.ones(3, 3), idxs, torch.zeros(3, 2, dtype=torch.int64)))
    bad(lambda: m.sample(0))
    bad(lambda: m.append(dict(g=1, obs=2., h=np.zeros(3, np.float32))))

def test_state_that_does_not_fit_is_refused():
    m = PrioritizedSequenceReplay(bs=2, max_sz=10, warmup_sz=1, seq_len=2, seed=0) + batch(0, [False] * 10)
    st = m.state_dict()
    for key, v in (('ep_step', -np.ones(10, np.int64)), ('ep_step', np.zeros(9, np.int64)), ('max_priority', 0.),
                   ('base_priority', np.full(10, np.inf)), ('prev_key', 'x'), ('base_priority', np.full(10, 5.))):
        other = PrioritizedSequenceReplay(bs=2, max_sz=10, warmup_sz=1, seq_len=2, seed=0)
        with pytest.raises(ExperienceReplayException):
            other.load_state_dict({**st, 'sampler': {**st['sampler'], key: v}})
        assert len(other) == 0

def test_lock_keeps_threads_apart():
    "Adds and samples from two threads under the memory's lock: every sample's slices stay consecutive"
    m = SequenceReplay(bs=16, max_sz=64, warmup_sz=8, seq_len=4, seed=0) + batch(0, [False] * 8)
    errors = []
    def writer():
        for i in range(300): m + batch(8 + i, [i % 11 == 10])
    def reader():
        try:
            for _ in range(300):
                b, _ = m.sample()
                assert (b['g'][:, :, 0].diff(dim=1) == 1).all()
        except Exception as e: errors.append(e)
    ts = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in ts: t.start()
    for t in ts: t.join()
    assert not errors

def test_sequence_returns_match_a_loop():
    "n-step targets inside slices: rewards until the window closes, then the discounted bootstrap unless terminated"
    rng = np.random.default_rng(0)
    bs, T, n, gamma = 7, 6, 3, 0.9
    reward = torch.from_numpy(rng.normal(size=(bs, T)).astype(np.float32))
    mask = torch.ones(bs, T, dtype=torch.bool); mask[0, 4:] = False; mask[1, 2:] = False
    done = torch.zeros(bs, T, dtype=torch.bool); done[0, 3] = True; done[2, 1] = True; done[3, 5] = True
    term = done.clone(); term[2, 1] = False  # row 2 truncated at step 1: bootstrapped
    boot = torch.from_numpy(rng.normal(size=(bs, T + 1)).astype(np.float32))
    got = sequence_returns(reward, term, done, mask, boot, gamma, n)
    for b in range(bs):
        for t in range(T):
            if not mask[b, t]: continue
            G, k = 0., 0
            while k < n and t + k < T and mask[b, t + k]:
                G += gamma ** k * reward[b, t + k].item(); k += 1
                if done[b, t + k - 1]: break
            if not term[b, t + k - 1]: G += gamma ** k * boot[b, t + k].item()
            assert got[b, t].item() == pytest.approx(G, rel=1e-5, abs=1e-5)


def test_n_step_rows_of_the_data_loop_make_slices():
    "`FirstLast`'s n-step rows come in the order of their first steps: with `traj_key` slices are runs of one episode"
    from fastrl_replay.data.gym import GymLoop, Source, FirstLast
    src = Source([GymLoop('CartPole-v1', seed=0, n_steps=3), FirstLast(0.9)])
    rows = src.batch(400)
    m = SequenceReplay(bs=32, max_sz=400, warmup_sz=1, seq_len=5, traj_key='episode_id', seed=0) + rows
    b, idxs = m.sample()
    assert (b['episode_id'] == b['episode_id'][:, :1]).all() and (b['step'][..., 0].diff(dim=1) == 1).all()
    assert torch.equal(b['reward'], m.memory['reward'][idxs])  # the n-step rewards, as stored

@pytest.mark.parametrize('seed', range(4))
def test_uniform_draw_maps_each_index_to_one_anchor(seed):
    "A uniform draw's index u picks the u-th anchor in row order: every anchor once, exactly uniform, none else"
    from fastrl_replay.memory.sequence import _nb_nth_anchor
    rng = np.random.default_rng(seed)
    m = SequenceReplay(bs=32, max_sz=300, warmup_sz=1, seq_len=3, burn_in=1, stride=2, seed=seed)
    for _ in range(4):
        m + batch(0, (rng.random(int(rng.integers(50, 200))) < 0.05).tolist())
        s = m.sampler
        anchors = np.flatnonzero(s.valid)
        assert s.n_valid == len(anchors) and s._counts.sum() == len(anchors)
        got = np.empty(len(anchors), np.int64)
        _nb_nth_anchor(s._valid, s._counts, np.arange(len(anchors)), got)
        np.testing.assert_array_equal(got, anchors)
        assert np.isin(m.sampler.draw(64), anchors).all()


@pytest.mark.parametrize('cls', [SequenceReplay, PrioritizedSequenceReplay])
@pytest.mark.parametrize('end', ['stop', 'pad'])
def test_dict_observations_come_back_as_slices_of_each_key_equal_to_flat_columns(cls, end, tmp_path):
    "A `Dict` observation's keys are sliced and padded as the same values in plain columns are; a checkpoint keeps them"
    n, g = 60, torch.Generator().manual_seed(0)
    obs, img = torch.randn(n, 3, generator=g), torch.randint(0, 255, (n, 2, 2), dtype=torch.uint8, generator=g)
    done = (torch.arange(n) % 7 == 6)[:, None]
    kw = dict(bs=8, max_sz=50, warmup_sz=1, seq_len=4, burn_in=1, end=end, seed=3)
    nested, flat = cls(**kw), cls(**kw)
    nested + dict(state=dict(observation=obs, img=img), reward=torch.arange(n, dtype=torch.float32)[:, None], done=done)
    flat + dict(obs=obs, img=img, reward=torch.arange(n, dtype=torch.float32)[:, None], done=done)
    (a, ia), (b, ib) = nested.sample()[:2], flat.sample()[:2]
    assert torch.equal(ia, ib) and torch.equal(a['mask'], b['mask'])
    assert torch.equal(a['state']['observation'], b['obs']) and torch.equal(a['state']['img'], b['img'])
    assert a['state']['img'].dtype == torch.uint8 and a['state']['img'].shape == (8, 5, 2, 2)
    assert (a['state']['observation'][~a['mask']] == 0).all()  # padded steps zeroed in every key
    nested.save(tmp_path/'m')
    again = load_memory(tmp_path/'m')
    assert torch.equal(again.sample()[0]['state']['img'], nested.sample()[0]['state']['img'])
