"""First use of a memory in a new process: the imports, making it, the first add, the first sample (and update), with
numba's cache of compiled kernels empty and then filled.

The memory's kernels are numba functions compiled on first call and cached on disk (`cache=True`). Each case runs in a
fresh process (`python bench/first_use_bench.py --child CASE`), pointed at a cache directory of its own with
`NUMBA_CACHE_DIR`: first with the directory empty (`cold`: numba compiles and writes the cache, as a user's first run
after installing), then `--warm` more times on the filled directory (`warm`: numba loads what it wrote, as every later
run). A process reports its seconds for `import torch`, the memory's import, making it, its first add, first sample
and first priority update, and a second sample (compiled and cached by then); the parent adds the whole process's wall
time, interpreter start included. Each round uses new cache directories. Results go to
bench/results/first_use_bench.json.

    python bench/first_use_bench.py                 # 3 rounds of a cold and 2 warm runs per case (a few minutes)
    python bench/first_use_bench.py --quick         # 1 round of a cold and 1 warm run
    python bench/first_use_bench.py --cases per --rounds 1
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts

OUT = Path(__file__).resolve().parent/'results'/'first_use_bench.json'
CASES = ('uniform', 'per', 'frames', 'compressed')
STEPS = ('import_torch_s', 'import_memory_s', 'make_s', 'add_s', 'sample_s', 'update_s', 'sample_again_s')

def memory(case: str):
    "The case's memory class made ready to use, and a function adding a few transitions to it"
    import numpy as np, torch
    if case in ('uniform', 'per'):
        from fastrl_replay.memory.experience_replay import ExperienceReplay
        from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
        g = torch.Generator().manual_seed(0)
        batch = dict(state=torch.randn(256, 17, generator=g), next_state=torch.randn(256, 17, generator=g),
                     action=torch.randn(256, 6, generator=g), reward=torch.randn(256, 1, generator=g),
                     done=torch.zeros(256, 1, dtype=torch.bool))
        cls = PrioritizedExperienceReplay if case == 'per' else ExperienceReplay
        return lambda: cls(bs=256, max_sz=100_000, warmup_sz=256, seed=0), lambda m: m + batch
    from fastrl_replay.memory.circular import FrameReplay
    frames = np.random.default_rng(0).integers(0, 8, (300, 84, 84), dtype=np.uint8)  # small values: zstd finds patterns
    def add(m):
        for t, f in enumerate(frames): m.add(f, t % 4, 1., t % 100 == 99)
        return m
    if case == 'frames': return lambda: FrameReplay((84, 84), 4, 10_000, 32, seed=0), add
    from fastrl_replay.memory.core import Replay, UniformSampler
    from fastrl_replay.memory.frames import CompressedFrameStorage
    def make():
        st = CompressedFrameStorage((84, 84), 10_000, stack_size=4, dictionary_frames=256)
        return Replay(st, UniformSampler(seed=0), bs=32, warmup_sz=32)
    def add_steps(m):
        for t, f in enumerate(frames): m.storage.add_step(f, t % 4, 1., t % 100 == 99); m.sampler.added(t, 1)
        return m
    return make, add_steps

def child(case: str) -> dict:
    "The seconds of each step of a first use, in this fresh process"
    out, t = {}, time.perf_counter()
    def lap(name):
        nonlocal t
        out[name], t = time.perf_counter() - t, time.perf_counter()
    import torch; lap('import_torch_s')
    torch.set_num_threads(1)
    make, add = memory(case); lap('import_memory_s')
    m = make(); lap('make_s')
    m = add(m); lap('add_s')
    batch, idxs = m.sample(); lap('sample_s')
    if case == 'per': m.update_td(torch.rand(len(idxs)), idxs); lap('update_s')
    m.sample(); lap('sample_again_s')
    return out

def run(case: str, cache: str) -> dict:
    "One fresh process of `case` with numba's cache in `cache`: its steps and its wall time, interpreter start included"
    t = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, '--child', case], capture_output=True, text=True, check=True,
                       env=os.environ | {'NUMBA_CACHE_DIR': cache, 'PYTHONWARNINGS': 'ignore'})
    res = json.loads(r.stdout.strip().splitlines()[-1])
    files = sum(1 for p in Path(cache).rglob('*') if p.is_file())  # what numba has cached so far
    return dict(res, process_s=time.perf_counter() - t, cache_files=files)

def main(cases, rounds: int, warm: int, out: Path):
    runs = {c: dict(cold=[], warm=[]) for c in cases}
    for r in range(rounds):
        for c in cases:
            with tempfile.TemporaryDirectory(prefix='numba_cache_') as cache:
                runs[c]['cold'].append(run(c, cache))
                runs[c]['warm'] += [run(c, cache) for _ in range(warm)]
            warm_s = ', '.join(f"{x['process_s']:.2f}" for x in runs[c]['warm'][-warm:])
            print(f"round {r + 1}/{rounds} {c}: cold {runs[c]['cold'][-1]['process_s']:.2f} s, warm {warm_s} s",
                  flush=True)
    med = {c: {k: {key: statistics.median(x[key] for x in v) for key in (*STEPS, 'process_s') if key in v[0]}
               for k, v in ks.items()} for c, ks in runs.items()}
    print(f'\nmedian seconds over {rounds} round(s): | case | cache | ' + ' | '.join(STEPS) + ' | process |')
    for c, ks in med.items():
        for k, m in ks.items():
            cells = [f'{m[s]:.3f}' if s in m else '' for s in STEPS] + [f"{m['process_s']:.2f}"]
            print(f'| {c} | {k} | ' + ' | '.join(cells) + ' |')
    out.parent.mkdir(parents=True, exist_ok=True)
    res = dict(settings=dict(rounds=rounds, warm=warm), runs=runs, median=med, machine=machine_record(torch_threads=1))
    out.write_text(json.dumps(res, indent=1))
    print(f'written to {out}')

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cases', nargs='+', choices=CASES, default=list(CASES))
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--warm', type=int, default=2, help='runs on the filled cache after each cold one')
    p.add_argument('--quick', action='store_true', help='1 round of a cold and 1 warm run')
    p.add_argument('--out', type=Path, default=OUT)
    p.add_argument('--child', choices=CASES, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child: print(json.dumps(child(a.child)))
    elif a.quick: main(a.cases, 1, 1, a.out)
    else: main(a.cases, a.rounds, a.warm, a.out)
