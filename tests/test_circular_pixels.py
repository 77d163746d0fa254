"A DQN on pixels through `CircularReplayBuffer` and `ExperienceReplayCallback`: the buffer rebuilds exactly the stacks the agent saw."
import numpy as np, torch
from torch import nn
from fastai.learner import Learner
from fastrl_replay.data.gym import pixel_env, GymLoop, Source, EpsilonGreedy, gym_dataloaders, NoValidation
from fastrl_replay.agents.dqn import DQNLoss, DQNTrainer
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.compat.reagent import CircularReplayBuffer

class PixelQNet(nn.Module):
    "Convolutions over a stack of uint8 frames, then one value per action"
    def __init__(self, stack, n_actions, hw):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(stack, 8, 4, stride=2), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(), nn.Flatten())
        n = self.conv(torch.zeros(1, stack, *hw)).shape[1]
        self.head = nn.Linear(n, n_actions)
    def forward(self, x): return self.head(self.conv((x['state'] if isinstance(x, dict) else x).float() / 255))

def test_pixel_dqn_trains_on_rebuilt_stacks():
    torch.manual_seed(0)
    env = pixel_env('CartPole-v1', n_envs=2, reduce_by=10, stack_size=4)  # (4, 40, 60) uint8 stacks, zero-padded
    hw = env.single_observation_space.shape[1:]
    model = PixelQNet(4, 2, hw)
    mem = CircularReplayBuffer(hw, stack_size=4, replay_capacity=1_000, batch_size=16, update_horizon=2, gamma=0.9,
                               warmup_sz=48, prioritized=True, seed=0)
    seen = []  # every row the loop produced, in order: the stacks the agent acted on
    source = Source([GymLoop(env=env, agent=EpsilonGreedy(model, 2, eps_steps=100, seed=0), seed=0, obs_dtype=np.uint8),
                     lambda row: seen.append(row) or row])
    loss = DQNLoss(model)
    trainer = DQNTrainer(loss, target_sync=20)
    learn = Learner(gym_dataloaders(source, n=240, bs=4), model, loss_func=loss, lr=1e-3,
                    cbs=[ExperienceReplayCallback(mem), trainer, NoValidation()])
    with learn.no_bar(), learn.no_logging(): learn.fit(1)

    assert mem.add_count == 240 and source.loop.n_episodes >= 2  # every step stored, episodes of both envs ended
    assert learn.experience_replay.batch.idxs.shape == (16,) and np.isfinite(learn.recorder.losses[-1].item())
    assert (mem.td_errors != 0).sum() > 16  # TD errors came back from the learner
    b = mem.sample_all_valid_transitions()
    assert len(b) >= 230  # all but the newest few steps of each env and nothing else
    by_episode = {}
    for s, row in enumerate(seen[:mem.add_count]): by_episode.setdefault(int(row['episode_id'][0, 0]), []).append(s)
    for j, s in enumerate(b['indices'].tolist()):  # capacity 1,000 > 240: index s holds the s-th step
        row = seen[s]
        np.testing.assert_array_equal(b['state'][j].numpy(), row['state'][0])
        ep = by_episode[int(row['episode_id'][0, 0])]
        last = seen[ep[ep.index(s) + b['horizon'][j].item() - 1]]  # the window's last step, same env and episode
        assert bool(last['terminated'][0, 0]) == b['terminated'][j].item()
        assert bool(last['truncated'][0, 0] and not last['terminated'][0, 0]) == b['truncated'][j].item()
        expected = last['next_state'][0].copy()
        if b['terminated'][j].item(): expected[-1] = 0  # the terminal frame is not kept: no target reads it
        np.testing.assert_array_equal(b['next_state'][j].numpy(), expected)
    env.close()

class LazyPixelQNet(nn.Module):
    "The same kind of network with a lazy first dense layer: `dqn_learner` sizes it from the observation space"
    def __init__(self, stack, n_actions):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(stack, 8, 4, stride=2), nn.ReLU(), nn.Flatten(), nn.LazyLinear(n_actions))
    def forward(self, x): return self.net((x['state'] if isinstance(x, dict) else x).float() / 255)

def test_pixel_dqn_in_one_call():
    from fastrl_replay.agents.dqn import dqn_learner, evaluate
    env = pixel_env('CartPole-v1', reduce_by=10, stack_size=4)  # one environment of (4, 40, 60) uint8 stacks
    mem = CircularReplayBuffer((40, 60), stack_size=4, replay_capacity=500, batch_size=16, update_horizon=3, gamma=0.9,
                               warmup_sz=50, seed=0)
    model = LazyPixelQNet(4, 2)
    learn = dqn_learner(env, model=model, memory=mem, steps_per_epoch=120, optim=dict(train_every=4, lr=1e-3), net=dict(target_sync=5), seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    loop = learn.dls.train.dataset.loop
    assert learn.model is model and loop.agent.model is model and loop.obs_dtype == np.uint8
    assert loop.agent.random_steps == 50  # random actions while the memory warms up
    assert mem.add_count == loop.env_steps == 120  # raw steps: the memory makes its own 3-step returns
    assert learn.dqn_trainer.n_updates == 30 - 13 + 1  # batches 13 (52 steps stored) to 30 train
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert learn.experience_replay.batch.idxs.shape == (16,) and np.isfinite(learn.recorder.losses[-1].item())
    assert mem.td_errors[:120].abs().sum() > 0
    env.close()
