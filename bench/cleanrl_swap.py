"""CleanRL's single-file scripts written against Stable-Baselines3's `ReplayBuffer` (DQN, SAC, TD3, DDPG) run as they are, on
SB3's buffer, and with only that import changed to `fastrl_replay.compat.sb3`: every network's final weights must be equal to the
bit, and the steps per second of both are printed, of the process's CPU time and of wall time: the median and range of interleaved
rounds (SB3 first in even rounds, the adapter first in odd ones), after one short run of each that warms up.

    python bench/cleanrl_swap.py [--scripts dqn sac td3 ddpg] [--steps 4000] [--rounds 5] [--cleanrl DIR] [--out FILE.json]

With `--out` naming a file that already holds results, the scripts run now replace theirs and the others' are kept, so that each
script can be timed in an invocation of its own (each with its own `--steps` and `--rounds`, recorded with its results).

DQN is vendored (bench/peers/cleanrl_dqn.py). SAC, TD3 and DDPG are read from a clone of CleanRL (`--cleanrl`, default the
mirror under /work/.mirror) at commit 08d1c0105e41f3ab435a981d3df901ea8d08cdd5, the last at which CleanRL's scripts import SB3's
`ReplayBuffer`; they run on Pendulum-v1. Nothing is copied: each script's source is taken from git and only its import line
changes.

The scripts read their settings with tyro; here they come from a stand-in `tyro.cli` that returns the script's `Args` with a
short run (learning from step 1,000, a buffer of 10,000, the CPU), so that tyro need not be installed. They were written for
gymnasium 0.29, whose vector environments hand back `final_observation` and `final_info` per environment; on gymnasium 1.x
the harness gives them that layout (a `SyncVectorEnv` that resets in the same step and lays its infos out as 0.29 did), the same
for both buffers. TensorBoard logs go to a temporary directory."""
import argparse, json, os, runpy, statistics, subprocess, sys, tempfile, time, types
from pathlib import Path
from machine import machine_record, records  # first: the load average as the run starts
import numpy as np, torch, gymnasium as gym

HERE = Path(__file__).parent
COMMIT = '08d1c0105e41f3ab435a981d3df901ea8d08cdd5'
MIRROR = Path('/work/.mirror/vwxyzjn+cleanrl/repo')
IMPORT = 'from stable_baselines3.common.buffers import ReplayBuffer'
SWAPPED = 'from fastrl_replay.compat.sb3 import ReplayBuffer'
SETTINGS = {  # script -> the Args of a short run on the CPU
    'dqn': dict(total_timesteps=None, learning_starts=1000, buffer_size=10_000, cuda=False, seed=1),
    'sac': dict(env_id='Pendulum-v1', total_timesteps=None, learning_starts=1000, buffer_size=10_000, cuda=False, seed=1),
    'td3': dict(env_id='Pendulum-v1', total_timesteps=None, learning_starts=1000, buffer_size=10_000, cuda=False, seed=1),
    'ddpg': dict(env_id='Pendulum-v1', total_timesteps=None, learning_starts=1000, buffer_size=10_000, cuda=False, seed=1),
}

def source(script:str, cleanrl:Path) -> str:
    "The script's source: DQN vendored here, the others from CleanRL's git at `COMMIT`"
    if script == 'dqn': return (HERE/'peers'/'cleanrl_dqn.py').read_text()
    return subprocess.run(['git', '-C', str(cleanrl), 'show', f'{COMMIT}:cleanrl/{script}_continuous_action.py'],
                          check=True, capture_output=True, text=True).stdout

def _at(v, i:int):
    "Environment `i`'s value in a gymnasium 1.x vector info (a dict of arrays, nested)"
    return {k: _at(x, i) for k, x in v.items() if not k.startswith('_')} if isinstance(v, dict) else v[i]

class SyncVectorEnv029(gym.vector.SyncVectorEnv):
    "gymnasium 1.x's `SyncVectorEnv` resetting in the step an episode ends, with gymnasium 0.29's `final_observation` and `final_info`"
    def __init__(self, env_fns, **kwargs): super().__init__(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, **kwargs)
    def step(self, actions):
        obs, rew, term, trunc, infos = super().step(actions)
        if 'final_obs' in infos:
            ended, final, info = infos.pop('_final_obs'), infos.pop('final_obs'), infos.pop('final_info')
            infos.pop('_final_info', None)
            infos['final_observation'] = np.array([final[i] if e else None for i, e in enumerate(ended)] + [None], dtype=object)[:-1]
            infos['final_info'] = np.array([_at(info, i) if e else None for i, e in enumerate(ended)] + [None], dtype=object)[:-1]
            infos['_final_observation'] = infos['_final_info'] = ended
        return obs, rew, term, trunc, infos

def run(script:str, src:str, steps:int) -> tuple[dict, tuple[float, float]]:
    "Run `src` as `__main__` for `steps` steps; the final weights of every network it made, and its steps per second of wall time and of CPU time"
    def cli(cls): return cls(**{**SETTINGS[script], 'total_timesteps': steps})
    sys.modules['tyro'] = types.SimpleNamespace(cli=cli)
    vector = gym.vector.SyncVectorEnv
    with tempfile.TemporaryDirectory() as d:
        cwd = os.getcwd(); os.chdir(d)
        path = Path(d)/f'{script}.py'; path.write_text(src)
        gym.vector.SyncVectorEnv = SyncVectorEnv029
        try:
            t, c = time.perf_counter(), time.process_time()
            g = runpy.run_path(str(path), run_name='__main__')
            dt, dc = time.perf_counter() - t, time.process_time() - c
        finally: os.chdir(cwd); gym.vector.SyncVectorEnv = vector
    nets = {f'{n}.{k}': v.clone() for n, m in g.items() if isinstance(m, torch.nn.Module) for k, v in m.state_dict().items()}
    nets.update({n: v.detach().clone() for n, v in g.items() if isinstance(v, torch.Tensor)})  # SAC's log_alpha, the last batch's values
    return nets, (steps / dt, steps / dc)

WARMUP = 1100  # steps of the run of each variant that warms up (imports, allocations, the first learning steps): not timed

def spread(v:list) -> dict:
    "The median, least and greatest of `v`, rounded"
    return dict(median=round(statistics.median(v), 3), min=round(min(v), 3), max=round(max(v), 3))

def compare(script:str, src:str, steps:int, rounds:int) -> dict:
    "Both buffers on one script, interleaved: steps per second of each round, and whether every final weight is equal to the bit"
    assert src.count(IMPORT) == 1, f'{script}: expected one line {IMPORT!r}'
    variants = {'SB3 ReplayBuffer': src, 'fastrl_replay.compat.sb3': src.replace(IMPORT, SWAPPED)}
    for s in variants.values(): run(script, s, min(steps, WARMUP))
    sps, cps, weights = {k: [] for k in variants}, {k: [] for k in variants}, {}
    for r in range(rounds):  # SB3 first in even rounds, the adapter first in odd ones
        for name in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
            w, (x, y) = run(script, variants[name], steps)
            sps[name].append(x); cps[name].append(y)
            if name in weights: assert all(torch.equal(w[k], weights[name][k]) for k in w), f'{script}, {name}: runs differ'
            weights[name] = w
    (na, wa), (nb, wb) = weights.items()
    same = wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    paired = lambda d: [b / a for a, b in zip(d[na], d[nb])]  # each round's adapter / SB3
    return dict(steps=steps, rounds=rounds, command=' '.join(['python bench/cleanrl_swap.py', *sys.argv[1:]]),
                networks=sorted({k.split('.')[0] for k in wa if '.' in k}), tensors=len(wa), weights_equal=same,
                cpu_sps={k: [round(x, 1) for x in v] for k, v in cps.items()}, cpu={k: spread(v) for k, v in cps.items()},
                cpu_ratio=spread(paired(cps)),
                sps={k: [round(x, 1) for x in v] for k, v in sps.items()}, wall={k: spread(v) for k, v in sps.items()},
                ratio=spread(paired(sps)), machine=machine_record('stable-baselines3', 'gymnasium'))

def stored(res:dict) -> dict:
    "The results in the form of `bench/stored/`, with a table of them"
    rows = ['| script | environment | steps × rounds | networks compared | equal to the bit | SB3 steps per CPU second | adapter steps per CPU second '
            '| adapter / SB3, CPU time | adapter / SB3, wall time |', '|---|---|---:|---|---|---:|---:|---:|---:|']
    fmt = lambda d, f, x='': f"{d['median']:{f}}{x} ({d['min']:{f}}–{d['max']:{f}})"
    for k, r in res.items():
        (na, sa), (nb, sb) = r['cpu'].items()
        rows.append(f"| {k} | {SETTINGS[k].get('env_id', 'CartPole-v1')} | {r['steps']:,} × {r['rounds']} | {', '.join(r['networks'])} "
                    f"| {'yes' if r['weights_equal'] else 'NO'} | {fmt(sa, ',.0f')} | {fmt(sb, ',.0f')} | {fmt(r['cpu_ratio'], '.2f', 'x')} "
                    f"| {fmt(r['ratio'], '.2f', 'x')} |")
    text = (f"CleanRL's single-file scripts at commit {COMMIT[:8]}, the last at which they import Stable-Baselines3's `ReplayBuffer`, run as they "
            f"are and with only that import changed to `fastrl_replay.compat.sb3`, learning from step 1,000, on the CPU with one torch thread. "
            f"Each script runs in rounds that interleave the two buffers (SB3 first in even rounds, the adapter first in odd ones) after one "
            f"short run of each that warms up; steps per second are of the process's CPU time, which the other jobs of a shared machine "
            f"disturb less than wall time, given as the median (least–greatest) of the rounds, and the ratios are the median (least–greatest) "
            f"of each round's adapter / SB3. Every network's final weights (and every tensor the script leaves, such as SAC's `log_alpha`) "
            f"are compared bit for bit.\n\n" + '\n'.join(rows))
    return dict(title="CleanRL's scripts with only the ReplayBuffer import changed", date=time.strftime('%Y-%m-%d'),
                machine=records(list(res.values())), conditions='shared with other jobs',
                command='; '.join(dict.fromkeys(r['command'] for r in res.values())), text=text, torch=torch.__version__,
                gymnasium=gym.__version__, results=res)

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--scripts', nargs='+', default=['dqn', 'sac', 'td3', 'ddpg'], choices=list(SETTINGS))
    p.add_argument('--steps', type=int, default=4000)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--cleanrl', type=Path, default=MIRROR, help="a clone of CleanRL's repository holding commit " + COMMIT)
    p.add_argument('--out', type=Path, help='write the results as JSON, keeping those of other scripts the file holds')
    a = p.parse_args()
    torch.set_num_threads(1)
    res = {}
    for script in a.scripts:
        r = res[script] = compare(script, source(script, a.cleanrl), a.steps, a.rounds)
        for k in r['cpu']:
            print(f'{script:5s} {k:26s} steps per CPU second {r["cpu"][k]["median"]:8.0f} (rounds {", ".join(f"{x:.0f}" for x in r["cpu_sps"][k])}), '
                  f'per wall second {r["wall"][k]["median"]:8.0f}')
        c, w = r['cpu_ratio'], r['ratio']
        print(f'{script:5s} final weights of {", ".join(r["networks"])} equal to the bit: {r["weights_equal"]}; adapter / SB3 of CPU time '
              f'{c["median"]:.3f} ({c["min"]:.3f}-{c["max"]:.3f}), of wall time {w["median"]:.3f} ({w["min"]:.3f}-{w["max"]:.3f})', flush=True)
    if a.out:
        old = json.loads(a.out.read_text())['results'] if a.out.exists() else {}
        kept = {k: v for k, v in old.items() if k not in res and 'cpu_ratio' in v and isinstance(v['cpu_ratio'], dict)}
        a.out.write_text(json.dumps(stored({k: {**kept, **res}[k] for k in SETTINGS if k in {**kept, **res}}), indent=1) + '\n')
    return 0 if all(r['weights_equal'] for r in res.values()) else 1

if __name__ == '__main__': sys.exit(main())
