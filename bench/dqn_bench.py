"""Our DQN against Stable-Baselines3's DQN on CartPole-v1, with the same hyperparameters, on the same machine.

Both use the rl-baselines3-zoo settings for CartPole-v1 DQN: 50,000 environment steps, an MLP of two 256-unit
layers, Adam at a constant 2.3e-3, batches of 64 from a memory of 100,000, training from step 1,000, 128
gradient steps after every 256 environment steps (SB3's train_freq and gradient_steps; ours: train_every and
grad_steps), the target network copied every 10 environment steps (in effect once per training burst, see ZOO),
exploration from 1 to 0.04 over the first 16% of steps with uniformly random actions until training starts,
Huber loss, gradient norm clipped at 10, torch's Adam (eps 1e-8), one-step returns, no Double DQN. Each run
reports environment steps per second (training only; also per second of the process's CPU time, which other
processes on a shared machine disturb less) and the mean return of 20 greedy evaluation episodes; the ratios are
ours over SB3's.

    .venv/bin/python bench/dqn_bench.py                # seeds 0 and 1
    .venv/bin/python bench/dqn_bench.py --seeds 0 1 2 --steps 50000
    .venv/bin/python bench/dqn_bench.py --seeds $(seq 0 19) --libs sb3 --out sb3.json   # one library at a time
    .venv/bin/python bench/dqn_bench.py --stats sb3.json ours.json                         # compare stored runs
    .venv/bin/python bench/dqn_bench.py --quick    # speed only: seed 0, 20,000 steps (returns not comparable to 50,000)

A run is solved when its greedy return is at least 475, CartPole-v1's reward threshold. Each run also stores its
learning curve, the return of every training episode and the environment step it ended at; `--stats` compares two
libraries' greedy returns with a Mann-Whitney U test and their curves by the mean training return in windows of
5,000 steps.
"""
import argparse, json, time
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts
import numpy as np, torch, gymnasium as gym
from fastai.callback.core import Callback
from fastrl_replay.data.gym import play_episodes

ENV, OUT = 'CartPole-v1', Path(__file__).resolve().parent/'results'/'dqn_bench.json'
# SB3 counts target_update_interval in environment steps, which it takes only between training bursts: its
# target network is therefore the online network as it was after the last burst. A copy after every 128th
# gradient step, the end of each of our bursts, is the same schedule.
ZOO = dict(lr=2.3e-3, bs=64, buffer=100_000, learning_starts=1_000, gamma=0.99, target_update_env_steps=10,
           target_sync_grad_steps=128, train_freq=256, gradient_steps=128, exploration_fraction=0.16, final_eps=0.04,
           hidden=(256, 256), max_grad_norm=10.)

def evaluate_policy(act, seed, n=20):
    "Mean return of `n` greedy episodes, `act` mapping an observation to an action"
    return float(np.mean(play_episodes(act, ENV, n, seed)))

SOLVED = 475.  # CartPole-v1's reward threshold

def run_sb3(seed, steps):
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    class Curve(BaseCallback):
        "The return of each finished training episode and the step it ended at (SB3's `Monitor` puts it in `info`)"
        def __init__(self): super().__init__(); self.curve = []
        def _on_step(self):
            for info in self.locals['infos']:
                if 'episode' in info: self.curve.append((self.num_timesteps, float(info['episode']['r'])))
            return True
    z = ZOO
    model = DQN('MlpPolicy', ENV, learning_rate=z['lr'], batch_size=z['bs'], buffer_size=z['buffer'],
                learning_starts=z['learning_starts'], gamma=z['gamma'], target_update_interval=z['target_update_env_steps'],
                train_freq=z['train_freq'], gradient_steps=z['gradient_steps'], exploration_fraction=z['exploration_fraction'],
                exploration_final_eps=z['final_eps'], max_grad_norm=z['max_grad_norm'],
                policy_kwargs=dict(net_arch=list(z['hidden'])), seed=seed, device='cpu')
    curve = Curve()
    t, c = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps, callback=curve)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    ret = evaluate_policy(lambda o: int(model.predict(o, deterministic=True)[0]), seed + 10_000)
    return dict(steps_per_s=steps / wall, wall_s=wall, cpu_steps_per_s=steps / cpu, eval_mean=ret, curve=curve.curve)

class Curve(Callback):
    "The return of each training episode finished in a batch, and the environment step at the batch's end"
    def before_fit(self): self.points, self.n_seen = [], 0
    def after_batch(self):
        loop = self.dls.train.dataset.loop
        self.points += [(loop.env_steps, r) for r in loop.returns[self.n_seen:]]
        self.n_seen = len(loop.returns)

def run_ours(seed, steps):
    from fastrl_replay.agents.dqn import dqn_learner, evaluate
    z = ZOO
    learn = dqn_learner(ENV, steps_per_epoch=steps, gamma=z['gamma'], n_steps=1, seed=seed,
                        net=dict(hidden=z['hidden'], target_sync=z['target_sync_grad_steps'], double=False),
                        replay=dict(bs=z['bs'], max_sz=z['buffer'], warmup_sz=z['learning_starts']),
                        explore=dict(eps_end=z['final_eps'], eps_steps=int(z['exploration_fraction'] * steps), random_warmup=True),
                        optim=dict(train_every=z['train_freq'], grad_steps=z['gradient_steps'], max_grad_norm=z['max_grad_norm'], lr=z['lr']),
                        valid=dict(n_episodes=0))  # no greedy episodes inside the timed fit: SB3 plays none
    learn.add_cb(curve := Curve())
    learn.create_opt()  # before the clock, as SB3 builds its optimizer in its constructor (the first torch optimizer
    t, c = time.perf_counter(), time.process_time()  # of a process imports torch._dynamo: about 1 s)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, z['lr'])  # one epoch: bursts fall where SB3's do
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    env_steps = learn.dls.train.dataset.loop.env_steps
    ret = float(np.mean(evaluate(learn.model, ENV, n_episodes=20, seed=seed + 10_000)))
    return dict(steps_per_s=env_steps / wall, wall_s=wall, cpu_steps_per_s=env_steps / cpu, eval_mean=ret, curve=curve.points)

def curve_means(curve, steps, width=5_000):
    "Mean training return of the episodes that ended in each window of `width` steps (NaN where none did)"
    c = np.array(curve, float).reshape(-1, 2)
    return [float(c[(c[:, 0] > a) & (c[:, 0] <= a + width), 1].mean()) if ((c[:, 0] > a) & (c[:, 0] <= a + width)).any()
            else float('nan') for a in range(0, steps, width)]

def stats(res, steps):
    "Solved counts, the rank test of the greedy returns and the mean learning curves of each library in `res`"
    from scipy.stats import mannwhitneyu
    for k, v in res.items():
        print(f'{k:5s}: {sum(r["eval_mean"] >= SOLVED for r in v)}/{len(v)} solved (greedy return >= {SOLVED:.0f}), '
              f'greedy return median {np.median([r["eval_mean"] for r in v]):.1f}, mean {np.mean([r["eval_mean"] for r in v]):.1f}; '
              f'steps/s median {np.median([r["steps_per_s"] for r in v]):.0f}'
              + (f', per CPU second {np.median([r["cpu_steps_per_s"] for r in v]):.0f}' if all('cpu_steps_per_s' in r for r in v) else ''))
    out = {}
    if len(res) == 2 and all(res.values()):
        (a, ra), (b, rb) = res.items()
        u = mannwhitneyu([r['eval_mean'] for r in ra], [r['eval_mean'] for r in rb], alternative='two-sided')
        out['mannwhitneyu'] = dict(U=float(u.statistic), p=float(u.pvalue))
        print(f'Mann-Whitney U, greedy returns of {a} vs {b}: U = {u.statistic:.1f}, two-sided p = {u.pvalue:.3f}')
    print('mean training return per 5,000 steps (learning curve):')
    for k, v in res.items():
        m = np.nanmean([curve_means(r['curve'], steps) for r in v if 'curve' in r], 0)
        out[f'curve_{k}'] = m.tolist()
        print(f'  {k:5s} ' + ' '.join(f'{x:6.1f}' for x in m))
    return out

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1])
    p.add_argument('--steps', type=int, default=50_000)
    p.add_argument('--out', type=Path, default=OUT)
    p.add_argument('--libs', nargs='+', choices=('sb3', 'ours'), default=['sb3', 'ours'], help='the libraries to run')
    p.add_argument('--stats', type=Path, nargs='+', help='compare the runs stored in these files instead of running')
    p.add_argument('--quick', action='store_true', help='seed 0 and 20,000 steps: the speed, not the returns')
    args = p.parse_args()
    if args.quick: args.seeds, args.steps = args.seeds[:1], min(args.steps, 20_000)
    if args.stats:
        res = {}
        for f in args.stats:
            for k, v in json.loads(f.read_text())['runs'].items(): res.setdefault(k, []).extend(v)
        stats({k: v for k, v in res.items() if v}, json.loads(args.stats[0].read_text())['settings']['steps'])
        return
    torch.set_num_threads(1)
    res = {'sb3': [], 'ours': []}
    for seed in args.seeds:  # alternate the two, so both see the same machine conditions
        for name, run in (('sb3', run_sb3), ('ours', run_ours)):
            if name not in args.libs: continue
            r = dict(seed=seed, **run(seed, args.steps))
            res[name].append(r)
            print(f'{name:5s} seed {seed}: {r["steps_per_s"]:7.0f} env steps/s, {r["wall_s"]:6.1f}s, greedy return {r["eval_mean"]:6.1f}', flush=True)
    med = {k: {m: float(np.median([r[m] for r in v])) for m in ('steps_per_s', 'eval_mean')} for k, v in res.items() if v}
    ratio = {m: med['ours'][m] / med['sb3'][m] for m in ('steps_per_s', 'eval_mean')} if len(med) == 2 else None
    print(f'\nmedian over seeds: ' + ', '.join(f'{k} {v}' for k, v in reversed(med.items())))
    if ratio: print(f'ours / sb3: steps per second {ratio["steps_per_s"]:.2f}, eval return {ratio["eval_mean"]:.2f}')
    extra = stats({k: v for k, v in res.items() if v}, args.steps)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = machine_record('stable-baselines3', 'gymnasium', 'scipy')
    settings = dict(ZOO, steps=args.steps, seeds=args.seeds)
    report = dict(settings=settings, runs=res, median=med, ratio=ratio, **extra, machine=machine)
    args.out.write_text(json.dumps(report, indent=1))

if __name__ == '__main__': main()
