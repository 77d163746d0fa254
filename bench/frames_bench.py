"""Image observations: memory per stored transition, add rate and sample(32) time of `FrameReplay`
against the peers' frame-deduplicating modes, in one run on the same data.

Setup (as in the peers' published Atari-like anchor): synthetic 84x84 uint8 frames, episodes of 1,000 steps,
stacks of 4, capacity 50,000, one add per environment step, 50,000 steps (the buffer is filled exactly once),
then batches of 32 sampled uniformly.

- ours:      `FrameReplay((84, 84), stack_size=4, ...)`, `add(frame, action, reward, terminal)`: one new
             frame per step; samples are `BD`s of torch tensors (state and next state `(32, 4, 84, 84)` uint8).
- ours[per]: the same with `prioritized=True` (no peer here: shown for its cost).
- cpprb:     `ReplayBuffer(next_of="obs", stack_compress="obs")`, fed `(84, 84, 4)` stacks and `on_episode_end()`.
- tianshou:  `ReplayBuffer(stack_num=4, ignore_obs_next=True, save_only_last_obs=True)`, fed `Batch`es of stacks.
- sb3:       `ReplayBuffer(optimize_memory_usage=True)`, fed `(1, 4, 84, 84)` stacks (stores stacks, not frames).

Each library runs in a fresh subprocess per round, so resident memory is measured from a clean process:
bytes per transition = (RSS after the adds - RSS before the buffer is made) / 50,000. The frames are generated,
and the libraries imported (for ours[per], its sum tree's kernels compiled), before the first RSS reading. Adds are timed as one loop over the 50,000 steps; sample(32) is the median of 300
calls after 20 warm-up calls. Rounds are interleaved with the order rotating; the median over rounds is reported,
with each of ours' figures as a ratio to the best peer's. Results go to bench/results/frames_bench.json.

    .venv/bin/python bench/frames_bench.py             # 3 rounds (about 2 minutes on 2 cores)
    .venv/bin/python bench/frames_bench.py --rounds 1      # or --quick
"""
import argparse, gc, json, os, statistics, subprocess, sys, time, warnings
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts

import numpy as np

CAP = N = 50_000
EP, B, STACK, FRAME = 1_000, 32, 4, 84 * 84
CONFIGS = ('ours', 'ours[per]', 'cpprb', 'tianshou', 'sb3')
PEERS = ('cpprb', 'tianshou', 'sb3')
OUT = Path(__file__).resolve().parent/'results'/'frames_bench.json'


def data(seed=0):
    "N + 3 frames, the stacks of step t being frames t..t+3 (newest last); actions, rewards, episode ends"
    rng = np.random.default_rng(seed)
    F = rng.integers(0, 256, size=(N + STACK, 84, 84), dtype=np.uint8)
    done = np.zeros(N, bool); done[EP - 1::EP] = True
    return F, rng.integers(0, 6, size=N), rng.standard_normal(N).astype(np.float32), done


def rss():
    import psutil
    gc.collect()
    return psutil.Process().memory_info().rss


def median_ms(fn, calls=300, warm=20):
    for _ in range(warm): fn()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def run_ours(F, ACT, REW, DONE, prioritized=False):
    import torch
    torch.set_num_threads(1)
    from fastrl_replay.memory.circular import FrameReplay
    if prioritized:  # the sum tree may compile its kernels on first use: that one-time cost is paid before the first
        warm = FrameReplay((84, 84), STACK, 64, B, prioritized=True, seed=0)  # reading, as the peers pay
        for t in range(64): warm.add(F[t], 0, 0., False)  # theirs at import
        warm.sample(); del warm
    r0 = rss()
    rb = FrameReplay((84, 84), STACK, CAP, B, prioritized=prioritized, seed=0)
    t0 = time.perf_counter()
    for t in range(N): rb.add(F[t + STACK - 1], ACT[t], REW[t], DONE[t])
    dt = time.perf_counter() - t0
    r1 = rss()
    b = rb.gather([5, 1001])  # what is timed is right: the stacks are the frames of the steps
    assert np.array_equal(b['state'][0].numpy(), F[5:9]) and np.array_equal(b['next_state'][0].numpy(), F[6:10])
    s = b['state'][1].numpy()  # the second step of an episode: two zero frames, then its first two
    assert not s[:2].any() and np.array_equal(s[2:], F[1003:1005])
    return dt, r0, r1, rb.sample


def run_cpprb(F, ACT, REW, DONE):
    import cpprb
    W = np.lib.stride_tricks.sliding_window_view(F, STACK, axis=0)  # (N + 1, 84, 84, 4) views: stack axis last
    r0 = rss()
    rb = cpprb.ReplayBuffer(CAP, {"obs": {"shape": (84, 84, STACK), "dtype": np.uint8}, "act": {"dtype": np.int64},
                                  "rew": {}, "done": {}}, next_of="obs", stack_compress="obs")
    t0 = time.perf_counter()
    for t in range(N):
        rb.add(obs=W[t], next_obs=W[t + 1], act=ACT[t], rew=REW[t], done=DONE[t])
        if DONE[t]: rb.on_episode_end()
    dt = time.perf_counter() - t0
    return dt, r0, rss(), lambda: rb.sample(B)


def run_tianshou(F, ACT, REW, DONE):
    from tianshou.data import Batch, ReplayBuffer
    r0 = rss()
    rb = ReplayBuffer(CAP, stack_num=STACK, ignore_obs_next=True, save_only_last_obs=True)
    t0 = time.perf_counter()
    for t in range(N):
        rb.add(Batch(obs=F[t:t + STACK], act=ACT[t], rew=REW[t], terminated=DONE[t], truncated=False,
                     obs_next=F[t + 1:t + 1 + STACK], info={}))
    dt = time.perf_counter() - t0
    return dt, r0, rss(), lambda: rb.sample(B)


def run_sb3(F, ACT, REW, DONE):
    import gymnasium as gym, torch
    torch.set_num_threads(1)
    from stable_baselines3.common.buffers import ReplayBuffer
    r0 = rss()
    rb = ReplayBuffer(CAP, gym.spaces.Box(0, 255, (STACK, 84, 84), np.uint8), gym.spaces.Discrete(6), device="cpu",
                      optimize_memory_usage=True, handle_timeout_termination=False)
    info = [{}]
    t0 = time.perf_counter()
    for t in range(N):
        rb.add(F[None, t:t + STACK], F[None, t + 1:t + 1 + STACK], ACT[t:t + 1], REW[t:t + 1], DONE[t:t + 1], info)
    dt = time.perf_counter() - t0
    return dt, r0, rss(), lambda: rb.sample(B)


RUNNERS = {'ours': run_ours, 'ours[per]': lambda *a: run_ours(*a, prioritized=True), 'cpprb': run_cpprb,
           'tianshou': run_tianshou, 'sb3': run_sb3}


def child(name):
    "One measurement in this (fresh) process, printed as a JSON line"
    warnings.filterwarnings('ignore')
    try: dt, r0, r1, sample = RUNNERS[name](*data())
    except ImportError as e:  # a peer that is not installed is left out of the run
        print(json.dumps({'config': name, 'skipped': str(e)}), flush=True); return
    print(json.dumps({'config': name, 'bytes_per_transition': (r1 - r0) / N, 'adds_per_s': N / dt,
                      'sample32_ms': median_ms(sample)}), flush=True)


def main(rounds, configs):
    runs = {c: [] for c in configs}
    configs = list(configs)
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for c in order:
            out = subprocess.run([sys.executable, __file__, '--child', c], capture_output=True, text=True,
                                 env={**os.environ, 'OMP_NUM_THREADS': '1'})
            if out.returncode: sys.exit(f'{c} failed:\n{out.stderr[-3000:]}')
            res = json.loads(out.stdout.strip().splitlines()[-1])
            if 'skipped' in res: print(f"{c} skipped: {res['skipped']}", file=sys.stderr); configs = [x for x in configs if x != c]
            else: runs[c].append(res)
            print(f'round {r + 1}/{rounds}: {c} done', file=sys.stderr, flush=True)
    configs = [c for c in configs if runs[c]]
    keys = ('bytes_per_transition', 'adds_per_s', 'sample32_ms')
    med = {c: {k: statistics.median(x[k] for x in runs[c]) for k in keys} for c in configs}
    peers = [c for c in configs if c in PEERS]
    best = {'bytes_per_transition': min(med[c]['bytes_per_transition'] for c in peers),
            'adds_per_s': max(med[c]['adds_per_s'] for c in peers),
            'sample32_ms': min(med[c]['sample32_ms'] for c in peers)} if peers else None
    print(f'\n84x84 uint8 frames, stack {STACK}, capacity {CAP:,}, episodes of {EP:,}, {N:,} single adds, sample({B}); '
          f'median of {rounds} round(s)\n')
    print(f'| library | bytes / transition | x 7,056 | adds / s | sample(32) ms |')
    print(f'|---|---:|---:|---:|---:|')
    for c in configs:
        m = med[c]
        print(f"| {c} | {m['bytes_per_transition']:,.0f} | {m['bytes_per_transition'] / FRAME:.3f} | "
              f"{m['adds_per_s']:,.0f} | {m['sample32_ms']:.3f} |")
    ratios = None
    if best and 'ours' in med:
        o = med['ours']
        ratios = {'memory_vs_best_peer': o['bytes_per_transition'] / best['bytes_per_transition'],
                  'adds_vs_best_peer': o['adds_per_s'] / best['adds_per_s'],
                  'sample_speed_vs_best_peer': best['sample32_ms'] / o['sample32_ms']}
        print(f"\nours against the best peer: memory {ratios['memory_vs_best_peer']:.3f}x (lower is better), "
              f"adds {ratios['adds_vs_best_peer']:.2f}x, sample speed {ratios['sample_speed_vs_best_peer']:.2f}x "
              f"(higher is better); memory {o['bytes_per_transition'] / FRAME:.4f}x the 7,056-byte frame")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({'setup': dict(capacity=CAP, steps=N, episode=EP, stack=STACK, batch=B, rounds=rounds),
                               'machine': machine_record('cpprb', 'tianshou', 'stable-baselines3', torch_threads=1),
                               'runs': runs, 'median': med, 'best_peer': best, 'ratios': ratios}, indent=1))
    print(f'\nwritten to {OUT}')


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--configs', nargs='+', default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument('--quick', action='store_true', help='1 round')
    ap.add_argument('--child', help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child: child(a.child)
    else: main(1 if a.quick else a.rounds, a.configs)
