"The gym data loop on a deterministic environment whose observations say where they come from."
import numpy as np, pytest, torch, gymnasium as gym
from gymnasium.spaces import Box, Discrete
from fastrl_replay.data.gym import GymLoop, Source, FirstLast, ResReduce, RandomAgent, EpsilonGreedy, gym_dataloaders

class CountEnv(gym.Env):
    "Observation (t, episode, tag); the reward of step t (from 1) is t; terminates after `term_at` steps"
    metadata = {'render_modes': []}
    def __init__(self, term_at=5, tag=0):
        self.observation_space, self.action_space = Box(-1e9, 1e9, (3,), np.float32), Discrete(2)
        self.term_at, self.tag, self.ep, self.t = term_at, tag, 0, 0
    def _obs(self): return np.array([self.t, self.ep, self.tag], np.float32)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ep, self.t = self.ep + 1, 0
        return self._obs(), {}
    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t >= self.term_at, False, {}

def count_vec(term_ats, trunc_at=None, mode=gym.vector.AutoresetMode.NEXT_STEP):
    def make(term_at, tag):
        def f():
            e = CountEnv(term_at, tag)
            return gym.wrappers.TimeLimit(e, trunc_at) if trunc_at else e
        return f
    return gym.vector.SyncVectorEnv([make(t, i) for i, t in enumerate(term_ats)], autoreset_mode=mode)

def take(src, n): return [r for r, _ in zip(src, range(n))]

def test_n_step_rewards_and_discounts_by_hand():
    src = Source([GymLoop(env=count_vec([5]), n_steps=3, seed=0), FirstLast(0.5)])
    rows = take(src, 5)  # one episode of 5 steps: windows start at steps 1..5
    assert [r['step'].item() for r in rows] == [1, 2, 3, 4, 5]
    # rewards of steps 1..5 are 1..5: window from step s sums r_s + 0.5 r_{s+1} + 0.25 r_{s+2}, cut at the episode end
    assert [r['reward'].item() for r in rows] == [1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2 + 1.25, 4 + 2.5, 5.]
    assert [r['discount'].item() for r in rows] == [0.125, 0.125, 0.125, 0.25, 0.5]
    assert [r['next_state'][0, 0].item() for r in rows] == [3, 4, 5, 5, 5]
    assert [r['terminated'].item() for r in rows] == [False, False, True, True, True]

def test_terminated_and_truncated_bootstrap_correctly():
    src = Source([GymLoop(env=count_vec([3], trunc_at=None), seed=0), FirstLast(0.9)])
    term = [r for r in take(src, 6) if r['done'].item()]
    assert all(r['terminated'].item() and not r['truncated'].item() for r in term)
    assert [r['next_state'][0, :2].tolist() for r in term] == [[3., 1.], [3., 2.]]  # the terminal observation
    src = Source([GymLoop(env=count_vec([100], trunc_at=4), seed=0), FirstLast(0.9)])
    rows = take(src, 8)
    trunc = [r for r in rows if r['done'].item()]
    assert all(r['truncated'].item() and not r['terminated'].item() for r in trunc)
    # the true final observation of each truncated episode, never the next episode's first one
    assert [r['next_state'][0, :2].tolist() for r in trunc] == [[4., 1.], [4., 2.]]
    assert rows[4]['state'][0, :2].tolist() == [0., 2.]  # the next episode starts from its reset observation

@pytest.mark.parametrize('mode', [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
@pytest.mark.parametrize('n', [1, 3])
def test_no_transition_crosses_a_reset(mode, n):
    src = Source([GymLoop(env=count_vec([2, 3, 5], trunc_at=4, mode=mode), n_steps=n, seed=0), FirstLast(0.9)])
    rows = take(src, 120)
    for r in rows:
        s, ns = r['state'][0], r['next_state'][0]
        k = round(np.log(r['discount'].item()) / np.log(0.9))
        assert ns[1] == s[1] and ns[2] == s[2] == r['env_id'].item()  # same episode, same environment
        assert ns[0] == s[0] + k and r['step'].item() == s[0] + 1  # k steps on, from the episode's step
    per_env = {e: [r for r in rows if r['env_id'].item() == e] for e in range(3)}
    term_at = {0: 2, 1: 3, 2: 4}  # env 2 is truncated at 4 before it can terminate at 5
    for e, rs in per_env.items():
        ends = [r for r in rs if r['done'].item() and r['step'].item() == term_at[e]]
        assert ends and all(r['truncated'].item() == (e == 2) and r['terminated'].item() == (e != 2) for r in ends)
    ids = {(r['env_id'].item(), r['state'][0, 1].item()): r['episode_id'].item() for r in rows}
    assert len(set(ids.values())) == len(ids)  # each (env, episode) has its own episode_id

def test_steps_delta_emits_every_kth_step():
    src = Source([GymLoop(env=count_vec([7]), steps_delta=3, seed=0), FirstLast(0.9)])
    assert [r['step'].item() for r in take(src, 6)] == [1, 4, 7, 1, 4, 7]

def test_without_first_last_windows_are_rows():
    src = Source([GymLoop(env=count_vec([4]), n_steps=2, seed=0)])
    wins = take(src, 4)
    assert [w.bs() for w in wins] == [2, 2, 2, 1] and 'discount' not in wins[0]

def test_seeding_is_reproducible_and_episodes_differ():
    def first_states(seed):
        src = Source([GymLoop('CartPole-v1', seed=seed), FirstLast])
        return [r['state'][0].tolist() for r in take(src, 300) if r['step'].item() == 1]
    a, b, c = first_states(3), first_states(3), first_states(4)
    assert a == b and a != c
    assert len(a) > 3 and len({tuple(s) for s in a}) == len(a)  # each episode starts somewhere new

def test_dataloaders_batch_transitions():
    dls = gym_dataloaders(Source([GymLoop(env=count_vec([3, 4]), seed=0), FirstLast]), n=12, bs=4)
    batches = list(dls.train)
    assert len(batches) == 3 and all(len(b) == 1 and b[0]['state'].shape == (4, 3) for b in batches)
    assert len(list(dls.valid)) == 0
    again = list(dls.train)  # the next epoch carries on with the same environments
    assert again[0][0]['state'][:, 1].max() >= batches[-1][0]['state'][:, 1].max()

def test_epsilon_greedy_uses_the_model_it_was_given():
    model = torch.nn.Linear(3, 2)
    with torch.no_grad(): model.weight.zero_(); model.bias.copy_(torch.tensor([0., 1.]))
    agent = EpsilonGreedy(model, 2, eps_start=0., eps_end=0., seed=0)
    assert agent(torch.zeros(5, 3)).tolist() == [1] * 5
    with torch.no_grad(): model.bias.copy_(torch.tensor([1., 0.]))  # the same object, changed in place
    assert agent(torch.zeros(5, 3)).tolist() == [0] * 5

def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown gymnasium environment 'NoSuchEnv-v9'"): GymLoop('NoSuchEnv-v9')
    with pytest.raises(ValueError, match='exactly one GymLoop'): Source([FirstLast])
    with pytest.raises(ValueError) as e: GymLoop('CartPole-v1', n_steps=0)
    assert str(e.value) == 'n_steps must be a positive int, got 0'
    with pytest.raises(ValueError) as e: GymLoop('CartPole-v1', steps_delta=0)
    assert str(e.value) == 'steps_delta must be a positive int, got 0'
    with pytest.raises(ValueError) as e: GymLoop('CartPol-v1')
    assert str(e.value) == "unknown gymnasium environment 'CartPol-v1'; did you mean CartPole-v1, CartPole-v0, phys2d/CartPole-v1?"
    src = Source([GymLoop(env=count_vec([3])), ResReduce(2)])
    with pytest.raises(ValueError, match="mode='rgb_array'"): take(src, 1)

def test_steps_count_is_an_alias_of_n_steps():
    assert GymLoop(env=count_vec([5]), steps_count=3).n_steps == 3  # fastrl's spelling
    assert GymLoop(env=count_vec([5]), n_steps=3).n_steps == 3
    assert GymLoop(env=count_vec([5])).n_steps == 1 and not hasattr(GymLoop(env=count_vec([5])), 'steps_count')
    assert GymLoop(env=count_vec([5]), n_steps=None, steps_count=2).n_steps == 2
    alias = take(Source([GymLoop(env=count_vec([5]), steps_count=3, seed=0), FirstLast(0.5)]), 7)
    name = take(Source([GymLoop(env=count_vec([5]), n_steps=3, seed=0), FirstLast(0.5)]), 7)
    for a, b in zip(alias, name):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for n, c in [(3, 3), (1, 3), (3, 1)]:
        with pytest.raises(ValueError) as e: GymLoop(env=count_vec([5]), n_steps=n, steps_count=c)
        assert str(e.value) == f'give n_steps or its alias steps_count, not both: got n_steps={n}, steps_count={c}'
    with pytest.raises(ValueError) as e: GymLoop(env=count_vec([5]), steps_count=0)
    assert str(e.value) == 'n_steps must be a positive int, got 0'

def test_bad_updates_for_the_dataloaders():
    for u in (0, -1, 1.5, None):
        with pytest.raises(ValueError) as e: gym_dataloaders(Source([GymLoop(env=count_vec([3]))]), updates=u)
        assert str(e.value) == f'updates must be a positive int, got {u!r}'


def test_peek_and_one_batch_leave_the_transitions_for_the_next_batch():
    src, twin = (Source([GymLoop(env=count_vec([4, 6]), n_steps=2, seed=0), FirstLast(0.5)]) for _ in range(2))
    shown = src.peek(5)
    assert all(torch.equal(shown[k], v) for k, v in src.batch(5).items())
    assert all(torch.equal(shown[k], v) for k, v in twin.batch(5).items())  # as if never peeked
    dl = gym_dataloaders(src, n=12, bs=3).train
    first = dl.one_batch()[0]
    assert all(torch.equal(first[k], v) for k, v in next(iter(dl))[0].items())
    with pytest.raises(ValueError, match='does not contain any batches'): gym_dataloaders(src, n=0).train.one_batch()


def test_evaluation_episodes_play_their_own_environment():
    from fastrl_replay.data.gym import evaluation_episodes
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    agent = EpsilonGreedy(model, 2, seed=0)
    src = Source([GymLoop('CartPole-v1', agent=agent, n_steps=2, seed=0), FirstLast(0.9)])
    before = src.batch(3)
    returns, b = evaluation_episodes(src, agent.greedy, n_episodes=4, seed=3)
    assert len(returns) == 4 and b.bs() == sum(returns) and b['discount'].unique().tolist() == pytest.approx([0.81, 0.9])
    assert evaluation_episodes(src, agent.greedy, n_episodes=4, seed=3)[0] == returns  # the same seed, the same episodes
    assert agent.steps == src.loop.env_steps == 4  # neither the agent nor the training environment stepped
    twin = Source([GymLoop('CartPole-v1', agent=EpsilonGreedy(model, 2, seed=0), n_steps=2, seed=0), FirstLast(0.9)])
    twin.batch(3)
    assert torch.equal(src.batch(6)['state'], twin.batch(6)['state'])
    with torch.no_grad(): greedy = model(b['state']).argmax(1)
    assert torch.equal(b['action'].flatten(), greedy)  # greedy actions: no exploration
