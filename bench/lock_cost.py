"""What a memory's lock costs one thread: the operations of `replay_bench.py` and `per_bench.py` (their own classes, data,
capacity of 1,000,000 and batches of 256), and a `FrameReplay` of Atari frames (84 x 84, stacks of 4) on two memories in one process, one as it is and one whose lock is switched
off (`memory.lock` replaced by a `contextlib.nullcontext`, which the memory's `with self.lock:` enters as it enters a
lock).

The two memories take turns in short blocks of calls (unlocked, locked, then locked, unlocked, ...), so that both see the
same machine load; the median time per call over the blocks is reported for each, and locked / unlocked as a time ratio
(1.00: no cost; 1.05: 5% slower). Results are printed and written to bench/results/lock_cost.json.

Run from the repository root:

    .venv/bin/python bench/lock_cost.py            # about a minute
    .venv/bin/python bench/lock_cost.py --blocks 200
"""
import argparse, contextlib, gc, json, statistics, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import machine_record  # noqa: E402  (first: the load average as the run starts)
import replay_bench as rb, per_bench as pb  # noqa: E402

OUT = HERE/'results'/'lock_cost.json'

def unlocked(mem):
    "`mem` with its lock switched off"
    mem.lock = contextlib.nullcontext()
    return mem

def per_call(fn, args) -> float:
    "Seconds per call of `fn` over `args`"
    t = time.perf_counter()
    for a in args: fn(a)
    return (time.perf_counter() - t) / len(args)

def compare(make, inputs, n_blocks:int) -> dict:
    "Median seconds per call of the locked and the unlocked memory's operation (`make(switch)` gives the operation), in alternating blocks over `inputs`"
    ops = {'locked': make(lambda m: m), 'unlocked': make(unlocked)}
    times = {k: [] for k in ops}
    size = max(len(inputs) // n_blocks, 1)
    for j in range(n_blocks):
        block = inputs[(j * size) % len(inputs):][:size]
        for k in (('unlocked', 'locked') if j % 2 == 0 else ('locked', 'unlocked')): times[k].append(per_call(ops[k], block))
    med = {k: statistics.median(v) for k, v in times.items()}
    return dict(locked_us=1e6 * med['locked'], unlocked_us=1e6 * med['unlocked'], ratio=med['locked'] / med['unlocked'])

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--blocks', type=int, default=100, help='alternating blocks per operation')
    p.add_argument('--out', type=Path, default=OUT)
    args = p.parse_args()
    gc.disable()
    data = rb.make_data(17)
    res = {}
    for cls in (rb.Ours, rb.OursNumpy, rb.OursAppend):  # add(1) with one memory each (the rows fit: no overwrite)
        lib = cls(data, 20_000, 400)
        def add1(switch, lib=lib):
            er, op = lib.add_buffer()
            switch(er)
            return op
        res[f'{lib.name} add(1)'] = compare(add1, lib.singles, args.blocks)
        def add256(switch, lib=lib):
            er, op = lib.chunk_buffer()
            switch(er)
            return op
        res[f'{lib.name} add(256)'] = compare(add256, lib.chunks, args.blocks)
        if cls is rb.Ours:
            def sample(switch, lib=lib):
                er, op = lib.full_buffer()
                switch(er)
                return lambda _: op()
            res['ours sample(256)'] = compare(sample, list(range(4_000)), args.blocks)
        del lib; gc.collect()
    pdata = dict(data, **{k: v for k, v in pb.make_data().items() if k in ('prio0', 'td')})
    lib = pb.Ours(pdata, dict(n_chunks=400))
    def per_sample(switch):
        er = switch(lib.full_buffer())
        return lambda _: lib.sample(er)
    res['per sample(256)'] = compare(per_sample, list(range(4_000)), args.blocks)
    def per_update(switch):
        er = switch(lib.full_buffer())
        return lambda td: lib.sample_update(er, td)
    res['per sample+update'] = compare(per_update, lib.td * 2, args.blocks)
    import numpy as np
    from fastrl_replay.memory.circular import FrameReplay
    steps = [(np.full((84, 84), i % 256, np.uint8), i % 4, 1., i % 100 == 99) for i in range(20_000)]
    def frames_add(switch):
        buf = switch(FrameReplay((84, 84), 4, 100_000, 32, seed=0))
        return lambda s: buf.add(*s)
    res['frames add(1)'] = compare(frames_add, steps, args.blocks)
    def frames_sample(switch):
        buf = switch(FrameReplay((84, 84), 4, 100_000, 32, seed=0))
        for s in steps: buf.add(*s)
        return lambda _: buf.sample()
    res['frames sample(32)'] = compare(frames_sample, list(range(2_000)), args.blocks)
    print(f'{"operation":<24}{"locked µs":>12}{"unlocked µs":>13}{"locked/unlocked":>17}')
    for k, r in res.items(): print(f'{k:<24}{r["locked_us"]:>12.3f}{r["unlocked_us"]:>13.3f}{r["ratio"]:>17.3f}')
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(blocks=args.blocks, results=res, machine=machine_record()), indent=1))

if __name__ == '__main__': main()
