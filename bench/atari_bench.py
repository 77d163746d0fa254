"""Replay memories on real Atari frames: bytes per transition in RAM, adds per second, sample(32) of stacked transitions,
checkpoint size and time, for this library (compressed and not) and its peers, in one run.

Frames: a random policy plays each game through gymnasium's `AtariPreprocessing` (84x84 grayscale, frame skip 4, sticky
actions as in v5), 200,000 steps per game, cached once in `/tmp/atari_frames/` (not in the repository) and reused.
Every (game, library) measurement runs in a fresh process, one at a time, so memory is freed between them and one
process's growth is its own: bytes per transition are the growth of the process's anonymous resident memory (`RssAnon`)
over the adds, divided by the transitions added. Uncompressed SB3 and TorchRL buffers would hold 5.6 to 11 GB at
200,000 transitions, more than this shared machine can spare: they are timed at 20,000 transitions and their bytes per
transition are the exact `nbytes` of their arrays (which grow linearly with the capacity), as noted in the table.
TorchRL's `CompressedListStorage` holds all 200,000 (about 5,000 adds a second, 40 s to a few minutes a game); its own
checkpoint (`rb.dumps`) fails, so its checkpoint is torch.save of its state dict for the first 1,000 transitions, scaled.

    python bench/atari_bench.py --games Pong  # one game, all libraries (about 5 minutes on 2 cores)
    python bench/atari_bench.py --steps 20000 --games Pong
    python bench/atari_bench.py --quick       # Pong, 50,000 steps
    python bench/atari_bench.py --stored bench/results/atari_run bench/stored/11_atari_replay.json  # the page's section: tables, goals, prose.json's paragraphs
"""
import argparse, json, os, pickle, shutil, subprocess, sys, tempfile, time
from pathlib import Path
from machine import machine_record, records  # first: the load average as the run starts
import numpy as np

FRAMES = Path('/tmp/atari_frames')
GAMES = ['Pong', 'Breakout', 'MsPacman']
LIBS = ['ours-compressed', 'ours', 'torchrl-compressed', 'torchrl-compressed-zstd', 'sb3-extra-igzip0', 'sb3-optimize', 'torchrl']
SMALL = 20_000  # transitions for the uncompressed peers, whose full size would not fit beside the other jobs
TORCHRL_COMPRESSED = 200_000  # TorchRL's compressed storage adds about a thousand per second here: 200,000 take about 4 minutes
BLOCK = int(os.environ.get('ATARI_BENCH_BLOCK', 8))  # rows per compressed block of this library's compressed storage
CKPT_ITEMS = 1_000  # its own checkpoint (`rb.dumps`) fails; torch.save of its state dict is timed on 1,000 transitions and scaled
STACK = 4

def make_frames(game:str, n:int):
    "Play `n` random steps of `game` and cache the frames and the step data"
    import gymnasium as gym, ale_py
    gym.register_envs(ale_py)
    env = gym.wrappers.AtariPreprocessing(gym.make(f'ALE/{game}-v5', frameskip=1), frame_skip=4, screen_size=84, grayscale_obs=True, noop_max=30)
    rng = np.random.default_rng(0)
    FRAMES.mkdir(exist_ok=True)
    obs = np.lib.format.open_memmap(FRAMES/f'{game}_obs.npy', 'w+', np.uint8, (n, 84, 84))
    act, rew, term, trunc = np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
    o, _ = env.reset(seed=0)
    for i in range(n):
        a = int(rng.integers(env.action_space.n))
        obs[i], act[i] = o, a
        o, rew[i], term[i], trunc[i], _ = env.step(a)
        if term[i] or trunc[i]: o, _ = env.reset()
    obs.flush()
    np.savez(FRAMES/f'{game}_meta.npz', action=act, reward=rew, terminated=term, truncated=trunc)

def load(game:str, n:int):
    if not (FRAMES/f'{game}_meta.npz').exists() or len(np.load(FRAMES/f'{game}_obs.npy', mmap_mode='r')) < n: make_frames(game, n)
    obs = np.load(FRAMES/f'{game}_obs.npy', mmap_mode='r')[:n]
    m = np.load(FRAMES/f'{game}_meta.npz')
    return obs, {k: m[k][:n] for k in m.files}

def rss_anon() -> int:
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'): return int(line.split()[1]) * 1024
    return 0

def du(path) -> int:
    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob('*') if f.is_file())

def stacks(obs, first):
    "A function giving the stack of the 4 frames up to step i, zero-padded before its episode's first step (`first[i]`: i starts an episode)"
    start = np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))
    zero = np.zeros((84, 84), np.uint8)
    def at(i): return np.stack([obs[j] if j >= start[i] else zero for j in range(i - STACK + 1, i + 1)])
    return at

def dumps_in_child(rb, d:Path):
    "Try `rb.dumps(d)` in a forked child; its failure (or None) and its seconds. TorchRL 0.14.1's `CompressedListStorage`"
    # checkpointer memory-maps one file per tensor of every item (five an item): past the kernel's 65,530 maps mmap fails with
    # ENOMEM, and the process that tried can no longer allocate (MemoryError on cleaning up its temporary directory), so it is tried
    # in a child whose temporary files go under `d`'s folder
    r, w = os.pipe()
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child never returns: whatever happens, it writes what it can and exits
        msg = b''
        try:
            tempfile.tempdir = str(d.parent)
            rb.dumps(d); msg = b'ok'
        except BaseException as e:
            try: msg = ' then '.join(f'{type(x).__name__}: {str(x)[:160]}' for x in (e.__context__, e) if x is not None).encode()
            except BaseException: msg = type(e).__name__.encode()
        finally:
            try: os.write(w, msg)
            finally: os._exit(0)
    os.close(w)
    msg = os.read(r, 4096).decode()
    _, status = os.waitpid(pid, 0)
    os.close(r)
    return (None if msg == 'ok' else msg or f'the process died, status {status}'), time.perf_counter() - t

def zstd3() -> dict:
    "TorchRL's `CompressedListStorage` codec functions for zstd level 3 (`zstandard`), its default codec from Python 3.14 on"
    import torch, zstandard
    cz, dz = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
    def compress(t): return torch.frombuffer(bytearray(cz.compress(t.numpy().tobytes())), dtype=torch.uint8)
    def decompress(t, meta): return torch.frombuffer(bytearray(dz.decompress(t.numpy().tobytes())), dtype=meta['dtype']).reshape(meta['shape'])
    return dict(compression_fn=compress, decompression_fn=decompress)

def measure(game:str, lib:str, n:int, threads:int=1) -> dict:
    "One library on one game, in this process, with torch's intra-op threads set to `threads`"
    import torch, gymnasium as gym
    torch.set_num_threads(threads)
    from fastrl_replay.memory.core import Replay, UniformSampler  # every import before the baseline of memory
    from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
    import fastrl_replay.memory.persist  # memory.save
    from torchrl.data import ReplayBuffer, CompressedListStorage, LazyTensorStorage
    from tensordict import TensorDict
    from stable_baselines3.common.save_util import save_to_pkl
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer
    from sb3_extra_buffers.compressed import CompressedReplayBuffer
    obs, m = load(game, n)
    obs = np.array(obs)  # a copy in RAM before the baseline: the adds read memory, not the file's pages (a cold page cache made the first library of a game wait on the disk), and the frames are not counted as the memory's
    act, rew, term, trunc = m['action'], m['reward'], m['terminated'], m['truncated']
    done = term | trunc
    first = np.concatenate([[True], done[:-1]])
    cap = n if lib.startswith('ours') or lib == 'sb3-extra-igzip0' else min(n, TORCHRL_COMPRESSED if lib.startswith('torchrl-compressed') else SMALL)
    res = dict(game=game, library=lib, transitions=cap, torch_threads=torch.get_num_threads())
    zero = np.zeros((84, 84), np.uint8)
    base = rss_anon()
    if lib.startswith('ours'):
        cls = CompressedFrameStorage if lib == 'ours-compressed' else FrameStorage
        opts = dict(block=BLOCK) if lib == 'ours-compressed' else {}
        if opts: res['block'] = BLOCK
        mem = Replay(cls((84, 84), cap, stack_size=STACK, n_steps=1, **opts), UniformSampler(seed=0), bs=32, warmup_sz=32)
        st, sp = mem.storage, mem.sampler
        t = time.perf_counter()
        for i in range(cap):
            row = st.add_step(obs[i], int(act[i]), float(rew[i]), bool(term[i]), truncated=bool(trunc[i]), next_observation=zero if trunc[i] else None)
            sp.added(row, 1)
        res['adds_per_s'] = cap / (time.perf_counter() - t)
        res['held_bytes'] = st.nbytes()
        if lib == 'ours-compressed': res.update(part=st.part, dictionary_bytes=len(st.dictionary))
        sample = lambda: mem.sample(32)
        def save(d): mem.save(d)
    else:
        at = stacks(obs, first)
        nxt = lambda i: at(i + 1) if i + 1 < cap and not done[i] else np.concatenate([at(i)[1:], obs[i:i + 1]])
        if lib.startswith('torchrl'):
            storage = CompressedListStorage(cap, **zstd3()) if lib == 'torchrl-compressed-zstd' else (
                CompressedListStorage(cap, compression_level=3) if lib == 'torchrl-compressed' else LazyTensorStorage(cap))
            rb = ReplayBuffer(storage=storage, batch_size=32)
            # the compressed storage compresses the tensors at an item's top level and keeps a nested TensorDict as it is (a nested
            # ('next', 'observation') stack would stay uncompressed): its next stacks go under the flat key 'next_observation'
            nkey = 'next_observation' if lib.startswith('torchrl-compressed') else ('next', 'observation')
            t = time.perf_counter()
            for i in range(cap):
                rb.add(TensorDict({'observation': torch.from_numpy(at(i)), 'action': torch.tensor(act[i]), 'reward': torch.tensor(rew[i]),
                                   'done': torch.tensor(done[i]), nkey: torch.from_numpy(nxt(i))}, []))
            res['adds_per_s'] = cap / (time.perf_counter() - t)
            if lib == 'torchrl': res['held_bytes'] = sum(v.numel() * v.element_size() for v in storage._storage.values(True, True))
            sample = lambda: rb.sample()
            def save(d):
                if lib == 'torchrl': return rb.dumps(d)
                failure, secs = dumps_in_child(rb, d)
                if failure is not None:
                    res['checkpoint_failure_s'] = secs
                    res['checkpoint_method'] = f'rb.dumps failed after {res["checkpoint_failure_s"]:.1f} s ({failure}); torch.save(rb.state_dict()) of the first {CKPT_ITEMS:,} transitions'
                    small = ReplayBuffer(storage=CompressedListStorage(CKPT_ITEMS, **(zstd3() if lib == 'torchrl-compressed-zstd' else dict(compression_level=3))), batch_size=32)
                    for i in range(CKPT_ITEMS): small.add(rb.storage[i])
                    shutil.rmtree(d, ignore_errors=True); d.mkdir(parents=True)
                    t = time.perf_counter(); torch.save(small.state_dict(), d/'rb.pt')
                    res['checkpoint_items'] = CKPT_ITEMS
                    res['checkpoint_s_per_transition'] = (time.perf_counter() - t) / CKPT_ITEMS
        else:
            osp, asp = gym.spaces.Box(0, 255, (STACK, 84, 84), np.uint8), gym.spaces.Discrete(int(act.max()) + 1)
            if lib == 'sb3-optimize':
                buf = SB3Buffer(cap, osp, asp, device='cpu', optimize_memory_usage=True, handle_timeout_termination=False)
            else:
                buf = CompressedReplayBuffer(cap, osp, asp, device='cpu', compression_method='igzip0', handle_timeout_termination=False)
            t = time.perf_counter()
            for i in range(cap):
                buf.add(at(i)[None], nxt(i)[None], np.array([act[i]]), np.array([rew[i]]), np.array([done[i]]), [{}])
            res['adds_per_s'] = cap / (time.perf_counter() - t)
            if lib == 'sb3-optimize': res['held_bytes'] = sum(a.nbytes for a in vars(buf).values() if isinstance(a, np.ndarray))
            sample = lambda: buf.sample(32)
            def save(d): save_to_pkl(Path(d)/'buffer.pkl', buf)
    res['rss_bytes_per_transition'] = (rss_anon() - base) / cap
    if 'held_bytes' in res: res['held_bytes_per_transition'] = res.pop('held_bytes') / cap
    for _ in range(20): sample()
    ts = []
    for _ in range(200):
        t = time.perf_counter(); sample(); ts.append(time.perf_counter() - t)
    res['sample32_ms'] = float(np.median(ts) * 1e3)
    d = Path(tempfile.mkdtemp(prefix='atari_bench_'))
    try:
        t = time.perf_counter()
        try: save(d/'ckpt')
        except RuntimeError as e:  # TorchRL's compressed storage: its fallback checkpoint can fail too (mmap of its items)
            res.update(checkpoint_method=f'failed: {str(e)[:120]}', checkpoint_s=None, checkpoint_bytes_per_transition=None)
            return res
        res['checkpoint_s'] = time.perf_counter() - t
        res['checkpoint_bytes_per_transition'] = du(d/'ckpt') / res.get('checkpoint_items', cap)
        if 'checkpoint_items' in res: res['checkpoint_s'] = res.pop('checkpoint_s_per_transition') * cap  # scaled to the whole buffer
    finally: shutil.rmtree(d)
    return res

NAMES = {'ours-compressed': '`CompressedFrameStorage` (this library, zstd 3, blocks of 8, trained dictionary)',
         'ours-compressed-32': '`CompressedFrameStorage(block=32)`', 'ours-compressed-8': '`CompressedFrameStorage(block=8)`', 'ours': '`FrameStorage` (this library, uncompressed)',
         'torchrl-compressed': 'TorchRL 0.14.1 `CompressedListStorage` (its default codec on Python 3.11: zlib level 3)',
         'torchrl-compressed-zstd': 'TorchRL 0.14.1 `CompressedListStorage` (zstd level 3)', 'sb3-extra-igzip0': 'sb3-extra-buffers 0.5.0 (igzip level 0)',
         'sb3-optimize': 'SB3 2.9.2 `optimize_memory_usage`', 'torchrl': 'TorchRL 0.14.1 `LazyTensorStorage`'}

def table(rows:list) -> str:
    "The results as a markdown table per game: bytes per transition, adds per second, sample(32), checkpoint"
    out = []
    for g in dict.fromkeys(r['game'] for r in rows):
        out += [f'**{g}**', '', '| library | transitions | bytes / transition in RAM | adds / s | sample(32) ms | checkpoint bytes / transition | checkpoint s |',
                '|---|---:|---:|---:|---:|---:|---:|']
        for r in sorted((r for r in rows if r['game'] == g), key=lambda r: list(NAMES).index(r['library'])):
            b = r.get('held_bytes_per_transition') if r['library'] in ('sb3-optimize', 'torchrl') else r['rss_bytes_per_transition']
            mark = ' (nbytes)' if r['library'] in ('sb3-optimize', 'torchrl') else ''
            ck = f" (`rb.dumps` failed; torch.save of {r['checkpoint_items']:,}, scaled)" if 'checkpoint_items' in r else ''
            out.append(f"| {NAMES[r['library']]} | {r['transitions']:,} | {b:,.0f}{mark} | {r['adds_per_s']:,.0f} | {r['sample32_ms']:.2f} | " +
                       (f"{r['checkpoint_bytes_per_transition']:,.0f} | {r['checkpoint_s']:.2f}{ck} |" if r['checkpoint_s'] is not None else 'failed | failed |'))
        out.append('')
    return '\n'.join(out)

BUDGET = dict(Pong=128, Breakout=128, MsPacman=256)  # the goals' bytes per transition: at most 128 on Pong and Breakout, 256 on every game
COMPRESSED_PEERS = ('torchrl-compressed', 'torchrl-compressed-zstd', 'sb3-extra-igzip0')

def _met(ok:bool) -> str: return 'met' if ok else 'missed'

def goals(rows:list, threaded:list) -> str:
    "Each game's figures against the goals, from the one-thread rows, and the reads of the two-thread rows"
    out = ['Against the goals:', '']
    for g in dict.fromkeys(r['game'] for r in rows):
        by = {r['library']: r for r in rows if r['game'] == g}
        c, u, peers = by['ours-compressed'], by['ours'], [by[l] for l in COMPRESSED_PEERS if l in by]
        best, fast = min(peers, key=lambda r: r['rss_bytes_per_transition']), min(peers, key=lambda r: r['sample32_ms'])
        b, s = c['rss_bytes_per_transition'], c['sample32_ms'] / u['sample32_ms']
        out.append(f"- **{g}**: {b:,.0f} bytes per transition (goal at most {BUDGET[g]}: {_met(b <= BUDGET[g])}); the best peer, {best['library']}, holds "
                   f"{best['rss_bytes_per_transition']:,.0f}, {best['rss_bytes_per_transition'] / b:.1f}x more (goal at least 2x: {_met(best['rss_bytes_per_transition'] >= 2 * b)}); "
                   f"{c['adds_per_s']:,.0f} adds/s (goal at least 100,000: {_met(c['adds_per_s'] >= 100_000)}; {u['adds_per_s']:,.0f} for the uncompressed `FrameStorage`); "
                   f"sample(32) {c['sample32_ms']:.2f} ms, {'faster' if c['sample32_ms'] < fast['sample32_ms'] else 'not faster'} than the fastest compressed peer, {fast['library']}, "
                   f"at {fast['sample32_ms']:.2f} ms (goal: {_met(c['sample32_ms'] < fast['sample32_ms'])}), and {s:.2f}x the uncompressed `FrameStorage`'s {u['sample32_ms']:.2f} ms "
                   f"(goal at most 3x: {_met(s <= 3)}); checkpoint {c['checkpoint_bytes_per_transition']:,.0f} bytes per transition in {c['checkpoint_s']:.2f} s.")
    two = []
    for g in dict.fromkeys(r['game'] for r in threaded):
        by, one = {r['library']: r for r in threaded if r['game'] == g}, {r['library']: r for r in rows if r['game'] == g}
        c, u, peers = by['ours-compressed'], by['ours'], [by[l] for l in COMPRESSED_PEERS if l in by]
        fast, s = min(peers, key=lambda r: r['sample32_ms']), c['sample32_ms'] / u['sample32_ms']
        two.append(f"- **{g}**: sample(32) {c['sample32_ms']:.2f} ms on two threads (one thread, in the table above: {one['ours-compressed']['sample32_ms']:.2f}), "
                   f"{s:.2f}x the uncompressed `FrameStorage`'s {u['sample32_ms']:.2f} ms (goal at most 3x: {_met(s <= 3)}), "
                   f"{'faster' if c['sample32_ms'] < fast['sample32_ms'] else 'not faster'} than the fastest compressed peer on two threads, {fast['library']}, "
                   f"at {fast['sample32_ms']:.2f} ms (goal: {_met(c['sample32_ms'] < fast['sample32_ms'])}).")
    return '\n'.join(out), '\n'.join(two)

def stored(run:Path, out:Path):
    "The page's section from a run's folder: one-thread results `t1_<game>.json`, two-thread `t2_<game>.json`, prose"
    prose = json.loads((run/'prose.json').read_text())  # paragraphs around the tables, date, conditions, commands
    runs = {k: [json.loads((run/f'{k}_{g}.json').read_text()) for g in GAMES if (run/f'{k}_{g}.json').exists()]
            for k in ('t1', 't2')}
    t1, t2 = ([r for res in runs[k] for r in res['rows']] for k in ('t1', 't2'))
    one, two = goals(t1, t2)
    parts = [*prose['before'], table(t1), one, *prose['misses']] + ([*prose['threads'], table(t2), two] if t2 else []) + prose['after']
    out.write_text(json.dumps(dict(title='Atari replay: compressed frames against the peers', date=prose['date'],
                                   machine=records(runs['t1'] + runs['t2']),
                                   conditions=prose.get('conditions', prose.get('machine')), command=prose['command'],
                                   text='\n\n'.join(parts), rows=t1, threads_rows=t2, threads_command=prose['threads_command']), indent=1) + '\n')

def main():
    p = argparse.ArgumentParser()
    p.add_argument('--games', nargs='*', default=GAMES)
    p.add_argument('--libs', nargs='*', default=LIBS)
    p.add_argument('--steps', type=int, default=200_000)
    p.add_argument('--threads', type=int, default=1, help="torch's intra-op threads of every library's process (1: training's setting)")
    p.add_argument('--one', nargs=2, metavar=('GAME', 'LIB'), help=argparse.SUPPRESS)
    p.add_argument('--out', default='bench/results/atari_bench.json')
    p.add_argument('--table', metavar='RESULTS', help='print the markdown table of a results file (its rows, or JSON lines)')
    p.add_argument('--stored', nargs=2, type=Path, metavar=('RUN', 'OUT'), help="write the benchmarks page's section OUT from the run's folder RUN (t1_<game>.json, t2_<game>.json, prose.json)")
    p.add_argument('--quick', action='store_true', help='Pong only, 50,000 steps')
    a = p.parse_args()
    if a.quick: a.games, a.steps = a.games[:1], min(a.steps, 50_000)
    if a.stored: return stored(*a.stored)
    if a.table:
        text = Path(a.table).read_text()
        rows = json.loads(text)['rows'] if text.lstrip().startswith('{"steps"') or text.lstrip().startswith('{\n') else [json.loads(l) for l in text.splitlines() if l.strip()]
        print(table(rows))
        return
    if a.one:
        print(json.dumps(measure(*a.one, a.steps, a.threads)))
        return
    rows = []
    for g in a.games:
        load(g, a.steps)  # make the frames once, before any measurement
        for lib in a.libs:
            r = subprocess.run([sys.executable, __file__, '--one', g, lib, '--steps', str(a.steps), '--threads', str(a.threads)], capture_output=True, text=True)
            if r.returncode: print(g, lib, 'failed:', r.stderr[-2000:], file=sys.stderr); continue
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    machine = machine_record('ale-py', 'gymnasium', 'zstandard', 'torchrl', 'tensordict', 'stable-baselines3',
                             'sb3-extra-buffers', 'isal', torch_threads=a.threads)
    Path(a.out).write_text(json.dumps(dict(steps=a.steps, threads=a.threads, rows=rows, machine=machine), indent=1))

if __name__ == '__main__': main()
