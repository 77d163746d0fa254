"The SB3 adapters against Stable-Baselines3 itself: the same arrays and samples, the same DQN training; prioritized replay for SB3's DQN."
import pickle, warnings
import numpy as np, pytest, torch
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.compat.sb3 import ReplayBuffer, PrioritizedReplayBuffer, PrioritizedReplayBufferSamples, PrioritizedDQN

ARRAYS = ('observations', 'next_observations', 'actions', 'rewards', 'dones', 'timeouts')
SPACES = {
    'box-discrete': (spaces.Box(-5, 5, (3,), np.float32), spaces.Discrete(4)),
    'discrete-box64': (spaces.Discrete(6), spaces.Box(-1, 1, (2,), np.float64)),
    'image-multidiscrete': (spaces.Box(0, 255, (2, 3, 3), np.uint8), spaces.MultiDiscrete([3, 2])),
    'multibinary-box': (spaces.MultiBinary(5), spaces.Box(-1, 1, (1,), np.float32)),
}

def step_values(rng, obs_space, act_space, n_envs, t):
    "One step of `n_envs` environments, in the shapes an SB3 algorithm passes"
    def obs(k):
        if isinstance(obs_space, spaces.Discrete): return (np.arange(n_envs) + k) % obs_space.n
        return ((np.arange(n_envs)[:, None] + k + np.zeros((n_envs, int(np.prod(obs_space.shape))))) % 100).reshape(n_envs, *obs_space.shape).astype(obs_space.dtype)
    act = np.stack([act_space.sample() for _ in range(n_envs)])
    done = rng.random(n_envs) < 0.2
    infos = [{'TimeLimit.truncated': bool(d and rng.random() < 0.5)} for d in done]
    return obs(t), obs(t + 1), act, rng.normal(size=n_envs), done, infos

def pair(name, n_envs=1, size=10, **kw):
    obs_space, act_space = SPACES[name]
    act_space.seed(0)
    return (ReplayBuffer(size, obs_space, act_space, device='cpu', n_envs=n_envs, **kw),
            SB3ReplayBuffer(size, obs_space, act_space, device='cpu', n_envs=n_envs, **kw))

def assert_samples_equal(a, b):
    assert type(a).__name__ == type(b).__name__ == 'ReplayBufferSamples'
    for x, y in zip(a, b):
        if y is None: assert x is None; continue
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device
        assert torch.equal(x, y)

@pytest.mark.parametrize('name', list(SPACES))
@pytest.mark.parametrize('n_envs', [1, 3])
@pytest.mark.parametrize('timeouts', [True, False])
def test_arrays_and_samples_equal_sb3s(name, n_envs, timeouts):
    rng = np.random.default_rng(n_envs)
    ours, theirs = pair(name, n_envs, size=12, handle_timeout_termination=timeouts)
    for t in range(11):  # 4 slots of 3 envs (12 of 1) fill and wrap
        v = step_values(rng, *SPACES[name], n_envs, t)
        for b in (ours, theirs): b.add(*v)
        assert (ours.pos, ours.full, ours.size()) == (theirs.pos, theirs.full, theirs.size())
        for k in ARRAYS:
            x, y = getattr(ours, k), getattr(theirs, k)
            assert x.dtype == y.dtype and x.shape == y.shape, k
            np.testing.assert_array_equal(x, y, err_msg=k)
        for bs in (1, 16):
            np.random.seed(t + bs); expected = theirs.sample(bs)
            np.random.seed(t + bs); assert_samples_equal(ours.sample(bs), expected)
        inds = rng.integers(0, theirs.size(), 5)
        np.random.seed(t); expected = theirs._get_samples(inds)
        np.random.seed(t); assert_samples_equal(ours._get_samples(inds), expected)

def test_a_seeded_buffer_draws_what_sb3_draws_after_that_seed():
    rng = np.random.default_rng(0)
    ours = ReplayBuffer(8, *SPACES['box-discrete'], device='cpu', n_envs=2, seed=7)
    theirs = SB3ReplayBuffer(8, *SPACES['box-discrete'], device='cpu', n_envs=2)
    for t in range(6):
        v = step_values(rng, *SPACES['box-discrete'], 2, t)
        for b in (ours, theirs): b.add(*v)
    np.random.seed(7)
    for _ in range(3): assert_samples_equal(ours.sample(10), theirs.sample(10))

def episodes_for_optimized(rng, n_steps):
    "Steps of one environment whose next observation is the next step's observation, except where an episode ends"
    o, steps = 0., []
    for t in range(n_steps):
        done = rng.random() < 0.25
        nxt = o + 1000. if done else o + 1.  # a terminal observation, which the next step's reset observation replaces
        steps.append((np.full((1, 3), o, np.float32), np.full((1, 3), nxt, np.float32), np.array([t % 4]), np.array([1.]), np.array([done]), [{}]))
        o = nxt + 1. if done else nxt
    return steps

def test_optimize_memory_usage_samples_sb3s_rows_with_the_next_observations_given():
    rng = np.random.default_rng(0)
    ours, theirs = pair('box-discrete', 1, size=9, optimize_memory_usage=True, handle_timeout_termination=False)
    differ = 0
    for t, v in enumerate(episodes_for_optimized(rng, 30)):
        for b in (ours, theirs): b.add(*v)
        np.random.seed(t); a = ours.sample(32)
        np.random.seed(t); b = theirs.sample(32)
        for k in ('observations', 'actions', 'dones', 'rewards'): assert torch.equal(getattr(a, k), getattr(b, k)), k
        other = (a.next_observations != b.next_observations).any(1)
        assert (a.dones[other] == 1).all()  # only where an episode ended: SB3 has the next episode's first observation there
        assert (a.next_observations[other] - a.observations[other] == 1000).all()  # the adapter, the terminal one given
        assert (a.next_observations - a.observations == torch.where(a.dones == 1, 1000., 1.)).all()  # always the one given
        if ours.full: assert ((a.observations[:, 0] // 1) != ours.observations[ours.pos, 0, 0]).all()  # never the slot about to go
        differ += int(other.sum())
    assert differ > 0
    for cls in (ReplayBuffer, SB3ReplayBuffer):
        with pytest.raises(ValueError, match='does not support optimize_memory_usage = True and handle_timeout_termination = True'):
            cls(8, *SPACES['box-discrete'], optimize_memory_usage=True)

def test_vecnormalize_normalizes_samples_as_sb3s():
    env = VecNormalize(make_vec_env('CartPole-v1', n_envs=1, seed=0), norm_obs=True, norm_reward=True)
    env.obs_rms.mean, env.obs_rms.var = np.array([1., -1., 0.5, 2.]), np.array([4., 0.25, 1., 9.])
    env.ret_rms.var = np.array(16.)
    space, act = env.observation_space, env.action_space
    ours, theirs = ReplayBuffer(16, space, act, device='cpu'), SB3ReplayBuffer(16, space, act, device='cpu')
    rng = np.random.default_rng(0)
    for t in range(10):
        v = (rng.normal(size=(1, 4)).astype(np.float32), rng.normal(size=(1, 4)).astype(np.float32), np.array([t % 2]),
             rng.normal(size=1), np.array([False]), [{}])
        for b in (ours, theirs): b.add(*v)
    np.random.seed(1); expected = theirs.sample(8, env=env)
    np.random.seed(1); got = ours.sample(8, env=env)
    assert_samples_equal(got, expected)
    assert not torch.equal(got.observations, ours._samples(ours.replay.storage.gather(torch.arange(8)), None).observations[:8])

def test_bad_input_raises_names_it_and_changes_nothing():
    ours = pair('box-discrete', 2, size=8)[0]
    rng = np.random.default_rng(0)
    for t in range(3): ours.add(*step_values(rng, *SPACES['box-discrete'], 2, t))
    before = {k: getattr(ours, k).copy() for k in ARRAYS}, ours.pos, ours.replay.pointer
    good = step_values(rng, *SPACES['box-discrete'], 2, 9)
    bad = [((np.zeros((3, 3)),) + good[1:], 'obs: expected shape (2, 3) (one value per environment), got (3, 3)'),
           (good[:1] + (np.zeros((2, 2)),) + good[2:], 'next_obs: expected shape (2, 3) (one value per environment), got (2, 2)'),
           (good[:2] + (np.zeros(3),) + good[3:], 'action: expected shape (2, 1) (one value per environment), got (3,)'),
           (good[:3] + (np.zeros(3),) + good[4:], 'reward: expected shape (2,) (one value per environment), got (3,)'),
           (good[:4] + (np.array(['a', 'b']),) + good[5:], 'done: expected numbers'),
           (good[:5] + ('x',), "infos: expected a list of 2 dicts or a vector env's dict of arrays, got str"),
           (good[:5] + ({'TimeLimit.truncated': np.array([True, False, True])},), 'infos: expected shape (2,) (one value per environment), got (3,)'),
           (good[:5] + ([{}, {}, {}],), 'infos: expected shape (2,) (one value per environment), got (3,)')]
    for args, msg in bad:
        with pytest.raises(ExperienceReplayException) as e: ours.add(*args)
        assert msg in str(e.value), (msg, str(e.value))
    assert {k: getattr(ours, k).tolist() for k in ARRAYS} == {k: v.tolist() for k, v in before[0].items()}
    assert (ours.pos, ours.replay.pointer) == before[1:]
    with pytest.raises(ExperienceReplayException, match='holds no transitions'): pair('box-discrete', 1)[0].sample(4)
    with pytest.raises(ExperienceReplayException, match='a Dict space needs a dict buffer'):
        ReplayBuffer(8, spaces.Dict({'a': spaces.Discrete(2)}), spaces.Discrete(2))
    with pytest.raises(ExperienceReplayException, match='n_envs must be a positive int, got 0'):
        ReplayBuffer(8, *SPACES['box-discrete'], n_envs=0)

def test_documented_usage_dummy_env_values_are_stored_exactly():
    "SB3's buffer tests use an environment whose observations and rewards count steps; the adapter stores them as given, in SB3's layout"
    model = DQN('MlpPolicy', make_vec_env('CartPole-v1', n_envs=2, seed=1), learning_starts=10_000, buffer_size=64,
                replay_buffer_class=ReplayBuffer, seed=1, device='cpu', policy_kwargs=dict(net_arch=[8]))
    rb = model.replay_buffer
    obs_space, act_space = rb.observation_space, rb.action_space
    for t in range(40):  # 32 slots of 2: wraps
        rb.add(np.full((2, 4), t, np.float32), np.full((2, 4), t + 1, np.float32), np.array([t % 2, 1 - t % 2]),
               np.array([t, 2 * t]), np.array([t % 5 == 4, False]), [{'TimeLimit.truncated': t % 10 == 9}, {}])
    assert (rb.buffer_size, rb.pos, rb.full) == (32, 8, True)
    slots = np.arange(32)
    t = np.where(slots < 8, slots + 32, slots)
    np.testing.assert_array_equal(rb.observations[:, 0, 0], t)
    np.testing.assert_array_equal(rb.rewards, np.stack([t, 2 * t], 1))
    np.testing.assert_array_equal(rb.dones[:, 0], t % 5 == 4)
    np.testing.assert_array_equal(rb.timeouts[:, 0], t % 10 == 9)
    s = rb.sample(256)
    np.testing.assert_array_equal(s.dones[:, 0].numpy(), ((s.observations[:, 0] % 5 == 4) & (s.observations[:, 0] % 10 != 9) &
                                                         (s.rewards[:, 0] == s.observations[:, 0])).numpy())

def dqn(buffer_class, n_envs=1, steps=1200, **kw):
    env = make_vec_env('CartPole-v1', n_envs=n_envs, seed=0) if n_envs > 1 else 'CartPole-v1'
    model = DQN('MlpPolicy', env, learning_starts=200, batch_size=32, train_freq=1, target_update_interval=100, buffer_size=500,
                policy_kwargs=dict(net_arch=[32]), replay_buffer_class=buffer_class, seed=0, device='cpu', **kw)
    return model.learn(steps)

@pytest.mark.parametrize('n_envs', [1, 2])
def test_sb3_dqn_trains_to_the_same_weights_with_the_adapter(n_envs):
    ours, theirs = dqn(ReplayBuffer, n_envs), dqn(SB3ReplayBuffer, n_envs)
    assert isinstance(ours.replay_buffer, ReplayBuffer) and ours.replay_buffer.full  # 1200 steps in a buffer of 500: wrapped
    for k in ARRAYS: np.testing.assert_array_equal(getattr(ours.replay_buffer, k), getattr(theirs.replay_buffer, k), err_msg=k)
    for (k, a), b in zip(ours.policy.state_dict().items(), theirs.policy.state_dict().values()): assert torch.equal(a, b), k
    assert ours._n_updates == theirs._n_updates == {1: 1000, 2: 500}[n_envs]

def test_optimized_dqn_truncates_the_last_trajectory_in_the_adapter_as_in_sb3s_buffer():
    "SB3 writes `replay_buffer.dones[pos] = True` when learning starts again over a memory-saving buffer"
    kw = dict(optimize_memory_usage=True, replay_buffer_kwargs=dict(handle_timeout_termination=False))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ours, theirs = dqn(ReplayBuffer, steps=300, **kw), dqn(SB3ReplayBuffer, steps=300, **kw)
        last = ours.replay_buffer.pos - 1
        assert ours.replay_buffer.dones[last, 0] == theirs.replay_buffer.dones[last, 0] == 0
        for m in (ours, theirs):  # reset_num_timesteps: the last trajectory is cut
            np.random.seed(1)  # the two models share NumPy's generator: each goes on from the same state
            m.learn(300)
    assert ours.replay_buffer.dones[last, 0] == theirs.replay_buffer.dones[last, 0] == 1
    a, b, pos = ours.replay_buffer, theirs.replay_buffer, ours.replay_buffer.pos
    keep = np.arange(a.buffer_size) != pos  # SB3 keeps the newest next observation in the slot about to be overwritten
    for k in ('observations', 'actions', 'rewards', 'dones'): np.testing.assert_array_equal(getattr(a, k)[keep], getattr(b, k)[keep], err_msg=k)
    np.testing.assert_array_equal(b.observations[pos], a.next_observations[pos - 1])
    for (k, x), y in zip(ours.policy.state_dict().items(), theirs.policy.state_dict().values()): assert torch.equal(x, y), k

def test_save_and_load_replay_buffer_round_trips(tmp_path):
    model = dqn(ReplayBuffer, steps=300)
    model.save_replay_buffer(tmp_path/'rb.pkl')
    other = DQN('MlpPolicy', 'CartPole-v1', replay_buffer_class=ReplayBuffer, buffer_size=500, seed=3, device='cpu')
    other.load_replay_buffer(tmp_path/'rb.pkl')
    a, b = model.replay_buffer, other.replay_buffer
    assert type(b) is ReplayBuffer and (b.pos, b.full, b.size()) == (a.pos, a.full, a.size()) == (300, False, 300)
    for k in ARRAYS: np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    np.random.seed(0); x = a.sample(64)
    np.random.seed(0); assert_samples_equal(b.sample(64), x)
    b.dones[0] = 1.  # b's views are over b's own storage
    assert a.dones[0, 0] == 0 and b.replay.storage.memory['dones'][0] == 1

# --- prioritized replay -------------------------------------------------------------------------------------------

def test_prioritized_samples_carry_weights_and_indexes_and_follow_the_priorities():
    obs_space, act_space = SPACES['box-discrete']
    per = PrioritizedReplayBuffer(8, obs_space, act_space, device='cpu', n_envs=2, alpha=1., beta=0.5, beta_steps=0, eps=1e-12, seed=0)
    rng = np.random.default_rng(0)
    for t in range(4): per.add(*step_values(rng, obs_space, act_space, 2, t))
    td = torch.tensor([1., 2., 3., 4., 5., 6., 7., 8.])
    per.update_td(td, torch.arange(8))
    counts = torch.zeros(8)
    for _ in range(20):
        s = per.sample(360)
        assert isinstance(s, PrioritizedReplayBufferSamples) and s.weights.shape == (360, 1) and s.weights.dtype == torch.float32
        counts += torch.bincount(s.indexes, minlength=8)
        torch.testing.assert_close(s.weights[:, 0], (td[s.indexes] / 1.) ** -0.5)  # (p_i / p_min)^-beta
        slot, env = s.indexes // 2, s.indexes % 2
        np.testing.assert_array_equal(s.observations.numpy(), per.observations[slot.numpy(), env.numpy()])
    expected = td / td.sum() * counts.sum()
    assert (((counts - expected) ** 2) / expected).sum() < 24.32  # chi-square, 7 degrees of freedom, p = 0.001
    assert ((counts - expected).abs() <= 2 * 20).all()  # stratified: at most two slices off per batch

def test_prioritized_dqn_writes_the_td_errors_back_and_is_reproducible():
    def run():
        m = PrioritizedDQN('MlpPolicy', 'CartPole-v1', learning_starts=100, batch_size=32, train_freq=1, buffer_size=1000,
                           policy_kwargs=dict(net_arch=[32]), replay_buffer_kwargs=dict(alpha=0.7, beta_steps=500), seed=0, device='cpu')
        return m.learn(600)
    a, b = run(), run()
    buf = a.replay_buffer
    assert isinstance(buf, PrioritizedReplayBuffer) and buf.replay.sampler.n_samples == a._n_updates == 500
    rows = buf.replay.sampler.sample_counts.nonzero()[:, 0]
    td = buf.replay.memory['td_error'][rows, 0].double()
    assert (td != 0).all()
    torch.testing.assert_close(buf.replay.sampler.get_priority(rows), (td.abs() + 1e-6) ** 0.7, rtol=1e-12, atol=0)
    unseen = torch.ones(600, dtype=torch.bool); unseen[rows] = False
    entry = buf.replay.sampler.get_priority(torch.nonzero(unseen)[:, 0])  # the largest priority when each was added
    assert unseen.any() and (entry >= 1).all() and (entry <= buf.replay.sampler.max_priority).all()
    for (k, x), y in zip(a.policy.state_dict().items(), b.policy.state_dict().values()): assert torch.equal(x, y), k
    assert abs(buf.replay.sampler.current_beta - 1.) < 1e-12

def test_prioritized_buffer_pickles_with_its_priorities():
    obs_space, act_space = SPACES['box-discrete']
    per = PrioritizedReplayBuffer(8, obs_space, act_space, device='cpu', alpha=1., seed=0)
    rng = np.random.default_rng(0)
    for t in range(5): per.add(*step_values(rng, obs_space, act_space, 1, t))
    per.update_td([3., 1.], [0, 4])
    copy = pickle.loads(pickle.dumps(per))
    torch.testing.assert_close(copy.replay.sampler.get_priority(range(5)), per.replay.sampler.get_priority(range(5)))
    x, y = per.sample(16), copy.sample(16)
    assert torch.equal(x.indexes, y.indexes) and torch.equal(x.weights, y.weights)
    with pytest.raises(ExperienceReplayException, match='alpha must be a finite number >= 0'):
        PrioritizedReplayBuffer(8, obs_space, act_space, alpha=-1.)

def test_samples_are_contiguous_tensors_of_their_own():
    ours, theirs = pair('box-discrete', 1, size=10)
    rng = np.random.default_rng(1)
    for t in range(6):
        v = step_values(rng, *SPACES['box-discrete'], 1, t)
        ours.add(*v); theirs.add(*v)
    np.random.seed(5); a = ours.sample(7)
    np.random.seed(5); b = theirs.sample(7)
    assert_samples_equal(a, b)
    assert all(x.is_contiguous() for x in a if x is not None)
    a.observations.fill_(-99.)  # the sample is the caller's: the stored rows are untouched
    assert ours.observations.min() >= 0

# --- Dict observations and hindsight replay (DictReplayBuffer, HerReplayBuffer) ---
from stable_baselines3.common.buffers import DictReplayBuffer as SB3DictReplayBuffer
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.her.her_replay_buffer import HerReplayBuffer as SB3HerReplayBuffer
from fastrl_replay.compat.sb3 import DictReplayBuffer, HerReplayBuffer

def bit_steps(n_envs, n, seed=0, max_steps=5):
    "`n` steps of `n_envs` bit-flipping environments under random actions, as SB3's off-policy loop adds them"
    venv = DummyVecEnv([lambda: BitFlippingEnv(n_bits=4, max_steps=max_steps) for _ in range(n_envs)])
    venv.seed(seed)
    rng, obs, res = np.random.default_rng(seed), venv.reset(), []
    for _ in range(n):
        act = rng.integers(0, 4, n_envs)
        nxt, rew, done, infos = venv.step(act)
        real = {k: v.copy() for k, v in nxt.items()}
        for i in np.flatnonzero(done):
            for k in real: real[k][i] = infos[i]['terminal_observation'][k]
        res.append((obs, real, act, rew, done, infos)); obs = nxt
    return venv, res

@pytest.mark.parametrize('n_envs', [1, 2])
@pytest.mark.parametrize('size', [12, 40, 400])
def test_her_bookkeeping_as_sb3(n_envs, size):
    venv, steps = bit_steps(n_envs, 60)
    ours = HerReplayBuffer(size, venv.observation_space, venv.action_space, venv, device='cpu', n_envs=n_envs)
    theirs = SB3HerReplayBuffer(size, venv.observation_space, venv.action_space, venv, device='cpu', n_envs=n_envs)
    for s in steps:
        ours.add(*s); theirs.add(*s)
        assert ours.pos == theirs.pos and ours.full == theirs.full
        assert np.array_equal(ours.ep_length, theirs.ep_length)
        valid = theirs.ep_length > 0
        assert np.array_equal(ours.ep_start[valid], theirs.ep_start[valid])
        assert np.array_equal(ours._current_ep_start, theirs._current_ep_start)
    for k in ours.observations: assert np.array_equal(ours.observations[k], theirs.observations[k])
    assert np.array_equal(ours.dones, theirs.dones) and np.array_equal(ours.timeouts, theirs.timeouts)

@pytest.mark.parametrize('strategy', ['future', 'final', 'episode'])
def test_her_samples_are_sb3s(strategy):
    "The same draws as SB3's (NumPy's global generator); relabelled rows' goals from their own episode, their rewards recomputed"
    venv, steps = bit_steps(1, 80)
    ours = HerReplayBuffer(400, venv.observation_space, venv.action_space, venv, device='cpu', goal_selection_strategy=strategy)
    theirs = SB3HerReplayBuffer(400, venv.observation_space, venv.action_space, venv, device='cpu', goal_selection_strategy=strategy)
    for s in steps: ours.add(*s); theirs.add(*s)
    np.random.seed(1); a = ours.sample(50)
    np.random.seed(1); b = theirs.sample(50)
    k = 50 - int(ours.her_ratio * 50)  # SB3 puts the rows kept as stored first
    for key in ('observation', 'achieved_goal'): assert torch.equal(a.observations[key], b.observations[key])
    assert torch.equal(a.actions, b.actions) and torch.equal(a.dones, b.dones)
    assert torch.equal(a.observations['desired_goal'][:k], b.observations['desired_goal'][:k])  # kept as stored
    assert torch.equal(a.rewards[:k], b.rewards[:k])
    want = venv.env_method('compute_reward', a.next_observations['achieved_goal'].numpy(),
                           a.observations['desired_goal'].numpy(), None, indices=[0])[0]
    assert np.array_equal(a.rewards.numpy().ravel(), want.astype(np.float32))
    assert torch.equal(a.observations['desired_goal'], a.next_observations['desired_goal'])
    if strategy == 'final':  # the goal is the last next achieved goal of the row's episode, as SB3's
        assert torch.equal(a.observations['desired_goal'][k:], b.observations['desired_goal'][k:])

def test_her_refuses_bad_input_unchanged():
    venv, steps = bit_steps(1, 10)
    rb = HerReplayBuffer(40, venv.observation_space, venv.action_space, venv, device='cpu')
    for s in steps[:5]: rb.add(*s)
    before = {k: v.copy() for k, v in rb.observations.items()}, rb.pos, rb.ep_length.copy()
    obs, nxt, act, rew, done, infos = steps[5]
    for bad in ({k: v for k, v in obs.items() if k != 'desired_goal'}, {**obs, 'desired_goal': np.zeros((1, 7))}):
        with pytest.raises(ExperienceReplayException): rb.add(bad, nxt, act, rew, done, infos)
    with pytest.raises(ExperienceReplayException): rb.add(obs, nxt, act, np.zeros(3), done, infos)
    for k, v in before[0].items(): assert np.array_equal(rb.observations[k], v)
    assert rb.pos == before[1] and np.array_equal(rb.ep_length, before[2])

def test_her_pickle_round_trip():
    venv, steps = bit_steps(2, 30)
    rb = HerReplayBuffer(40, venv.observation_space, venv.action_space, venv, device='cpu', n_envs=2)
    for s in steps: rb.add(*s)
    back = pickle.loads(pickle.dumps(rb))
    back.set_env(venv)
    assert np.array_equal(back.ep_length, rb.ep_length) and back.pos == rb.pos
    for k in rb.observations: assert np.array_equal(back.observations[k], rb.observations[k])
    back.dones[0, 0] = 7; assert back.replay.storage.column('done')[0] == 7  # the arrays are the core memory's columns
    torch.manual_seed(0); np.random.seed(0); a = rb.sample(16)
    torch.manual_seed(0); np.random.seed(0); b = back.sample(16)
    assert torch.equal(a.rewards, b.rewards) and torch.equal(a.actions, b.actions)

def test_dict_buffer_as_sb3():
    venv, steps = bit_steps(2, 30)
    ours = DictReplayBuffer(20, venv.observation_space, venv.action_space, device='cpu', n_envs=2)
    theirs = SB3DictReplayBuffer(20, venv.observation_space, venv.action_space, device='cpu', n_envs=2)
    for s in steps: ours.add(*s); theirs.add(*s)
    for k in ours.observations:
        assert np.array_equal(ours.observations[k], theirs.observations[k])
        assert np.array_equal(ours.next_observations[k], theirs.next_observations[k])
    np.random.seed(3); a = ours.sample(8)
    np.random.seed(3); b = theirs.sample(8)
    for x, y in zip(a, b):
        if x is None: assert y is None
        elif isinstance(x, dict): assert all(torch.equal(x[k], y[k].to(x[k].dtype)) for k in x)
        else: assert torch.equal(x, y.to(x.dtype))
