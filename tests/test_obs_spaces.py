"Observation spaces as SB3 takes them: images, dicts, discrete values and bits, stored in their own dtypes, read by the default networks; others refused at build."
import numpy as np, pytest, torch, gymnasium as gym
from fastai.callback.core import Callback, CancelFitException
from fastrl_replay.agents.dqn import dqn_learner, evaluate, QNet
from fastrl_replay.agents.nets import EncodedNet, ImageEncoder, DictEncoder, OneHotEncoder, FlatEncoder
from fastrl_replay.agents.sac import sac_learner, evaluate_actor
from fastrl_replay.agents.td3 import td3_learner
from fastrl_replay.callback import EpisodeValidation
from fastrl_replay.checkpoint import CheckpointCallback, read_checkpoint
from fastrl_replay.core import BD
from fastrl_replay.data.gym import GymLoop, Source, FirstLast, NoValidation
from fastrl_replay.envs.toy import SIDE_GAME
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.persist import load_memory
from run_helpers import StopAt

SMALL = dict(replay=dict(warmup_sz=100, bs=32), net=dict(hidden=(32,)), seed=0)
DICT_COLUMNS = {'flip': ((), torch.int64), 'image': ((1, 5, 5), torch.uint8), 'noise': ((3,), torch.float32)}


def game(obs, continuous=False): return gym.make(SIDE_GAME, obs=obs, continuous=continuous)


def fit(learn, epochs=1):
    with learn.no_bar(), learn.no_logging(): learn.fit(epochs)
    return learn


def columns(memory) -> dict:
    "Each stored column's trailing shape and dtype"
    return {k: (tuple(v.shape[1:]), v.dtype) for k, v in memory.storage.memory.items()}


@pytest.mark.parametrize('kind', ['uniform', 'per', 'laber'])
def test_dict_game_trains_with_a_column_per_key_in_its_own_dtype(kind):
    learn = fit(dqn_learner(game('dict'), steps_per_epoch=300, **(SMALL | dict(replay=dict(kind=kind, warmup_sz=100, bs=32)))))
    mem = learn.experience_replay.memory
    cols = columns(mem)
    for k, spec in DICT_COLUMNS.items(): assert cols[f'state.{k}'] == cols[f'next_state.{k}'] == spec
    assert 'state' not in cols and len(mem) == 300
    assert learn.dqn_trainer.n_updates >= 40  # a gradient step per 4 environment steps once the memory warmed up
    b, _ = mem.sample()
    assert type(b['state']) is dict and list(b['state']) == ['flip', 'image', 'noise']
    assert b['state']['image'].shape == (32, 1, 5, 5) and b['next_state']['flip'].dtype == torch.int64
    assert isinstance(learn.model, EncodedNet) and isinstance(learn.model.encoder, DictEncoder)
    assert (mem.memory['td_error'] != 0).any()  # the loss saw the nested batches and reported their TD errors
    assert len(evaluate(learn.model, game('dict'), n_episodes=2)) == 2


@pytest.mark.parametrize('obs,shape', [('image', (1, 5, 5)), ('image_last', (5, 5, 1))])
def test_image_game_stores_uint8_and_reads_through_convolutions(obs, shape):
    learn = fit(dqn_learner(game(obs), steps_per_epoch=300, **SMALL))
    assert columns(learn.experience_replay.memory)['state'] == (shape, torch.uint8)
    enc = learn.model.encoder
    assert isinstance(enc, ImageEncoder) and enc.layout == ('chw' if obs == 'image' else 'hwc')
    b, _ = learn.experience_replay.memory.sample()
    assert b['state'].dtype == torch.uint8 and torch.isfinite(learn.model(b)).all()
    assert len(evaluate(learn.model, game(obs), n_episodes=2)) == 2


@pytest.mark.parametrize('obs,col,encoder', [('discrete', ((), torch.int64), OneHotEncoder),
                                             ('multibinary', ((2,), torch.int8), FlatEncoder)])
def test_discrete_and_multibinary_observations(obs, col, encoder):
    learn = fit(dqn_learner(game(obs), steps_per_epoch=200, **SMALL))
    assert columns(learn.experience_replay.memory)['state'] == col
    assert isinstance(learn.model.encoder, encoder)
    assert len(evaluate(learn.model, game(obs), n_episodes=1)) == 1


def test_box_vectors_keep_the_plain_qnet():
    learn = dqn_learner(game('vector'), steps_per_epoch=200, **SMALL)
    assert type(learn.model) is QNet and learn.model.net[0].in_features == 2


@pytest.mark.parametrize('build', [sac_learner, td3_learner])
@pytest.mark.parametrize('obs', ['dict', 'image_last', 'discrete'])
def test_actor_critics_take_the_spaces_too(build, obs):
    learn = fit(build(game(obs, continuous=True), steps_per_epoch=150, **SMALL))
    m = learn.model
    assert m.actor.encoder is not None and m.critic.encoder is not None and m.actor.encoder is not m.critic.encoder
    assert m.critic_target.encoder is not m.critic.encoder  # the target critic has a copy of its own
    cols = columns(learn.experience_replay.memory)
    if obs == 'dict':
        for k, spec in DICT_COLUMNS.items(): assert cols[f'state.{k}'] == spec
    else: assert cols['state'][1] == (torch.uint8 if obs == 'image_last' else torch.int64)
    assert learn.actor_critic_trainer.n_updates == 150 - 100 + 1
    assert len(evaluate_actor(m, game(obs, continuous=True), n_episodes=1)) == 1


def test_two_dict_runs_from_a_seed_are_equal_bit_for_bit():
    a, b = (fit(dqn_learner(game('dict'), steps_per_epoch=200, **SMALL)) for _ in range(2))
    for k, w in a.model.state_dict().items(): assert torch.equal(b.model.state_dict()[k], w), k
    for k, v in a.experience_replay.memory.memory.items(): assert torch.equal(b.experience_replay.memory.memory[k], v), k


class Text(gym.Env):
    "An environment that observes text"
    observation_space = gym.spaces.Text(8)
    def __init__(self, continuous=False):
        self.action_space = gym.spaces.Box(-1., 1., (1,)) if continuous else gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None): return 'hello', {}
    def step(self, action): return 'hello', 0., True, False, {}


class Graphs(Text):
    "An environment that observes graphs"
    observation_space = gym.spaces.Graph(gym.spaces.Box(0., 1., (2,)), None)


class Nested(Text):
    "An environment that observes a dict in a dict"
    observation_space = gym.spaces.Dict({'a': gym.spaces.Dict({'b': gym.spaces.Discrete(2)})})


@pytest.mark.parametrize('env,named', [(Text, 'Text('), (Graphs, 'Graph('), (Nested, "key 'a' holds Dict(")])
@pytest.mark.parametrize('build', [dqn_learner, sac_learner, td3_learner])
def test_unsupported_spaces_are_refused_at_build_by_name(env, named, build):
    with pytest.raises(ExperienceReplayException) as e: build(env(continuous=build is not dqn_learner))
    assert named in str(e.value) and 'they take Box' in str(e.value)


def nested_batch(n, start=0):
    return BD(state={'flip': torch.arange(start, start + n) % 2, 'image': torch.full((n, 1, 5, 5), start, dtype=torch.uint8)},
              next_state={'flip': torch.zeros(n, dtype=torch.int64), 'image': torch.zeros(n, 1, 5, 5, dtype=torch.uint8)},
              action=torch.zeros(n, 1, dtype=torch.int64), reward=torch.arange(start, start + n).float()[:, None])


def test_memory_flattens_on_add_and_nests_on_sample():
    er = ExperienceReplay(bs=8, max_sz=10, warmup_sz=1, seed=0) + nested_batch(3)
    assert er.keys == ['state.flip', 'state.image', 'next_state.flip', 'next_state.image', 'action', 'reward', 'td_error']
    flat = {f'{k}.{j}' if isinstance(v, dict) else k: x for k, v in nested_batch(2, 3).items()
            for j, x in (v.items() if isinstance(v, dict) else [(None, v)])}
    er + flat  # flat columns are the same columns
    er.append({k: ({j: x[0] for j, x in v.items()} if isinstance(v, dict) else v[0]) for k, v in nested_batch(1, 5).items()})
    assert len(er) == 6 and er.memory['reward'].flatten().tolist() == [0., 1., 2., 3., 4., 5.]
    assert er.memory['state.image'][:, 0, 0, 0].tolist() == [0, 0, 0, 3, 3, 5]
    b, idxs = er.sample()
    assert list(b) == ['state', 'next_state', 'action', 'reward'] and list(b['state']) == ['flip', 'image']
    assert torch.equal(b['state']['image'][:, 0, 0, 0].float(), er.memory['state.image'][idxs, 0, 0, 0].float())
    assert torch.equal(b['reward'], er.memory['reward'][idxs])


@pytest.mark.parametrize('bad,says', [
    (lambda b: {**b, 'state': {'flip': b['state']['flip']}}, "missing ['state.image']"),
    (lambda b: {**b, 'state': {**b['state'], 'goal': torch.zeros(2, 2)}}, "extra ['state.goal']"),
    (lambda b: {**b, 'state': {**b['state'], 'image': torch.zeros(2, 5, 5, dtype=torch.uint8)}}, "column 'state.image': expected shape (n, 1, 5, 5)"),
    (lambda b: {**b, 'state': {**b['state'], 'image': torch.zeros(2, 1, 5, 5)}}, "'state.image': dtype float32 cannot be stored as uint8"),
    (lambda b: {**b, 'state': {'flip': {'deeper': torch.zeros(2)}}}, "one level deep"),
    (lambda b: {**b, 'state.flip': b['state']['flip']}, "'state.flip': expected one tensor, got it twice"),
    (lambda b: {**b, 'state': torch.zeros(2, 3)}, "missing ['state.flip', 'state.image'], extra ['state']")])
def test_wrong_keys_and_shapes_are_refused_and_leave_the_memory_as_it_was(bad, says):
    er = ExperienceReplay(bs=2, max_sz=10, warmup_sz=1, seed=0) + nested_batch(4)
    before = {k: v.clone() for k, v in er.memory.items()}
    with pytest.raises(ExperienceReplayException) as e: er + bad(nested_batch(2, 7))
    assert says in str(e.value)
    assert len(er) == 4 and er.pointer == 4
    for k, v in er.memory.items(): assert torch.equal(v, before[k]), k


def test_a_column_beside_its_own_keys_is_refused():
    with pytest.raises(ExperienceReplayException, match='come back from a sample as one dict column'):
        ExperienceReplay(max_sz=4, warmup_sz=1) + {'state': torch.zeros(2, 1), 'state.x': torch.zeros(2, 1)}


@pytest.mark.parametrize('kind', ['ExperienceReplay', 'PrioritizedExperienceReplay'])
def test_checkpoints_round_trip_the_flat_columns(tmp_path, kind):
    import fastrl_replay.memory.prioritized as per
    cls = ExperienceReplay if kind == 'ExperienceReplay' else per.PrioritizedExperienceReplay
    er = cls(bs=4, max_sz=8, warmup_sz=1, seed=0) + nested_batch(5) + nested_batch(5, 5)  # wrapped around
    er.update_td(torch.arange(4.), [0, 1, 2, 3])
    er.save(tmp_path/'m')
    back = load_memory(tmp_path/'m')
    assert type(back) is cls and back.keys == er.keys
    for k, v in er.memory.items(): assert torch.equal(back.memory[k], v), k
    (b1, i1), (b2, i2) = er.sample(), back.sample()
    assert torch.equal(i1, i2) and torch.equal(b1['state']['image'], b2['state']['image'])


def test_loop_collects_dicts_in_vector_envs_with_either_autoreset():
    for mode in (gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP):
        env = gym.make_vec(SIDE_GAME, num_envs=2, vectorization_mode='sync', vector_kwargs=dict(autoreset_mode=mode), obs='dict')
        dtypes = {'flip': np.int64, 'image': np.uint8, 'noise': np.float32}
        src = Source([GymLoop(env=env, seed=0, obs_dtype=dtypes), FirstLast(0.9)])
        b = src.batch(40)  # 2 episodes of 10 steps in each environment
        assert b['state']['image'].dtype == torch.uint8 and b['next_state']['noise'].shape == (40, 3)
        assert int(b['done'].sum()) == 4 and (b['step'].flatten() <= 10).all()
        last = b['done'].flatten()  # SAME_STEP: the final observation, not the next episode's first, ends an episode
        assert not torch.equal(b['next_state']['image'][last], b['state']['image'][last])


def test_windows_of_dicts_without_first_last_and_the_loop_state():
    loop = GymLoop(env=game('dict'), seed=0, n_steps=3, obs_dtype={'flip': np.int64, 'image': np.uint8, 'noise': np.float32})
    src = Source([loop])
    rows = src.take() if src.step() else []
    while len(rows) < 2: src.step(); rows += src.take()
    assert rows[0]['state']['image'].shape == (3, 1, 5, 5)  # a window of 3 steps, key by key
    state = loop.state_dict()
    assert {k: v.dtype for k, v in state['state'].items()} == {'flip': np.int64, 'image': np.uint8, 'noise': np.float32}
    again = GymLoop(env=game('dict'), seed=0, n_steps=3, obs_dtype=loop.obs_dtype)
    assert not again.load_state_dict(state)  # the game's own state is not saved: its environments start new episodes
    assert {k: v.dtype for k, v in again.state.items()} == {'flip': np.int64, 'image': np.uint8, 'noise': np.float32}
    assert again.env_steps == loop.env_steps
    with pytest.raises(ValueError, match='stacks are of array observations'): GymLoop(env=game('dict'), stack_size=2)


def test_episode_validation_plays_and_scores_dicts():
    learn = dqn_learner(game('dict'), steps_per_epoch=200, cbs=[EpisodeValidation(n_episodes=2, env=lambda: game('dict'))],
                        **SMALL)
    for cb in [cb for cb in learn.cbs if isinstance(cb, NoValidation)]: learn.remove_cb(cb)  # a ready env: none by default
    with learn.no_bar(): learn.fit(1)
    assert learn.episode_validation.valid_return is not None


def test_a_stopped_dict_run_resumes_from_its_checkpoint(tmp_path):
    stopped = dqn_learner(game('dict'), steps_per_epoch=200, **SMALL)
    with stopped.no_bar(), stopped.no_logging(): stopped.fit(2, cbs=[CheckpointCallback(tmp_path/'c', every=100), StopAt(300)])
    assert read_checkpoint(tmp_path/'c')['env_steps'] == 300
    learn = dqn_learner(game('dict'), steps_per_epoch=200, **SMALL)
    with learn.no_bar(), learn.no_logging(): learn.fit(2, cbs=[CheckpointCallback(tmp_path/'c', every=100, resume=True)])
    mem, saved = learn.experience_replay.memory, stopped.experience_replay.memory
    assert len(mem) == 400 and columns(mem)['state.image'] == ((1, 5, 5), torch.uint8)
    for k, v in saved.storage.memory.items(): assert torch.equal(mem.storage.memory[k][:300], v[:300]), k


@pytest.mark.slow
@pytest.mark.parametrize('obs', ['image', 'image_last', 'dict'])
def test_dqn_solves_the_side_game_from_each_observation(obs):
    "A random policy scores 5; reading the image (and, in the dict, the coin beside it) scores 10"
    torch.set_num_threads(1)  # the steps are independent: a short horizon keeps the values near the rewards
    learn = dqn_learner(game(obs), steps_per_epoch=1_000, gamma=0.5, replay=dict(warmup_sz=500),
                        explore=dict(eps_steps=2_000), net=dict(hidden=(64, 64)), seed=0)
    fit(learn, epochs=4)
    assert np.mean(evaluate(learn.model, game(obs), n_episodes=20)) >= 9.5


@pytest.mark.cuda
@pytest.mark.parametrize('replay', ['uniform', 'per', 'laber'])
def test_dict_game_on_cuda_keeps_every_key_on_the_device(replay):
    learn = fit(dqn_learner(game('dict'), steps_per_epoch=300, device='cuda', replay=dict(kind=replay, warmup_sz=100, bs=32,
                            options=dict(device='cuda')), net=dict(hidden=(32,)), seed=0))
    mem = learn.experience_replay.memory
    assert all(v.device.type == 'cuda' for v in mem.storage.memory.values())
    b, _ = mem.sample()
    assert all(t.device.type == 'cuda' for t in b.tensors()) and b['state']['image'].dtype == torch.uint8
    assert mem.memory['td_error'].abs().sum() > 0
    sac = fit(sac_learner(game('dict', continuous=True), steps_per_epoch=150, device='cuda', **SMALL))
    assert next(sac.model.parameters()).device.type == 'cuda'
    assert len(evaluate(learn.model, game('dict'), n_episodes=1)) == 1
    assert len(evaluate_actor(sac.model, game('dict', continuous=True), n_episodes=1)) == 1
