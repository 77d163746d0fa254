"""Training speed with torch's default number of CPU threads against one thread: `python bench/threads_bench.py`.

Two small-network workloads, each in a fresh process per setting, alternating settings for `--repeats` rounds:
- `dqn`: `dqn_learner('CartPole-v1')` fitted for 5,000 environment steps in 10 epochs, as `fastrl-replay train --steps 5000`
  (without the `TorchThreads` callback `dqn_learner` adds, so that the setting measured is the one used);
- `learner`: the plain fastai `Learner` of the first tutorial (`nbs/tutorials/01_learner_cartpole.ipynb`: `GymLoop` on
  CartPole-v1, `ExperienceReplayCallback`, `DQNTrainer`), without its `TorchThreads` callback, fitted for 3 epochs of
  1,200 batches of 8 environment steps.
Writes `bench/results/threads.json` (the rates, the machine (`bench/machine.py`), the 1-minute load average as each run
starts, `uptime` before and after). `--beside K` runs the same beside K busy processes of its own (Python spinning, one
core each) started before the first run and stopped after the last, as a training run beside other jobs on the same
cores: `python bench/threads_bench.py --beside 1 --out bench/results/threads_beside.json`."""
import argparse, json, os, subprocess, sys, time
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts

ROOT = Path(__file__).resolve().parent.parent

def work(kind: str, threads: str) -> float:
    "Run workload `kind` with `threads` ('default' or a count) in this process; its rate"
    import torch
    if threads != 'default': torch.set_num_threads(int(threads))
    if kind == 'dqn':
        from fastrl_replay.agents.dqn import dqn_learner
        learn = dqn_learner('CartPole-v1', steps_per_epoch=500, seed=0, valid=dict(n_episodes=0))  # training alone
        try:  # dqn_learner fits on one thread itself: to measure torch's default, that callback goes
            from fastrl_replay.threads import TorchThreads
            learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, TorchThreads)])
        except ImportError: pass
        t = time.perf_counter()
        with learn.no_bar(), learn.no_logging(): learn.fit_flat_cos(10, 1e-3)
        return learn.dls.train.dataset.loop.env_steps / (time.perf_counter() - t)
    from fastrl_replay.all import (QNet, EpsilonGreedy, Source, GymLoop, FirstLast, gym_dataloaders, DQNLoss, ExperienceReplay,
                                   ExperienceReplayCallback, DQNTrainer, NoValidation)
    from fastai.learner import Learner
    torch.manual_seed(0)  # tutorial 01's learner, without its TorchThreads callback, for 3 of its 10 epochs
    model = QNet(4, 2, hidden=(64, 64))
    agent = EpsilonGreedy(model, n_actions=2, eps_steps=6_000, random_steps=500, seed=0)
    source = Source([GymLoop('CartPole-v1', agent=agent, seed=0), FirstLast(gamma=0.99)])
    dls = gym_dataloaders(source, n=1_200, bs=8)
    loss = DQNLoss(model)
    memory = ExperienceReplay(bs=64, max_sz=10_000, warmup_sz=500, seed=0)
    learn = Learner(dls, model, loss_func=loss, cbs=[ExperienceReplayCallback(memory), DQNTrainer(loss, target_sync=100), NoValidation()])
    t = time.perf_counter()
    with learn.no_bar(), learn.no_logging(): learn.fit_flat_cos(3, 2e-3)
    return source.loop.env_steps / (time.perf_counter() - t)

def main(repeats: int, beside: int = 0, out: Path = ROOT/'bench'/'results'/'threads.json'):
    uptime = lambda: subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    command = 'python bench/threads_bench.py' + (f' --beside {beside}' if beside else '')
    busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(beside)]
    try: res = runs(repeats, dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), uptime_before=uptime(),
                                  command=command, beside=beside, runs={}))
    finally:
        for b in busy: b.kill()
    res['uptime_after'] = uptime()
    res['machine'] = machine_record()  # torch's threads in it: its default here
    res['units'] = {'dqn': 'environment steps/s', 'learner': 'environment steps/s'}
    out.parent.mkdir(exist_ok=True); out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))

def runs(repeats: int, res: dict) -> dict:
    "The rounds: each workload with each setting in a fresh process, the settings' order alternating"
    for r in range(repeats):
        for kind in ('dqn', 'learner'):
            for threads in ('default', '1') if r % 2 == 0 else ('1', 'default'):
                load1 = os.getloadavg()[0]  # the 1-minute load average as this run starts
                out = subprocess.run([sys.executable, __file__, '--one', kind, threads], capture_output=True, text=True, check=True,
                                     env=os.environ | {'PYTHONPATH': str(ROOT)})
                rate = float(out.stdout.strip().splitlines()[-1])
                res['runs'].setdefault(f'{kind} threads={threads}', []).append(round(rate, 1))
                res.setdefault('load_at_start', {}).setdefault(f'{kind} threads={threads}', []).append(round(load1, 2))
                print(kind, threads, round(rate, 1), 'load', round(load1, 2), flush=True)
    return res

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--beside', type=int, default=0, help='busy processes of its own to run beside the rounds')
    ap.add_argument('--out', type=Path, default=ROOT/'bench'/'results'/'threads.json')
    ap.add_argument('--one', nargs=2, metavar=('KIND', 'THREADS'), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one: print(work(*a.one))
    else: main(a.repeats, a.beside, a.out)
