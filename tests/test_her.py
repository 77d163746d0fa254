"Hindsight replay: property tests of the relabelled goals, rewards, episode bounds, checkpoints and refused input"
import tempfile
import numpy as np, pytest, torch
from hypothesis import given, example, settings, strategies as st, HealthCheck
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.her import HindsightReplay, HindsightSampler, relabelled_count, STRATEGIES
from fastrl_replay.memory.prioritized import PrioritizedSampler
from fastrl_replay.memory.persist import load_memory, load_into

CALLS = []
def compute_reward(achieved, desired, info):
    "0 where the goal is reached, -1 elsewhere; counts its calls"
    CALLS.append(len(achieved))
    return -(achieved != desired).any(-1).astype(np.float32)

def stream(lengths, truncate, n_envs=1):
    "Steps of episodes of `lengths` per environment, interleaved; step s of episode e reaches goal (env, e, s + 1)"
    per_env = []
    for e in range(n_envs):
        rows, s = [], 0
        for ep, n in enumerate(lengths):
            for i in range(n):
                last = i == n - 1
                rows.append(dict(env=e, ep=ep, s=s, done=last and not truncate[ep % len(truncate)],
                                 trunc=last and truncate[ep % len(truncate)])); s += 1
        per_env.append(rows)
    return [r for step in zip(*per_env) for r in step]

def batch(rows):
    "The memory batch of `rows` from `stream`"
    g = lambda r, k: [r['env'], r['ep'], r['s'] + k]
    goal = np.array([[-1, -1, -1]] * len(rows), np.float32)
    return dict(state=dict(observation=np.array([[r['s']] for r in rows], np.float32),
                           achieved_goal=np.array([g(r, 0) for r in rows], np.float32), desired_goal=goal),
                next_state=dict(observation=np.array([[r['s'] + 1] for r in rows], np.float32),
                                achieved_goal=np.array([g(r, 1) for r in rows], np.float32), desired_goal=goal.copy()),
                action=np.zeros((len(rows), 1), np.int64), reward=np.full((len(rows), 1), -1., np.float32),
                done=np.array([[r['done']] for r in rows]), truncated=np.array([[r['trunc']] for r in rows]))

def filled(rows, chunks, max_sz, n_envs=1, **kw):
    "A memory given `rows` in adds of whole steps, `chunks` steps at a time"
    mem = HindsightReplay(compute_reward, bs=64, max_sz=max_sz, warmup_sz=1, n_envs=n_envs, seed=0, **kw)
    i, k = 0, 0
    while i < len(rows):
        n = chunks[k % len(chunks)] * n_envs; k += 1
        mem + batch(rows[i:i + n]); i += n
    return mem

episodes = st.lists(st.integers(1, 9), min_size=1, max_size=8)
truncs = st.lists(st.booleans(), min_size=1, max_size=4)
chunks = st.lists(st.integers(1, 5), min_size=1, max_size=4)

def bounds(rows, max_sz, n_envs):
    "Per (env, ep): its steps written and still stored, its last step, and whether it ended"
    total = len(rows) // n_envs
    info = {}
    for r in rows:
        d = info.setdefault((r['env'], r['ep']), dict(steps=[], ended=False))
        d['steps'].append(r['s']); d['ended'] |= r['done'] or r['trunc']
    return info, total - max_sz // n_envs  # steps before this one are overwritten

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episodes, truncs, chunks, st.sampled_from(STRATEGIES), st.integers(0, 6), st.sampled_from([1, 2]),
       st.sampled_from([8, 12, 64]))
@example([5], [False], [5], 'final', 1, 2, 8)  # one add of more rows than the ring holds
def test_relabelled_goals(lengths, truncate, chunk, strategy, n_goal, n_envs, max_sz):
    rows = stream(lengths, truncate, n_envs)
    mem = filled(rows, chunk, max_sz, n_envs, n_sampled_goal=n_goal, goal_selection_strategy=strategy)
    info, oldest = bounds(rows, max_sz, n_envs)
    CALLS.clear()
    b, idxs = mem.sample(64)
    w = mem.sampler.last_relabelled
    test_rows = torch.ones(64, dtype=torch.bool); test_rows[w] = False
    assert len(w) == relabelled_count(64, n_goal) == 64 * n_goal // (n_goal + 1)  # the relabelled share is the ratio
    assert CALLS == ([len(w)] if len(w) else [])  # one vectorised call per batch
    # rows kept as stored: their goal and reward untouched
    assert (b['state']['desired_goal'][test_rows] == -1).all() and (b['reward'][test_rows] == -1).all()
    goal, nxt = b['state']['desired_goal'][w].long().numpy(), b['next_state']['achieved_goal'][w].numpy()
    assert (b['next_state']['desired_goal'][w].long().numpy() == goal).all()
    assert np.array_equal(b['reward'][w].ravel().numpy(), -(nxt != goal).any(-1).astype(np.float32))
    for (env, ep, s), (genv, gep, gs) in zip(b['state']['achieved_goal'][w].long().tolist(), goal.tolist()):
        d = info[(env, ep)]
        reached = [x + 1 for x in d['steps'] if x >= oldest]  # next achieved goals still stored
        assert (genv, gep) == (env, ep), 'a goal from another episode or environment'
        assert gs in reached, 'a goal not reached, or overwritten: across the cursor'
        if strategy == 'future': assert gs >= s + 1
        if strategy == 'final': assert gs == max(reached)

@settings(max_examples=25, deadline=None)
@given(episodes, truncs, chunks, st.sampled_from([1, 2]))
def test_checkpoint_resume_exact(lengths, truncate, chunk, n_envs):
    rows = stream(lengths, truncate, n_envs)
    mem = filled(rows, chunk, 16, n_envs, sampler=PrioritizedSampler(seed=3))
    mem.sample(8)
    with tempfile.TemporaryDirectory() as d:
        mem.save(f'{d}/m')
        back = load_memory(f'{d}/m')
        into = filled(stream([2], [False], n_envs), [1], 16, n_envs, sampler=PrioritizedSampler(seed=9))
        load_into(into, f'{d}/m')
    with pytest.raises(ExperienceReplayException, match='compute_reward'): back.sample(8)
    back.sampler.compute_reward = compute_reward
    for m in (back, into):
        for _ in range(3):
            (a, ia), (c, ic) = mem.sample(8), m.sample(8)
            assert torch.equal(ia, ic) and torch.equal(a['reward'], c['reward'])
            assert torch.equal(a['weight'], c['weight'])
            assert torch.equal(a['state']['desired_goal'], c['state']['desired_goal'])
            td = torch.arange(8.)
            mem.update_td(td, ia); m.update_td(td, ic)
        mem = filled(rows, chunk, 16, n_envs, sampler=PrioritizedSampler(seed=3)); mem.sample(8)

def _same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    for k in ('t_of', 'ep_begin', 'ep_end', 'steps', 'open_begin'):
        assert np.array_equal(sa['sampler'][k], sb['sampler'][k])
    assert a.storage.keys == b.storage.keys
    for k in a.storage.keys: assert torch.equal(a.storage.column(k), b.storage.column(k))
    assert len(a) == len(b) and a.pointer == b.pointer

@pytest.mark.parametrize('spoil', ['no_done', 'no_desired', 'goal_shape', 'goal_dtype', 'rows', 'flat_obs', 'nested'])
def test_bad_input_refused_unchanged(spoil):
    mem = filled(stream([3, 2], [False], 2), [1], 16, 2)
    ref = filled(stream([3, 2], [False], 2), [1], 16, 2)
    b = batch(stream([2], [False], 2)[:2])
    if spoil == 'no_done': del b['done']
    if spoil == 'no_desired': del b['next_state']['desired_goal']
    if spoil == 'goal_shape': b['state']['desired_goal'] = np.zeros((2, 4), np.float32)
    if spoil == 'goal_dtype': b['state']['achieved_goal'] = np.zeros((2, 3), np.complex64)
    if spoil == 'rows': b = batch(stream([2], [False], 2)[:1])
    if spoil == 'flat_obs': b['state'] = np.zeros((2, 1), np.float32)
    if spoil == 'nested': b['state']['observation'] = {'x': np.zeros((2, 1), np.float32)}
    with pytest.raises(ExperienceReplayException): mem + b
    _same(mem, ref)
    s0 = mem.sampler.state_dict()
    bad = {**s0, 'ep_end': s0['ep_end'][:-1]}
    with pytest.raises(ExperienceReplayException): mem.sampler.load_state_dict(bad)
    _same(mem, ref)

def test_settings_refused():
    with pytest.raises(ExperienceReplayException, match='future'):
        HindsightSampler(compute_reward, goal_selection_strategy='x')
    with pytest.raises(ExperienceReplayException, match='n_sampled_goal'):
        HindsightSampler(compute_reward, n_sampled_goal=-1)
    with pytest.raises(ExperienceReplayException, match='multiple'):
        HindsightReplay(compute_reward, max_sz=9, warmup_sz=1, n_envs=2)

def test_reproducible_from_seed():
    rows = stream([4, 5, 3], [True, False])
    a, b = filled(rows, [2], 32), filled(rows, [2], 32)
    for _ in range(3):
        (x, i), (y, j) = a.sample(16), b.sample(16)
        assert torch.equal(i, j) and torch.equal(x['state']['desired_goal'], y['state']['desired_goal'])

def test_host_paths_match_torch_paths(monkeypatch):
    "NumPy's reads and writes of CPU columns give the batches and episode bounds torch's indexing gives"
    import fastrl_replay.memory.her as her
    rows = stream([4, 7, 3, 9, 2], [True, False, False])
    host = filled(rows, [2, 3], 24)
    as_ints = lambda b: b | {k: b[k].astype(np.int8) for k in ('done', 'truncated')}  # ends read by torch: not bool
    mem = HindsightReplay(compute_reward, bs=64, max_sz=24, warmup_sz=1, seed=0)
    for i in range(0, len(rows), 2): mem + as_ints(batch(rows[i:i + 2]))
    for k in ('t_of', 'ep_begin', 'ep_end', 'steps', 'open_begin'):
        np.testing.assert_array_equal(getattr(host.sampler, k), getattr(mem.sampler, k))
    torched = filled(rows, [2, 3], 24)
    monkeypatch.setattr(her, '_host_views', lambda *ts: None)  # every relabelling through torch's indexing
    for _ in range(5):
        monkeypatch.undo(); (x, i) = host.sample(40)
        monkeypatch.setattr(her, '_host_views', lambda *ts: None); (y, j) = torched.sample(40)
        assert torch.equal(i, j) and torch.equal(host.sampler.last_relabelled, torched.sampler.last_relabelled)
        for k in ('state', 'next_state'):
            for g in ('achieved_goal', 'desired_goal'): assert torch.equal(x[k][g], y[k][g])
        assert torch.equal(x['reward'], y['reward']) and (x['reward'] == 0).any()
