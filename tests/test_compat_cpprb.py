"The cpprb adapters against cpprb itself: the same stored values, samples, n-step returns, priorities and weights."
import numpy as np, pytest
import cpprb  # the reference implementation; the dev extra installs it
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.compat.cpprb import ReplayBuffer, PrioritizedReplayBuffer

CHI2_3DOF_P001 = 16.27  # chi-square critical value at p = 0.001 for 3 degrees of freedom
ENV = {'obs': {'shape': (2, 3)}, 'act': {'dtype': np.int8}, 'rew': {}, 'next_obs': {'shape': (2, 3)}, 'done': {},
       'flag': {'dtype': np.bool_}, 'extra': {'shape': 2, 'dtype': np.float64}}

def env_dict(): return {k: dict(v) for k, v in ENV.items()}  # cpprb writes into the dicts it is given

def steps(rng, n, start):
    "n transitions whose values name their step"
    t = np.arange(start, start + n)
    return dict(obs=np.broadcast_to(t[:, None, None], (n, 2, 3)) + np.arange(6.).reshape(2, 3), act=(t % 100).astype(np.int8),
                rew=t * 0.5, next_obs=np.broadcast_to(t[:, None, None] + 1., (n, 2, 3)), done=(t % 7 == 6).astype(np.float32),
                flag=t % 2 == 0, extra=rng.normal(size=(n, 2)))

def one(b, i): return {k: v[i] for k, v in b.items()}

def assert_same(ours, theirs, keys=None):
    assert list(ours) == list(theirs)
    for k in keys or ours:
        assert ours[k].dtype == theirs[k].dtype and ours[k].shape == theirs[k].shape, k
        np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)

# --- stored values and uniform samples ---------------------------------------------------------------------------

@pytest.mark.parametrize('seed', range(4))
def test_stored_values_and_indexes_equal_cpprbs_under_random_adds(seed):
    rng = np.random.default_rng(seed)
    ours, theirs = ReplayBuffer(13, env_dict()), cpprb.ReplayBuffer(13, env_dict())
    t = 0
    for _ in range(30):
        n = int(rng.integers(1, 14))
        b = steps(rng, n, t); t += n
        if n == 1 and rng.random() < 0.5: b = one(b, 0)  # a single transition without its step dimension
        assert ours.add(**b) == theirs.add(**b)
        assert (ours.get_stored_size(), ours.get_next_index()) == (theirs.get_stored_size(), theirs.get_next_index())
        assert_same(ours.get_all_transitions(), theirs.get_all_transitions())
    assert ours.get_buffer_size() == theirs.get_buffer_size() == 13

@pytest.mark.parametrize('seed', range(3))
def test_uniform_samples_equal_cpprbs_after_the_same_numpy_seed(seed):
    rng = np.random.default_rng(seed)
    ours, theirs, own = ReplayBuffer(20, env_dict()), cpprb.ReplayBuffer(20, env_dict()), ReplayBuffer(20, env_dict(), seed=seed)
    for b in (steps(rng, 9, 0), steps(rng, 15, 9)):
        for r in (ours, theirs, own): r.add(**b)
    for bs in (1, 7, 64):
        np.random.seed(seed + bs); s_theirs = theirs.sample(bs)
        np.random.seed(seed + bs); s_ours = ours.sample(bs)
        assert_same(s_ours, s_theirs)
    np.random.seed(seed); expected = theirs.sample(32)
    assert_same(own.sample(32), expected)  # a buffer's own seed gives the stream np.random.seed gives

def test_documented_examples_give_cpprbs_shapes_and_dtypes():
    "cpprb's examples (flexible environment, multistep add, next_of, stack_compress, PER), each run on both libraries"
    flexible = dict(size=32, env_dict={"obs": {"shape": (4, 4)}, "act": {"shape": 1}, "rew": {}, "next_obs": {"shape": (4, 4)},
                                       "next_next_obs": {"shape": (4, 4)}, "done": {}, "my_important_info": {"dtype": np.short}})
    o, t = ReplayBuffer(**flexible), cpprb.ReplayBuffer(**flexible)
    for i in range(100):
        for r in (o, t): r.add(obs=np.full((4, 4), i), act=1.5, rew=0.0, next_obs=np.zeros((4, 4)), next_next_obs=np.zeros((4, 4)), done=0,
                               my_important_info=2)
    np.random.seed(0); a = t.sample(64)
    np.random.seed(0); assert_same(o.sample(64), a)

    spec = {"obs": {"shape": 5}, "act": {"shape": 3}, "rew": {}, "next_obs": {"shape": 5}, "done": {}}
    o, t = ReplayBuffer(32, spec), cpprb.ReplayBuffer(32, {k: dict(v) for k, v in spec.items()})
    for r in (o, t):
        r.add(obs=np.ones((10, 5)), act=np.zeros((10, 3)), rew=np.ones(10), next_obs=np.ones((10, 5)), done=np.zeros(10))
    assert o.get_stored_size() == t.get_stored_size() == 10
    assert_same(o.get_all_transitions(), t.get_all_transitions())

    spec = {"obs": {"shape": (16, 16, 4)}, 'rew': {}, 'done': {}}
    o = ReplayBuffer(32, spec, next_of="obs", stack_compress="obs")
    t = cpprb.ReplayBuffer(32, {k: dict(v) for k, v in spec.items()}, next_of="obs", stack_compress="obs")
    for r in (o, t): r.add(obs=np.ones((16, 16, 4)), next_obs=np.ones((16, 16, 4)), rew=1, done=0)
    assert_same(o.get_all_transitions(), t.get_all_transitions())

    spec = {"obs": {"shape": (4, 4)}, "act": {"shape": 3}, "rew": {}, "next_obs": {"shape": (4, 4)}, "done": {}}
    o, t = PrioritizedReplayBuffer(256, spec, alpha=0.5), cpprb.PrioritizedReplayBuffer(256, {k: dict(v) for k, v in spec.items()}, alpha=0.5)
    for i in range(1000):
        for r in (o, t): r.add(obs=np.full((4, 4), i), act=np.ones(3), rew=0.5, next_obs=np.zeros((4, 4)), done=0)
    so, st = o.sample(32, beta=0.5), t.sample(32, beta=0.5)
    assert list(so) == list(st) and all(so[k].shape == st[k].shape and so[k].dtype == st[k].dtype for k in so)
    np.testing.assert_array_equal(so['weights'], st['weights'])  # one priority everywhere: weights of 1
    for r, s in ((o, so), (t, st)): r.update_priorities(s['indexes'], np.ones_like(s['weights']))
    assert o.get_max_priority() == t.get_max_priority() == 1.

# --- next_of and stack_compress ----------------------------------------------------------------------------------

def frames_episodes(rng, n_eps, stack=3):
    "Episodes of stacked frames, each step a sliding window one frame on; each episode's next frames are consistent"
    f = 0
    for _ in range(n_eps):
        T = int(rng.integers(1, 7))
        frames = np.arange(f, f + T + stack, dtype=np.float32); f += T + stack + 100
        win = np.stack([frames[t:t + stack] for t in range(T + 1)])  # (T + 1, stack)
        yield dict(obs=win[:-1, None, :], next_obs=win[1:, None, :], rew=rng.normal(size=T), done=np.r_[np.zeros(T - 1), 1.])

def ring_of(added, size):
    "What a ring of `size` rows holds after the rows `added` (dicts of one row each) were written in order"
    rows = [None] * min(len(added), size)
    for i, r in enumerate(added): rows[i % size] = r
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}

def run_frames(seed, batched, size=11, **kw):
    "The same episodes into both libraries; after each episode, what each holds and what was added"
    rng = np.random.default_rng(seed)
    spec = {'obs': {'shape': (1, 3)}, 'rew': {}, 'done': {}}
    ours, theirs = ReplayBuffer(size, spec, **kw), cpprb.ReplayBuffer(size, {k: dict(v) for k, v in spec.items()}, **kw)
    added = []
    for ep in frames_episodes(rng, 12):
        if 'next_of' not in kw: ep.pop('next_obs')
        for r in (ours, theirs):
            if batched: r.add(**ep)
            else:
                for i in range(len(ep['rew'])): r.add(**one(ep, i))
            r.on_episode_end()
        added += [{k: np.asarray(v[i], np.float32).reshape(-1 if k in ('rew', 'done') else v.shape[1:]) for k, v in ep.items()}
                  for i in range(len(ep['rew']))]
        yield ours, theirs, ring_of(added, size)

@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('batched', [False, True])
@pytest.mark.parametrize('kw', [dict(next_of='obs'), dict(stack_compress='obs')], ids=['next_of', 'stack_compress'])
def test_next_of_or_stack_compress_store_what_cpprb_returns(seed, batched, kw):
    for ours, theirs, given in run_frames(seed, batched, **kw):
        o = ours.get_all_transitions()
        for k in given: np.testing.assert_array_equal(o[k], given[k], err_msg=k)
        assert_same(o, theirs.get_all_transitions())
    np.random.seed(seed); s = theirs.sample(40)
    np.random.seed(seed); assert_same(ours.sample(40), s)

def test_next_of_with_stack_compress_differs_only_in_cpprbs_next_value_at_the_ring_end():
    "Together, cpprb's two compressions return a next stack whose frames were overwritten at the ring's last index; the adapter, the one given"
    differ = 0
    for seed in range(6):
        for ours, theirs, given in run_frames(seed, False, next_of='obs', stack_compress='obs'):
            o, t = ours.get_all_transitions(), theirs.get_all_transitions()
            for k in given: np.testing.assert_array_equal(o[k], given[k], err_msg=k)
            rows = np.flatnonzero((o['next_obs'] != t['next_obs']).reshape(len(o['obs']), -1).any(1))
            assert set(rows) <= {10}
            differ += len(rows)
            assert_same({k: v for k, v in o.items() if k != 'next_obs'}, {k: v for k, v in t.items() if k != 'next_obs'})
    assert differ > 0

def test_next_values_are_the_ones_given_where_cpprb_needs_on_episode_end():
    "Without on_episode_end, cpprb takes an episode's last next_obs from the next episode's first obs; the adapter keeps the one given"
    spec = {'obs': {}, 'done': {}}
    ours, theirs = ReplayBuffer(8, spec, next_of='obs'), cpprb.ReplayBuffer(8, {k: dict(v) for k, v in spec.items()}, next_of='obs')
    for r in (ours, theirs):
        r.add(obs=[0, 1, 2], next_obs=[1, 2, 3], done=[0, 0, 1])  # the episode ends with next_obs 3
        r.add(obs=[10, 11], next_obs=[11, 12], done=[0, 0])  # no on_episode_end in between
    np.testing.assert_array_equal(ours.get_all_transitions()['next_obs'][:, 0], [1, 2, 3, 11, 12])
    np.testing.assert_array_equal(theirs.get_all_transitions()['next_obs'][:, 0], [1, 2, 10, 11, 12])

# --- n-step returns ----------------------------------------------------------------------------------------------

def nstep_episodes(rng, n_eps):
    "Episodes with distinct observations; most end with done = 1, the others are cut short (done = 0 throughout)"
    o = 0
    for _ in range(n_eps):
        T = int(rng.integers(1, 13))
        obs = np.arange(o, o + T, dtype=np.float32); o += 1000
        done = np.zeros(T, np.float32)
        if rng.random() < 0.7: done[-1] = 1
        yield dict(obs=obs, act=rng.integers(0, 5, T), rew=rng.normal(size=T).astype(np.float32), next_obs=obs + 0.5, done=done)

def nstep_reference(ep, n, gamma):
    "The transitions of one episode by the definition (a window of n steps cut at the episode's end, in float64), with what cpprb 11 returns for next_obs and done"
    T, g = len(ep['rew']), float(np.float32(gamma))
    k = min(n - 1, T)  # the transitions on_episode_end writes
    flushed_done = ep['done'][T - k:].astype(np.float64).copy()
    for i in range(1, k): flushed_done[:-i] += flushed_done[i:]  # cpprb adds the later dones into an array it is still adding into
    rows = []
    for t in range(T):
        last = min(t + n - 1, T - 1)
        rew = sum(g ** j * float(ep['rew'][t + j]) for j in range(last - t + 1))
        flushed = t >= T - k
        rows.append(dict(obs=ep['obs'][t], act=ep['act'][t], rew=rew, next_obs=ep['next_obs'][last], done=float(ep['done'][last]),
                         cpprb_next=1. if flushed else ep['next_obs'][last],  # on_episode_end's transitions: the window's initial fill
                         cpprb_done=flushed_done[t - (T - k)] if flushed else ep['done'][t:t + max(n - 1, 1)].sum()))  # the window's last done left out
    return rows

@pytest.mark.parametrize('n', [1, 2, 3, 5])
@pytest.mark.parametrize('mode', ['single', 'batched', 'mixed'])
def test_nstep_returns_equal_cpprbs_to_the_bit(n, mode):
    rng = np.random.default_rng(n * 10 + len(mode))
    gamma = 0.9
    spec = {'obs': {}, 'act': {'dtype': np.int64}, 'rew': {}, 'next_obs': {}, 'done': {}}
    nstep = {'size': n, 'gamma': gamma, 'rew': 'rew', 'next': 'next_obs'}
    ours = ReplayBuffer(2000, spec, Nstep=nstep)
    # cpprb 11 raises for a window of one step, which its documentation calls an ordinary buffer: compare with one
    theirs = cpprb.ReplayBuffer(2000, {k: dict(v) for k, v in spec.items()}, **({'Nstep': dict(nstep)} if n > 1 else {}))
    ref = []
    for ep in nstep_episodes(rng, 40):
        T = len(ep['rew'])
        cuts = {'single': list(range(T + 1)), 'batched': [0, T], 'mixed': sorted({0, T, *rng.integers(0, T + 1, 2).tolist()})}[mode]
        for a, b in zip(cuts[:-1], cuts[1:]):
            part = {k: v[a:b] for k, v in ep.items()}
            if b - a == 1 and mode == 'single': part = one(part, 0)
            assert ours.add(**part) == theirs.add(**{k: np.copy(v) for k, v in part.items()})  # cpprb may write into what it is given
            assert ours.get_stored_size() == theirs.get_stored_size()
        for r in (ours, theirs): r.on_episode_end()
        ref += nstep_reference(ep, n, gamma)
    o, t = ours.get_all_transitions(), theirs.get_all_transitions()
    assert len(o['rew']) == len(ref) == theirs.get_stored_size()
    for k in ('obs', 'act', 'rew'): np.testing.assert_array_equal(o[k], t[k], err_msg=k)  # the float32 sums, to the bit
    np.testing.assert_allclose(o['rew'][:, 0], [r['rew'] for r in ref], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(o['next_obs'][:, 0], [r['next_obs'] for r in ref])
    np.testing.assert_array_equal(o['done'][:, 0], [r['done'] for r in ref])
    np.testing.assert_array_equal(t['next_obs'][:, 0], [r['cpprb_next'] for r in ref])
    np.testing.assert_array_equal(t['done'][:, 0], [r['cpprb_done'] for r in ref])
    differ = (o['done'] != t['done'])[:, 0] | (o['next_obs'] != t['next_obs'])[:, 0]
    assert differ.any() == (n > 1)  # a window of one step is a plain transition, the same in both

def test_adding_leaves_the_given_arrays_alone_where_cpprb_writes_sums_into_them():
    spec = {'obs': {}, 'rew': {}, 'next_obs': {}, 'done': {}}
    nstep = {'size': 2, 'gamma': 0.5, 'rew': 'rew', 'next': 'next_obs'}
    for cls, expected in ((ReplayBuffer, [1., 10., 100.]), (cpprb.ReplayBuffer, [1., 60., 100.])):
        rew = np.array([1., 10., 100.], np.float32)
        cls(16, {k: dict(v) for k, v in spec.items()}, Nstep=dict(nstep)).add(obs=np.arange(3), rew=rew, next_obs=np.arange(1, 4), done=np.zeros(3))
        np.testing.assert_array_equal(rew, expected)

# --- prioritized replay ------------------------------------------------------------------------------------------

def closed_form_weights(leaves, idxs, beta):
    "cpprb's weights (P(i) N)^-beta / (P_min N)^-beta over the stored leaves, in float64"
    return (leaves[idxs] / leaves.min()) ** -beta

def leaves_of(prios, alpha, eps): return ((prios.astype(np.float32) + np.float32(eps)) ** np.float32(alpha)).astype(np.float64)

@pytest.mark.parametrize('seed', range(4))
def test_priorities_max_priority_and_weights_agree_with_cpprb(seed):
    rng = np.random.default_rng(seed)
    alpha, eps, size = float(rng.uniform(0.3, 1)), float(rng.choice([1e-4, 1e-2])), 17
    ours = PrioritizedReplayBuffer(size, {'obs': {}}, alpha=alpha, eps=eps, seed=seed)
    theirs = cpprb.PrioritizedReplayBuffer(size, {'obs': {}}, alpha=alpha, eps=eps)
    prios = np.zeros(size)  # the priority p each index holds, kept by hand
    maxp, t = 1., 0
    for _ in range(25):
        n = int(rng.integers(1, 6))
        given = rng.random() < 0.5
        if given: n = min(n, size - ours.get_next_index())  # cpprb 11 misplaces given priorities that run past the ring's end (below)
        p = rng.uniform(0, 3, n) if given else None
        kw = dict(obs=np.arange(t, t + n), priorities=p) if given else dict(obs=np.arange(t, t + n))
        start = ours.add(**kw)
        assert start == theirs.add(**kw)
        if given: maxp = max(maxp, float(np.float32(p).max()))
        prios[(start + np.arange(n)) % size] = np.float32(p) if given else maxp
        t += n
        stored = ours.get_stored_size()
        idx = rng.integers(0, stored, int(rng.integers(1, 6)))  # repeated indexes: the last one wins, in both
        new = rng.uniform(0, 5, len(idx))
        for r in (ours, theirs): r.update_priorities(idx.astype(np.uint64), new)
        for i, v in zip(idx, new): prios[i] = np.float32(v)
        maxp = max(maxp, float(np.float32(new).max()))
        assert ours.get_max_priority() == theirs.get_max_priority() == pytest.approx(maxp, rel=1e-7)
        leaves = leaves_of(prios[:stored], alpha, eps)
        np.testing.assert_allclose(ours.replay.sampler.get_priority(np.arange(stored)).numpy(), leaves, rtol=1e-7)
        beta = float(rng.uniform(0, 1))
        so, st = ours.sample(64, beta), theirs.sample(64, beta)
        for s in (so, st):
            assert s['indexes'].dtype == np.uint64 and s['indexes'].shape == (64,) and s['weights'].shape == (64,)
            assert s['weights'].dtype == np.float32 and (s['indexes'] < stored).all()
            i = s['indexes'].astype(np.int64)
            np.testing.assert_array_equal(s['obs'][:, 0], ours.get_all_transitions()['obs'][i, 0])
        np.testing.assert_allclose(so['weights'], closed_form_weights(leaves, so['indexes'].astype(np.int64), beta), rtol=1e-6)
        np.testing.assert_allclose(st['weights'], closed_form_weights(leaves, st['indexes'].astype(np.int64), beta), rtol=2e-5)

def test_priorities_given_past_the_ring_end_land_where_their_transitions_do():
    "cpprb 11 gives the transitions written after the ring's end the first priorities of the batch again; the adapter, their own"
    for cls, expected in ((PrioritizedReplayBuffer, [0.1, 4., 5., 2., 3.]), (cpprb.PrioritizedReplayBuffer, [2., 3., 5., 2., 3.])):
        r = cls(5, {'obs': {}}, alpha=1., eps=0.)
        r.add(obs=np.arange(3), priorities=[5, 5, 5])
        r.add(obs=np.arange(4), priorities=[2, 3, 0.1, 4])  # indexes 3, 4, then 0, 1
        s = r.sample(4000, beta=1.)  # weight p_min / p_i: the priorities up to their smallest
        w = {int(i): float(w) for i, w in zip(s['indexes'], s['weights'])}
        assert sorted(w) == [0, 1, 2, 3, 4]
        np.testing.assert_allclose([min(expected) / w[i] for i in range(5)], expected, rtol=1e-6)

@pytest.mark.parametrize('which', ['ours', 'cpprb'])
def test_prioritized_draws_follow_the_priorities(which):
    "Both libraries draw in proportion to (p + eps)^alpha, one draw per equal slice of the total"
    cls = PrioritizedReplayBuffer if which == 'ours' else cpprb.PrioritizedReplayBuffer
    r = cls(4, {'obs': {}}, alpha=1., eps=1., **({'seed': 5} if which == 'ours' else {}))
    r.add(obs=np.arange(4), priorities=[0, 1, 3, 7])  # (p + 1)^1: 1, 2, 4, 8
    counts = np.zeros(4)
    for _ in range(40): counts += np.bincount(r.sample(300)['indexes'].astype(np.int64), minlength=4)
    probs = np.array([1, 2, 4, 8]) / 15
    assert ((counts - probs * counts.sum()) ** 2 / (probs * counts.sum())).sum() < CHI2_3DOF_P001
    assert (np.abs(counts - probs * counts.sum()) <= 2 * 40).all()  # stratified: at most two slices off per batch

def test_prioritized_samples_are_reproducible_from_the_seed():
    a, b = (PrioritizedReplayBuffer(10, {'obs': {}}, seed=3) for _ in range(2))
    for r in (a, b): r.add(obs=np.arange(10), priorities=np.arange(10.))
    np.testing.assert_array_equal(a.sample(50, 0.7)['indexes'], b.sample(50, 0.7)['indexes'])
    a.clear(); b.clear()
    for r in (a, b): r.add(obs=np.arange(3), priorities=[1, 2, 3])
    np.testing.assert_array_equal(a.sample(20)['indexes'], b.sample(20)['indexes'])

@pytest.mark.parametrize('check', [False, True])
def test_late_updates_follow_cpprbs_check_for_update(check):
    "A transition written after the last sample keeps its priority only with check_for_update, in both libraries"
    res = []
    for cls in (PrioritizedReplayBuffer, cpprb.PrioritizedReplayBuffer):
        r = cls(4, {'obs': {}}, alpha=1., eps=0., check_for_update=check)
        r.add(obs=np.arange(4), priorities=[1, 1, 1, 1])
        r.sample(4)
        r.add(obs=4, priorities=2)  # index 0 is overwritten after the sample
        r.update_priorities([0], [50])  # late: stale with check_for_update
        r.update_priorities([1], [3])
        m1 = r.get_max_priority()
        r.sample(4)
        r.update_priorities([0], [60])  # sampled since: applied in both
        res.append((m1, r.get_max_priority()))
    assert res[0] == res[1] == ((3. if check else 50.), 60.)

def test_nstep_priorities_leave_the_window_with_their_transitions():
    spec = {'obs': {}, 'rew': {}, 'next_obs': {}, 'done': {}}
    nstep = {'size': 3, 'gamma': 0.5, 'rew': 'rew', 'next': 'next_obs'}
    ours = PrioritizedReplayBuffer(32, spec, alpha=1., eps=0., Nstep=nstep)
    theirs = cpprb.PrioritizedReplayBuffer(32, {k: dict(v) for k, v in spec.items()}, alpha=1., eps=0., Nstep=dict(nstep))
    seen = []
    for t, p in enumerate([4., None, 9., None, 2.]):
        kw = dict(obs=t, rew=1., next_obs=t + 1, done=float(t == 4))
        if p is not None: kw['priorities'] = p
        for r in (ours, theirs): r.add(**kw)
        seen.append((ours.get_max_priority(), theirs.get_max_priority()))
    for r in (ours, theirs): r.on_episode_end()
    assert all(a == b for a, b in seen) and [a for a, _ in seen] == [1., 1., 4., 4., 9.]
    assert ours.get_max_priority() == theirs.get_max_priority() == 9.
    # given, or the largest when the step was added (not when it left the window): 4, 1, 9, 4, 2
    np.testing.assert_array_equal(ours.replay.sampler.get_priority(range(5)).numpy(), [4., 1., 9., 4., 2.])

# --- input, state, files -----------------------------------------------------------------------------------------

def test_bad_input_raises_names_it_and_changes_nothing():
    spec = {'obs': {'shape': 2}, 'rew': {}, 'next_obs': {'shape': 2}, 'done': {}}
    nstep = {'size': 3, 'gamma': 0.5, 'rew': 'rew', 'next': 'next_obs'}
    ours = PrioritizedReplayBuffer(8, spec, Nstep=nstep, seed=0)
    theirs = cpprb.PrioritizedReplayBuffer(8, {k: dict(v) for k, v in spec.items()}, Nstep=dict(nstep))
    good = lambda t: dict(obs=[t, t], rew=t, next_obs=[t + 1, t + 1], done=0.)
    for t in range(4):
        for r in (ours, theirs): r.add(**good(t), priorities=t)
    before = ours.get_all_transitions(), ours.get_max_priority(), ours.replay.sampler.get_priority(range(8)).numpy()
    bad = [(dict(good(9), colour=1), "unexpected ['colour']"),
           ({k: v for k, v in good(9).items() if k != 'done'}, "missing ['done']"),
           (dict(good(9), obs=[1, 2, 3]), 'obs: expected shape (2,) or a batch of shape (n, 2), got (3,)'),
           (dict(good(9), rew=[1, 2]), "every value needs the same number of steps, got {'obs': 1, 'rew': 2, 'next_obs': 1, 'done': 1}"),
           (dict(good(9), obs=['a', 'b']), 'obs: expected numbers'),
           (dict(good(9), priorities=-1.), 'expected finite values >= 0, got [-1.0]'),
           (dict(good(9), priorities=[1., 2.]), 'expected 1 priorities, one per transition, got 2')]
    for kw, msg in bad:
        with pytest.raises(ExperienceReplayException) as e: ours.add(**kw)
        assert msg in str(e.value), (msg, str(e.value))
    for call, msg in [(lambda: ours.update_priorities([0, 8], [1., 1.]), 'indexes [8] are out of range'),
                      (lambda: ours.update_priorities([0], None), 'expected 1 priorities'),
                      (lambda: ours.update_priorities([0], [float('nan')]), 'expected finite values >= 0'),
                      (lambda: ours.sample(4, beta=-1.), 'beta must be a finite number >= 0'),
                      (lambda: ours.sample(0), 'bs must be a positive int')]:
        with pytest.raises(ExperienceReplayException) as e: call()
        assert msg in str(e.value), (msg, str(e.value))
    after = ours.get_all_transitions(), ours.get_max_priority(), ours.replay.sampler.get_priority(range(8)).numpy()
    for k in before[0]: np.testing.assert_array_equal(before[0][k], after[0][k])
    assert before[1] == after[1]
    np.testing.assert_array_equal(before[2], after[2])
    for t in range(4, 6):  # the n-step window is intact: the next adds store what cpprb stores
        assert ours.add(**good(t)) == theirs.add(**good(t))
    for r in (ours, theirs): r.on_episode_end()
    o, t = ours.get_all_transitions(), theirs.get_all_transitions()
    for k in ('obs', 'rew'): np.testing.assert_array_equal(o[k], t[k])

@pytest.mark.parametrize('args, msg', [
    (dict(size=0, env_dict={'a': {}}), 'size must be a positive int, got 0'),
    (dict(size=2.5, env_dict={'a': {}}), 'size must be a positive int, got 2.5'),
    (dict(size=4, env_dict={}), 'env_dict must name at least one value'),
    (dict(size=4, env_dict={'a': {'shpae': 3}}), "env_dict['a']: expected the keys 'shape' and 'dtype', got also ['shpae']"),
    (dict(size=4, env_dict={'a': {'shape': (0, 2)}}), "'shape' must be a positive int or a tuple of them, got (0, 2)"),
    (dict(size=4, env_dict={'a': {'dtype': np.longdouble}}), "env_dict['a']: dtype float128 cannot be stored"),
    (dict(size=4, env_dict={'td_error': {}}), "the name 'td_error' is reserved"),
    (dict(size=4, env_dict={'a': {}}, next_of='b'), "next_of: ['b'] are not in env_dict ['a']"),
    (dict(size=4, env_dict={'a': {}, 'next_a': {}}, next_of='a'), "next_of='a' adds 'next_a': env_dict must not name it too"),
    (dict(size=4, env_dict={'a': {}}, Nstep={'size': 2, 'rew': 'a'}), "Nstep: ['done'] are not among the values ['a']"),
    (dict(size=4, env_dict={'a': {'dtype': np.int32}, 'done': {}}, Nstep={'size': 2, 'rew': 'a'}), "Nstep: rewards are summed in their dtype"),
    (dict(size=4, env_dict={'a': {}, 'done': {}}, Nstep={'size': 0}), "Nstep['size'] must be a positive int, got 0")])
def test_bad_settings_raise_naming_them(args, msg):
    with pytest.raises(ExperienceReplayException) as e: ReplayBuffer(**args)
    assert msg in str(e.value), str(e.value)
    with pytest.raises(ExperienceReplayException, match='are the names of what a prioritized buffer takes'):
        PrioritizedReplayBuffer(4, {'weights': {}})

def test_clear_empties_both_alike():
    spec = {'obs': {}, 'rew': {}, 'next_obs': {}, 'done': {}}
    nstep = {'size': 2, 'gamma': 0.5, 'rew': 'rew', 'next': 'next_obs'}
    ours = PrioritizedReplayBuffer(4, spec, Nstep=nstep, seed=0)
    theirs = cpprb.PrioritizedReplayBuffer(4, {k: dict(v) for k, v in spec.items()}, Nstep=dict(nstep))
    for r in (ours, theirs):
        r.add(obs=np.arange(5.), rew=np.ones(5), next_obs=np.arange(1., 6.), done=np.zeros(5), priorities=np.arange(5.) + 2)
        r.clear()
    assert (ours.get_stored_size(), ours.get_next_index(), ours.get_max_priority()) == \
           (theirs.get_stored_size(), theirs.get_next_index(), theirs.get_max_priority()) == (0, 0, 1.)
    for r in (ours, theirs): r.add(obs=[7., 8.], rew=[1., 1.], next_obs=[8., 9.], done=[0., 1.]); r.on_episode_end()
    o, t = ours.get_all_transitions(), theirs.get_all_transitions()
    for k in ('obs', 'rew'): np.testing.assert_array_equal(o[k], t[k])  # nothing of the cleared window is left
    with pytest.raises(ExperienceReplayException, match='holds no transitions'):
        ReplayBuffer(4, {'obs': {}}).sample(2)

def test_mmap_prefix_keeps_the_columns_in_files(tmp_path):
    d = tmp_path/'rb'
    ours, theirs = ReplayBuffer(6, env_dict(), mmap_prefix=d), cpprb.ReplayBuffer(6, env_dict())
    rng = np.random.default_rng(0)
    for n in (4, 5):
        b = steps(rng, n, 0)
        for r in (ours, theirs): r.add(**b)
    assert sorted(p.name for p in d.iterdir())[:2] == ['00_obs.npy', '01_act.npy']
    assert_same(ours.get_all_transitions(), theirs.get_all_transitions())
    np.testing.assert_array_equal(np.load(d/'00_obs.npy', mmap_mode='r'), ours.get_all_transitions()['obs'])
    ours.clear()
    assert ours.get_stored_size() == 0
    with pytest.raises(ExperienceReplayException, match='holds the arrays of another memory'):
        ReplayBuffer(6, env_dict(), mmap_prefix=d)

@pytest.mark.parametrize('cls', [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_checkpoint_of_the_core_memory_restores_the_transitions_and_the_draws(cls, tmp_path):
    from fastrl_replay.memory.persist import load_memory
    a = cls(8, env_dict(), seed=4)
    a.add(**steps(np.random.default_rng(0), 11, 0))
    a.sample(3)
    a.replay.save(tmp_path/'ck')
    b = cls(8, env_dict(), seed=4)
    b.replay.load_state_dict(load_memory(tmp_path/'ck').state_dict())
    assert_same(b.get_all_transitions(), a.get_all_transitions())
    assert (b.get_stored_size(), b.get_next_index()) == (a.get_stored_size(), a.get_next_index()) == (8, 3)
    assert_same(b.sample(16), a.sample(16))

def test_samples_are_new_contiguous_arrays_of_the_drawn_rows():
    ours = ReplayBuffer(8, env_dict())
    ours.add(**steps(np.random.default_rng(0), 5, 0))
    np.random.seed(3)
    s = ours.sample(6)
    np.random.seed(3)
    idx = np.random.randint(0, 5, 6)
    assert_same(s, ours._encode_sample(idx))
    assert all(v.flags.c_contiguous for v in s.values())
    s['obs'][:] = -1  # the sample is the caller's: the stored rows are untouched
    assert ours._encode_sample(idx)['obs'].min() >= 0
    assert {k: v.shape for k, v in ours.get_all_transitions().items()}['obs'] == (5, 2, 3)

def test_sample_none_refused():
    "`sample(None)` raises the library's exception in both buffers, as cpprb's prioritized buffer refuses it"
    for C in (ReplayBuffer, PrioritizedReplayBuffer):
        ours = C(8, {'obs': {}}, seed=0)
        for t in range(3): ours.add(obs=float(t))
        before = ours.get_all_transitions()
        for bad in (None, 0, 1.5):
            with pytest.raises(ExperienceReplayException, match='bs must be a positive int'): ours.sample(bad)
        if C is PrioritizedReplayBuffer:  # the refused call leaves the importance-sampling exponent as it was
            beta = ours.replay.sampler.beta
            with pytest.raises(ExperienceReplayException): ours.sample(None, beta=beta + 0.25)
            assert ours.replay.sampler.beta == beta
        after = ours.get_all_transitions()
        np.testing.assert_array_equal(before['obs'], after['obs'])
    theirs = cpprb.PrioritizedReplayBuffer(8, {'obs': {}})
    theirs.add(obs=1.)
    with pytest.raises(TypeError): theirs.sample(None)
