"""Sharded replay on Ray: inserts and samples against shards and writers, prefetch on and off, against one memory in
this process and TorchRL's `RayReplayBuffer` in the same run; then the DQN's environment steps per second with 1 and 2
collector actors.

CartPole-sized transitions (state and next state of 4 float32, an int64 action, a float32 reward and discount, a bool
terminated flag, an int64 id). Capacity 100,000 rows (split evenly over the shards), prioritized replay (alpha 0.6,
beta 0.4). Measured:

- insert:  batches of 64 rows written by W writer actors (W = 1, 2), each cycling over the shards with the routing
           rule of `fastrl_replay.distributed` (rows/s over all writers, from the first write to the last reply);
- sample:  a batch of 256 rows drawn over all shards and its TD errors sent back, as the DQN's learner does, with
           prefetch 2 and asynchronous TD updates, or neither (batches/s);
- reference: the same operations on one `PrioritizedExperienceReplay` in this process, and on TorchRL's
           `RayReplayBuffer` (one actor, blocking calls; uniform `extend`/`sample`, and prioritized sample + update);
- dqn:     `dqn_ray_learner(ray=dict(actors=N, shards=2))` with N = 1, 2 for 3,000 environment steps after its actors have started,
           and the same DQN in one process (environment steps/s).

Ray runs locally with `num_cpus=2`. This machine has 2 cores shared with the writers, the shards and the driver, so
these are per-shard costs on a crowded machine, not a scaling curve. Results go to bench/results/ray_bench.json.

    .venv/bin/python bench/ray_bench.py            # a few minutes
    .venv/bin/python bench/ray_bench.py --quick
"""
import argparse, json, time, warnings
from functools import partial
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts
import numpy as np, torch

warnings.filterwarnings('ignore', message='`torch.jit.script` is deprecated')
import ray
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.distributed import RayReplay, write_batch, init_ray, apex_epsilons
from fastrl_replay.agents.dqn_ray import dqn_ray_learner
from fastrl_replay.agents.dqn import dqn_learner

CAP, WRITE_BS, BS = 100_000, 64, 256
OUT = Path(__file__).resolve().parent/'results'/'ray_bench.json'
SETTINGS = {'full': dict(n_write=300, n_sample=200, fill=20_000, dqn_steps=3000),
            'quick': dict(n_write=80, n_sample=60, fill=10_000, dqn_steps=1200)}

def batch(n, start=0, seed=0):
    "`n` CartPole-sized transitions as a dict of NumPy arrays"
    g = np.random.default_rng(seed + start)
    return dict(state=g.standard_normal((n, 4), np.float32), next_state=g.standard_normal((n, 4), np.float32),
                action=g.integers(0, 2, (n, 1)), reward=g.standard_normal((n, 1), np.float32),
                discount=np.full((n, 1), 0.99 ** 3, np.float32), terminated=g.random((n, 1)) < 0.05,
                tid=np.arange(start, start + n, dtype=np.int64)[:, None])

def per_memory(max_sz, i=0): return PrioritizedExperienceReplay(bs=BS, max_sz=max_sz, warmup_sz=0, seed=i, alpha=0.6, beta=0.4)

@ray.remote(num_cpus=0)
class Writer:
    "Writes the same batch `n` times to the shards, following the routing rule"
    def __init__(self, index, shards, rows):
        self.index, self.shards, self.batch = index, shards, batch(rows, seed=index)
        self.sent = [0] * len(shards)  # rows sent to each shard, which the routing rule balances
    def ready(self): return True
    def run(self, n):
        for b in range(n): write_batch(self.shards, self.index, self.sent, self.batch)
        return n * len(self.batch['tid'])

def insert_rate(rr, n_writers, n):
    ws = [Writer.remote(i, rr.shards, WRITE_BS) for i in range(n_writers)]
    ray.get([w.ready.remote() for w in ws]); ray.get([w.run.remote(5) for w in ws])  # started and warm
    t = time.perf_counter()
    rows = sum(ray.get([w.run.remote(n) for w in ws]))
    dt = time.perf_counter() - t
    for w in ws: ray.kill(w)
    return rows / dt

def sample_rate(mem, n, td=True):
    "Batches of 256 per second, each with its TD errors sent back"
    g = torch.Generator().manual_seed(0)
    for _ in range(5): b, k = mem.sample(BS); mem.update_td(torch.rand(BS, generator=g), k)
    t = time.perf_counter()
    for _ in range(n):
        b, k = mem.sample(BS)
        if td: mem.update_td(torch.rand(BS, generator=g), k)
    if hasattr(mem, 'flush'): mem.flush()
    return n / (time.perf_counter() - t)

def fill(mem, rows):
    for s in range(0, rows, 1000): mem + {k: torch.from_numpy(v) for k, v in batch(1000, s).items()}

def ours(s):
    res = []
    one = per_memory(CAP)
    t = time.perf_counter()
    for i in range(s['n_write']): one + {k: torch.from_numpy(v) for k, v in batch(WRITE_BS, i * WRITE_BS).items()}
    res.append(dict(kind='one memory (this process)', shards=0, writers=0, insert_rows_s=s['n_write'] * WRITE_BS / (time.perf_counter() - t)))
    fill(one, s['fill'])
    res[-1]['sample_batches_s'] = sample_rate(one, s['n_sample'])
    for M in (1, 2, 4):
        rr = RayReplay(partial(per_memory, CAP // M), M, bs=BS, warmup_sz=0, seed=0)
        rr.refresh()  # the shards are up
        for W in (1, 2): res.append(dict(kind='RayReplay', shards=M, writers=W, insert_rows_s=insert_rate(rr, W, s['n_write'])))
        rr.reset(); fill(rr, s['fill'])
        for pf in (0, 2):
            rr.prefetch, rr.async_td = pf, pf > 0
            res.append(dict(kind='RayReplay', shards=M, prefetch=pf, async_td=pf > 0, sample_batches_s=sample_rate(rr, s['n_sample'])))
        rr.close()
        print(*res[-4:], sep='\n', flush=True)
    return res

def torchrl_peer(s):
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, RayReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler
    def td(n, start=0): return TensorDict({k: torch.from_numpy(v) for k, v in batch(n, start).items()}, batch_size=[n])
    res = []
    rb = RayReplayBuffer(storage=partial(LazyTensorStorage, CAP), batch_size=BS, remote_config={'num_cpus': 0})
    rb.extend(td(WRITE_BS))
    t = time.perf_counter()
    for i in range(s['n_write']): rb.extend(td(WRITE_BS, i * WRITE_BS))
    ins = s['n_write'] * WRITE_BS / (time.perf_counter() - t)
    for i in range(0, s['fill'], 1000): rb.extend(td(1000, i))
    t = time.perf_counter()
    for _ in range(s['n_sample']): rb.sample()
    res.append(dict(kind='TorchRL RayReplayBuffer (uniform)', shards=1, insert_rows_s=ins, sample_batches_s=s['n_sample'] / (time.perf_counter() - t),
                    note='sample only: a uniform buffer takes no TD errors'))
    try:
        rb = RayReplayBuffer(storage=partial(LazyTensorStorage, CAP), sampler=partial(PrioritizedSampler, CAP, 0.6, 0.4), batch_size=BS,
                             remote_config={'num_cpus': 0})
        for i in range(0, s['fill'], 1000): rb.extend(td(1000, i))
        g = torch.Generator().manual_seed(0)
        t = time.perf_counter()
        for _ in range(s['n_sample']):
            b, info = rb.sample(return_info=True)
            rb.update_priority(info['index'], torch.rand(BS, generator=g))
        res.append(dict(kind='TorchRL RayReplayBuffer (prioritized)', shards=1, sample_batches_s=s['n_sample'] / (time.perf_counter() - t)))
    except Exception as e: res.append(dict(kind='TorchRL RayReplayBuffer (prioritized)', error=f'{type(e).__name__}: {e}'[:300]))
    print(*res, sep='\n', flush=True)
    return res

def dqn(s):
    res, kw = [], dict(replay=dict(kind='per', bs=128, warmup_sz=500), net=dict(hidden=(64, 64)), seed=0, steps_per_epoch=s['dqn_steps'])
    torch.set_num_threads(1)
    learn = dqn_learner(**kw, valid=dict(n_episodes=0))  # environment steps alone, as the collectors' rate
    t = time.perf_counter()
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    res.append(dict(kind='dqn, one process', actors=0, env_steps_s=learn.dls.train.dataset.stats().env_steps / (time.perf_counter() - t)))
    for n in (1, 2):
        learn = dqn_ray_learner(**kw, ray=dict(actors=n, shards=2, epsilons=apex_epsilons(n)))
        fleet, rr = learn.fleet.fleet, learn.experience_replay.memory
        ray.get([a.__ray_ready__.remote() for a in fleet.actors + rr.shards])  # started
        fleet.publish(learn.model); fleet.advance(200); fleet.stop()  # warm
        s0, t = fleet.env_steps, time.perf_counter()
        with learn.no_bar(), learn.no_logging(): learn.fit(1)
        res.append(dict(kind='dqn on Ray', actors=n, shards=2, env_steps_s=(fleet.env_steps - s0) / (time.perf_counter() - t)))
        learn.fleet.close()
    print(*res, sep='\n', flush=True)
    return res

if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('--quick', action='store_true')
    s = SETTINGS['quick' if p.parse_args().quick else 'full']
    torch.set_num_threads(1)
    init_ray(num_cpus=2)
    out = dict(settings=s, results=[])
    out['results'] += ours(s)
    out['results'] += torchrl_peer(s)
    out['results'] += dqn(s)
    out['machine'] = machine_record('ray', 'torchrl', 'tensordict')
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1))
    print(f'written to {OUT}')
