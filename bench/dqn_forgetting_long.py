"""Does a DQN forget mode 1 of `ChangingEnv` when its FIFO memory has held only mode 2 for a long time?

The forgetting experiment's DQN (`fastrl_replay.forgetting`: γ 0.91, one step, a gradient step every 4 environment steps,
a memory of 2,000 rows) trains 10,000 steps on mode 1 with a reservoir memory, then `--steps2` steps on mode 2 from the
same rows in a FIFO memory, which holds no mode-1 row after its first 2,000 mode-2 steps. Prints, per seed, the greedy
optimal-choice rate of each mode over 5,000 trials, before and after mode 2, as JSON lines.

    .venv/bin/python bench/dqn_forgetting_long.py --hidden 100 --seeds 0 1 2 3 4
    .venv/bin/python bench/dqn_forgetting_long.py --hidden 256 256 --seeds 0 1 2 3 4 --steps2 40000
"""
import argparse, json, time, warnings

import torch

warnings.filterwarnings('ignore', category=FutureWarning)
from fastrl_replay.agents.dqn import dqn_learner
from fastrl_replay.envs.changing import changing_env_id, evaluate_choices
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.continual import ReservoirReplay


def train(mode, steps, mem, seed, hidden, model=None):
    "The experiment's DQN on `mode` for `steps` environment steps, learning from `mem`, started from `model`'s weights if given"
    learn = dqn_learner(changing_env_id(mode, features=True), memory=mem, steps_per_epoch=steps // 10, gamma=0.91, n_steps=1, seed=seed,
                        net=dict(hidden=hidden, target_sync=100), optim=dict(train_every=4, lr=1e-3), explore=dict(eps_end=0.05, eps_steps=steps // 2))
    if model is not None: learn.model.load_state_dict(model.state_dict())
    with learn.no_bar(), learn.no_logging(): learn.fit(10)
    return learn.model


def rate(model, mode, seed):
    "Greedy optimal-choice rate of `model` on `mode` over 5,000 trials"
    def act(obs):
        with torch.no_grad(): return model(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
    return float(evaluate_choices(act, mode, 5000, seed + 50_000 + mode)['rate'])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--hidden', type=int, nargs='+', default=[100])
    ap.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    ap.add_argument('--steps2', type=int, default=40_000)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for seed in a.seeds:
        t0 = time.time()
        mem = ReservoirReplay(bs=64, max_sz=2000, warmup_sz=500, seed=seed)
        m1 = train(1, 10_000, mem, seed, tuple(a.hidden))
        before = rate(m1, 1, seed)
        fifo = ExperienceReplay(bs=64, max_sz=2000, warmup_sz=500, seed=seed + 1, memory={k: v for k, v in mem.memory.items() if k != 'task'})
        m2 = train(2, a.steps2, fifo, seed + 1, tuple(a.hidden), model=m1)
        print(json.dumps(dict(hidden=a.hidden, seed=seed, steps2=a.steps2, mode1_before=before, mode1_after=rate(m2, 1, seed),
                              mode2_after=rate(m2, 2, seed), wall_s=round(time.time() - t0, 1))), flush=True)


if __name__ == '__main__': main()
