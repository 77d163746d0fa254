"""Prioritized replay: `PrioritizedExperienceReplay` against cpprb, TorchRL's `PrioritizedSampler` and Tianshou.

Capacity 1,000,000, batch 256, alpha=0.6, beta=0.4, transitions with 17 float32 observation features (state and
next state), a float32 action of 6, a float32 reward and a bool done flag: the low-dimensional setting of the peer
measurements. Three operations:

- add(256):        chunks of 256 transitions added to a fresh prioritized buffer, one call each (transitions/s)
- sample(256):     one prioritized batch with its importance weights, from a full buffer (ms per call)
- sample+update:   a sample, then the priorities of its 256 rows updated from new TD errors (ms per pair)

Every library gets the same seeded data and the same TD errors, in its own input format, built before the timed
loops. Full buffers start from the same random priorities over all rows, so sampling walks a non-uniform tree.
Tianshou has no batched add on its plain buffer; its add(256) is `PrioritizedVectorReplayBuffer` with 256
sub-buffers, one step of 256 environments per call, as it is used with vectorized environments. Its full buffer is
filled by setting its arrays directly. Rounds are interleaved, with the order rotating; the median over rounds is
reported, with ratios (>= 1.0 means ours is faster), and written to bench/results/per_bench.json.

Run from the repository root (after `make bench` has installed the peers):

    .venv/bin/python bench/per_bench.py            # 5 rounds, a few minutes
    .venv/bin/python bench/per_bench.py --quick
    .venv/bin/python bench/per_bench.py --device cuda --peers torchrl cpprb   # on a GPU machine
    .venv/bin/python bench/per_bench.py --device cuda --tree-device cuda     # our tree on the GPU too
"""
import argparse, gc, json, logging, statistics, time
from pathlib import Path

from machine import machine_record  # first: the load average as the run starts
import numpy as np, torch
from replay_bench import CAP, BS, ACT_DIM, make_data as transitions  # the uniform benchmark's sizes and transitions

DIM, ALPHA, BETA = 17, 0.6, 0.4
OPS = ('add256', 'sample', 'sample_update')
PEERS = ('cpprb', 'torchrl', 'tianshou')
SETTINGS = {'full':  dict(rounds=5, n_chunks=400, calls=300, warmup=20),
            'quick': dict(rounds=2, n_chunks=100, calls=100, warmup=10)}
OUT = Path(__file__).resolve().parent/'results'/'per_bench.json'


def make_data(seed=0):
    "replay_bench's CAP transitions, with initial priorities and per-call TD errors: the one source for every library"
    rng = np.random.default_rng(seed + 1)
    return dict(transitions(DIM, seed), prio0=np.abs(rng.standard_normal(CAP)) + 1e-3,
                td=rng.standard_normal((2_000, BS)).astype(np.float32))


class Ours:
    name = 'ours'
    def __init__(self, data, cfg, device='cpu', tree_device=None):
        from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
        self.cls, self.device, self.tree_device = PrioritizedExperienceReplay, torch.device(device), tree_device
        t = {k: torch.from_numpy(v).to(self.device) for k, v in data.items()}
        self.all = dict(state=t['obs'], next_state=t['next_obs'], action=t['act'], reward=t['rew'], done=t['done'])
        self.chunks = [{k: v[s:s+BS] for k, v in self.all.items()} for s in range(0, cfg['n_chunks']*BS, BS)]
        self.prio0, self.td = t['prio0'], list(t['td'])

    def new(self): return self.cls(bs=BS, max_sz=CAP, warmup_sz=1, alpha=ALPHA, beta=BETA, beta_steps=0, seed=0,
                                   device=self.device, tree_device=self.tree_device)
    def add_buffer(self):
        er = self.new()
        return er, er.__add__
    def full_buffer(self):
        er = self.new() + self.all
        er.update_td(self.prio0, torch.arange(CAP, device=self.device))
        return er
    def sample(self, er): return er.sample()
    def sample_update(self, er, td):
        _, idxs = er.sample()
        er.update_td(td, idxs)
    def sync(self):
        if self.device.type == 'cuda': torch.cuda.synchronize()


class Cpprb:
    name = 'cpprb'
    def __init__(self, data, cfg):
        import cpprb
        self.cls = cpprb.PrioritizedReplayBuffer
        self.env_dict = {'obs': {'shape': DIM}, 'next_obs': {'shape': DIM}, 'act': {'shape': ACT_DIM}, 'rew': {},
                         'done': {'dtype': np.bool_}}
        self.all = {k: data[k] for k in ('obs', 'next_obs', 'act', 'rew', 'done')}
        self.chunks = [{k: v[s:s+BS] for k, v in self.all.items()} for s in range(0, cfg['n_chunks']*BS, BS)]
        self.prio0, self.td = data['prio0'], list(np.abs(data['td']) + 1e-6)  # cpprb takes priorities, not TD errors

    def add_buffer(self):
        rb = self.cls(CAP, self.env_dict, alpha=ALPHA)
        return rb, lambda x: rb.add(**x)
    def full_buffer(self):
        rb = self.cls(CAP, self.env_dict, alpha=ALPHA)
        rb.add(**self.all)
        rb.update_priorities(np.arange(CAP), self.prio0)
        return rb
    def sample(self, rb): return rb.sample(BS, beta=BETA)
    def sample_update(self, rb, td):
        b = rb.sample(BS, beta=BETA)
        rb.update_priorities(b['indexes'], td)
    def sync(self): pass


class TorchRL:
    name = 'torchrl'
    def __init__(self, data, cfg, device='cpu'):
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.data.replay_buffers.samplers import PrioritizedSampler
        logging.getLogger('torchrl').setLevel(logging.WARNING)
        self.rb_cls, self.storage, self.sampler, self.device = TensorDictReplayBuffer, LazyTensorStorage, PrioritizedSampler, device
        t = {k: torch.from_numpy(v) for k, v in data.items()}
        self.all = TensorDict(dict(obs=t['obs'], next_obs=t['next_obs'], action=t['act'], reward=t['rew'], done=t['done']),
                              batch_size=[CAP]).to(device)
        self.chunks = [self.all[s:s+BS] for s in range(0, cfg['n_chunks']*BS, BS)]
        self.prio0, self.td = t['prio0'].float(), list(t['td'].abs() + 1e-6)

    def new(self):
        return self.rb_cls(storage=self.storage(CAP, device=self.device), sampler=self.sampler(CAP, alpha=ALPHA, beta=BETA),
                           batch_size=BS, priority_key='td_error')
    def add_buffer(self):
        rb = self.new()
        return rb, rb.extend
    def full_buffer(self):
        rb = self.new()
        rb.extend(self.all)
        rb.update_priority(torch.arange(CAP), self.prio0)
        return rb
    def sample(self, rb): return rb.sample()
    def sample_update(self, rb, td):
        b = rb.sample()
        rb.update_priority(b['index'], td)
    def sync(self):
        if self.device == 'cuda': torch.cuda.synchronize()


class Tianshou:
    name = 'tianshou'
    def __init__(self, data, cfg):
        from tianshou.data import Batch, PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer
        self.Batch, self.cls, self.vec_cls = Batch, PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer
        d = data
        self.cols = dict(obs=d['obs'], act=d['act'], rew=d['rew'][:, 0], terminated=d['done'][:, 0],
                         truncated=np.zeros(CAP, bool), obs_next=d['next_obs'])
        self.chunks = [Batch({k: v[s:s+BS] for k, v in self.cols.items()}) for s in range(0, cfg['n_chunks']*BS, BS)]
        self.ids = np.arange(BS)
        self.prio0, self.td = d['prio0'], list(d['td'])  # Tianshou takes TD errors: |td| + eps, to the power alpha

    def add_buffer(self):
        rb = self.vec_cls(CAP, BS, alpha=ALPHA, beta=BETA)
        return rb, lambda x: rb.add(x, buffer_ids=self.ids)
    def full_buffer(self):
        rb = self.cls(CAP, alpha=ALPHA, beta=BETA)
        rb.add(self.Batch({k: v[0] for k, v in self.cols.items()}))  # allocates the arrays
        rb.set_batch(self.Batch(dict(self.cols, done=self.cols['terminated'])))
        rb._size, rb._insertion_idx = CAP, 0
        rb.update_weight(np.arange(CAP), self.prio0)
        return rb
    def sample(self, rb): return rb.sample(BS)
    def sample_update(self, rb, td):
        _, idxs = rb.sample(BS)
        rb.update_weight(idxs, td)
    def sync(self): pass


LIBS = {'ours': Ours, 'cpprb': Cpprb, 'torchrl': TorchRL, 'tianshou': Tianshou}
DISTS = {'cpprb': ['cpprb'], 'torchrl': ['torchrl', 'tensordict'], 'tianshou': ['tianshou', 'numba']}


def add_rate(lib, cfg):
    "Transitions/s of adding the prebuilt chunks to a fresh buffer; a first untimed call allocates lazy storage"
    buf, add = lib.add_buffer()
    add(lib.chunks[0])
    gc.collect()
    t0 = time.perf_counter()
    for x in lib.chunks: add(x)
    lib.sync()
    dt = time.perf_counter() - t0
    del buf, add
    gc.collect()
    return len(lib.chunks)*BS/dt


def call_times(lib, buf, op, cfg):
    "Median ms per call of `op` on a full buffer, after untimed warm-up calls"
    tds = lib.td
    for i in range(cfg['warmup']): op(buf, tds[i % len(tds)]) if op == lib.sample_update else op(buf)
    lib.sync()
    gc.collect()
    ts = []
    for i in range(cfg['calls']):
        t0 = time.perf_counter()
        if op == lib.sample_update: op(buf, tds[i % len(tds)])
        else: op(buf)
        lib.sync()
        ts.append(time.perf_counter() - t0)
    return 1e3*statistics.median(ts)


def measure_round(lib, cfg):
    out = dict(add256=add_rate(lib, cfg))
    buf = lib.full_buffer()
    out['sample'] = call_times(lib, buf, lib.sample, cfg)
    out['sample_update'] = call_times(lib, buf, lib.sample_update, cfg)
    del buf
    gc.collect()
    return out


def ratios(res):
    "Ours over each peer and over the best peer: throughput ratio for add, time ratio (peer/ours) for the rest"
    peers = [n for n in res if n != 'ours']
    def r(op, p): return res['ours'][op]/res[p][op] if op == 'add256' else res[p][op]/res['ours'][op]
    out = {f'vs {p}': {op: r(op, p) for op in OPS} for p in peers}
    if peers:
        best = {op: max(peers, key=lambda p: res[p][op]) if op == 'add256' else min(peers, key=lambda p: res[p][op])
                for op in OPS}
        out['vs best peer'] = {op: r(op, best[op]) for op in OPS}
        out['best peer'] = best
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--quick', action='store_true', help='fewer rounds and calls')
    p.add_argument('--peers', nargs='+', choices=PEERS, default=list(PEERS))
    p.add_argument('--device', default='cpu', help="where ours and TorchRL store transitions: 'cpu' or 'cuda'")
    p.add_argument('--tree-device', help="where our sum tree lives (default: the CPU, as TorchRL's)")
    p.add_argument('--rounds', type=int)
    p.add_argument('--out', type=Path, default=OUT)
    args = p.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0); torch.manual_seed(0)  # Tianshou and cpprb sample with NumPy's global RNG, TorchRL with torch's
    cfg = dict(SETTINGS['quick' if args.quick else 'full'])
    if args.rounds: cfg['rounds'] = args.rounds
    data = make_data()
    libs = []
    for name in ['ours'] + args.peers:
        kw = dict(device=args.device) if name in ('ours', 'torchrl') else {}
        if name == 'ours': kw['tree_device'] = args.tree_device
        try: libs.append(LIBS[name](data, cfg, **kw))
        except ImportError as e: print(f'  skipping {name}: not installed ({e})')
    del data
    print(f'settings: {cfg}, device {args.device}, our tree on {args.tree_device or "cpu"}, '
          f'torch threads {torch.get_num_threads()}')
    rounds = {lib.name: {op: [] for op in OPS} for lib in libs}
    t0 = time.perf_counter()
    for r in range(cfg['rounds']):
        t1 = time.perf_counter()
        order = libs[r % len(libs):] + libs[:r % len(libs)]
        for lib in order:
            for op, v in measure_round(lib, cfg).items(): rounds[lib.name][op].append(v)
        print(f'  round {r+1}/{cfg["rounds"]}: {time.perf_counter()-t1:.1f}s (order: {", ".join(l.name for l in order)})',
              flush=True)
    res = {n: {op: statistics.median(v) for op, v in ops.items()} for n, ops in rounds.items()}
    rats = ratios(res)
    print(f'\nPER, capacity {CAP:,}, batch {BS}, alpha {ALPHA}, beta {BETA}, median of {cfg["rounds"]} rounds')
    print(f'{"library":<10}{"add(256) tr/s":>16}{"sample(256) ms":>16}{"sample+update ms":>18}')
    for n, v in res.items(): print(f'{n:<10}{v["add256"]:>16,.0f}{v["sample"]:>16.4f}{v["sample_update"]:>18.4f}')
    print('\nours / peer (>= 1.0 means ours is faster)')
    print(f'{"":<14}{"add(256)":>18}{"sample(256)":>18}{"sample+update":>18}')
    for k, v in rats.items():
        if k == 'best peer': continue
        cells = [f'{v[op]:.2f}' + (f' ({rats["best peer"][op]})' if k == 'vs best peer' else '') for op in OPS]
        print(f'{k:<14}' + ''.join(f'{c:>18}' for c in cells))
    report = dict(settings=dict(cfg, capacity=CAP, batch=BS, dim=DIM, alpha=ALPHA, beta=BETA, device=args.device,
                                tree_device=args.tree_device),
                  machine=machine_record(*(d for n in args.peers for d in DISTS[n])), median=res, ratios=rats,
                  rounds=rounds, seconds=time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f'\ntotal {report["seconds"]:.0f}s; results written to {args.out}')


if __name__ == '__main__':
    main()
