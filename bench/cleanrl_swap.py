"""CleanRL's single-file DQN (bench/peers/cleanrl_dqn.py) run as it is, on Stable-Baselines3's `ReplayBuffer`, and with only that
import changed to `fastrl_replay.compat.sb3`: the final Q-network weights must be equal to the bit, and the steps per second are
printed for both (the best of interleaved rounds, after one round that warms up).

    python bench/cleanrl_swap.py [--steps 4000] [--rounds 3]

The script reads its settings with tyro; here they come from a stand-in `tyro.cli` that returns CleanRL's `Args` with a short run
(learning from step 1000, a buffer of 10,000), so that tyro need not be installed. It writes its TensorBoard logs to a temporary
directory."""
import argparse, os, runpy, sys, tempfile, time, types
from pathlib import Path
import torch

SCRIPT = Path(__file__).parent/'peers'/'cleanrl_dqn.py'
IMPORT = 'from stable_baselines3.common.buffers import ReplayBuffer'
SWAPPED = 'from fastrl_replay.compat.sb3 import ReplayBuffer'

def run(source:str, steps:int) -> tuple[dict, float]:
    "Run the script's source as `__main__` for `steps` steps on the CPU; its final Q-network weights and its steps per second"
    def cli(cls): return cls(total_timesteps=steps, learning_starts=1000, buffer_size=10_000, cuda=False, seed=1)
    sys.modules['tyro'] = types.SimpleNamespace(cli=cli)
    with tempfile.TemporaryDirectory() as d:
        cwd = os.getcwd(); os.chdir(d)
        path = Path(d)/'dqn.py'; path.write_text(source)
        try:
            t = time.perf_counter()
            g = runpy.run_path(str(path), run_name='__main__')
            dt = time.perf_counter() - t
        finally: os.chdir(cwd)
    return {k: v.clone() for k, v in g['q_network'].state_dict().items()}, steps / dt

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--steps', type=int, default=4000)
    p.add_argument('--rounds', type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    source = SCRIPT.read_text()
    assert source.count(IMPORT) == 1
    variants = {'SB3 ReplayBuffer': source, 'fastrl_replay.compat.sb3': source.replace(IMPORT, SWAPPED)}
    sps, weights = {k: [] for k in variants}, {}
    for r in range(a.rounds + 1):  # the first round warms up (imports, allocations) and is not timed
        for name, src in variants.items():
            w, s = run(src, a.steps)
            if r: sps[name].append(s)
            if name in weights: assert all(torch.equal(w[k], weights[name][k]) for k in w), f'{name}: runs differ'
            weights[name] = w
    (na, wa), (nb, wb) = weights.items()
    same = all(torch.equal(wa[k], wb[k]) for k in wa)
    best = {k: max(v) for k, v in sps.items()}
    for k, v in sps.items(): print(f'{k:26s} steps/s best {best[k]:8.0f}   rounds {", ".join(f"{x:.0f}" for x in v)}')
    print(f'final Q-network weights equal to the bit: {same}')
    print(f'steps/s ratio (adapter / SB3): {best[nb] / best[na]:.3f}')
    return 0 if same else 1

if __name__ == '__main__': sys.exit(main())
