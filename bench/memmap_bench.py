"""Memories larger than RAM: resident memory while adding 2 GB of transitions to an `ExperienceReplay` kept in
memory-mapped files (`storage_dir=`), and its sample(256) time against the same memory in RAM, in one run.

Transitions are 1 KiB (`state` and `next_state` of 128 float32 each, plus action, reward, done and td_error):
2,000,000 of them, added in batches of 4,096. Each configuration runs in a fresh process; resident memory (RSS) is
read before the memory is made and after the last add. sample(256) is the median of 2,000 calls after 100 warm-up
calls (with the mapped storage, early calls map pages from the page cache; the median is the steady state). After
sampling, resident memory is split into anonymous memory (the process's own) and mapped file pages: the pages that
samples read stay mapped, and the kernel reclaims them under memory pressure without swapping.
Results go to bench/results/memmap_bench.json.

    .venv/bin/python bench/memmap_bench.py
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time, warnings
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts

N, B, D = 2_000_000, 4_096, 128
OUT = Path(__file__).resolve().parent/'results'/'memmap_bench.json'


def rss_parts() -> dict:
    "Resident memory from /proc/self/status: anonymous (the process's own) and file-backed (mapped page cache) bytes"
    f = dict(l.split(':') for l in Path('/proc/self/status').read_text().splitlines() if l.startswith(('RssAnon', 'RssFile')))
    return {k: int(v.split()[0]) * 1024 for k, v in f.items()}


def child(mode, work):
    warnings.filterwarnings('ignore')
    import psutil, torch
    torch.set_num_threads(1)
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    g = torch.Generator().manual_seed(0)
    batch = {'state': torch.randn(B, D, generator=g), 'next_state': torch.randn(B, D, generator=g),
             'action': torch.randint(0, 6, (B, 1), generator=g), 'reward': torch.randn(B, 1, generator=g),
             'done': torch.zeros(B, 1, dtype=torch.bool)}
    proc = psutil.Process()
    r0, p0 = proc.memory_info().rss, rss_parts()
    er = ExperienceReplay(bs=256, max_sz=N, warmup_sz=256, seed=0, storage_dir=work if mode == 'mapped' else None)
    t0 = time.perf_counter()
    for i in range(N // B + 1): er + batch
    add_s = time.perf_counter() - t0
    r1 = proc.memory_info().rss
    for _ in range(100): er.sample()
    ts = []
    for _ in range(2000):
        t = time.perf_counter(); er.sample(); ts.append(time.perf_counter() - t)
    nbytes, p1 = sum(c.np.nbytes for c in er.storage._cols), rss_parts()
    print(json.dumps(dict(mode=mode, stored_bytes=nbytes, rss_growth=r1 - r0, rss_after_sampling=proc.memory_info().rss - r0,
                          anon_after_sampling=p1['RssAnon'] - p0['RssAnon'], file_after_sampling=p1['RssFile'] - p0['RssFile'],
                          adds_per_s=len(er) / add_s, sample256_ms=statistics.median(ts) * 1e3)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--child'); ap.add_argument('--work')
    a = ap.parse_args()
    if a.child: return child(a.child, a.work)
    res = {}
    for mode in ('ram', 'mapped'):
        work = tempfile.mkdtemp(dir=Path(__file__).resolve().parent)
        try: out = subprocess.run([sys.executable, __file__, '--child', mode, '--work', work], capture_output=True, text=True, check=True)
        finally: shutil.rmtree(work, ignore_errors=True)
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print('| storage | stored | RSS growth over the adds | RSS growth after 2,100 samples (anonymous + mapped file) | adds / s | sample(256) ms |')
    print('|---|---:|---:|---:|---:|---:|')
    for m, r in res.items():
        print(f"| {m} | {r['stored_bytes'] / 2**30:.2f} GiB | {r['rss_growth'] / 2**30:.3f} GiB | {r['rss_after_sampling'] / 2**30:.3f} GiB ({r['anon_after_sampling'] / 2**30:.3f} + {r['file_after_sampling'] / 2**30:.3f}) | "
              f"{r['adds_per_s']:,.0f} | {r['sample256_ms']:.3f} |")
    print(f"mapped sample(256) time: {res['mapped']['sample256_ms'] / res['ram']['sample256_ms']:.2f}x the in-RAM time")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(dict(res, machine=machine_record(torch_threads=1)), indent=1))


if __name__ == '__main__': main()
