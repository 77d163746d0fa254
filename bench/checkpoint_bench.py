"""Checkpoints: save and load time and bytes on disk of a full memory, ours against the peers' own checkpoint formats,
in one run on the same data.

Cases (the peers' published anchor for low-dim, and a pixel case):
- lowdim: 1,000,000 transitions: obs 17 float32, action 6 float32, reward float32, next obs 17 float32, done bool.
- frames: 200,000 steps of one 84x84 uint8 frame, an int64 action, a float32 reward and a done flag.

Configurations:
- ours:        `ExperienceReplay` (lowdim) or `FrameReplay((84, 84), 1, ...)` (frames): `memory.save(dir)`
               (a .npy per array, the column storage's rows as one block, large arrays written and read past the page
               cache (O_DIRECT); a JSON manifest sealed by its own CRC-32, a CRC-32 per array computed on save and checked
               on load, every file fsynced, the directory swapped in atomically) and `load_memory(dir)` (a ready memory,
               every field, header and checksum checked, files opened only inside the checkpoint).
- ours[no fsync]: the same with `save(dir, durable=False)`: still atomic for a killed process, but no file or directory
               is flushed (fsync), as no peer here flushes; large arrays go through the page cache like the peers',
               into files allocated whole first (`fallocate`), their values still at byte 4,096 for direct loads.
- ours[per]:   the same with prioritized sampling (the sum and min trees, the clocks and the generator saved too).
- torchrl:     `ReplayBuffer(LazyTensorStorage)` `dumps(dir)` / `loads(dir)` (memmap + JSON) into a buffer made first.
- torchrl[per]: the same with its `PrioritizedSampler`.
- tianshou:    `ReplayBuffer.save_hdf5` / `ReplayBuffer.load_hdf5`.
- sb3:         `save_to_pkl` / `load_from_pkl` of its `ReplayBuffer` (what `save_replay_buffer` does: pickle).
- sb3[fsync], tianshou[fsync]: the same saves, then their file and its directory flushed (`fsync`), as a user makes
               them durable: the peers to compare `ours` (durable by default) with; `ours[no fsync]` is compared with
               the peers that do not flush.
- cpprb:       `save_transitions` (NumPy's compressed npz) / `load_transitions` into a buffer made first.

Each configuration runs in a fresh subprocess per round; the data are made, and the libraries imported, before the
timers start. Rounds are interleaved, each in its own shuffled order (seeded by the round), so that no configuration
always follows the same one (what the process before left freed shapes the next one's pages); the median over rounds
is reported, and the best round beside it, and ours' times are given as ratios to the fastest peer (> 1 means ours is faster) by both. The best round
says what a library's own work costs: on a virtual machine, a process that needs new pages (for the page cache a save
fills, for the memory a load makes) may get pages the host must find anew, about ten times slower, at moments no
library chooses, so any library's median can hold such rounds. cpprb's compressed save of incompressible frames takes
minutes, so the frames case runs it once. Files go to a temporary directory on the same disk as the project, and the
page cache is flushed (`os.sync`) before each configuration starts, so none pays for the writes another left behind.
Every library's checkpoint is read once (untimed) between its save and its timed load, so every load reads a file that
is in the page cache: the peers' saves leave their files there, ours writes large arrays past it (O_DIRECT).
Then each library loads its checkpoint a second time from a cold page cache (`load_cold_s`): the loaded copy is dropped,
the checkpoint's files are flushed (`os.sync`) and the kernel is told to drop their cached pages
(`posix_fadvise(POSIX_FADV_DONTNEED)`, which needs no root), so the load reads the disk, as after a reboot or once other
work has pushed the files out. It is the second load in that process, which may reuse the memory the first one freed
(the first load, in a fresh process, finds new pages for all of it); `cold_cached` is the share of the files' pages the page cache still held (Linux's
`cachestat`; None where the kernel cannot tell), which should be 0.
For ours, the growth of the process's peak resident memory is reported too: while saving (no copy of the storage is made)
and while loading (the new memory itself, plus the checkpoint's pages mapped while they are read).
Results go to bench/results/checkpoint_bench.json.

    .venv/bin/python bench/checkpoint_bench.py                # both cases, 3 rounds
    .venv/bin/python bench/checkpoint_bench.py --case lowdim --rounds 1
    .venv/bin/python bench/checkpoint_bench.py --quick        # both cases, 1 round, the frames case without cpprb
"""
import argparse, json, os, random, shutil, statistics, subprocess, sys, tempfile, time, warnings
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts

import numpy as np

CONFIGS = ('ours', 'ours[no fsync]', 'ours[per]', 'torchrl', 'torchrl[per]', 'tianshou', 'tianshou[fsync]', 'sb3', 'sb3[fsync]', 'cpprb')
PEERS = ('torchrl', 'torchrl[per]', 'tianshou', 'tianshou[fsync]', 'sb3', 'sb3[fsync]', 'cpprb')
PEERS_UNIFORM = ('torchrl', 'tianshou', 'sb3', 'cpprb')  # none flushes its files
PEERS_DURABLE = ('tianshou[fsync]', 'sb3[fsync]')
OUT = Path(__file__).resolve().parent/'results'/'checkpoint_bench.json'
N = {'lowdim': 1_000_000, 'frames': 200_000}


def data(case, seed=0):
    rng = np.random.default_rng(seed)
    n = N[case]
    if case == 'lowdim':
        return dict(obs=rng.standard_normal((n, 17), dtype=np.float32), act=rng.standard_normal((n, 6), dtype=np.float32),
                    rew=rng.standard_normal(n, dtype=np.float32), next_obs=rng.standard_normal((n, 17), dtype=np.float32),
                    done=rng.random(n) < 0.01)
    return dict(obs=rng.integers(0, 256, (n, 84, 84), dtype=np.uint8), act=rng.integers(0, 6, n),
                rew=rng.standard_normal(n, dtype=np.float32), done=rng.random(n) < 0.001)


def warm(p: Path):
    "Read every file of checkpoint `p` once, so its load finds it in the page cache, as a save through the cache leaves it"
    for f in ([p] if p.is_file() else sorted(p.rglob('*'))):
        if f.is_file():
            with open(f, 'rb') as o:
                while o.read(1 << 20): pass  # 1 MB at a time: the process's peak memory stays as it was


def files(p: Path) -> list: return [p] if p.is_file() else [f for f in sorted(p.rglob('*')) if f.is_file()]


def cached_pages(f: Path):
    "How many of file `f`'s pages the page cache holds (Linux 6.5's `cachestat`), or None where the kernel cannot tell"
    import ctypes
    fd = os.open(f, os.O_RDONLY)
    try:
        span, stat = (ctypes.c_uint64 * 2)(0, 0), (ctypes.c_uint64 * 5)()  # the whole file; struct cachestat, nr_cache first
        ok = ctypes.CDLL(None, use_errno=True).syscall(ctypes.c_long(451), ctypes.c_int(fd), span, stat, ctypes.c_uint(0)) == 0
        return stat[0] if ok else None
    finally: os.close(fd)


def cold(p: Path):
    "Push checkpoint `p` out of the page cache without root: flush it, then drop its files' clean pages; the share of its pages still cached"
    import gc
    gc.collect()  # the loaded copy's last references, so no page of the files stays mapped
    os.sync()
    for f in files(p):
        fd = os.open(f, os.O_RDONLY)
        try: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally: os.close(fd)
    held = [cached_pages(f) for f in files(p)]
    if any(h is None for h in held): return None
    return sum(held) / max(1, sum(-(-f.stat().st_size // 4096) for f in files(p)))


def flush(p: Path):
    "Make file `p` durable as a user would after a peer's save: flush the file, then its directory"
    for f, flags in ((p, os.O_RDONLY), (p.parent, os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(f, flags)
        try: os.fsync(fd)
        finally: os.close(fd)


def size(p: Path) -> int: return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob('*') if f.is_file())


def ours(case, d, per, durable=True):
    import torch
    torch.set_num_threads(1)
    from fastrl_replay.memory.persist import load_memory
    if case == 'lowdim':
        from fastrl_replay.memory.experience_replay import ExperienceReplay
        from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
        m = (PrioritizedExperienceReplay if per else ExperienceReplay)(bs=256, max_sz=N[case], warmup_sz=256, seed=0)
        m + {k: torch.from_numpy(v if v.ndim == 2 else v[:, None]) for k, v in d.items()}
    else:
        from fastrl_replay.memory.circular import FrameReplay
        m = FrameReplay((84, 84), 1, N[case], 32, prioritized=per, seed=0)
        for t in range(N[case]): m.add(d['obs'][t], d['act'][t], d['rew'][t], d['done'][t])
    path = Path(tempfile.mkdtemp(dir=WORK))/'ck'
    p0 = peak_rss(); t0 = time.perf_counter(); m.save(path, durable=durable); t1 = time.perf_counter(); p1 = peak_rss()
    warm(path); tw = time.perf_counter()
    twin = load_memory(path); t2 = time.perf_counter(); p2 = peak_rss()
    first = twin.sample()[1]
    assert len(twin) == N[case] and torch.equal(first, m.sample()[1])
    PEAKS.update(save_peak_growth=p1 - p0, load_peak_growth=p2 - p1, stored=size(path))
    del twin
    PEAKS['cold_cached'] = cold(path)
    t3 = time.perf_counter(); twin = load_memory(path); t4 = time.perf_counter()
    assert len(twin) == N[case] and torch.equal(twin.sample()[1], first)
    return t1 - t0, t2 - tw, t4 - t3, size(path)


PEAKS = {}
def peak_rss() -> int:
    "The process's peak resident memory so far, in bytes"
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def torchrl(case, d, per):
    import torch
    torch.set_num_threads(1)
    from tensordict import TensorDict
    from torchrl.data import ReplayBuffer, LazyTensorStorage
    from torchrl.data.replay_buffers import PrioritizedSampler
    n, t = N[case], {k: torch.from_numpy(v) for k, v in d.items()}
    nxt = {'reward': t['rew'][:, None], 'done': t['done'][:, None]}
    if 'next_obs' in t: nxt['obs'] = t['next_obs']
    td = TensorDict({'obs': t['obs'], 'action': t['act'], 'next': nxt}, [n])
    make = lambda: ReplayBuffer(storage=LazyTensorStorage(n), sampler=PrioritizedSampler(n, 0.6, 0.4) if per else None)
    rb = make(); rb.extend(td)
    path = Path(tempfile.mkdtemp(dir=WORK))/'ck'
    t0 = time.perf_counter(); rb.dumps(path); t1 = time.perf_counter()
    rb2 = make(); rb2.extend(td[:1])  # the storage must exist before `loads`
    warm(path)
    t2 = time.perf_counter(); rb2.loads(path); t3 = time.perf_counter()
    assert len(rb2) == n
    del rb2
    rb3 = make(); rb3.extend(td[:1])
    PEAKS['cold_cached'] = cold(path)
    t4 = time.perf_counter(); rb3.loads(path); t5 = time.perf_counter()
    assert len(rb3) == n
    return t1 - t0, t3 - t2, t5 - t4, size(path)


def tianshou(case, d, durable=False):
    from tianshou.data import Batch, ReplayBuffer
    n = N[case]
    rb = ReplayBuffer(n)
    rb.set_batch(Batch(obs=d['obs'], act=d['act'], rew=d['rew'], terminated=d['done'], truncated=np.zeros(n, bool), done=d['done'],
                       obs_next=d.get('next_obs', d['obs']), info={}))
    rb._size = n
    path = Path(tempfile.mkdtemp(dir=WORK))/'ts.hdf5'
    t0 = time.perf_counter(); rb.save_hdf5(str(path))
    if durable: flush(path)
    t1 = time.perf_counter()
    warm(path); tw = time.perf_counter()
    rb2 = ReplayBuffer.load_hdf5(str(path)); t2 = time.perf_counter()
    assert len(rb2) == n
    del rb2
    PEAKS['cold_cached'] = cold(path)
    t3 = time.perf_counter(); rb2 = ReplayBuffer.load_hdf5(str(path)); t4 = time.perf_counter()
    assert len(rb2) == n
    return t1 - t0, t2 - tw, t4 - t3, size(path)


def sb3(case, d, durable=False):
    import gymnasium as gym, torch
    torch.set_num_threads(1)
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.save_util import save_to_pkl, load_from_pkl
    n = N[case]
    obs_sp = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32) if case == 'lowdim' else gym.spaces.Box(0, 255, (84, 84), np.uint8)
    act_sp = gym.spaces.Box(-1, 1, (6,), np.float32) if case == 'lowdim' else gym.spaces.Discrete(6)
    rb = ReplayBuffer(n, obs_sp, act_sp, device='cpu', optimize_memory_usage=case == 'frames', handle_timeout_termination=False)
    rb.observations[:, 0] = d['obs']
    if case == 'lowdim': rb.next_observations[:, 0] = d['next_obs']
    rb.actions[:, 0] = d['act'].reshape(n, -1); rb.rewards[:, 0] = d['rew']; rb.dones[:, 0] = d['done']; rb.full = True
    path = Path(tempfile.mkdtemp(dir=WORK))/'sb3.pkl'
    t0 = time.perf_counter(); save_to_pkl(path, rb)
    if durable: flush(path)
    t1 = time.perf_counter()
    warm(path); tw = time.perf_counter()
    rb2 = load_from_pkl(path); t2 = time.perf_counter()
    assert rb2.full
    del rb2
    PEAKS['cold_cached'] = cold(path)
    t3 = time.perf_counter(); rb2 = load_from_pkl(path); t4 = time.perf_counter()
    assert rb2.full
    return t1 - t0, t2 - tw, t4 - t3, size(path)


def cpprb(case, d):
    import cpprb
    n = N[case]
    spec = ({'obs': {'shape': 17}, 'act': {'shape': 6}, 'rew': {}, 'next_obs': {'shape': 17}, 'done': {}} if case == 'lowdim' else
            {'obs': {'shape': (84, 84), 'dtype': np.uint8}, 'act': {'dtype': np.int64}, 'rew': {}, 'done': {}})
    rb = cpprb.ReplayBuffer(n, spec); rb.add(**d)
    path = Path(tempfile.mkdtemp(dir=WORK))/'cpprb.npz'
    t0 = time.perf_counter(); rb.save_transitions(str(path)); t1 = time.perf_counter()
    rb2 = cpprb.ReplayBuffer(n, spec); warm(path); t2 = time.perf_counter(); rb2.load_transitions(str(path)); t3 = time.perf_counter()
    assert rb2.get_stored_size() == n
    del rb2
    rb2 = cpprb.ReplayBuffer(n, spec); PEAKS['cold_cached'] = cold(path)
    t4 = time.perf_counter(); rb2.load_transitions(str(path)); t5 = time.perf_counter()
    assert rb2.get_stored_size() == n
    return t1 - t0, t3 - t2, t5 - t4, size(path)


RUNNERS = {'ours': lambda c, d: ours(c, d, False), 'ours[no fsync]': lambda c, d: ours(c, d, False, durable=False),
           'ours[per]': lambda c, d: ours(c, d, True),
           'torchrl': lambda c, d: torchrl(c, d, False), 'torchrl[per]': lambda c, d: torchrl(c, d, True),
           'tianshou': tianshou, 'tianshou[fsync]': lambda c, d: tianshou(c, d, durable=True),
           'sb3': sb3, 'sb3[fsync]': lambda c, d: sb3(c, d, durable=True), 'cpprb': cpprb}
WORK = None


def child(name, case, work):
    global WORK
    WORK = work
    warnings.filterwarnings('ignore')
    try: save_s, load_s, load_cold_s, nbytes = RUNNERS[name](case, data(case))
    except ImportError as e:
        print(json.dumps({'config': name, 'skipped': str(e)}), flush=True); return
    print(json.dumps({'config': name, 'save_s': save_s, 'load_s': load_s, 'load_cold_s': load_cold_s, 'bytes': nbytes, **PEAKS}), flush=True)


def run_case(case, rounds, configs, work, cpprb_frames=1):
    "Each configuration's results over `rounds`; cpprb's slow save of frames in the first `cpprb_frames` rounds only"
    res = {c: [] for c in configs}
    for r in range(rounds):
        order = random.Random(r).sample(configs, len(configs))
        for c in order:
            if c == 'cpprb' and case == 'frames' and r >= cpprb_frames: continue
            d = Path(tempfile.mkdtemp(dir=work))
            os.sync()  # every configuration starts without the dirty pages an earlier one left for the kernel to write
            try:
                out = subprocess.run([sys.executable, __file__, '--child', c, '--case', case, '--work', str(d)], capture_output=True,
                                     text=True, check=True).stdout.strip().splitlines()[-1]
            finally: shutil.rmtree(d, ignore_errors=True)
            res[c].append(json.loads(out))
            print(f'{case} round {r + 1}/{rounds}: {c} done', flush=True)
    table = {}
    for c, rows in res.items():
        rows = [x for x in rows if 'skipped' not in x]
        if not rows: continue
        table[c] = {k: statistics.median(x[k] for x in rows) if all(x[k] is not None for x in rows) else None
                    for k in rows[0] if k != 'config'}
        table[c].update({f'{k}_best': min(x[k] for x in rows) for k in TIMES})
        table[c]['rounds'] = {k: [x[k] for x in rows] for k in TIMES}
    return table


TIMES = ('save_s', 'load_s', 'load_cold_s')


def report(case, table):
    print(f'\n{case}: {N[case]:,} transitions, median (and best) over rounds')
    print('| library | save (s) | load (s) | load, cold cache (s) | on disk (MB) |\n|---|---:|---:|---:|---:|')
    for c, t in table.items():
        print(f"| {c} | " + ' | '.join(f"{t[k]:.3f} ({t[k + '_best']:.3f})" for k in TIMES) + f" | {t['bytes'] / 1e6:,.1f} |")
    held = {c: t['cold_cached'] for c, t in table.items() if t.get('cold_cached')}
    if held: print(f'still in the page cache before the cold loads (share of pages): {held}')
    peers = {c: t for c, t in table.items() if c in PEERS}
    for mine, theirs in (('ours', PEERS_DURABLE), ('ours', PEERS_UNIFORM), ('ours[no fsync]', PEERS_UNIFORM), ('ours[per]', ('torchrl[per]',))):
        ps = {c: peers[c] for c in theirs if c in peers}
        if mine not in table or not ps: continue
        def ratio(stat):
            best = min(ps, key=lambda c: ps[c][stat])
            return f'{ps[best][stat] / table[mine][stat]:.2f}x ({best})'
        for k in TIMES:
            print(f"{mine} {k[:-2].replace('_', ' ')}: {ratio(k)} median, {ratio(k + '_best')} best, "
                  f"against the fastest {'durable ' if theirs == PEERS_DURABLE else ''}peer")
        if theirs == PEERS_DURABLE: continue
        if 'save_peak_growth' in table[mine]:
            t = table[mine]
            print(f"{mine}: peak resident memory grew by {t['save_peak_growth'] / 1e6:,.0f} MB while saving and "
                  f"{t['load_peak_growth'] / 1e6:,.0f} MB while loading, for a checkpoint of {t['bytes'] / 1e6:,.0f} MB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--case', choices=('lowdim', 'frames', 'both'), default='both')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--configs', default=','.join(CONFIGS))
    ap.add_argument('--quick', action='store_true', help='1 round; frames without cpprb (its save takes minutes)')
    ap.add_argument('--child'); ap.add_argument('--work')
    a = ap.parse_args()
    if a.child: return child(a.child, a.case, a.work)
    if a.quick: a.rounds = 1
    work = Path(__file__).resolve().parent/'results'/'ckpt-tmp'
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        for case in (('lowdim', 'frames') if a.case == 'both' else (a.case,)):
            results[case] = run_case(case, a.rounds, a.configs.split(','), work, cpprb_frames=0 if a.quick else 1)
            report(case, results[case])
    finally: shutil.rmtree(work, ignore_errors=True)
    OUT.parent.mkdir(exist_ok=True)
    machine = machine_record('torchrl', 'tensordict', 'tianshou', 'h5py', 'stable-baselines3', 'cpprb', torch_threads=1)
    OUT.write_text(json.dumps(dict(rounds=a.rounds, results=results, machine=machine), indent=1))
    print(f'\nwritten to {OUT}')


if __name__ == '__main__': main()
