"""Throughput of `ExperienceReplay` against peer replay buffers: cpprb, TorchRL, Stable-Baselines3 and rlox (optional).

`ours` is fed torch tensors, its native input; `ours[numpy]` is fed the NumPy arrays that SB3 and cpprb get;
`ours[append]` adds single transitions with `append`, one NumPy row per column without a batch dimension, as SB3's and
rlox's `push` take them (its add(256) and sampling are `ours`'). rlox (a Rust core, `pip install rlox`) is left out when
it is not installed.

A buffer of capacity 1,000,000 holds transitions with float32 observations of D features (D=4 and D=17 by
default), a float32 action of 6, a float32 reward and a bool done flag. Three operations are timed:

- add(1):      single transitions added one call at a time
- add(256):    chunks of 256 transitions added in one call each
- sample(256): 256 transitions drawn uniformly from a full buffer (median time per call)

Every library gets the same seeded data in its own input format, with the per-call inputs built before the
timed loops. Rounds are interleaved, with the order of the libraries rotating from round to round, and the
median over rounds is reported. Results are printed as tables and written to bench/results/replay_bench.json.

Run from the repository root:

    .venv/bin/python bench/replay_bench.py                  # full run, D=4 and D=17 (a few minutes)
    .venv/bin/python bench/replay_bench.py --quick          # fewer rounds and calls
    .venv/bin/python bench/replay_bench.py --dims 17 --peers cpprb torchrl
"""
import argparse, gc, json, logging, statistics, time
from pathlib import Path

from machine import machine_record  # first: the load average as the run starts
import numpy as np, torch

CAP, BS, ACT_DIM = 1_000_000, 256, 6
OPS = ('add1', 'add256', 'sample')
OP_NAMES = {'add1': 'add(1)', 'add256': 'add(256)', 'sample': 'sample(256)'}
PEERS = ('cpprb', 'sb3', 'torchrl', 'rlox')
SETTINGS = {'full':  dict(rounds=5, n_single=20_000, n_chunks=400, sample_calls=300, sample_warmup=20),
            'quick': dict(rounds=2, n_single=5_000, n_chunks=100, sample_calls=100, sample_warmup=10)}
OUT = Path(__file__).resolve().parent/'results'/'replay_bench.json'


def make_data(dim, seed=0):
    "CAP transitions as NumPy arrays, from a seeded generator: the single source of data for every library"
    rng = np.random.default_rng(seed)
    return dict(obs=rng.standard_normal((CAP, dim), dtype=np.float32),
                next_obs=rng.standard_normal((CAP, dim), dtype=np.float32),
                act=rng.uniform(-1, 1, (CAP, ACT_DIM)).astype(np.float32),
                rew=rng.standard_normal((CAP, 1), dtype=np.float32),
                done=rng.random((CAP, 1)) < 0.01)


def chunk_starts(n_chunks): return range(0, n_chunks*BS, BS)


# Each library prebuilds its inputs from the shared data and makes buffers as `(buffer, operation)` pairs:
# `add_buffer` for add(1) (and add(256) unless `chunk_buffer` is overridden), `full_buffer` for sampling.

class Ours:
    name = 'ours'
    def __init__(self, data, n_single, n_chunks):
        from fastrl_replay.memory.experience_replay import ExperienceReplay
        self.cls = ExperienceReplay
        t = {k: torch.from_numpy(v) for k, v in data.items()}
        cols = dict(state=t['obs'], next_state=t['next_obs'], action=t['act'], reward=t['rew'], done=t['done'])
        self.all = cols
        self.singles = [{k: v[i:i+1] for k, v in cols.items()} for i in range(n_single)]
        self.chunks = [{k: v[s:s+BS] for k, v in cols.items()} for s in chunk_starts(n_chunks)]

    def new(self): return self.cls(bs=BS, max_sz=CAP, warmup_sz=1, seed=0)
    def add_buffer(self):
        er = self.new()
        return er, er.__add__
    chunk_buffer = add_buffer
    def full_buffer(self):
        er = self.new()
        er + self.all
        return er, er.sample


class OursNumpy(Ours):
    "Ours fed NumPy arrays, the input SB3 and cpprb get: the same buffer without torch's per-tensor call overhead"
    name = 'ours[numpy]'
    def __init__(self, data, n_single, n_chunks):
        super().__init__(data, n_single, n_chunks)
        cols = dict(state=data['obs'], next_state=data['next_obs'], action=data['act'], reward=data['rew'], done=data['done'])
        self.singles = [{k: v[i:i+1] for k, v in cols.items()} for i in range(n_single)]
        self.chunks = [{k: v[s:s+BS] for k, v in cols.items()} for s in chunk_starts(n_chunks)]


class OursAppend(Ours):
    "Ours fed one transition per call without a batch dimension, with `append` (NumPy rows, as SB3 and rlox get)"
    name = 'ours[append]'
    def __init__(self, data, n_single, n_chunks):
        super().__init__(data, n_single, n_chunks)
        cols = dict(state=data['obs'], next_state=data['next_obs'], action=data['act'], reward=data['rew'][:, 0], done=data['done'][:, 0])
        self.singles = [{k: v[i] for k, v in cols.items()} for i in range(n_single)]
    def add_buffer(self):
        er = self.new()
        return er, er.append
    def chunk_buffer(self): return Ours.add_buffer(self)


class Rlox:
    "rlox's Rust ring buffer: `push` one transition, `push_batch` a chunk of flat arrays, `sample(n, seed)`"
    name = 'rlox'
    def __init__(self, data, n_single, n_chunks):
        import rlox
        self.cls, self.dim = rlox.ReplayBuffer, data['obs'].shape[1]
        flat = lambda *vs: tuple(np.ascontiguousarray(v).reshape(-1) for v in vs)  # `push_batch` takes flat arrays, flags as uint8
        self.all = flat(data['obs'], data['next_obs'], data['act'], data['rew'], data['done'].astype(np.uint8), np.zeros(CAP, np.uint8))
        self.singles = [(data['obs'][i], data['act'][i], float(data['rew'][i, 0]), bool(data['done'][i, 0]), False, data['next_obs'][i])
                        for i in range(n_single)]
        rows = (self.dim, self.dim, ACT_DIM, 1, 1, 1)  # values per transition in each flat array
        self.chunks = [tuple(v[s*k:(s+BS)*k] for v, k in zip(self.all, rows)) for s in chunk_starts(n_chunks)]
        self.seed = 0
    def new(self): return self.cls(CAP, self.dim, ACT_DIM)
    def add_buffer(self):
        rb = self.new()
        return rb, lambda x: rb.push(*x)
    def chunk_buffer(self):
        rb = self.new()
        return rb, lambda x: rb.push_batch(*x)
    def full_buffer(self):
        rb = self.new()
        rb.push_batch(*self.all)
        def sample():
            self.seed += 1  # rlox takes a seed per call
            return rb.sample(BS, self.seed)
        return rb, sample


class Cpprb:
    name = 'cpprb'
    def __init__(self, data, n_single, n_chunks):
        import cpprb
        self.cls = cpprb.ReplayBuffer
        self.env_dict = {'obs': {'shape': data['obs'].shape[1]}, 'next_obs': {'shape': data['obs'].shape[1]},
                         'act': {'shape': ACT_DIM}, 'rew': {}, 'done': {'dtype': np.bool_}}
        self.all = data
        self.singles = [{k: v[i] for k, v in data.items()} for i in range(n_single)]
        self.chunks = [{k: v[s:s+BS] for k, v in data.items()} for s in chunk_starts(n_chunks)]

    def add_buffer(self):
        rb = self.cls(CAP, self.env_dict)
        return rb, lambda x: rb.add(**x)
    chunk_buffer = add_buffer
    def full_buffer(self):
        rb = self.cls(CAP, self.env_dict)
        rb.add(**self.all)
        return rb, lambda: rb.sample(BS)


class SB3:
    "SB3 adds one step of `n_envs` environments per call: n_envs=1 for add(1) and sampling, 256 for add(256)"
    name = 'sb3'
    def __init__(self, data, n_single, n_chunks):
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer
        self.cls = ReplayBuffer
        self.obs_space = gym.spaces.Box(-np.inf, np.inf, (data['obs'].shape[1],), np.float32)
        self.act_space = gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32)
        self.all = data
        cols = data['obs'], data['next_obs'], data['act'], data['rew'][:, 0], data['done'][:, 0]
        one, many = [{}], [{} for _ in range(BS)]
        self.singles = [(*(v[i:i+1] for v in cols), one) for i in range(n_single)]
        self.chunks = [(*(v[s:s+BS] for v in cols), many) for s in chunk_starts(n_chunks)]

    def new(self, n_envs=1): return self.cls(CAP, self.obs_space, self.act_space, device='cpu', n_envs=n_envs)
    def add_buffer(self):
        rb = self.new()
        return rb, lambda x: rb.add(*x)
    def chunk_buffer(self):
        rb = self.new(n_envs=BS)
        return rb, lambda x: rb.add(*x)
    def full_buffer(self):
        "Filled by writing its arrays directly: a million one-row `add` calls would take too long"
        rb, d = self.new(), self.all
        rb.observations[:, 0], rb.next_observations[:, 0], rb.actions[:, 0] = d['obs'], d['next_obs'], d['act']
        rb.rewards[:, 0], rb.dones[:, 0] = d['rew'][:, 0], d['done'][:, 0]
        rb.full, rb.pos = True, 0
        return rb, lambda: rb.sample(BS)


class TorchRL:
    name = 'torchrl'
    def __init__(self, data, n_single, n_chunks):
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        logging.getLogger('torchrl').setLevel(logging.WARNING)  # one INFO line per storage allocated
        self.cls, self.storage = ReplayBuffer, LazyTensorStorage
        t = {k: torch.from_numpy(v) for k, v in data.items()}
        self.all = TensorDict(dict(obs=t['obs'], next_obs=t['next_obs'], action=t['act'], reward=t['rew'],
                                   done=t['done']), batch_size=[CAP])
        self.singles = [self.all[i] for i in range(n_single)]
        self.chunks = [self.all[s:s+BS] for s in chunk_starts(n_chunks)]

    def new(self): return self.cls(storage=self.storage(CAP), batch_size=BS)
    def add_buffer(self):
        rb = self.new()
        return rb, rb.add
    def chunk_buffer(self):
        rb = self.new()
        return rb, rb.extend
    def full_buffer(self):
        rb = self.new()
        rb.extend(self.all)
        return rb, rb.sample


LIBS = {'ours': Ours, 'ours[numpy]': OursNumpy, 'ours[append]': OursAppend, 'cpprb': Cpprb, 'sb3': SB3, 'torchrl': TorchRL, 'rlox': Rlox}
DISTS = {'cpprb': ['cpprb'], 'sb3': ['stable-baselines3', 'gymnasium'], 'torchrl': ['torchrl', 'tensordict'], 'rlox': ['rlox']}


def add_rate(make, inputs, rows_each):
    "Transitions/s of adding `inputs` one call each to a fresh buffer; a first untimed call allocates lazy storage"
    buf, add = make()
    add(inputs[0])
    gc.collect()
    t0 = time.perf_counter()
    for x in inputs: add(x)
    dt = time.perf_counter() - t0
    del buf, add
    gc.collect()
    return len(inputs)*rows_each/dt


def sample_time(make, calls, warmup):
    "Median seconds per `sample` call on a full buffer, after `warmup` untimed calls"
    buf, sample = make()
    for _ in range(warmup): sample()
    gc.collect()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        sample()
        ts.append(time.perf_counter() - t0)
    del buf, sample
    gc.collect()
    return statistics.median(ts)


def measure(lib, op, cfg):
    "One measurement of `op` for `lib`, in transitions/s"
    if op == 'add1': return add_rate(lib.add_buffer, lib.singles, 1)
    if op == 'add256': return add_rate(lib.chunk_buffer, lib.chunks, BS)
    return BS/sample_time(lib.full_buffer, cfg['sample_calls'], cfg['sample_warmup'])


def load_libs(names, data, cfg):
    "The libraries that can be imported, each with its inputs prebuilt; a note for each one that cannot"
    libs = []
    for name in names:
        try: libs.append(LIBS[name](data, cfg['n_single'], cfg['n_chunks']))
        except ImportError as e: print(f'  skipping {name}: not installed ({e})')
    return libs


def bench_dim(dim, names, cfg):
    "Per-round throughputs {lib: {op: [tr/s per round]}} for observations of `dim` features"
    data = make_data(dim)
    libs = load_libs(names, data, cfg)
    rounds = {lib.name: {op: [] for op in OPS} for lib in libs}
    for r in range(cfg['rounds']):
        t0 = time.perf_counter()
        order = libs[r % len(libs):] + libs[:r % len(libs)]
        for op in OPS:
            for lib in order: rounds[lib.name][op].append(measure(lib, op, cfg))
        print(f'  D={dim} round {r+1}/{cfg["rounds"]}: {time.perf_counter()-t0:.1f}s '
              f'(order: {", ".join(lib.name for lib in order)})', flush=True)
    del libs, data
    gc.collect()
    return rounds


def summarize(rounds):
    "Median over rounds of each throughput, and the sampling time per call in ms"
    res = {}
    for name, ops in rounds.items():
        res[name] = {op: statistics.median(v) for op, v in ops.items()}
        res[name]['sample_ms'] = 1e3*BS/res[name]['sample']
    return res


OURS = ('ours', 'ours[numpy]', 'ours[append]')

def ratios(res, ours='ours'):
    "The throughput of `ours` over each peer's, and over the best peer's, for each operation"
    peers = [n for n in res if n not in OURS]
    out = {f'vs {p}': {op: res[ours][op]/res[p][op] for op in OPS} for p in peers}
    if peers:
        best = {op: max(peers, key=lambda p: res[p][op]) for op in OPS}
        out['vs best peer'] = {op: res[ours][op]/res[best[op]][op] for op in OPS}
        out['best peer'] = best
    return out


def print_tables(dim, res, rats, n_rounds):
    print(f'\nD={dim}: capacity {CAP:,}, batch {BS}, median of {n_rounds} rounds (transitions/s)')
    print(f'{"library":<13}{"add(1)":>14}{"add(256)":>14}{"sample(256)":>14}{"sample ms/call":>16}')
    for name, r in res.items():
        print(f'{name:<13}{r["add1"]:>14,.0f}{r["add256"]:>14,.0f}{r["sample"]:>14,.0f}{r["sample_ms"]:>16.4f}')
    for ours, rat in rats.items():
        if not rat: continue
        print(f'\n{ours} / peer (throughput ratio, >= 1.0 means ours is faster)')
        print(f'{"":<14}' + ''.join(f'{OP_NAMES[op]:>22}' for op in OPS))
        for key, r in rat.items():
            if key == 'best peer': continue
            cells = [f'{r[op]:.2f}' + (f' ({rat["best peer"][op]})' if key == 'vs best peer' else '') for op in OPS]
            print(f'{key:<14}' + ''.join(f'{c:>22}' for c in cells))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--quick', action='store_true', help='fewer rounds and calls')
    p.add_argument('--dims', type=int, nargs='+', default=[4, 17], help='observation sizes to run')
    p.add_argument('--peers', nargs='+', choices=PEERS, default=list(PEERS), help='peers to compare with')
    p.add_argument('--rounds', type=int, help='override the number of interleaved rounds')
    p.add_argument('--out', type=Path, default=OUT, help='where to write the JSON results')
    args = p.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0)  # SB3 samples with NumPy's global RNG
    torch.manual_seed(0)  # TorchRL samples with torch's global RNG
    cfg = dict(SETTINGS['quick' if args.quick else 'full'])
    if args.rounds: cfg['rounds'] = args.rounds
    names = list(OURS) + args.peers
    print(f'settings: {cfg}, torch threads: {torch.get_num_threads()}')
    t0 = time.perf_counter()
    report = dict(settings=dict(cfg, capacity=CAP, batch=BS, action_dim=ACT_DIM), dims={})
    for dim in args.dims:
        rounds = bench_dim(dim, names, cfg)
        res = summarize(rounds)
        rats = {o: ratios(res, o) for o in OURS if o in res}
        print_tables(dim, res, rats, cfg['rounds'])
        report['dims'][str(dim)] = dict(median=res, ratios=rats, rounds=rounds)
    report['seconds'] = time.perf_counter() - t0
    report['machine'] = machine_record(*(d for n in names for d in DISTS.get(n, [])))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f'\ntotal {report["seconds"]:.0f}s; results written to {args.out}')


if __name__ == '__main__':
    main()
