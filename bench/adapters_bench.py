"""The compat adapters against the libraries they stand for, in the same run: one `add` and `sample(256)` of the SB3 adapter
against SB3's `ReplayBuffer`, of the cpprb adapter against cpprb's, and the native one-row `+` of torch tensors and `append`
against SB3's `add` (rlox's `push` beside, if rlox is installed).

    python bench/adapters_bench.py [--rounds 7] [--calls 5000] [--pool 64] [--clock cpu] [--out FILE.json]
    python bench/adapters_bench.py --quick    # 3 rounds of 2,000 calls

Transitions are CartPole-like (4 float32 observations, a discrete action), given as each library's users give them: to SB3,
what CleanRL's DQN passes (float32 observations of shape (1, 4), int64 actions, float64 rewards, bool dones); to cpprb, one
transition by keyword; to the native memory, a batch of one row of tensors (`+`) or one transition without a batch dimension
(`append`). Each round times `calls` calls of every library in turn (the order rotates); the tables give the median over
rounds of the time per call, and each ours / peer ratio of calls per second (above 1: ours is faster).

The calls add the transitions of a pool of `pool` prepared ones in turn (0: every call its own), as a training loop adds
the step it has just made, whose arrays and tensors are still in the processor's cache; with thousands of distinct
prepared rows, reading each tensor's metadata from memory costs the tensor paths more than the write. Time is the calling
thread's CPU time (`--clock cpu`, the default), which other jobs on a shared machine do not stretch as they stretch wall
time (`--clock wall`); every library here runs on the calling thread (torch is set to one thread). The medians, each
round's times and the machine go to bench/results/adapters_bench.json."""
import argparse, json, statistics, time, warnings
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts
import numpy as np, torch
from gymnasium import spaces

warnings.filterwarnings('ignore')
CAP, BS, DIM = 100_000, 256, 4
OUT = Path(__file__).resolve().parent/'results'/'adapters_bench.json'

def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return dict(obs=rng.standard_normal((n, DIM), dtype=np.float32), next_obs=rng.standard_normal((n, DIM), dtype=np.float32),
                act=rng.integers(0, 2, n), rew=rng.standard_normal(n), done=rng.random(n) < 0.01)

def sb3_adds(cls, d, timeouts:bool):
    "SB3-style buffers (`cls`) and a call adding step i, as CleanRL calls add"
    obs_space, act_space = spaces.Box(-np.inf, np.inf, (DIM,), np.float32), spaces.Discrete(2)
    rows = [(d['obs'][i:i+1], d['next_obs'][i:i+1], d['act'][i:i+1], d['rew'][i:i+1], d['done'][i:i+1]) for i in range(len(d['rew']))]
    infos = [{}] if timeouts else {}
    def make():
        b = cls(CAP, obs_space, act_space, device='cpu', handle_timeout_termination=timeouts)
        return lambda i: b.add(*rows[i], infos)
    return make

def sb3_sample(cls, d):
    obs_space, act_space = spaces.Box(-np.inf, np.inf, (DIM,), np.float32), spaces.Discrete(2)
    def make():
        b = cls(CAP, obs_space, act_space, device='cpu', handle_timeout_termination=False)
        for i in range(CAP): b.add(d['obs'][i % len(d['rew'])][None], d['next_obs'][i % len(d['rew'])][None], d['act'][i % 7:i % 7 + 1],
                                   d['rew'][i % 7:i % 7 + 1], d['done'][i % 7:i % 7 + 1], {})
        return lambda i: b.sample(BS)
    return make

ENV = {'obs': {'shape': DIM}, 'act': {'dtype': np.int64}, 'rew': {}, 'next_obs': {'shape': DIM}, 'done': {}}

def cpprb_adds(cls, d):
    rows = [dict(obs=d['obs'][i], act=int(d['act'][i]), rew=float(d['rew'][i]), next_obs=d['next_obs'][i], done=bool(d['done'][i]))
            for i in range(len(d['rew']))]
    def make():
        b = cls(CAP, ENV)
        return lambda i: b.add(**rows[i])
    return make

def cpprb_sample(cls, d):
    def make():
        b = cls(CAP, ENV)
        n = len(d['rew'])
        for s in range(0, CAP, n):
            b.add(obs=d['obs'], act=d['act'], rew=d['rew'], next_obs=d['next_obs'], done=d['done'])
        return lambda i: b.sample(BS)
    return make

def native_plus(d):
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    t = dict(state=torch.from_numpy(d['obs']), next_state=torch.from_numpy(d['next_obs']), action=torch.from_numpy(d['act'])[:, None],
             reward=torch.from_numpy(d['rew'].astype(np.float32))[:, None], done=torch.from_numpy(d['done'])[:, None])
    rows = [{k: v[i:i+1] for k, v in t.items()} for i in range(len(d['rew']))]
    def make():
        er = ExperienceReplay(bs=BS, max_sz=CAP, warmup_sz=1, seed=0)
        return lambda i: er + rows[i]
    return make

def native_append(d):
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    rows = [dict(state=d['obs'][i], next_state=d['next_obs'][i], action=d['act'][i], reward=np.float32(d['rew'][i]), done=d['done'][i])
            for i in range(len(d['rew']))]
    def make():
        er = ExperienceReplay(bs=BS, max_sz=CAP, warmup_sz=1, seed=0)
        return lambda i: er.append(rows[i])
    return make

def rlox_push(d):
    import rlox
    rows = [(d['obs'][i], d['act'][i:i+1].astype(np.float32), float(d['rew'][i]), bool(d['done'][i]), False, d['next_obs'][i])
            for i in range(len(d['rew']))]
    def make():
        b = rlox.ReplayBuffer(CAP, DIM, 1)
        return lambda i: b.push(*rows[i])
    return make

def time_calls(make, calls:int, pool:int=0, clock=time.thread_time) -> float:
    "Seconds per call of `calls` calls of a fresh buffer's operation (after 200 unmeasured ones), on the prepared rows from 200 on, cycling through `pool` of them (0: all)"
    f = make()
    for i in range(200): f(i)
    order = [200 + (i % pool if pool else i) for i in range(calls)]
    t = clock()
    for i in order: f(i)
    return (clock() - t) / calls

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rounds', type=int, default=7)
    p.add_argument('--calls', type=int, default=5000)
    p.add_argument('--pool', type=int, default=64, help='prepared transitions cycled through (0: a new one at every call)')
    p.add_argument('--clock', choices=['cpu', 'wall'], default='cpu', help="the calling thread's CPU time, or wall time")
    p.add_argument('--quick', action='store_true', help='at most 3 rounds of 2,000 calls')
    p.add_argument('--out', type=Path, default=OUT, help='where to write the JSON results')
    a = p.parse_args()
    if a.quick: a.rounds, a.calls = min(a.rounds, 3), min(a.calls, 2000)
    torch.set_num_threads(1)
    clock = time.thread_time if a.clock == 'cpu' else time.perf_counter
    import cpprb
    from stable_baselines3.common.buffers import ReplayBuffer as SB3
    from fastrl_replay.compat import sb3 as ours_sb3, cpprb as ours_cpprb
    d = data(a.calls + 200)
    cases = {  # case -> {name: make}; the first name is the peer the others are compared with
        'SB3 add (infos ignored)': {'SB3': sb3_adds(SB3, d, False), 'adapter': sb3_adds(ours_sb3.ReplayBuffer, d, False)},
        'SB3 add (timeouts read)': {'SB3': sb3_adds(SB3, d, True), 'adapter': sb3_adds(ours_sb3.ReplayBuffer, d, True)},
        'SB3 sample 256': {'SB3': sb3_sample(SB3, d), 'adapter': sb3_sample(ours_sb3.ReplayBuffer, d)},
        'cpprb add': {'cpprb': cpprb_adds(cpprb.ReplayBuffer, d), 'adapter': cpprb_adds(ours_cpprb.ReplayBuffer, d)},
        'cpprb sample 256': {'cpprb': cpprb_sample(cpprb.ReplayBuffer, d), 'adapter': cpprb_sample(ours_cpprb.ReplayBuffer, d)},
        'one transition': {'SB3 add': sb3_adds(SB3, d, False), 'native + (tensors)': native_plus(d), 'native append': native_append(d)},
    }
    try:
        import rlox  # noqa: F401
        cases['one transition']['rlox push'] = rlox_push(d)
    except ImportError: print('rlox is not installed: left out')
    res = {c: {n: [] for n in libs} for c, libs in cases.items()}
    for r in range(a.rounds):
        for c, libs in cases.items():
            names = list(libs)
            for n in names[r % len(names):] + names[:r % len(names)]:
                res[c][n].append(time_calls(libs[n], a.calls if 'sample' not in c else a.calls // 10, a.pool, clock))
    print(f'{"case":26s}{"library":22s}{"median us/call":>16s}{"ours / peer":>14s}')
    medians = {}
    for c, libs in res.items():
        med = medians[c] = {n: statistics.median(v) for n, v in libs.items()}
        peer = next(iter(med))
        for n, m in med.items():
            ratio = '' if n == peer else f'{med[peer] / m:.2f}x'
            print(f'{c:26s}{n:22s}{m * 1e6:16.2f}{ratio:>14s}')
    a.out.parent.mkdir(parents=True, exist_ok=True)
    settings = dict(rounds=a.rounds, calls=a.calls, pool=a.pool, clock=a.clock)
    machine = machine_record('stable-baselines3', 'gymnasium', 'cpprb', 'rlox')
    a.out.write_text(json.dumps(dict(settings=settings, median_s=medians, rounds_s=res, machine=machine), indent=1))
    print(f'written to {a.out}')

if __name__ == '__main__': main()
