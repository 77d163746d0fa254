"""Bytes per transition of Dict-observation memories, from their columns: the SB3 adapters against SB3's arrays, the
memories our learners make; the adapters' flags and their sampler, which keeps nothing per row."""
import copy, math
import gymnasium as gym, numpy as np, pytest, torch
from stable_baselines3.common.buffers import DictReplayBuffer as SB3DictReplayBuffer
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.her.her_replay_buffer import HerReplayBuffer as SB3HerReplayBuffer
from fastrl_replay.compat.sb3 import DictReplayBuffer, HerReplayBuffer, SlotSampler
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ColumnStorage
from fastrl_replay.memory.checks import TD_DTYPE
from run_helpers import same

N_BITS, SIZE = 15, 600

def venv(n_envs=1):
    return DummyVecEnv([lambda: BitFlippingEnv(n_bits=N_BITS, continuous=False) for _ in range(n_envs)])

def ring_bytes(state, rows:int) -> int:
    "Bytes of the arrays in nested state `state` that hold one entry per row of a ring of `rows` (counted once each)"
    if isinstance(state, (np.ndarray, torch.Tensor)):
        return state.nbytes if len(state.shape) and state.shape[0] == rows else 0
    vals = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else ()
    return sum(ring_bytes(v, rows) for v in vals)

def sb3_bytes(rb) -> float:
    "Bytes per transition of SB3's buffer: its arrays of `(buffer_size, n_envs, ...)`, an object array's dicts too"
    arrays = [v for v in vars(rb).values() if isinstance(v, np.ndarray)]
    arrays += [a for v in vars(rb).values() if isinstance(v, dict) for a in v.values() if isinstance(a, np.ndarray)]
    held = [a for a in arrays if a.ndim and a.shape[0] == rb.buffer_size]
    objects = sum(sum(map(__import__('sys').getsizeof, a.ravel())) for a in held if a.dtype == object)
    return (sum(a.nbytes for a in held) + objects) / (rb.buffer_size * rb.n_envs)

def column_bytes(storage) -> int:
    "A row's bytes as its columns declare them, rounded up to the widest value (the row block's alignment)"
    cols = [storage.column(k) for k in storage.keys]
    raw = sum(c.element_size() * math.prod(c.shape[1:]) for c in cols)
    widest = max(c.element_size() for c in cols)
    return -(-raw // widest) * widest

def steps(env, n, seed=0):
    "`n` steps under random actions, as SB3's off-policy loop adds them (terminal observations given)"
    env.seed(seed)
    rng, obs, res = np.random.default_rng(seed), env.reset(), []
    for _ in range(n):
        act = rng.integers(0, N_BITS, env.num_envs)
        nxt, rew, done, infos = env.step(act)
        real = {k: v.copy() for k, v in nxt.items()}
        for i in np.flatnonzero(done):
            for k in real: real[k][i] = infos[i]['terminal_observation'][k]
        res.append((obs, real, act, rew, done, infos)); obs = nxt
    return res

def test_dict_adapter_holds_its_columns_and_nothing_per_row_below_sb3s():
    env = venv()
    ours = DictReplayBuffer(SIZE, env.observation_space, env.action_space, device='cpu')
    theirs = SB3DictReplayBuffer(SIZE, env.observation_space, env.action_space, device='cpu')
    per_row = ring_bytes(ours.replay.state_dict(), SIZE) / SIZE
    assert per_row == column_bytes(ours.replay.storage)  # the columns, and nothing per row in the sampler
    obs_bytes = sum(s.dtype.itemsize * math.prod(s.shape) for s in env.observation_space.spaces.values())
    assert sb3_bytes(theirs) == 2 * obs_bytes + 8 + 3 * 4  # SB3's: each observation twice, int64 action, 3 float32
    assert per_row < sb3_bytes(theirs)

def test_her_adapter_holds_its_columns_and_episode_bookkeeping_below_sb3s():
    env = venv()
    ours = HerReplayBuffer(SIZE, env.observation_space, env.action_space, env, device='cpu')
    theirs = SB3HerReplayBuffer(SIZE, env.observation_space, env.action_space, env, device='cpu')
    assert ours.infos is None  # kept only with copy_info_dict
    bookkeeping = sum(getattr(ours.replay.sampler, k).nbytes for k in ('t_of', 'ep_begin', 'ep_end')) / SIZE
    per_row = ring_bytes(ours.replay.state_dict(), SIZE) / SIZE
    assert per_row == column_bytes(ours.replay.storage) + bookkeeping
    assert per_row < sb3_bytes(theirs)

@pytest.mark.parametrize('her', [False, True])
def test_learner_dict_memory_holds_its_columns_and_the_core_per_row_state(her):
    from fastrl_replay.agents.dqn import dqn_learner
    from fastrl_replay.envs.goal import BIT_FLIP
    relabel = dict(strategy='future') if her else None
    learn = dqn_learner(gym.make(BIT_FLIP, n_bits=N_BITS), n_steps=1 if her else None, steps_per_epoch=50,
                        replay=dict(max_sz=SIZE, warmup_sz=10, her=relabel), valid=dict(n_episodes=0))
    memory = learn.experience_replay.memory
    memory + learn.dls.train.dataset.batch(2)
    sampler = memory.sampler.base if her else memory.sampler
    core = TD_DTYPE.itemsize + torch.int8.itemsize + torch.int32.itemsize  # TD error, hand-out mark, generation
    assert [a.element_size() for a in (sampler.td_errors, sampler.handed, sampler.written)] == [4, 1, 4]
    bookkeeping = 3 * np.dtype(np.int64).itemsize if her else 0  # each row's step, episode start and end
    per_row = ring_bytes(memory.state_dict(), SIZE) / SIZE
    assert per_row == column_bytes(memory.storage) + core + bookkeeping

def filled(n_envs=2, n=45, size=20):  # episodes of 15 steps: the last ends in the buffer
    env = venv(n_envs)
    rb = DictReplayBuffer(size, env.observation_space, env.action_space, device='cpu', n_envs=n_envs)
    for s in steps(env, n): rb.add(*s)
    return env, rb

def test_dones_and_timeouts_are_flags_and_samples_are_sb3s():
    env, ours = filled()
    theirs = SB3DictReplayBuffer(20, env.observation_space, env.action_space, device='cpu', n_envs=2)
    for s in steps(env, 45): theirs.add(*s)
    assert ours.dones.dtype == ours.timeouts.dtype == np.int8 and ours.dones.any()
    assert np.array_equal(ours.dones, theirs.dones) and np.array_equal(ours.timeouts, theirs.timeouts)
    np.random.seed(5); a = ours.sample(32)
    np.random.seed(5); b = theirs.sample(32)
    assert a.dones.dtype == b.dones.dtype == torch.float32 and torch.equal(a.dones, b.dones)
    assert torch.equal(a.rewards, b.rewards) and torch.equal(a.actions, b.actions.to(a.actions.dtype))

def test_a_done_that_is_not_a_flag_raises_and_changes_nothing():
    env, rb = filled()
    before, pos = copy.deepcopy(rb.replay.state_dict()), rb.pos
    obs, nxt, act, rew, done, infos = steps(env, 1, seed=1)[0]
    for bad in (np.array([0.5, 0.]), np.array([2, 0]), np.array([np.nan, 0.])):
        with pytest.raises(ExperienceReplayException, match='done'): rb.add(obs, nxt, act, rew, bad, infos)
    with pytest.raises(ExperienceReplayException, match='infos'):
        rb.add(obs, nxt, act, rew, done, [{'TimeLimit.truncated': 0.3}, {}])
    same(rb.replay.state_dict(), before); assert rb.pos == pos
    rb.add(obs, nxt, act, rew, np.array([1., 0.]), infos)  # numbers 0 and 1 are flags
    assert rb.dones[pos].tolist() == [1, 0]

def test_the_slot_sampler_keeps_no_td_errors_and_refuses_them_unchanged():
    env, rb = filled()
    m = rb.replay
    assert isinstance(m.sampler, SlotSampler) and not m.sampler.per_row
    assert m.td_errors.tolist() == [0.] * len(m)
    batch = m.storage.gather(torch.arange(2))
    before, rng = copy.deepcopy(m.state_dict()), np.random.get_state()
    with pytest.raises(ExperienceReplayException, match='TD errors'): m.update_td([1.], [0])
    with pytest.raises(ExperienceReplayException, match='TD errors'): m.sample(4, generations=True)
    with pytest.raises(ExperienceReplayException, match='td_error'): m + {**batch, 'td_error': torch.ones(2)}
    with pytest.raises(ExperienceReplayException, match='td_error'):
        m.append({k: v[0] for k, v in _flat(batch).items()} | {'td_error': 1.})
    same(m.state_dict(), before)
    assert np.array_equal(np.random.get_state()[1], rng[1]) and np.random.get_state()[2] == rng[2]  # nothing drawn

def _flat(b) -> dict:
    "Batch `b`'s columns, a Dict observation's keys as columns `name.<key>`"
    return {f'{k}.{j}' if isinstance(v, dict) else k: x for k, v in b.items()
            for j, x in (v.items() if isinstance(v, dict) else [(None, v)])}

def old_format(rb) -> dict:
    "`rb`'s pickled state as an older adapter wrote it: float32 `done` and `timeout`, per-row sampler arrays"
    d = rb.__getstate__()
    st = d['replay_state']['storage']
    old = ColumnStorage(st['max_sz'])
    cols = {k: rb.replay.storage.column(k).clone() for k in rb.replay.storage.keys}
    cols['done'], cols['timeout'] = cols['done'].float(), cols['timeout'].float()
    old.add(cols)
    old_state = old.state_dict()
    old_state.update(pointer=st['pointer'], len=st['len'])
    m = st['max_sz']
    sampler = dict(d['replay_state']['sampler'], td=torch.zeros(m), handed=torch.zeros(m, dtype=torch.int8),
                   written=torch.ones(m, dtype=torch.int64), n_stale=0)
    return {**d, 'replay_state': {**d['replay_state'], 'storage': old_state, 'sampler': sampler}}

def test_an_older_pickle_loads_with_its_flags_and_samples_the_same():
    env, rb = filled()
    back = DictReplayBuffer.__new__(DictReplayBuffer)
    back.__setstate__(old_format(rb))
    assert back.dones.dtype == np.int8
    for k in rb.observations: assert np.array_equal(back.next_observations[k], rb.next_observations[k])
    assert np.array_equal(back.dones, rb.dones) and np.array_equal(back.timeouts, rb.timeouts) and back.pos == rb.pos
    np.random.seed(2); a = rb.sample(16)
    np.random.seed(2); b = back.sample(16)
    assert torch.equal(a.dones, b.dones) and torch.equal(a.rewards, b.rewards)

def test_an_older_pickle_holding_what_this_one_cannot_keep_is_refused():
    env, rb = filled()
    d = old_format(rb)
    d['replay_state']['sampler']['td'][3] = 1.5  # TD errors: SB3's buffers take none back, the sampler keeps none
    with pytest.raises(ExperienceReplayException, match='TD errors'):
        DictReplayBuffer.__new__(DictReplayBuffer).__setstate__(d)
    d = old_format(rb)
    rows = d['replay_state']['storage']['rows']
    spec = d['replay_state']['storage']['columns']['done']
    np.ndarray((len(rows),), np.float32, rows, spec['offset'], (rows.strides[0],))[0] = 0.5  # not a flag
    with pytest.raises(ExperienceReplayException, match='done'):
        DictReplayBuffer.__new__(DictReplayBuffer).__setstate__(d)
