"What code written for the peers does that the adapters once refused or got wrong: each case against the peer itself where it runs, with exact values."
import warnings
import numpy as np, pytest, torch
from gymnasium import spaces
import cpprb
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.compat import cpprb as ours_cpprb, sb3 as ours_sb3
from fastrl_replay.compat.reagent import ReplayBuffer as ReAgentBuffer, OutOfGraphReplayBuffer

BOX, DISC = spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2)

def assert_samples_equal(a, b):
    for x, y in zip(a, b):
        if y is None: assert x is None; continue
        assert (x.dtype, x.shape) == (y.dtype, y.shape)
        assert torch.equal(x, y)

# --- SB3 -----------------------------------------------------------------------------------------------------------------

def test_sb3_add_takes_a_vector_envs_infos_dict():
    "gymnasium's vector envs return infos as a dict of arrays; SB3 reads infos only for timeouts"
    ours = ours_sb3.ReplayBuffer(8, BOX, DISC, device='cpu', n_envs=2)
    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours.add(obs, obs + 1, np.array([0, 1]), np.array([1., 2.]), np.array([True, True]),
             {'TimeLimit.truncated': np.array([True, True]), '_TimeLimit.truncated': np.array([True, False])})
    ours.add(obs, obs + 1, np.array([0, 1]), np.array([1., 2.]), np.array([False, False]), {})
    assert ours.timeouts[:2].tolist() == [[1., 0.], [0., 0.]]  # the second env's flag is masked out by `_TimeLimit.truncated`
    assert ours.dones[:2].tolist() == [[1., 1.], [0., 0.]]
    # without timeout handling, SB3 reads no infos: the same values as SB3's own buffer, whatever infos are
    ours, theirs = (cls(8, BOX, DISC, device='cpu', handle_timeout_termination=False) for cls in (ours_sb3.ReplayBuffer, SB3ReplayBuffer))
    for t in range(5):
        o = np.full((1, 3), t, np.float32)
        for b in (ours, theirs): b.add(o, o + 1, np.array([t % 2]), np.array([float(t)]), np.array([t == 4]), {'episode': {'r': np.zeros(1)}})
    for k in ('observations', 'next_observations', 'actions', 'rewards', 'dones', 'timeouts'):
        np.testing.assert_array_equal(getattr(ours, k), getattr(theirs, k))

def test_sb3_prioritized_get_samples():
    per = ours_sb3.PrioritizedReplayBuffer(8, BOX, DISC, device='cpu', seed=0)
    for t in range(4): per.add(np.full((1, 3), t), np.full((1, 3), t + 1), np.array([t % 2]), np.array([t]), np.array([0]), [{}])
    s = per._get_samples(np.array([3, 0, 2]))
    assert s.observations[:, 0].tolist() == [3., 0., 2.]
    assert s.next_observations[:, 0].tolist() == [4., 1., 3.]
    assert s.actions[:, 0].tolist() == [1, 0, 0]
    per2 = ours_sb3.PrioritizedReplayBuffer(8, BOX, DISC, device='cpu', n_envs=2, seed=0)
    per2.add(np.zeros((2, 3)), np.ones((2, 3)), np.array([0, 1]), np.array([5., 6.]), np.array([0, 0]), [{}, {}])
    assert sorted(per2._get_samples(np.zeros(64, int)).rewards[:, 0].unique().tolist()) == [5., 6.]  # both environments drawn

@pytest.mark.parametrize('dtype', [np.uint16, np.uint32, np.uint64])
def test_sb3_unsigned_observations_stored_as_sb3_stores_them(dtype):
    "SB3 keeps an unsigned space's dtype; so do the adapter's arrays and samples (the column holds the same bytes as a signed int)"
    space = spaces.Box(0, np.iinfo(dtype).max, (2,), dtype)
    ours, theirs = (cls(6, space, DISC, device='cpu') for cls in (ours_sb3.ReplayBuffer, SB3ReplayBuffer))
    top = np.iinfo(dtype).max
    for t in range(4):
        o = np.array([[t, top - t]], dtype)
        for b in (ours, theirs): b.add(o, o + 1, np.array([t % 2]), np.array([1.]), np.array([0]), [{}])
    assert ours.observations.dtype == theirs.observations.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours.observations, theirs.observations)
    assert ours.observations[3, 0].tolist() == [3, int(top) - 3]
    np.random.seed(7); expected = theirs.sample(5)
    np.random.seed(7); assert_samples_equal(ours.sample(5), expected)

def test_sb3_get_samples_of_no_indices_is_empty_as_sb3s():
    ours, theirs = (cls(8, BOX, DISC, device='cpu') for cls in (ours_sb3.ReplayBuffer, SB3ReplayBuffer))
    for b in (ours, theirs): b.add(np.zeros((1, 3)), np.ones((1, 3)), np.array([1]), np.array([1.]), np.array([0]), [{}])
    got, expected = ours._get_samples(np.array([], np.int64)), theirs._get_samples(np.array([], np.int64))
    assert [tuple(x.shape) for x in got[:5]] == [(0, 3), (0, 1), (0, 3), (0, 1), (0, 1)]
    assert_samples_equal(got, expected)

# --- cpprb ---------------------------------------------------------------------------------------------------------------

ENV = {'obs': {'shape': 2}, 'rew': {}}

def test_cpprb_get_all_transitions_of_an_empty_or_cleared_buffer():
    for make in (lambda: ours_cpprb.ReplayBuffer(4, ENV), lambda: cpprb.ReplayBuffer(4, ENV)):
        rb = make()
        for _ in range(2):
            got = rb.get_all_transitions()
            assert {k: (v.shape, v.dtype) for k, v in got.items()} == {'obs': ((0, 2), np.float32), 'rew': ((0, 1), np.float32)}
            rb.add(obs=[1, 2], rew=1.); rb.clear()

@pytest.mark.parametrize('env', [{'obs': {'shape': 2, 'dtype': np.complex64}},
                                 {'obs': {'shape': 3, 'dtype': np.complex128}, 'a': {'dtype': np.int8}},
                                 {'obs': {'shape': 2, 'dtype': np.complex64}, 'rew': {}}])
def test_cpprb_complex_columns_are_stored_whatever_the_other_columns(env):
    ours, theirs = ours_cpprb.ReplayBuffer(4, env), cpprb.ReplayBuffer(4, env)
    vals = {k: (np.arange(3 * d.get('shape', 1)).reshape(3, -1) * (1 + 2j if np.dtype(d.get('dtype', np.float32)).kind == 'c' else 1))
            .astype(d.get('dtype', np.float32)) for k, d in env.items()}
    for b in (ours, theirs): b.add(**vals)
    got, expected = ours.get_all_transitions(), theirs.get_all_transitions()
    for k in env:
        assert got[k].dtype == expected[k].dtype
        np.testing.assert_array_equal(got[k], expected[k])
    assert ours.get_all_transitions()['obs'][1, 1] == np.asarray(vals['obs'])[1, 1]

def test_cpprb_save_and_load_transitions(tmp_path):
    rb = ours_cpprb.ReplayBuffer(4, ENV)
    rb.add(obs=[[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]], rew=[1, 2, 3, 4, 5])  # wraps: 5 and 2, 3, 4 stay
    rb.save_transitions(tmp_path/'t')  # cpprb's name: .npz appended
    back = ours_cpprb.ReplayBuffer(4, ENV)
    back.load_transitions(tmp_path/'t.npz')
    assert back.get_all_transitions()['rew'][:, 0].tolist() == rb.get_all_transitions()['rew'][:, 0].tolist() == [5., 2., 3., 4.]
    assert back.get_stored_size() == 4 and back.get_next_index() == 0
    with np.load(tmp_path/'t.npz', allow_pickle=False) as f: assert sorted(f.files) == ['Nstep', 'data.obs', 'data.rew', 'version']
    nstep = ours_cpprb.ReplayBuffer(4, {'obs': {}, 'rew': {}, 'done': {}}, Nstep={'size': 2, 'gamma': 0.5, 'rew': 'rew'})
    with pytest.raises(ExperienceReplayException, match='stored data and buffer mismatch for Nstep'): nstep.load_transitions(tmp_path/'t.npz')
    other = ours_cpprb.ReplayBuffer(4, {'obs': {'shape': 3}, 'rew': {}})
    with pytest.raises(ExperienceReplayException, match=r'obs: expected shape \(3,\)'): other.load_transitions(tmp_path/'t.npz')
    assert other.get_stored_size() == 0
    theirs = cpprb.ReplayBuffer(4, ENV); theirs.add(obs=[1, 2], rew=1.)
    theirs.save_transitions(str(tmp_path/'cpprb'))
    with pytest.raises(ExperienceReplayException, match="files that need pickle, as cpprb's own, are not read"):
        back.load_transitions(tmp_path/'cpprb.npz')
    assert back.get_stored_size() == 4

def test_cpprb_update_priorities_takes_float_indexes():
    ours = ours_cpprb.PrioritizedReplayBuffer(4, {'obs': {}}, alpha=1., eps=0., seed=0)
    ours.add(obs=[1, 2, 3])
    ours.update_priorities(np.array([0., 2.]), [5., 6.])
    assert ours.replay.sampler.get_priority([0, 1, 2]).tolist() == [5., 1., 6.]
    with pytest.raises(ExperienceReplayException, match=r'indexes: expected whole numbers, got \[1.5\]'): ours.update_priorities([1.5], [9.])
    assert ours.replay.sampler.get_priority([0, 1, 2]).tolist() == [5., 1., 6.]

@pytest.mark.parametrize('name,uniform,onehot', [('LaBERmean', 1., .25), ('LaBERlazy', 4., 1.), ('LaBERmax', 1., 1.)])
def test_cpprb_laber_helpers(name, uniform, onehot):
    ours, theirs = getattr(ours_cpprb, name), getattr(cpprb, name)
    for args in ((12,), (12, 5)):
        np.testing.assert_array_equal(ours(*args).idx, theirs(*args).idx)
    assert ours(2, 2)(priorities=[1, 1, 1, 1])['weights'].tolist() == [uniform, uniform]
    s = ours(2, 2, eps=0)(priorities=[1, 0, 0, 0])
    assert (s['indexes'].tolist(), s['weights'].tolist()) == ([0, 0], [onehot, onehot])

# --- ReAgent and Dopamine ------------------------------------------------------------------------------------------------

def test_capacity_error_has_the_peers_wording():
    for make in (lambda: ReAgentBuffer(stack_size=10, replay_capacity=10, batch_size=32),
                 lambda: OutOfGraphReplayBuffer((84, 84), 5, 10, 32, update_horizon=10)):
        with pytest.raises(ValueError, match='^There is not enough capacity to cover update_horizon and stack_size'): make()

def test_dopamine_get_range_and_observation_stack():
    ob = OutOfGraphReplayBuffer((2,), 4, 10, 32, update_horizon=5, gamma=1., seed=0)
    for i in range(10): ob.add(np.full(2, i, np.uint8), 0, 2., 0)  # 3 padding rows, then 10 steps: the ring wraps
    array = np.arange(10).reshape(10, 1) + np.ones(5)
    np.testing.assert_array_equal(ob.get_range(array, 2, 5), array[2:5])
    np.testing.assert_array_equal(ob.get_range(array, 8, 12), np.roll(array, 2, axis=0)[:4])
    assert ob.get_observation_stack(1)[0].tolist() == [5, 6, 7, 8]  # rows 8, 9, 0, 1 of the wrapped ring: steps 5 to 8
    for a, b, msg in ((2, 1, 'end_index must be larger than start_index'), (1, -1, 'end_index must be larger'),
                      (10, 11, 'start_index < replay_capacity = 10')):
        with pytest.raises(ExperienceReplayException, match=msg): ob.get_range([], a, b)
    with pytest.raises(ExperienceReplayException, match='Index 1 has not been added.'):
        OutOfGraphReplayBuffer((2,), 4, 10, 32).get_range([], 1, 2)

# --- the native memory: float input of a wider type, as every peer stores it ---------------------------------------------

def test_blog_seed_path_float64_after_python_floats():
    "Appending Python-float tuples types the columns float32; a float64 observation then rounds into them, as every peer stores it"
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    er = ExperienceReplay(bs=2, max_sz=10, warmup_sz=1, seed=0)
    er.append({'state': (0.1, 0.2, 0.3, 0.4), 'action': 1, 'reward': 1.0, 'done': False})
    er.append({'state': np.zeros(4), 'action': 0, 'reward': np.float64(0.1), 'done': True})
    er.append({'state': torch.full((4,), 1 / 3, dtype=torch.float64), 'action': 1, 'reward': 2.0, 'done': False})
    er + {'state': np.full((2, 4), 0.7), 'action': np.array([0, 1]), 'reward': np.array([0.5, 0.25]), 'done': np.zeros(2, bool)}
    m = er.memory
    assert m['state'].dtype == m['reward'].dtype == torch.float32
    assert m['state'][:, 0].tolist() == [np.float32(0.1), 0., np.float32(1 / 3), np.float32(0.7), np.float32(0.7)]
    assert m['reward'].tolist() == [1., np.float32(0.1), 2., 0.5, 0.25]
    # what loses integers or changes kind is still refused, and leaves the memory as it was
    for bad, msg in (({'state': np.arange(4)}, 'dtype int64 cannot be stored as float32'),
                     ({'state': np.zeros(4, np.complex128)}, 'dtype complex128 cannot be stored as float32'),
                     ({'action': np.float64(1.)}, 'cannot be stored as int64')):
        with pytest.raises(ExperienceReplayException, match=msg): er.append({'state': np.zeros(4), 'action': 1, 'reward': 1., 'done': False, **bad})
    assert len(er) == 5
