"""Sequence replay: `SequenceReplay` and `PrioritizedSequenceReplay` against TorchRL's slice samplers, in one run.

Two settings, each on the same seeded steps in episodes of random length (uniform from 10 to 1,000 steps), built before
the timed loops and given to every library in its own format:

- `2669`: TorchRL issue #2669's setting (TD-MPC2's replay): 5,000,000 low-dimensional steps stored in a capacity of
  6,000,000 (observations of 17 float32, an action of 6 float32, a reward, a done flag, an episode id), samples of
  256 slices of 4 steps that never cross an episode's end. Ours: `SequenceReplay(seq_len=4, end='stop',
  traj_key='episode')`. TorchRL 0.14.1: `SliceSampler(num_slices=256, traj_key='episode', end_key=None,
  truncated_key=None, strict_length=True)` as the issue set it, and its newer `Sequence(length=4,
  episode_boundary='stop')` sample unit (episode ends from `done`) on a plain buffer.
- `r2d2`: an R2D2 batch: 1,000,000 steps (observations of 17 float32, an int64 action, a reward, a done flag and an
  LSTM state `(h, c)` of 64 float32 each per step), 64 slices of 80 learning steps after 40 steps of burn-in, padded
  at episode ends, drawn by priority (eta = alpha = 0.9, beta = 0.6). Ours: `PrioritizedSequenceReplay(seq_len=80,
  burn_in=40, stride=40, end='pad', state_keys=('h', 'c'))`, whose slices start every 40 steps of an episode as R2D2's
  and which returns `(h, c)` at each slice's first stored step. TorchRL 0.14.1: `TensorDictPrioritizedReplayBuffer`
  with `Sequence(length=80, burn_in=40, episode_boundary='pad')`, which anchors a slice at any step and returns every
  column, `(h, c)` included, at all 120 steps. Before timing, every buffer takes 200 rounds of sample + update so that
  its priorities are not all equal.

For each: `sample` (ms per call) and, where the library updates priorities or TD errors, `sample + update` (a
sample, then one TD error per learning step written back: ours `update_td(td (bs, seq_len), rows)`, TorchRL
`update_tensordict_priority` on a per-record `td_error`). Medians over calls, one torch thread, written to
bench/results/sequence_bench.json with the machine's record.

Learning runs (`--learn r2d2` or `--learn dqn`): the recurrent DQN of `r2d2_learner` and the feed-forward DQN of
`dqn_learner`, each with its defaults, on `CartPoleNoVelocity-v1` (CartPole observed without velocities) for `--steps`
environment steps per seed, one torch thread; after each epoch of 10,000 steps, 10 greedy episodes, and at the end 20
(from seed 10,000 + seed). One JSON line per seed goes to bench/results/sequence_learning.jsonl.

Over a frame storage (`--frames`): 100,000 steps of 84x84 uint8 frames (bench/atari_bench.py's recorded Pong frames
from /tmp/atari_frames/ if there, else uniform random bytes as bench/frames_bench.py makes them), stacks of 4, 3-step
returns, 4 environments interleaved row by row, episodes also cut at random lengths of 10 to 1,000 steps. On each tier
(`FrameStorage`, `CompressedFrameStorage`), uniform and prioritized, on the same steps in one process: slice memories
(32 slices of 10 steps; 8 of 40 after 20 of burn-in, stride 20, padded) and transition memories (`frame_replay`, 320
transitions a sample: as many learning steps). For each: bytes per stored step (held: the storage's `nbytes` and every
array of its sampler; the walk over `state_dict()` of the runs' `memory_bytes_per_transition`; the process's resident
growth while it was built and filled), adds one step at a time (1,000 to each memory in turn), and sample and sample +
update times, medians over interleaved rounds; written to bench/results/sequence_frames.json. `--stored` builds
bench/stored/14_sequence.json from the three results files (a missing one leaves its section as the page had it).

Run from the repository root:

    .venv/bin/python bench/sequence_bench.py            # about 2 minutes
    .venv/bin/python bench/sequence_bench.py --quick
    .venv/bin/python bench/sequence_bench.py --setting r2d2 --no-peers
    nice .venv/bin/python bench/sequence_bench.py --learn r2d2 --seeds 0 1 --steps 100000   # minutes to hours a seed
    nice .venv/bin/python bench/sequence_bench.py --frames     # about 2 minutes, 5 GB of RAM
    .venv/bin/python bench/sequence_bench.py --stored
"""
import argparse, ctypes, gc, json, logging, statistics, time, warnings
from pathlib import Path

from machine import machine_record  # first: the load average as the run starts
import numpy as np, torch

SETTINGS = {
    '2669': dict(stored=5_000_000, capacity=6_000_000, slices=256, seq_len=4, burn_in=0, dim=17, act=6, hidden=0),
    'r2d2': dict(stored=1_000_000, capacity=1_000_000, slices=64, seq_len=80, burn_in=40, stride=40, dim=17, act=0,
                 hidden=64, eta=0.9, alpha=0.9, beta=0.6),
}
RUNS = {'full': dict(calls=200, warmup=20, prefill=200), 'quick': dict(calls=60, warmup=10, prefill=50)}
OUT = Path(__file__).resolve().parent/'results'/'sequence_bench.json'


def make_steps(s:dict, seed:int=0) -> dict:
    "The stored steps of setting `s`: NumPy columns, episodes of 10 to 1,000 steps, the last cut where the steps end"
    rng = np.random.default_rng(seed)
    n = s['stored']
    lengths = rng.integers(10, 1001, n // 10 + 1)
    ends = np.cumsum(lengths)
    lengths, ends = lengths[ends <= n], ends[ends <= n]
    done = np.zeros(n, bool); done[ends - 1] = True
    episode = np.repeat(np.arange(len(lengths) + 1), np.append(lengths, n - (ends[-1] if len(ends) else 0)))
    cols = dict(obs=rng.standard_normal((n, s['dim']), np.float32), reward=rng.standard_normal((n, 1), np.float32),
                done=done[:, None], episode=episode[:, None].astype(np.int64))
    if s['act']: cols['action'] = rng.standard_normal((n, s['act']), np.float32)
    else: cols['action'] = rng.integers(0, 4, (n, 1)).astype(np.int64)
    if s['hidden']:
        for k in ('h', 'c'): cols[k] = rng.standard_normal((n, s['hidden']), np.float32)
    return cols


class Ours:
    name = 'ours'
    def __init__(self, s, steps, seed=0):
        from fastrl_replay.memory.sequence import SequenceReplay, PrioritizedSequenceReplay
        self.s, self.prioritized = s, 'eta' in s
        if self.prioritized:
            self.rb = PrioritizedSequenceReplay(bs=s['slices'], max_sz=s['capacity'], warmup_sz=1, seq_len=s['seq_len'],
                                                burn_in=s['burn_in'], stride=s['stride'], end='pad',
                                                state_keys=('h', 'c'), eta=s['eta'], alpha=s['alpha'], beta=s['beta'],
                                                seed=seed)
        else:
            self.rb = SequenceReplay(bs=s['slices'], max_sz=s['capacity'], warmup_sz=1, seq_len=s['seq_len'],
                                     end='stop', traj_key='episode', seed=seed)
        self.rb + {k: torch.from_numpy(v) for k, v in steps.items()}
    def sample(self): return self.rb.sample()
    def sample_update(self, td):
        _, rows = self.rb.sample()
        self.rb.update_td(td, rows)
    def check(self):
        "One sample's shapes, for the record"
        b, rows = self.rb.sample()
        return {k: list(v.shape) for k, v in b.items()}


class TorchRLSlice:
    name = 'torchrl SliceSampler'
    updates = False
    def __init__(self, s, steps, seed=0):
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.data.replay_buffers.samplers import SliceSampler
        torch.manual_seed(seed)
        sampler = SliceSampler(num_slices=s['slices'], traj_key='episode', end_key=None, truncated_key=None,
                               strict_length=True)
        self.rb = TensorDictReplayBuffer(storage=LazyTensorStorage(s['capacity']), sampler=sampler,
                                         batch_size=s['slices'] * s['seq_len'])
        td = {k: torch.from_numpy(v) for k, v in steps.items()}
        td['episode'] = td['episode'][:, 0]
        self.rb.extend(TensorDict(td, batch_size=[s['stored']]))
    def sample(self): return self.rb.sample()
    def check(self): return {k: list(v.shape) for k, v in self.rb.sample().items() if isinstance(v, torch.Tensor)}


class TorchRLSequence:
    name = 'torchrl Sequence'
    def __init__(self, s, steps, seed=0):
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer, TensorDictPrioritizedReplayBuffer
        from torchrl.data.replay_buffers.sample_units import Sequence
        torch.manual_seed(seed)
        self.s, self.updates = s, 'eta' in s
        L = s['burn_in'] + s['seq_len']
        unit = Sequence(length=s['seq_len'], burn_in=s['burn_in'], episode_boundary='pad' if self.updates else 'stop',
                        done_key='done')
        store = LazyTensorStorage(s['capacity'])
        if self.updates:
            self.rb = TensorDictPrioritizedReplayBuffer(alpha=s['alpha'], beta=s['beta'], storage=store,
                                                        batch_size=s['slices'], sample_unit=unit,
                                                        priority_key='td_error')
        else:
            self.rb = TensorDictReplayBuffer(storage=store, batch_size=s['slices'], sample_unit=unit)
            self.sample_update = None  # a uniform buffer keeps no priorities
        self.rb.extend(TensorDict({k: torch.from_numpy(v) for k, v in steps.items()}, batch_size=[s['stored']]))
        self.L = L
    def sample(self): return self.rb.sample()
    def sample_update(self, td):
        b = self.rb.sample()
        per_record = torch.zeros(self.s['slices'], self.L)
        per_record[:, self.s['burn_in']:] = td.abs()
        b.set('td_error', per_record.reshape(-1))
        self.rb.update_tensordict_priority(b)
    def check(self): return {k: list(v.shape) for k, v in self.rb.sample().items() if isinstance(v, torch.Tensor)}


def times(f, run, arg_of=None):
    "Median ms per call of `f` after warm-up calls"
    for i in range(run['warmup']): f() if arg_of is None else f(arg_of(i))
    gc.collect()
    ts = []
    for i in range(run['calls']):
        a = None if arg_of is None else arg_of(i)
        t0 = time.perf_counter()
        f() if a is None else f(a)
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def measure(name, s, run, peers):
    "Build each library on the setting's steps, then time its sample and sample + update"
    steps = make_steps(s)
    rng = np.random.default_rng(1)
    tds = [torch.from_numpy(rng.standard_normal((s['slices'], s['seq_len'])).astype(np.float32)) for _ in range(64)]
    libs = [Ours] + ([TorchRLSlice, TorchRLSequence] if name == '2669' else [TorchRLSequence]) * bool(peers)
    out = {}
    for cls in libs:
        t0 = time.perf_counter()
        lib = cls(s, steps)
        built = time.perf_counter() - t0
        res = dict(build_s=built, shapes=lib.check())
        if getattr(lib, 'sample_update', None) is not None and run['prefill'] and 'eta' in s:
            for i in range(run['prefill']): lib.sample_update(tds[i % len(tds)])
        res['sample_ms'] = times(lib.sample, run)
        if getattr(lib, 'sample_update', None) is not None:
            res['sample_update_ms'] = times(lib.sample_update, run, lambda i: tds[i % len(tds)])
        out[lib.name] = res
        print(f"  {name} {lib.name:<22} built in {built:5.1f}s  sample {res['sample_ms']:7.3f} ms"
              + (f"  sample+update {res['sample_update_ms']:7.3f} ms" if 'sample_update_ms' in res else ''), flush=True)
        del lib
        gc.collect()
    del steps
    gc.collect()
    return out


LEARN_OUT = OUT.parent/'sequence_learning.jsonl'
EPOCH = 10_000
CONFIGS = {  # settings of `r2d2_learner` tried, over its defaults ('default')
    'default': {},
    'uniform': dict(replay=dict(kind='uniform')),
}

def learn_run(algo:str, seed:int, steps:int, config:str='default', progress:Path|None=None,
              schedule:str='constant') -> dict:
    "Train `algo` ('r2d2' or 'dqn'), its defaults and `config`'s, on CartPoleNoVelocity-v1: greedy returns by epoch"
    from fastai.callback.core import Callback
    from fastrl_replay.envs.pomdp import POMDP_CARTPOLE as ENV
    from fastrl_replay.agents.r2d2 import r2d2_learner, play_recurrent
    from fastrl_replay.agents.dqn import dqn_learner, evaluate
    play = lambda m, n, s: (play_recurrent if algo == 'r2d2' else evaluate)(m, ENV, n, s)
    curve, kw = [], dict(CONFIGS[config]) if algo == 'r2d2' else {}
    lr = kw.get('optim', {}).get('lr', 1e-3)
    class Greedy(Callback):
        order = 90
        def after_epoch(self):
            st = self.learn.dls.train.dataset.stats()
            curve.append(dict(env_steps=st.env_steps, greedy=float(np.mean(play(self.learn.model, 10, 10_000 + seed))),
                              train_return=st.recent_return, wall_s=round(time.perf_counter() - t0, 1)))
            line = dict(algo=algo, config=config, schedule=schedule, seed=seed, **curve[-1])
            print(f"  {line}", flush=True)
            if progress is not None:
                with open(progress, 'a') as f: f.write(json.dumps(line) + '\n')
    build = r2d2_learner if algo == 'r2d2' else dqn_learner
    learn = build(ENV, steps_per_epoch=EPOCH, seed=seed, cbs=[Greedy()], **kw)
    t0, c0 = time.perf_counter(), time.process_time()
    fit = learn.fit_flat_cos if schedule == 'flat_cos' else learn.fit  # flat_cos: lr annealed over the last quarter
    with learn.no_bar(), learn.no_logging(): fit(steps // EPOCH, lr)
    final = play(learn.model, 20, 10_000 + seed)
    return dict(algo=algo, config=config if algo == 'r2d2' else 'default', schedule=schedule, env=ENV, seed=seed,
                steps=steps, settings=kw, final_greedy=float(np.mean(final)), final_returns=final,
                best_greedy=max(c['greedy'] for c in curve), curve=curve, wall_s=round(time.perf_counter() - t0, 1),
                cpu_s=round(time.process_time() - c0, 1), machine=machine_record(torch_threads=1))


FRAMES_OUT = OUT.parent/'sequence_frames.json'
try: _LIBC = ctypes.CDLL('libc.so.6')  # glibc's malloc_trim: freed heap pages given back before each reading of RSS
except OSError: _LIBC = None
ATARI_FRAMES = Path('/tmp/atari_frames')  # bench/atari_bench.py's recorded frames, if it has run on this machine
FRAMES = dict(steps=100_000, stack=4, n_steps=3, gamma=0.99, envs=4, game='Pong', chunk=1_000, rounds=10, calls=10,
              prefill=50)
KINDS = {  # the memories over one tier's storage: bs, the sampler's settings (None: transitions)
    'transitions': dict(bs=320, slices=None),
    'slices 32x10': dict(bs=32, slices=dict(seq_len=10)),
    'slices 8x(20+40)': dict(bs=8, slices=dict(seq_len=40, burn_in=20, stride=20, end='pad')),
}

def frame_steps(f:dict, seed:int=0) -> tuple[np.ndarray, list, str]:
    "The stored steps in row order, `f['envs']` environments interleaved: frames, (action, reward, end, env), source"
    n, E = f['steps'], f['envs']
    rng = np.random.default_rng(seed)
    obs_file, meta = ATARI_FRAMES/f"{f['game']}_obs.npy", ATARI_FRAMES/f"{f['game']}_meta.npz"
    if obs_file.exists() and meta.exists() and len(np.load(obs_file, mmap_mode='r')) >= n:
        src, m = np.array(np.load(obs_file, mmap_mode='r')[:n]), np.load(meta)
        act, rew, end = m['action'][:n], m['reward'][:n], m['terminated'][:n] | m['truncated'][:n]
        source = (f"real {f['game']} frames recorded by bench/atari_bench.py (a random policy, AtariPreprocessing "
                  f"84x84 grayscale, frame skip 4), each environment a quarter of the recording")
    else:
        src = rng.integers(0, 256, size=(n, 84, 84), dtype=np.uint8)
        act, rew, end = rng.integers(0, 6, n), rng.standard_normal(n).astype(np.float32), np.zeros(n, bool)
        source = 'synthetic frames of uniform random bytes (as bench/frames_bench.py makes them; incompressible)'
    per = n // E
    for e in range(E):  # each environment's episodes also end at random lengths, 10 to 1,000 steps
        cuts = np.cumsum(rng.integers(10, 1001, per // 10 + 1))
        end[e * per + cuts[cuts <= per] - 1] = True
    order = np.arange(per * E).reshape(E, per).T.reshape(-1)  # row t * E + e: environment e's step t
    steps = [(int(act[i]), float(rew[i]), bool(end[i]), int(i // per)) for i in order]
    return src[order], steps, source

def build_memory(tier:str, kind:str, prioritized:bool, f:dict, max_sz:int|None=None):
    "A memory of `kind` over a new storage of `tier` ('plain' or 'compressed') holding `max_sz` steps"
    from fastrl_replay.atari import frame_replay
    from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
    from fastrl_replay.memory.sequence import (SequenceReplay, PrioritizedSequenceReplay, SequenceSampler,
                                               PrioritizedSequenceSampler)
    k, M, s = KINDS[kind], max_sz or f['steps'], SETTINGS['r2d2']
    if k['slices'] is None:
        return frame_replay('per' if prioritized else 'uniform', bs=k['bs'], max_sz=M, warmup_sz=1,
                            stack_size=f['stack'], n_steps=f['n_steps'], gamma=f['gamma'],
                            compress=tier == 'compressed', seed=0)
    st = (CompressedFrameStorage if tier == 'compressed' else FrameStorage)((84, 84), M, stack_size=f['stack'],
                                                                            n_steps=f['n_steps'], gamma=f['gamma'])
    if prioritized:
        sampler = PrioritizedSequenceSampler(**k['slices'], eta=s['eta'], alpha=s['alpha'], beta=s['beta'], seed=0)
        return PrioritizedSequenceReplay.from_parts(st, sampler, bs=k['bs'], warmup_sz=1)
    return SequenceReplay.from_parts(st, SequenceSampler(**k['slices'], seed=0), bs=k['bs'], warmup_sz=1)

def add_steps(mem, frames, steps, lo:int, hi:int):
    "Steps `lo` to `hi`, one at a time, as `FrameReplay.add` writes a step: the storage's row, then the sampler's"
    st, sp, lock = mem.storage, mem.sampler, mem.lock
    for i in range(lo, hi):
        a, r, end, e = steps[i]
        with lock:
            row = st.add_step(frames[i], a, r, end, env_id=e)
            sp.added(row, 1)

def rss_anon() -> int:
    "The process's anonymous resident memory, bytes, after the C heap's free pages are given back (`malloc_trim`)"
    if _LIBC is not None: _LIBC.malloc_trim(0)
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'): return int(line.split()[1]) * 1024
    return 0

def held_bytes(mem) -> int:
    "Bytes the memory holds: the storage's (`nbytes`) and every array, tensor and bytes of its sampler, each once"
    seen, total = set(), mem.storage.nbytes()
    def walk(v):
        nonlocal total
        if isinstance(v, torch.Tensor): ptr, n = v.untyped_storage().data_ptr(), v.untyped_storage().nbytes()
        elif isinstance(v, np.ndarray):
            while isinstance(v.base, np.ndarray): v = v.base
            ptr, n = v.__array_interface__['data'][0], v.nbytes
        elif isinstance(v, bytes): ptr, n = id(v), len(v)
        elif isinstance(v, dict):
            for x in v.values(): walk(x)
            return
        elif isinstance(v, (list, tuple)):
            for x in v: walk(x)
            return
        elif type(v).__module__.startswith('fastrl_replay') and hasattr(v, '__dict__'):  # a sum tree
            for x in vars(v).values(): walk(x)
            return
        else: return
        if ptr not in seen: seen.add(ptr); total += n
    walk({k: v for k, v in vars(mem.sampler).items() if k not in ('storage', 'generator')})
    return total

def frames_measure(f:dict) -> dict:
    "Every memory over both tiers on the same steps: bytes per stored step, adds, sample and sample + update times"
    from fastrl_replay.runs import _bytes_per_transition
    frames, steps, source = frame_steps(f)
    names = [(t, k, p) for t in ('plain', 'compressed') for k in KINDS for p in (False, True)]
    label = lambda t, k, p: f"{t} {k} {'prioritized' if p else 'uniform'}"
    for t, k, p in names:  # compiled kernels loaded, first calls made, before any reading
        m = build_memory(t, k, p, f, 4_000)
        add_steps(m, frames, steps, 0, 4_000)
        b, rows = m.sample()
        if p: m.update_td(torch.rand(rows.shape[0], *(() if rows.ndim == 1 else (m.seq_len,))), rows)
        del m, b, rows
    gc.collect()
    mems, res = {}, {}
    for t, k, p in names:
        r0 = rss_anon()
        mems[label(t, k, p)] = build_memory(t, k, p, f)
        res[label(t, k, p)] = dict(rss=rss_anon() - r0, add_s=0.)
    n, C, L = f['steps'], f['chunk'], list(mems)
    for j, lo in enumerate(range(0, n, C)):  # a chunk of steps to each memory in turn, the order rotating
        for name in L[j % len(L):] + L[:j % len(L)]:
            r0, t0 = rss_anon(), time.perf_counter()
            add_steps(mems[name], frames, steps, lo, min(lo + C, n))
            res[name]['add_s'] += time.perf_counter() - t0
            res[name]['rss'] += rss_anon() - r0
    del frames
    gc.collect()
    for name, m in mems.items():
        r = res[name]
        r.update(stored=len(m), adds_per_s=n / r.pop('add_s'), bytes_state_dict=_bytes_per_transition(m),
                 bytes_held=held_bytes(m) / len(m), bytes_rss=r.pop('rss') / len(m))
        if 'slices' in name: r['n_anchors'] = int(m.n_valid)
    rng = np.random.default_rng(1)
    tds = {name: [torch.from_numpy(rng.random((m.bs, *(() if 'transitions' in name else (m.seq_len,))), np.float32))
                  for _ in range(16)] for name, m in mems.items()}
    def update(name, i):
        m = mems[name]
        _, rows = m.sample()
        m.update_td(tds[name][i % 16], rows)
    ops = [(name, 'sample_ms', lambda i, m=m: m.sample()) for name, m in mems.items()]
    ops += [(name, 'sample_update_ms', lambda i, name=name: update(name, i)) for name, m in mems.items()
            if 'prioritized' in name]
    for name in mems:
        if 'prioritized' in name:
            for i in range(f['prefill']): update(name, i)
    ts = {(name, op): [] for name, op, _ in ops}
    for rnd in range(f['rounds']):
        for name, op, fn in ops[rnd % len(ops):] + ops[:rnd % len(ops)]:
            for i in range(3 if rnd == 0 else 0): fn(i)
            for i in range(f['calls']):
                t0 = time.perf_counter(); fn(i); ts[(name, op)].append(time.perf_counter() - t0)
    for (name, op), xs in ts.items(): res[name][op] = 1e3 * statistics.median(xs)
    for name, r in res.items():
        print(f"  {name:<42} {r['bytes_held']:8.1f} B/step held ({r['bytes_state_dict']:8.1f} state_dict, "
              f"{r['bytes_rss']:8.1f} RSS)  {r['adds_per_s']:8,.0f} adds/s  sample {r['sample_ms']:7.3f} ms"
              + (f"  sample+update {r['sample_update_ms']:7.3f} ms" if 'sample_update_ms' in r else ''), flush=True)
    return dict(source=source, results=res)

def frames_run(args):
    "Time `frames_measure` and write its results with the machine's record"
    f = dict(FRAMES, **({'steps': args.frames_steps} if args.frames_steps else {}))
    t0 = time.perf_counter()
    r = frames_measure(f)
    report = dict(settings=f, kinds=KINDS, torch_threads=1, **r, machine=machine_record(torch_threads=1),
                  seconds=time.perf_counter() - t0)
    FRAMES_OUT.parent.mkdir(parents=True, exist_ok=True)
    FRAMES_OUT.write_text(json.dumps(report, indent=1))
    print(f'total {report["seconds"]:.0f}s; results written to {FRAMES_OUT}')

def _frames_text(fr:dict) -> str:
    "The frame-storage results as the page's markdown: bytes per stored step, slices against transitions, and times"
    f, r = fr['settings'], fr['results']
    def ratio(tier, order, key):
        return r[f'{tier} slices 32x10 {order}'][key] / r[f'{tier} transitions {order}'][key]
    per_tier = []
    for tier, cls in (('plain', 'FrameStorage'), ('compressed', 'CompressedFrameStorage')):
        b = lambda k, o: r[f'{tier} {k} {o}']['bytes_held']
        per_tier.append(f"{cls}: slices {b('slices 32x10', 'uniform'):,.1f} (uniform) and "
                        f"{b('slices 32x10', 'prioritized'):,.1f} (prioritized), transitions "
                        f"{b('transitions', 'uniform'):,.1f} and {b('transitions', 'prioritized'):,.1f}: "
                        f"{ratio(tier, 'uniform', 'bytes_held'):.3f}x and "
                        f"{ratio(tier, 'prioritized', 'bytes_held'):.3f}x")
    rows = ['| storage | memory | sampling | bytes/step held | state_dict | RSS growth | adds/s | sample (ms) | '
            'sample + update (ms) |', '|---|---|---|---:|---:|---:|---:|---:|---:|']
    for name, v in r.items():
        tier, rest = name.split(' ', 1)
        kind, order = rest.rsplit(' ', 1)
        su = f"{v['sample_update_ms']:.2f}" if 'sample_update_ms' in v else '–'
        rows.append(f"| {tier} | {kind} | {order} | {v['bytes_held']:,.1f} | {v['bytes_state_dict']:,.1f} | "
                    f"{v['bytes_rss']:,.1f} | {v['adds_per_s']:,.0f} | {v['sample_ms']:.2f} | {su} |")
    extra = {(t, o, k): r[f"{t} slices {k} {o}"]["bytes_held"] - r[f"{t} transitions {o}"]["bytes_held"]
             for t in ("plain", "compressed") for o in ("uniform", "prioritized") for k in ("32x10", "8x(20+40)")}
    x = lambda t, o, k="32x10": extra[t, o, k]  # bytes a step a slice memory holds over the transition memory
    def more(d):
        return ('as many bytes a step as' if abs(d) < 0.05 else
                f"{abs(d):.1f} bytes a step {'more' if d > 0 else 'less'} than")
    load = fr['machine']['load']
    times = '; '.join(f"{tier}: {ratio(tier, 'uniform', 'sample_ms'):.2f}x uniform, "
                      f"{ratio(tier, 'prioritized', 'sample_update_ms'):.2f}x prioritized with the update"
                      for tier in ('plain', 'compressed'))
    return (f"Over a frame storage (`--frames`): {f['steps']:,} stored steps of {fr['source']}; 84x84 uint8 frames, "
            f"stacks of {f['stack']}, {f['n_steps']}-step returns, {f['envs']} environments interleaved row by row, "
            f"episodes also cut at random lengths of 10 to 1,000 steps. On each storage, on the same steps: slice "
            f"memories (`SequenceReplay`, `PrioritizedSequenceReplay` over the storage: 32 slices of 10 steps, and "
            f"8 of 40 after 20 of burn-in, stride 20, padded at episode ends) and transition memories "
            f"(`frame_replay`, 320 transitions a sample: as many learning steps). Steps are added one at a time "
            f"(`add_step`, then the sampler's `added`), {f['chunk']:,} to each memory in turn; the times are medians "
            f"of {f['rounds'] * f['calls']} calls in {f['rounds']} interleaved rounds (after {f['prefill']} sample + "
            f"update calls for the prioritized ones), one torch thread; load average {load['start']} at the start, "
            f"{load['end']} at the end. Each memory is filled once from empty: the plain tier's adds include the first "
            f"writes to its frame array's pages.\n\n"
            f"Bytes per stored step held (the storage's `nbytes` and every array of its sampler), slices against "
            f"transitions: " + '; '.join(per_tier) + f". A uniform slice memory holds "
            f"{more(x('plain', 'uniform'))} a uniform transition memory ({x('compressed', 'uniform'):+.1f} "
            f"on the compressed tier; the slices of 20 + 40 at stride 20: "
            f"{x('plain', 'uniform', '8x(20+40)'):+.2f} and "
            f"{x('compressed', 'uniform', '8x(20+40)'):+.2f}): over frames its sampler keeps no per-row "
            f"state beyond the transition sampler's (TD errors, write generations, hand-out marks). It draws rows "
            f"uniformly and keeps those that anchor a slice, each candidate's slice walked along the storage's links "
            f"and the storage asked which of its steps it can build, the others redrawn; with a stride above 1, a "
            f"row's step in its episode modulo the stride follows from its episode's last step, of which the sampler "
            f"keeps one int64 per stored finished episode. A prioritized slice memory holds "
            f"{more(x('plain', 'prioritized'))} a prioritized transition memory "
            f"({x('compressed', 'prioritized'):+.1f} on the compressed tier): both keep a sum tree and float64 "
            f"priorities, the slice sampler also each row's step in its episode (int32) and whether the row anchors a "
            f"slice and whether the storage can build it (a byte each). The walk over `state_dict()` (the runs' "
            f"`memory_bytes_per_transition`) leaves out the prioritized slice sampler's per-row arrays (rebuilt on "
            f"load); "
            f"the resident growth is the process's, per memory while it was built and filled. Sample time, 32 slices "
            f"of 10 against 320 transitions: {times}; the 8 padded slices of 20 + 40 gather 480 steps and zero "
            f"their padded steps.\n\n" + '\n'.join(rows))


STORED = OUT.parent.parent/'stored'/'14_sequence.json'

def _speed_text(b:dict) -> str:
    "The timing results as the page's markdown"
    r = b['results']
    rows = ['| setting | library | sample (ms) | sample + update (ms) |', '|---|---|---:|---:|']
    for name, libs in r.items():
        for lib, v in libs.items():
            su = f"{v['sample_update_ms']:.3f}" if 'sample_update_ms' in v else '–'
            rows.append(f"| {name} | {lib} | {v['sample_ms']:.3f} | {su} |")
    ratio = lambda name, op: r[name]['ours'].get(f'{op} vs best peer')
    lines = ['\n'.join(rows)]
    for name, what in (('2669', "TorchRL #2669's setting (256 slices of 4 steps from 5,000,000 stored, capacity "
                                "6,000,000)"),
                       ('r2d2', 'The R2D2 batch (64 slices of 80 steps after 40 of burn-in, stored LSTM states, by '
                                'priority, from 1,000,000)')):
        if name not in r: continue
        x, u = ratio(name, 'sample'), ratio(name, 'sample_update')
        lines.append(f"{what}: ours {r[name]['ours']['sample_ms']:.3f} ms a sample" +
                     (f", {x['ratio']:.1f}x faster than {x['peer']}" if x else '') +
                     f"; sample + update {r[name]['ours']['sample_update_ms']:.3f} ms" +
                     (f" ({u['ratio']:.1f}x faster than {u['peer']})" if u else '') + '.')
    return '\n\n'.join(lines)

def stored_page():
    "bench/stored/14_sequence.json from the timings, the learning runs (the last of each agent, schedule and seed) and "
    "the frame-storage timings; a results file missing here leaves the page's section from it as it was"
    old = json.loads(STORED.read_text()) if STORED.exists() else {}
    if OUT.exists(): bench = json.loads(OUT.read_text())
    else: bench = dict(results=old['speed'], run=old['speed_run'], machine=old['speed_machine'])
    runs = {}
    for line in LEARN_OUT.read_text().splitlines() if LEARN_OUT.exists() else []:
        if line.strip():
            r = json.loads(line)
            r.setdefault('schedule', 'constant')
            runs[(r['algo'], r['schedule'], r['seed'])] = r
    runs = [runs[k] for k in sorted(runs)] if LEARN_OUT.exists() else old['learning']['runs']
    frames = json.loads(FRAMES_OUT.read_text()) if FRAMES_OUT.exists() else old.get('frames')
    def summary(a, sch):
        rs = [r for r in runs if (r['algo'], r['schedule']) == (a, sch)]
        if not rs: return None
        fin, best = [r['final_greedy'] for r in rs], [r['best_greedy'] for r in rs]
        at = lambda xs: f'{sum(x >= 475 for x in xs)} of {len(rs)} at 475 or more'
        cpu = np.mean([r['cpu_s'] for r in rs]) / 60
        first = [next((f"{c['env_steps'] // 1000}k" for c in r['curve'] if c['greedy'] >= 475), 'never') for r in rs]
        first = f", first at 475 or more after {', '.join(first)} steps" if set(first) != {'never'} else ''
        lr = 'constant learning rate' if sch == 'constant' else 'learning rate annealed over the last quarter'
        return (f"{a}, {lr} ({len(rs)} seeds, {rs[0]['steps']:,} steps each): final greedy return (20 episodes) "
                f"per seed {', '.join(f'{x:.1f}' for x in fin)} (mean {np.mean(fin):.1f}; {at(fin)}); best of the "
                f"per-epoch evaluations (10 episodes) {', '.join(f'{x:.1f}' for x in best)} ({at(best)}){first}; "
                f"{cpu:.1f} CPU minutes a seed")
    lines = [x for a in ('r2d2', 'dqn') for sch in ('constant', 'flat_cos') if (x := summary(a, sch))]
    text = ('`bench/sequence_bench.py` times the sequence samplers against TorchRL 0.14.1 on the same steps, one torch '
            f"thread, medians of {bench['run']['calls']} calls:\n\n" + _speed_text(bench) + '\n\n'
            "The settings differ where the libraries do: TorchRL's `Sequence` unit anchors a slice at any step and "
            "returns `(h, c)` at all 120 steps of an R2D2 slice, ours anchors slices every 40 steps of an episode "
            "(R2D2's overlap) and returns `(h, c)` once per slice; its slice priority is the max of the steps' "
            "priorities, ours R2D2's mix. Issue #2669 reported 4.8 ms for `SliceSampler` on its author's machine.\n\n"
            'Learning on `CartPoleNoVelocity-v1` (CartPole observed without velocities): the recurrent DQN of '
            '`r2d2_learner` and the feed-forward DQN of `dqn_learner`, each with its defaults, greedy episodes after '
            'each epoch of 10,000 steps and at the end.\n\n- ' + '\n- '.join(lines)
            + ('\n\n' + _frames_text(frames) if frames else ''))
    machines = [bench['machine']] + [r['machine'] for r in runs] + ([frames['machine']] if frames else [])
    uniq = list({json.dumps({k: v for k, v in m.items() if k not in ('load', 'started', 'ended')}, sort_keys=True): m
                 for m in machines}.values())
    page = dict(title='Sequence replay: slices against TorchRL, and a recurrent DQN on CartPole without velocities',
                date=time.strftime('%Y-%m-%d'), machine=uniq[0] if len(uniq) == 1 else uniq,
                conditions='2-core machine shared with other jobs (each record gives the load at its start and end); '
                           'learning runs niced, two at a time; --frames niced',
                command='python bench/sequence_bench.py; python bench/sequence_bench.py --learn r2d2 [--schedule '
                        'flat_cos]; python bench/sequence_bench.py --learn dqn [--schedule flat_cos]; '
                        'python bench/sequence_bench.py --frames; python bench/sequence_bench.py --stored',
                text=text, speed=bench['results'], speed_run=bench['run'], speed_machine=bench['machine'],
                learning=dict(runs=runs), **({'frames': frames} if frames else {}))
    STORED.write_text(json.dumps(page, indent=1, ensure_ascii=False) + '\n')
    print(text)
    print(f'written to {STORED}')


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--quick', action='store_true', help='fewer calls')
    p.add_argument('--learn', choices=['r2d2', 'dqn'], help='learning runs of this agent instead of the timings')
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    p.add_argument('--steps', type=int, default=100_000, help='environment steps per learning run')
    p.add_argument('--config', choices=list(CONFIGS), default='default', help="r2d2_learner's settings (--learn r2d2)")
    p.add_argument('--schedule', choices=['constant', 'flat_cos'], default='constant',
                   help="--learn's learning rate: constant, or fit_flat_cos (annealed over the last quarter)")
    p.add_argument('--learn-out', type=Path, default=LEARN_OUT, help='the JSON-lines file the learning runs go to')
    p.add_argument('--progress', type=Path, help='a JSON-lines file that gets each evaluation as it is made')
    p.add_argument('--stored', action='store_true', help='build bench/stored/14_sequence.json from the results files')
    p.add_argument('--frames', action='store_true', help='frame storage: slices against transitions')
    p.add_argument('--frames-steps', type=int, help=f"stored steps for --frames (default {FRAMES['steps']:,})")
    p.add_argument('--setting', choices=list(SETTINGS), nargs='+', default=list(SETTINGS))
    p.add_argument('--no-peers', dest='peers', action='store_false', help='time ours only')
    p.add_argument('--out', type=Path, default=OUT)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.stored: return stored_page()
    if args.frames: return frames_run(args)
    if args.learn:
        for seed in args.seeds:
            r = learn_run(args.learn, seed, args.steps, args.config, args.progress, args.schedule)
            with open(args.learn_out, 'a') as f: f.write(json.dumps(r) + '\n')
            print(f"{args.learn} seed {seed}: final greedy {r['final_greedy']:.1f}, best {r['best_greedy']:.1f}",
                  flush=True)
        return
    logging.getLogger('torchrl').setLevel(logging.WARNING)
    warnings.filterwarnings('ignore', category=UserWarning)
    run = RUNS['quick' if args.quick else 'full']
    t0 = time.perf_counter()
    res = {name: measure(name, SETTINGS[name], run, args.peers) for name in args.setting}
    for name, r in res.items():
        peers = {k: v for k, v in r.items() if k != 'ours'}
        for op in ('sample_ms', 'sample_update_ms'):
            timed = [(v[op], k) for k, v in peers.items() if op in v]
            if timed and op in r['ours']:
                best = min(timed)
                r['ours'][f'{op[:-3]} vs best peer'] = dict(peer=best[1], ratio=best[0] / r['ours'][op])
        print(f"{name}: ours sample {r['ours']['sample_ms']:.3f} ms"
              + ''.join(f"; {k}: {v['ratio']:.2f}x {v['peer']}" for k, v in r['ours'].items()
                        if k.endswith('best peer')))
    report = dict(settings={k: SETTINGS[k] for k in args.setting}, run=run, torch_threads=1, results=res,
                  machine=machine_record(*(['torchrl', 'tensordict'] if args.peers else []), torch_threads=1),
                  seconds=time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f'total {report["seconds"]:.0f}s; results written to {args.out}')


if __name__ == '__main__':
    main()
