"Memories as DataFrames and as Minari datasets: exact contents, round trips bit for bit, and bad input"
import re
import numpy as np, pandas as pd, torch, pytest, gymnasium as gym
import minari
from minari.data_collector import EpisodeBuffer
from minari.dataset.minari_storage import is_image_space
from fastrl_replay.memory.core import ExperienceReplayException, Replay, Storage
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERExperienceReplay
from fastrl_replay.compat.reagent import CircularReplayBuffer, ReplayElement
from fastrl_replay.data.gym import GymLoop, Source, FirstLast
from fastrl_replay.agents.dqn import dqn_learner
from fastrl_replay.datasets import storage_order, storage_episodes, to_minari, from_minari

pytestmark = pytest.mark.filterwarnings('ignore::UserWarning:minari')  # its advice on metadata for published datasets

@pytest.fixture(autouse=True)
def minari_dir(tmp_path, monkeypatch):
    "Every dataset of a test in a directory of its own"
    monkeypatch.setenv('MINARI_DATASETS_PATH', str(tmp_path/'minari'))
    return tmp_path/'minari'

def raises(msg): return pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$')

def same_bits(a, b) -> bool:
    "Same dtype, same shape, same bytes"
    a, b = (x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x) for x in (a, b))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

def rows(er) -> dict:
    "Every column of a column memory but `td_error`, oldest row first"
    order = storage_order(er.storage)
    return {k: v[order].numpy() for k, v in er.memory.items() if k != 'td_error'}

def assert_same_rows(a:dict, b:dict):
    assert list(a) == list(b)
    for k in a: assert same_bits(a[k], b[k]), k

BOX1 = gym.spaces.Box(-1000, 1000, (1,), np.float32)
BOX2 = gym.spaces.Box(-1000, 1000, (2,), np.float32)
ACT3 = gym.spaces.Discrete(3)

def transitions(states, nexts, term, trunc, **extra) -> dict:
    "Transitions of one-number states as `GymLoop` lays them out, action t % 3 and reward 0.5 t for row t"
    n = len(states)
    return dict(state=np.array(states, np.float32)[:, None], next_state=np.array(nexts, np.float32)[:, None],
                action=(np.arange(n) % 3)[:, None], reward=(0.5 * np.arange(n, dtype=np.float32))[:, None],
                terminated=np.array(term, bool)[:, None], truncated=np.array(trunc, bool)[:, None], **extra)

# ------------------------------------------------------------------ to_df

def test_to_df_column_memory_oldest_first():
    er = ExperienceReplay(max_sz=4, warmup_sz=0)
    er + {'v': torch.arange(18.).reshape(6, 3), 'r': torch.arange(6)[:, None], 'flag': torch.tensor([1, 0, 0, 1, 0, 1], dtype=torch.bool)}
    er.update_td(torch.tensor([0.5, -2.]), torch.tensor([0, 3]))
    df = er.to_df()
    assert df.index.name == 'row' and df.index.tolist() == [2, 3, 0, 1]
    assert list(df.columns) == ['v', 'r', 'flag', 'td_error']
    assert df['r'].tolist() == [2, 3, 4, 5]
    assert df['flag'].tolist() == [False, True, False, True]
    assert df['td_error'].tolist() == [0., -2., 0.5, 0.]
    assert df['td_error'].dtype == np.float32 and df['r'].dtype == np.int64
    assert same_bits(df['v'][0], np.array([12., 13., 14.], np.float32))
    df['v'][0][:] = -1  # a copy: the memory keeps its rows
    assert er.memory['v'][0].tolist() == [12., 13., 14.]

@pytest.mark.parametrize('cls', [PrioritizedExperienceReplay, LaBERExperienceReplay])
def test_to_df_other_samplers(cls):
    er = cls(max_sz=3, warmup_sz=0)
    er + {'x': torch.tensor([[1.], [2.], [3.], [4.]])}
    df = er.to_df()
    assert df.index.tolist() == [1, 2, 0] and df['x'].tolist() == [2., 3., 4.]

def test_to_df_frame_memory():
    cb = CircularReplayBuffer(observation_shape=(2,), stack_size=1, replay_capacity=4, batch_size=1, observation_dtype=np.int16,
                              extra_storage_types=[ReplayElement('legal', (2,), np.bool_)])
    for t in range(6):
        cb.add(np.array([t, 10 * t], np.int16), t % 2, float(t), t == 1, np.array([t % 2 == 0, True]), truncated=t == 4,
               next_observation=np.array([7, 7], np.int16) if t == 4 else None, env_id=t % 2)
    cb.update_td([0.25], [3])
    df = cb.to_df()
    assert df.index.tolist() == [2, 3, 0, 1]
    assert list(df.columns) == ['observation', 'action', 'reward', 'terminal', 'truncated', 'final_observation',
                                'episode_id', 'env_id', 'legal', 'td_error']  # the TD errors, which the sampler keeps, last
    assert [o.tolist() for o in df['observation']] == [[2, 20], [3, 30], [4, 40], [5, 50]]
    assert df['action'].tolist() == [0, 1, 0, 1] and df['reward'].tolist() == [2., 3., 4., 5.]
    assert df['truncated'].tolist() == [False, False, True, False] and df['terminal'].tolist() == [False] * 4
    assert same_bits(df['final_observation'][0], np.array([7, 7], np.int16))
    assert [f is None for f in df['final_observation']] == [True, True, False, True]
    assert df['episode_id'].tolist() == [1, 3, 1, 3]  # env 0: episode 1 until step 4; env 1: episode 2 ended at step 1
    assert df['env_id'].tolist() == [0, 1, 0, 1]
    assert df['td_error'].tolist() == [0., 0.25, 0., 0.]
    assert [l.tolist() for l in df['legal']] == [[True, True], [False, True], [True, True], [False, True]]

def test_to_df_empty_memories():
    assert er_df_shape(ExperienceReplay(warmup_sz=0)) == (0, 0)
    cb = CircularReplayBuffer(observation_shape=(2,), stack_size=1, replay_capacity=4, batch_size=1)
    assert cb.to_df().shape == (0, 9)

def er_df_shape(er): return er.to_df().shape

def test_to_df_unknown_storage():
    class Rows(Storage):
        def __len__(self): return 0
    with raises('to_df: expected a ColumnStorage or a FrameStorage, got a Rows'): Replay(Rows(4), warmup_sz=0).to_df()

# ------------------------------------------------------------------ column memories through Minari

def wrapped_memory(**kw) -> ExperienceReplay:
    "Ten rows written into eight: a terminated episode that lost its first two rows, a truncated one (true final 99), one still running"
    er = ExperienceReplay(max_sz=8, warmup_sz=0, **kw)
    er + transitions([0, 1, 2, 3, 10, 11], [1, 2, 3, 4, 11, 12], [0, 0, 0, 1, 0, 0], [0] * 6,
                     done=np.array([0, 0, 0, 1, 0, 0], bool)[:, None], episode_id=np.array([[1]] * 4 + [[2]] * 2),
                     step=np.array([[1], [2], [3], [4], [1], [2]]), env_id=np.zeros((6, 1), np.int64),
                     image=np.arange(6 * 4, dtype=np.uint8).reshape(6, 2, 2))
    er + transitions([12, 20, 21, 22], [99, 21, 22, 23], [0] * 4, [1, 0, 0, 0],
                     done=np.array([1, 0, 0, 0], bool)[:, None], episode_id=np.array([[2]] + [[3]] * 3),
                     step=np.array([[3], [1], [2], [3]]), env_id=np.zeros((4, 1), np.int64),
                     image=np.arange(24, 40, dtype=np.uint8).reshape(4, 2, 2))
    return er

def test_column_episodes_exact():
    eps = storage_episodes(wrapped_memory().storage)
    assert [e['observations'][:, 0].tolist() for e in eps] == [[2, 3, 4], [10, 11, 12, 99], [20, 21, 22, 23]]
    assert [e['terminations'].tolist() for e in eps] == [[False, True], [False] * 3, [False] * 3]
    assert [e['truncations'].tolist() for e in eps] == [[False, False], [False, False, True], [False] * 3]
    assert [e['actions'][:, 0].tolist() for e in eps] == [[2, 0], [1, 2, 0], [1, 2, 0]]
    assert list(eps[0]['columns']) == ['done', 'episode_id', 'step', 'env_id', 'image']
    assert eps[1]['columns']['step'][:, 0].tolist() == [1, 2, 3, 0]  # one entry per observation; the last is zero

def test_column_round_trip_bit_for_bit():
    er = wrapped_memory()
    ds = to_minari(er, 'test/column-v0', observation_space=BOX1, action_space=ACT3)
    assert (ds.total_episodes, ds.total_steps) == (3, 8)
    ep = minari.load_dataset('test/column-v0')[1]
    assert ep.terminations.tolist() == [False, False, False] and ep.truncations.tolist() == [False, False, True]
    assert ep.rewards.dtype == np.float32 and ep.rewards.tolist() == [2.0, 2.5, 0.0]
    back = from_minari('test/column-v0', warmup_sz=0)
    assert (back.max_sz, back.bs, back.warmup_sz) == (8, 16, 0)
    assert_same_rows(rows(back), rows(er))
    assert back.memory['td_error'].abs().sum() == 0

def test_column_round_trip_into_a_prioritized_memory():
    er = wrapped_memory()
    to_minari(er, 'test/per-v0', observation_space=BOX1, action_space=ACT3)
    per = from_minari('test/per-v0', PrioritizedExperienceReplay(max_sz=20, warmup_sz=0, seed=0))
    assert_same_rows(rows(per), rows(er))
    assert per.sampler.get_priority(torch.arange(8)).tolist() == [1.] * 8  # entered at the entry priority, as with `+`

def test_episode_indices_pick_and_order():
    to_minari(wrapped_memory(), 'test/pick-v0', observation_space=BOX1, action_space=ACT3)
    er = from_minari('test/pick-v0', episode_indices=[2, 0], warmup_sz=0)
    assert er.memory['state'][:, 0].tolist() == [20, 21, 22, 2, 3]

def test_rows_that_do_not_chain_are_episodes_of_their_own():
    "Two-step rows: each next_state is two steps on, so no row chains to the next; each comes back as it was"
    er = ExperienceReplay(max_sz=8, warmup_sz=0)
    er + transitions([0, 1, 2, 3], [2, 3, 4, 4], [0, 0, 1, 1], [0] * 4)
    eps = storage_episodes(er.storage)
    assert [e['observations'][:, 0].tolist() for e in eps] == [[0, 2], [1, 3], [2, 4], [3, 4]]
    assert [e['terminations'].tolist() for e in eps] == [[False], [False], [True], [True]]
    to_minari(er, 'test/nstep-v0', observation_space=BOX1, action_space=ACT3)
    assert_same_rows(rows(from_minari('test/nstep-v0', warmup_sz=0)), rows(er))

def test_environments_are_split_by_env_id():
    "Two environments interleaved: each keeps its episodes; they come back one after another, in the order they started"
    er = ExperienceReplay(max_sz=8, warmup_sz=0)
    er + transitions([0, 100, 1, 101, 2, 102], [1, 101, 2, 102, 3, 103], [0, 0, 0, 1, 0, 0], [0] * 6,
                     env_id=np.array([[0], [1], [0], [1], [0], [1]]))
    eps = storage_episodes(er.storage)
    assert [e['observations'][:, 0].tolist() for e in eps] == [[0, 1, 2, 3], [100, 101, 102], [102, 103]]
    to_minari(er, 'test/envs-v0', observation_space=BOX1, action_space=ACT3)
    back = rows(from_minari('test/envs-v0', warmup_sz=0))
    assert back['state'][:, 0].tolist() == [0, 1, 2, 100, 101, 102]
    order = [0, 2, 4, 1, 3, 5]
    assert_same_rows(back, {k: v[order] for k, v in rows(er).items()})

def test_done_without_terminated():
    "A memory with only `done` writes it as the termination, and keeps the column"
    er = ExperienceReplay(max_sz=8, warmup_sz=0)
    t = transitions([0, 1, 5], [1, 2, 6], [0, 1, 0], [0] * 3)
    t['done'] = t.pop('terminated'); del t['truncated']
    er + t
    to_minari(er, 'test/done-v0', observation_space=BOX1, action_space=ACT3)
    ds = minari.load_dataset('test/done-v0')
    assert [ep.terminations.tolist() for ep in ds] == [[False, True], [False]]
    back = rows(from_minari('test/done-v0', warmup_sz=0))
    assert list(back) == ['state', 'next_state', 'action', 'reward', 'terminated', 'truncated', 'done']
    assert same_bits(back['done'], rows(er)['done']) and same_bits(back['terminated'], rows(er)['done'])
    assert back['truncated'].sum() == 0

# ------------------------------------------------------------------ frame memories through Minari

def frame_memory(capacity=16, **kw) -> CircularReplayBuffer:
    "A terminated episode, a truncated one (true final observation [90, 91]), and one still running, with an extra element"
    cb = CircularReplayBuffer(observation_shape=(2,), stack_size=2, replay_capacity=capacity, batch_size=2, update_horizon=2,
                              observation_dtype=np.float32, extra_storage_types=[ReplayElement('legal', (), np.int8)], **kw)
    for t in range(11):
        cb.add(np.array([t, -t], np.float32), t % 3, 0.25 * t, t == 2, np.int8(t), truncated=t == 6,
               next_observation=np.array([90, 91], np.float32) if t == 6 else None)
    return cb

def frame_copy(cb, capacity=16) -> CircularReplayBuffer:
    return CircularReplayBuffer(observation_shape=(2,), stack_size=2, replay_capacity=capacity, batch_size=2, update_horizon=2,
                                observation_dtype=np.float32, extra_storage_types=[ReplayElement('legal', (), np.int8)])

def in_order(cb):
    "Every valid transition of a frame memory, oldest first"
    rows = storage_order(cb.storage)
    return cb.sample_transition_batch(indices=rows[cb.valid_mask()[rows]])

def assert_same_transitions(a, b, skip=()):
    ta, tb = in_order(a), in_order(b)
    assert list(ta) == list(tb)
    for k in ta:
        if k not in skip: assert same_bits(ta[k], tb[k]), k

def test_frame_episodes_exact():
    eps = storage_episodes(frame_memory().storage)
    assert [e['observations'][:, 0].tolist() for e in eps] == [[0, 1, 2, 0], [3, 4, 5, 6, 90], [7, 8, 9, 10]]
    assert [e['actions'].tolist() for e in eps] == [[0, 1, 2], [0, 1, 2, 0], [1, 2, 0]]  # step 10 is pending
    assert [e['terminations'].tolist() for e in eps] == [[False, False, True], [False] * 4, [False] * 3]
    assert eps[1]['truncations'].tolist() == [False, False, False, True]
    assert eps[2]['columns']['legal'][:, 0].tolist() == [7, 8, 9, 0] and eps[2]['columns']['env_id'].shape == (4, 1)
    assert [e['pending'] is None for e in eps] == [True, True, False]
    p = eps[2]['pending']
    assert same_bits(p['action'], np.array([1])) and same_bits(p['reward'], np.array([2.5], np.float32)) and same_bits(p['legal'], np.array([10], np.int8))

def test_frame_round_trip_bit_for_bit():
    cb = frame_memory()
    ds = to_minari(cb, 'test/frames-v0', observation_space=BOX2, action_space=ACT3)
    assert (ds.total_episodes, ds.total_steps) == (3, 10)
    back = from_minari('test/frames-v0', frame_copy(cb))
    a, b = cb.to_df(), back.to_df()
    assert b.index.tolist() == a.index.tolist() == list(range(11))
    for k in ['observation', 'final_observation']:
        assert all(same_bits(x, y) if x is not None else y is None for x, y in zip(a[k], b[k])), k
    for k in ['action', 'reward', 'terminal', 'truncated', 'episode_id', 'env_id', 'legal']: assert b[k].tolist() == a[k].tolist(), k
    assert b['action'].tolist()[-1] == 1 and b['reward'].tolist()[-1] == 2.5  # the pending step, from infos['pending']
    assert len(cb.sample_all_valid_transitions()['indices']) == 9
    assert_same_transitions(cb, back)
    back.add(np.array([11, -11], np.float32), 2, 2.75, False, np.int8(11))  # the next step completes the pending one
    cb.add(np.array([11, -11], np.float32), 2, 2.75, False, np.int8(11))
    assert_same_transitions(cb, back)

def test_frame_round_trip_after_wrapping():
    "Eleven steps into a ring of eight: the first episode lost its first three steps; episode ids are numbered again"
    cb = frame_memory(capacity=8)
    to_minari(cb, 'test/wrapped-v0', observation_space=BOX2, action_space=ACT3)
    back = from_minari('test/wrapped-v0', frame_copy(cb, 8))
    assert back.to_df()['observation'].map(lambda o: o[0]).tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert cb.to_df()['episode_id'].tolist() == [2] * 4 + [3] * 4
    assert back.to_df()['episode_id'].tolist() == [1] * 4 + [2] * 4
    assert_same_transitions(cb, back, skip=['episode_id', 'indices'])

def test_frame_environments_keep_their_ids():
    "Two environments, both running at the end: each open episode keeps its pending step on its own environment"
    cb = CircularReplayBuffer(observation_shape=(1,), stack_size=1, replay_capacity=16, batch_size=1, observation_dtype=np.float32)
    for t in range(8): cb.add(np.array([t + 100 * (t % 2)], np.float32), 1, 1., t == 2, env_id=t % 2)
    to_minari(cb, 'test/two-envs-v0', observation_space=BOX1, action_space=ACT3)
    back = from_minari('test/two-envs-v0', CircularReplayBuffer(observation_shape=(1,), stack_size=1, replay_capacity=16,
                                                                batch_size=1, observation_dtype=np.float32))
    df = back.to_df()
    assert df['observation'].tolist() == [0, 2, 101, 103, 105, 107, 4, 6]  # one value per step: scalars  # episodes in the order they started
    assert df['env_id'].tolist() == [0, 0, 1, 1, 1, 1, 0, 0]
    assert df['episode_id'].tolist() == [1, 1, 2, 2, 2, 2, 3, 3]
    assert df['action'].tolist() == [1] * 8
    ta, tb = cb.sample_all_valid_transitions(), back.sample_all_valid_transitions()
    key = lambda t: sorted(zip(t['state'][:, 0].tolist(), t['next_state'][:, 0].tolist(), t['reward'][:, 0].tolist(),
                               t['terminated'][:, 0].tolist(), t['env_id'][:, 0].tolist()))
    assert key(tb) == key(ta) == [(0., 2., 1., False, 0), (2., 0., 1., True, 0), (4., 6., 1., False, 0),
                                  (101., 103., 1., False, 1), (103., 105., 1., False, 1), (105., 107., 1., False, 1)]

def test_column_memory_into_frame_memory():
    "A column dataset whose unfinished episode is followed by another of the same environment: closed as truncated"
    er = ExperienceReplay(max_sz=8, warmup_sz=0)
    er + transitions([0, 1, 50, 51], [1, 2, 51, 52], [0] * 4, [0] * 4)  # 2 is not 50: two unfinished episodes
    to_minari(er, 'test/gap-v0', observation_space=BOX1, action_space=ACT3)
    cb = from_minari('test/gap-v0', CircularReplayBuffer(observation_shape=(1,), stack_size=1, replay_capacity=8, batch_size=1,
                                                         observation_dtype=np.float32))
    df = cb.to_df()
    assert df['observation'].tolist() == [0, 1, 50, 51, 52]
    assert df['truncated'].tolist() == [False, True, False, False, False]
    assert same_bits(df['final_observation'][1], np.array([2.], np.float32))
    assert df['episode_id'].tolist() == [1, 1, 2, 2, 2]
    t = cb.sample_all_valid_transitions()
    assert t['next_state'][:, 0].tolist() == [1., 2., 51., 52.] and t['truncated'][:, 0].tolist() == [False, True, False, False]

# ------------------------------------------------------------------ images

IMAGE = gym.spaces.Box(0, 255, (32, 32), np.uint8)

def noise(n, seed=0): return np.random.default_rng(seed).integers(0, 256, (n, 32, 32), dtype=np.uint8)

def test_image_space_would_be_jpeg_encoded():
    "Minari JPEG-encodes this space by default: the round trips below show it is not"
    assert is_image_space(IMAGE)

def test_column_images_round_trip_bit_for_bit():
    frames = noise(6)
    er = ExperienceReplay(max_sz=8, warmup_sz=0)
    er + dict(state=frames[:5], next_state=frames[1:], action=np.zeros((5, 1), np.int64), reward=np.ones((5, 1), np.float32),
              terminated=np.zeros((5, 1), bool), truncated=np.array([[0], [0], [0], [0], [1]], bool))
    ds = to_minari(er, 'test/pixels-v0', observation_space=IMAGE, action_space=ACT3)
    assert ds.storage.metadata['jpeg_encoding'] is False
    assert same_bits(minari.load_dataset('test/pixels-v0')[0].observations, frames)
    assert_same_rows(rows(from_minari('test/pixels-v0', warmup_sz=0)), rows(er))

def test_frame_images_round_trip_bit_for_bit():
    frames = noise(5, seed=1)
    cb = CircularReplayBuffer(observation_shape=(32, 32), stack_size=2, replay_capacity=8, batch_size=1)
    for t in range(4): cb.add(frames[t], 1, 0., False, truncated=t == 3, next_observation=frames[4] if t == 3 else None)
    to_minari(cb, 'test/frame-pixels-v0', observation_space=IMAGE, action_space=ACT3)
    assert same_bits(minari.load_dataset('test/frame-pixels-v0')[0].observations, frames)
    back = from_minari('test/frame-pixels-v0', CircularReplayBuffer(observation_shape=(32, 32), stack_size=2, replay_capacity=8, batch_size=1))
    assert_same_transitions(cb, back)

# ------------------------------------------------------------------ datasets from elsewhere, and training on

def foreign_dataset(dataset_id='other/cartpole-v0'):
    "A CartPole dataset written with Minari's own API, without the memory's columns in its infos"
    rng = np.random.default_rng(0)
    obs = [rng.normal(size=(4, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)]
    bufs = [EpisodeBuffer(observations=obs[0], actions=np.array([0, 1, 1]), rewards=np.array([1., 1., 1.]),
                          terminations=np.array([False, False, True]), truncations=np.array([False, False, False])),
            EpisodeBuffer(observations=obs[1], actions=np.array([1, 0]), rewards=np.array([1., 1.]),
                          terminations=np.array([False, False]), truncations=np.array([False, True]))]
    minari.create_dataset_from_buffers(dataset_id, bufs, env='CartPole-v1')
    return obs

def test_foreign_dataset_gets_gymloop_columns():
    obs = foreign_dataset()
    er = from_minari('other/cartpole-v0', max_sz=100, warmup_sz=4, bs=4, seed=0)
    m = er.memory
    assert er.keys == ['state', 'next_state', 'action', 'reward', 'terminated', 'truncated', 'done', 'episode_id', 'step', 'env_id', 'td_error']
    assert same_bits(m['state'], np.concatenate([obs[0][:-1], obs[1][:-1]]))
    assert same_bits(m['next_state'], np.concatenate([obs[0][1:], obs[1][1:]]))
    assert m['action'].flatten().tolist() == [0, 1, 1, 1, 0] and m['reward'].dtype == torch.float64
    assert m['done'].flatten().tolist() == [False, False, True, False, True]
    assert m['episode_id'].flatten().tolist() == [1, 1, 1, 2, 2] and m['step'].flatten().tolist() == [1, 2, 3, 1, 2]
    assert m['env_id'].flatten().tolist() == [0] * 5
    loop_batch = Source([GymLoop('CartPole-v1', seed=0)]).batch(3)
    er + loop_batch  # online batches fit the memory filled offline
    assert same_bits(er.memory['state'][5:8], loop_batch['state'])

def test_foreign_dataset_with_a_discount():
    foreign_dataset()
    er = from_minari('other/cartpole-v0', gamma=0.9, warmup_sz=0)
    assert er.keys[-2:] == ['discount', 'td_error']
    assert same_bits(er.memory['discount'], np.full((5, 1), 0.9, np.float32))

def dqn(er, **kw):
    return dqn_learner('CartPole-v1', memory=er, steps_per_epoch=16, optim=dict(train_every=4), n_steps=1, net=dict(hidden=(8,)), seed=0, **kw)

def test_dqn_pretrains_offline_and_trains_on_online():
    "A DQN's own transitions through a dataset: the memory they fill trains the same learner, which goes on adding online steps"
    er = ExperienceReplay(max_sz=40, warmup_sz=0)
    er + Source([GymLoop('CartPole-v1', n_steps=1, seed=0), FirstLast(0.99)]).batch(30)
    to_minari(er, 'dqn/cartpole-v0', env='CartPole-v1')
    mem = from_minari('dqn/cartpole-v0', max_sz=100, warmup_sz=8, bs=8, seed=0)
    assert_same_rows(rows(mem), rows(er))
    learn = dqn(mem)
    learn.fit(1)
    assert len(mem) == 46 and mem.memory['td_error'].abs().sum() > 0  # trained on replayed rows, wrote their TD errors

def test_dqn_trains_on_a_foreign_dataset():
    foreign_dataset()
    mem = from_minari('other/cartpole-v0', max_sz=100, warmup_sz=4, bs=4, gamma=0.99, dtypes={'rewards': np.float32}, seed=0)
    assert mem.memory['reward'].dtype == torch.float32
    dqn(mem).fit(1)
    assert len(mem) == 21

def test_memory_with_rows_gets_its_own_columns():
    foreign_dataset()
    er = ExperienceReplay(max_sz=20, warmup_sz=0)
    er + Source([GymLoop('CartPole-v1', seed=0)]).batch(2)
    from_minari('other/cartpole-v0', er)
    assert len(er) == 7 and er.memory['episode_id'].flatten().tolist() == [1, 1, 1, 1, 1, 2, 2]
    only = ExperienceReplay(max_sz=20, warmup_sz=0)
    only + {'state': np.zeros((1, 4), np.float32), 'q': np.zeros((1, 1), np.float32)}
    with raises("the dataset has no column ['q'] for the memory, which holds ['state', 'q']"): from_minari('other/cartpole-v0', only)
    assert len(only) == 1
    disc = ExperienceReplay(max_sz=20, warmup_sz=0)
    disc + Source([GymLoop('CartPole-v1', n_steps=1, seed=0), FirstLast(0.99)]).batch(1)
    with raises("the dataset has no column ['discount'] for the memory, which holds ['state', 'next_state', 'action', 'reward', "
                "'terminated', 'truncated', 'done', 'episode_id', 'step', 'env_id', 'discount']; pass gamma for a discount column"):
        from_minari('other/cartpole-v0', disc)
    from_minari('other/cartpole-v0', disc, gamma=0.99)
    assert len(disc) == 6 and disc.memory['reward'].dtype == torch.float32  # the dataset's float64 rewards, stored exactly as float32
    half = ExperienceReplay(max_sz=20, warmup_sz=0)
    half + {k: v.half() if k == 'state' else v for k, v in Source([GymLoop('CartPole-v1', seed=0)]).batch(1).items()}
    with raises("column 'state': dtype float32 cannot be stored as float16 without loss"): from_minari('other/cartpole-v0', half)

def test_episodes_with_different_columns():
    "Episodes of which only some carry the memory's columns cannot make one memory"
    obs = np.zeros((3, 4), np.float32)
    ep = lambda infos: EpisodeBuffer(observations=obs, actions=np.array([0, 1]), rewards=np.array([1., 1.]), infos=infos,
                                     terminations=np.array([False, True]), truncations=np.array([False, False]))
    minari.create_dataset_from_buffers('other/mixed-v0', [ep(None), ep({'columns': {'q': np.zeros(3)}})], env='CartPole-v1')
    with raises("the episodes of the dataset make different columns: ['state', 'next_state', 'action', 'reward', 'terminated', "
                "'truncated', 'done', 'episode_id', 'step', 'env_id'] for the first, ['state', 'next_state', 'action', 'reward', "
                "'terminated', 'truncated', 'q'] for episode 1"):
        from_minari('other/mixed-v0')

def test_dataset_records_the_environment():
    er = wrapped_memory()
    to_minari(er, 'test/env-v0', env=gym.make('CartPole-v1'), observation_space=BOX1, action_space=ACT3, algorithm_name='random')
    ds = minari.load_dataset('test/env-v0')
    assert ds.env_spec.id == 'CartPole-v1' and ds.storage.metadata['algorithm_name'] == 'random'

# ------------------------------------------------------------------ bad input

def test_bad_input(minari_dir):
    er = wrapped_memory()
    with raises("episodes need the columns state, action, reward, next_state and terminated (or done); missing "
                "['action', 'reward', 'next_state', 'terminated (or done)'], the memory has ['state']"):
        to_minari(ExperienceReplay(memory={'state': torch.zeros(2, 1)}, warmup_sz=0), 'bad/cols-v0', observation_space=BOX1, action_space=ACT3)
    with raises("episodes need the columns state, action, reward, next_state and terminated (or done); missing "
                "['state', 'action', 'reward', 'next_state', 'terminated (or done)'], the memory has []"):
        to_minari(ExperienceReplay(), 'bad/empty-v0', observation_space=BOX1, action_space=ACT3)
    cb = CircularReplayBuffer(observation_shape=(2,), stack_size=1, replay_capacity=4, batch_size=1)
    cb.add(np.zeros(2, np.uint8), 0, 0., False)  # one pending step: no transition yet
    with raises('the memory holds no transitions to write'): to_minari(cb, 'bad/pending-v0', observation_space=BOX2, action_space=ACT3)
    with raises("dataset_id must look like (namespace/)name-v<version>, got 'no version'"):
        to_minari(er, 'no version', observation_space=BOX1, action_space=ACT3)
    with raises('dataset_id must be a str, got 3'): from_minari(3)
    with raises('to_minari needs env, or both observation_space and action_space'): to_minari(er, 'bad/spaces-v0', observation_space=BOX1)
    with raises('env must be a gymnasium Env, id or EnvSpec, got int'): to_minari(er, 'bad/env-v0', env=3)
    with raises(f'observations: the memory holds (1,) per step, {BOX2} needs (2,)'):
        to_minari(er, 'bad/shape-v0', observation_space=BOX2, action_space=ACT3)
    dict_space = gym.spaces.Dict({'a': BOX1})
    with raises(f'actions: only Box and Discrete spaces are supported, got {dict_space}'):
        to_minari(er, 'bad/dict-v0', observation_space=BOX1, action_space=dict_space)
    assert not (minari_dir/'bad').exists()  # nothing written for any of them
    to_minari(er, 'bad/twice-v0', observation_space=BOX1, action_space=ACT3)
    with raises(f"a Minari dataset 'bad/twice-v0' already exists at {minari_dir/'bad/twice-v0'}: pick a new name or version"):
        to_minari(er, 'bad/twice-v0', observation_space=BOX1, action_space=ACT3)
    assert minari.load_dataset('bad/twice-v0').total_steps == 8
    with raises(f"no local Minari dataset 'bad/none-v0' in {minari_dir/'bad'}; the local ones are ['bad/twice-v0']"):
        from_minari('bad/none-v0')
    with raises("settings ['bs'] are for the default memory; a memory was given"): from_minari('bad/twice-v0', ExperienceReplay(), bs=4)
    with raises('memory must be a replay memory, got a dict'): to_minari({}, 'bad/dict-memory-v0', observation_space=BOX1, action_space=ACT3)
    with raises('memory must be a replay memory, got a dict'): from_minari('bad/twice-v0', {})
    with raises("dtypes casts the fields 'observations', 'actions' and 'rewards', got ['reward']"):
        from_minari('bad/twice-v0', dtypes={'reward': np.float32})
    with raises("the dataset has no column ['legal'] for the extra elements of the memory"): from_minari('bad/twice-v0', frame_copy(None))
    cb = CircularReplayBuffer(observation_shape=(3,), stack_size=1, replay_capacity=8, batch_size=1, observation_dtype=np.float32)
    with pytest.raises(ExperienceReplayException): from_minari('bad/twice-v0', cb)
    assert len(cb) == 0  # one add for the whole dataset: a step that does not fit leaves the memory as it was

# ------------------------------------------------------------------ properties: any history of steps survives the round trip

from hypothesis import given, settings, strategies as st, HealthCheck
import itertools
_ids = itertools.count()

# one step: its environment (0 or 1), how it ends (0 runs on, 1 terminates, 2 is truncated), and whether steps were lost before it
steps_st = st.lists(st.tuples(st.integers(0, 1), st.sampled_from([0, 0, 0, 1, 2]), st.booleans()), min_size=1, max_size=25)

def history(steps):
    "Per step: env, observation, next observation (the true final one when truncated), terminated, truncated"
    cur, fresh, res = {0: 0., 1: 500.}, itertools.count(1000), []
    for env, end, gap in steps:
        if gap: cur[env] = float(next(fresh))  # the memory never saw the steps in between
        obs, nxt = cur[env], cur[env] + 1
        if end == 2: nxt = float(next(fresh))  # a truncated step's true final observation
        res.append((env, obs, nxt, end == 1, end == 2))
        cur[env] = float(next(fresh)) if end else nxt  # a new episode starts from a reset observation
    return res

def by_env(r:dict) -> dict:
    "Rows of each environment, in order"
    env = r['env_id'][:, 0]
    return {e: {k: v[env == e] for k, v in r.items()} for e in (0, 1)}

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps_st, cap=st.integers(1, 30))
def test_any_column_memory_round_trips(steps, cap):
    h = history(steps)
    er = ExperienceReplay(max_sz=cap, warmup_sz=0)
    er + dict(state=np.array([[o] for _, o, _, _, _ in h], np.float32), next_state=np.array([[x] for _, _, x, _, _ in h], np.float32),
              action=np.arange(len(h))[:, None] % 3, reward=np.arange(len(h), dtype=np.float32)[:, None],
              terminated=np.array([[t] for *_, t, _ in h]), truncated=np.array([[t] for *_, t in h]),
              env_id=np.array([[e] for e, *_ in h]))
    i = next(_ids)
    to_minari(er, f'prop/column{i}-v0', observation_space=BOX1, action_space=ACT3)
    a, b = by_env(rows(er)), by_env(rows(from_minari(f'prop/column{i}-v0', warmup_sz=0)))
    for e in (0, 1): assert_same_rows(b[e], a[e])

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps_st, stack=st.integers(1, 3), n=st.integers(1, 3), cap=st.integers(2, 30))
def test_any_frame_memory_round_trips(steps, stack, n, cap):
    "Every valid transition comes back; a memory of stacks is not wrapped (an episode cut by the ring would gain padded stacks)"
    h = history([(e, end, False) for e, end, _ in steps])  # a frame memory links its own steps: nothing is lost in between
    cap = cap if stack == 1 else 32
    make = lambda: CircularReplayBuffer(observation_shape=(1,), stack_size=stack, replay_capacity=cap, batch_size=1, update_horizon=n,
                                        observation_dtype=np.float32)
    cb = make()
    for t, (e, o, x, term, trunc) in enumerate(h):
        cb.add(np.array([o], np.float32), t % 3, float(t), term, truncated=trunc, next_observation=np.array([x], np.float32), env_id=e)
    if not storage_episodes(cb.storage): return  # only pending steps: nothing to write
    i = next(_ids)
    to_minari(cb, f'prop/frames{i}-v0', observation_space=BOX1, action_space=ACT3)
    back = from_minari(f'prop/frames{i}-v0', make())
    def key(m):  # every valid transition, as a sorted list of tuples
        if not m.valid_mask().any(): return []  # (a frame memory cannot build an empty batch)
        t = m.sample_all_valid_transitions()
        return sorted(zip(*(t[k].reshape(len(t[k]), -1).tolist() for k in
                            ['state', 'action', 'reward', 'next_state', 'discount', 'terminated', 'truncated', 'horizon', 'env_id'])))
    assert key(back) == key(cb)
    da, db = cb.to_df(), back.to_df()
    lone = da.groupby('episode_id')['episode_id'].transform('size').eq(1) & ~da['terminal'] & ~da['truncated']
    da = da[~lone]  # an episode whose only stored step is pending is not written
    for e in (0, 1):
        x, y = da[da['env_id'] == e], db[db['env_id'] == e]
        for k in ['observation', 'action', 'reward', 'terminal', 'truncated']: assert y[k].tolist() == x[k].tolist(), k
