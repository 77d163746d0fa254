"""Our DQN and Stable-Baselines3's in lockstep on one seed, to find where they first differ.

Both start from the same Q-network weights and draw from the same random streams: at environment step t both
use the same coin for epsilon and the same random action, and at their g-th gradient step both replay the same
rows (the same fractions of their memory's length). Each library keeps its own logic: its exploration schedule,
its warm-up actions, its memory, its optimizer, its loss, clipping and target copies. After every training burst
the script compares the transitions stored, the online and target weights, and the actions taken; the first
burst where they differ names the part that differs.

With torch's default (unfused) Adam, as SB3 uses, the two are bit for bit the same: the same actions, the same
stored transitions and the same weights after every burst (seed 0, 8,000 steps: 28 bursts, 3,584 gradient steps).
Our fused Adam rounds differently in the last bits; Adam's normalization amplifies those differences in weights
whose gradients are near zero, and after about ten bursts the runs part as two seeds would. `--greedy-warmup`
(ours explores by its schedule during the warm-up) parts them within the first 256 steps, `--eps 1e-5` (Adam's
epsilon of SB3's actor-critic policies, not of its DQN) in the first burst.

    .venv/bin/python bench/dqn_lockstep.py --seed 0 --steps 8000 --unfused     # identical
    .venv/bin/python bench/dqn_lockstep.py --seed 0 --steps 8000               # parts at burst 10: rounding
    .venv/bin/python bench/dqn_lockstep.py --seed 0 --steps 5000 --greedy-warmup --eps 1e-5

The verdict (the first burst and the first action that differ), the settings and the machine (`bench/machine.py`) go
to bench/results/dqn_lockstep.json (`--out`).
"""
import argparse, copy, json
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts
from functools import partial
from fastai.optimizer import OptimWrapper
import numpy as np, torch, gymnasium as gym
from fastai.callback.core import Callback

ENV = 'CartPole-v1'
ZOO = dict(lr=2.3e-3, bs=64, buffer=100_000, learning_starts=1_000, gamma=0.99, train_freq=256, gradient_steps=128,
           exploration_fraction=0.16, final_eps=0.04, hidden=(256, 256), max_grad_norm=10.)

def streams(seed, steps, bs):
    "The shared draws: per environment step a coin and a random action's uniform; per gradient step `bs` uniforms"
    g = np.random.default_rng(seed + 12345)
    return g.random((steps + 1000, 2)), g.random((steps, bs))

def sb3_run(seed, steps, D, U, record, clip=10.):
    from stable_baselines3 import DQN
    from stable_baselines3.common.buffers import ReplayBuffer
    z = ZOO
    class LockBuffer(ReplayBuffer):
        g = 0
        def sample(self, batch_size, env=None):
            upper = self.buffer_size if self.full else self.pos
            i = (U[LockBuffer.g] * upper).astype(np.int64); LockBuffer.g += 1
            return self._get_samples(i, env)
    class LockDQN(DQN):
        def _sample_action(self, learning_starts, action_noise=None, n_envs=1):
            t = self.num_timesteps
            u, r = D[t]
            if t < learning_starts or u < self.exploration_rate: a = int(r * 2)
            else:
                with torch.no_grad(): a = int(self.q_net(torch.as_tensor(self._last_obs, dtype=torch.float32)).argmax())
            record['actions'].append(a)
            return np.array([a]), np.array([a])
        def train(self, gradient_steps, batch_size=100):
            super().train(gradient_steps, batch_size)
            rb = self.replay_buffer
            record['bursts'].append(dict(
                n=rb.pos, obs=rb.observations[:rb.pos, 0].copy(), next_obs=rb.next_observations[:rb.pos, 0].copy(),
                act=rb.actions[:rb.pos, 0, 0].copy(), rew=rb.rewards[:rb.pos, 0].copy(),
                term=(rb.dones[:rb.pos, 0] * (1 - rb.timeouts[:rb.pos, 0])).copy(),
                online=[p.detach().clone() for p in self.q_net.parameters()],
                target=[p.detach().clone() for p in self.q_net_target.parameters()]))
    model = LockDQN('MlpPolicy', ENV, learning_rate=z['lr'], batch_size=z['bs'], buffer_size=z['buffer'],
                    learning_starts=z['learning_starts'], gamma=z['gamma'], target_update_interval=10,
                    train_freq=z['train_freq'], gradient_steps=z['gradient_steps'], exploration_fraction=z['exploration_fraction'],
                    exploration_final_eps=z['final_eps'], max_grad_norm=clip, replay_buffer_class=LockBuffer,
                    policy_kwargs=dict(net_arch=list(z['hidden'])), seed=seed, device='cpu')
    init = copy.deepcopy(model.q_net.q_net.state_dict())
    model.learn(total_timesteps=steps)
    return init

def ours_run(seed, steps, D, U, record, init, eps=1e-8, random_warmup=True, clip=10., fused=True, **kw):
    from fastrl_replay.agents.dqn import dqn_learner
    from fastrl_replay.data.gym import EpsilonGreedy
    z = ZOO
    per_epoch = -(-steps // z['train_freq']) * z['train_freq']  # SB3 collects whole rollouts of train_freq steps
    learn = dqn_learner(ENV, steps_per_epoch=per_epoch, gamma=z['gamma'], n_steps=1, seed=seed,
                        net=dict(hidden=z['hidden'], target_sync=z['gradient_steps'], double=False),
                        replay=dict(bs=z['bs'], max_sz=z['buffer'], warmup_sz=z['learning_starts']),
                        explore=dict(eps_end=z['final_eps'], eps_steps=int(z['exploration_fraction'] * steps), random_warmup=random_warmup),
                        optim=dict(train_every=z['train_freq'], grad_steps=z['gradient_steps'], lr=z['lr'], max_grad_norm=clip),
                        **(dict(valid=dict(n_episodes=0)) | kw))  # SB3 plays no greedy episodes in its fit
    learn.model.net.load_state_dict(init)
    if not fused: learn.opt_func = partial(OptimWrapper, opt=torch.optim.Adam)  # torch's default Adam, as SB3's
    loop = learn.dls.train.dataset.loop
    class LockAgent(EpsilonGreedy):
        def __call__(self, state):
            eps_now = self.epsilon; self.steps += 1
            t = loop.env_steps
            u, r = D[t]
            if u < eps_now: a = int(r * 2)  # epsilon is 1 during a random warm-up
            else:
                with torch.no_grad(): a = int(self.model(torch.as_tensor(state)).argmax())
            if not loop.resetting.any(): record['actions'].append(a)  # a reset step takes no action
            return np.array([a])
    ag = loop.agent
    loop.agent = LockAgent(ag.model, ag.n_actions, ag.eps_start, ag.eps_end, ag.eps_steps, random_steps=ag.random_steps)
    mem = learn.experience_replay.memory
    g = [0]
    def draw(n):
        i = (U[g[0]] * len(mem)).astype(np.int64); g[0] += 1
        return torch.from_numpy(i)
    class Record(Callback):
        order = 50
        def before_fit(self):
            mem.sampler.draw = draw
            if eps != 1e-8:
                for pg in self.opt.opt.param_groups: pg['eps'] = eps
        def after_batch(self):
            tr = self.learn.dqn_trainer
            if self.learn.experience_replay.batch is None or tr.n_updates % z['gradient_steps']: return
            m = mem.memory
            record['bursts'].append(dict(
                n=len(mem), obs=m['state'].numpy().copy(), next_obs=m['next_state'].numpy().copy(),
                act=m['action'].numpy()[:, 0].copy(), rew=m['reward'].numpy()[:, 0].copy(), term=m['terminated'].numpy()[:, 0].astype(np.float32),
                online=[p.detach().clone() for p in self.learn.model.parameters()],
                target=[p.detach().clone() for p in tr.dqn_loss.target.parameters()]))
    learn.add_cb(Record())
    with learn.no_bar(), learn.no_logging(): learn.fit(1, z['lr'])
    return learn

def compare(a, b):
    "One line per burst: stored transitions, then weights, then the actions taken so far"
    first = None
    for k, (x, y) in enumerate(zip(a['bursts'], b['bursts'])):
        n = min(x['n'], y['n'])
        data = {c: float(np.abs(x[c][:n].astype(np.float64) - y[c][:n]).max()) for c in ('obs', 'next_obs', 'act', 'rew', 'term')}
        w = max(float((p - q).abs().max()) for p, q in zip(x['online'], y['online']))
        # SB3 copies its target at the first collection step after a burst, ours at the burst's end: the target that
        # trains burst k is SB3's as recorded after burst k and ours as recorded after burst k - 1
        wt = max(float((p - q).abs().max()) for p, q in zip(x['target'], b['bursts'][k - 1]['target'])) if k else 0.
        print(f'burst {k:3d}: stored sb3 {x["n"]:6d} ours {y["n"]:6d}; max |diff| data {max(data.values()):.2g} '
              f'{ {c: f"{v:.2g}" for c, v in data.items() if v} }; online weights {w:.3g}; target weights used {wt:.3g}')
        if first is None and (x['n'] != y['n'] or max(data.values()) > 0 or w > 1e-4 or wt > 1e-4): first = k
    na = min(len(a['actions']), len(b['actions']))
    diff = np.flatnonzero(np.array(a['actions'][:na]) != np.array(b['actions'][:na]))
    print(f'actions: sb3 {len(a["actions"])}, ours {len(b["actions"])}; first different action at step '
          f'{diff[0] if len(diff) else None} of {na}')
    print(f'first burst that differs: {first}')
    return dict(first=first, first_action=None if not len(diff) else int(diff[0]), actions=na)

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--steps', type=int, default=5_000)
    p.add_argument('--eps', type=float, default=1e-8, help="our Adam's eps (SB3's is 1e-5)")
    p.add_argument('--clip', type=float, default=ZOO['max_grad_norm'], help="both libraries' gradient clipping norm")
    p.add_argument('--unfused', action='store_true', help="ours steps with torch's default Adam instead of the fused one, as SB3 does")
    p.add_argument('--greedy-warmup', action='store_true', help='ours follows its epsilon schedule during the warm-up instead of acting at random')
    p.add_argument('--out', type=Path, default=Path(__file__).resolve().parent/'results'/'dqn_lockstep.json')
    args = p.parse_args()
    torch.set_num_threads(1)
    D, U = streams(args.seed, args.steps, ZOO['bs'])
    a, b = dict(actions=[], bursts=[]), dict(actions=[], bursts=[])
    init = sb3_run(args.seed, args.steps, D, U, a, clip=args.clip)
    ours_run(args.seed, args.steps, D, U, b, init, eps=args.eps, random_warmup=not args.greedy_warmup, clip=args.clip,
             fused=not args.unfused)
    verdict = compare(a, b)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != 'out'}
    args.out.write_text(json.dumps(dict(settings=settings, bursts=len(a['bursts']), **verdict,
                                        machine=machine_record('stable-baselines3', 'gymnasium')), indent=1))

if __name__ == '__main__': main()
