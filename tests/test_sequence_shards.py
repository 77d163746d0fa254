"""Slices of consecutive steps from replay shards: each slice inside one shard, batches joined over shards with their
masks, weights over all shards, TD errors back to the rows of the right shard, resume from checkpoints; on Ray too."""
import sys
from functools import partial
import numpy as np, pytest, torch

ray = pytest.importorskip('ray')
from fastrl_replay.distributed import RayReplay, decode_keys
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.sequence import SequenceReplay, PrioritizedSequenceReplay
from fastrl_replay.memory.sumtree import per_weights

pytestmark = pytest.mark.xdist_group('ray')  # one Ray cluster at a time on one xdist worker

SEQ, BURN = 3, 2

def _mem(prioritized, i):
    kw = dict(bs=8, max_sz=40, warmup_sz=0, seq_len=SEQ, burn_in=BURN, end='pad', state_keys=('h',), seed=10 + i)
    if prioritized: return PrioritizedSequenceReplay(**kw, beta=0.5, beta_steps=0, weight_norm='memory')
    return SequenceReplay(**kw)

def _episodes(writer, n, rng):
    "`n` steps of writer `writer`, episodes of 2 to 9 steps; `g` numbers each step: writer * 1000 + its index"
    done = np.zeros(n, bool)
    at = 0
    while at < n: at += int(rng.integers(2, 10)); done[min(at, n) - 1] = True
    g = writer * 1000 + np.arange(n)
    return dict(obs=torch.from_numpy(g.astype(np.float32))[:, None], done=torch.from_numpy(done)[:, None],
                h=torch.from_numpy(np.stack([g, -g], 1).astype(np.float32)), g=torch.from_numpy(g)[:, None])

def _filled(prioritized, writers=2, steps=30, **kw):
    "A local client of 2 shards, and local memories holding what each shard holds, fed the same rows"
    rr = RayReplay(partial(_mem, prioritized), 2, seed=3, prefetch=0, local=True, **kw)
    mems, rng = [_mem(prioritized, j) for j in range(2)], np.random.default_rng(0)
    for w in range(writers):
        b = _episodes(w, steps, rng)
        for lo in range(0, steps, 7):  # several batches: each goes to the writer's own shard
            part = {k: v[lo:lo + 7] for k, v in b.items()}
            rr.add(part, writer=w); mems[w % 2] + part
    return rr, mems

@pytest.mark.parametrize('prioritized', [False, True])
def test_slices_from_shards_are_the_local_memories_slices(prioritized):
    "The split over shards, then each shard's slices, rows, masks and weights; TD errors land on each shard's rows"
    rr, mems = _filled(prioritized)
    gen, rng = torch.Generator().manual_seed(3), np.random.default_rng(1)
    for _ in range(4):
        b, keys, gens = rr.sample(12, generations=True)
        totals = [m.sampler.totals()[0] if prioritized else float(m.n_valid) for m in mems]
        counts = torch.multinomial(torch.tensor(totals, dtype=torch.float64), 12, replacement=True,
                                   generator=gen).bincount(minlength=2).tolist()
        drawn = [j for j, k in enumerate(counts) if k]  # the shards asked, in order
        parts = [mems[j].sample(counts[j], generations=True) for j in drawn]
        for c in ('obs', 'g', 'h', 'mask', 'done'):
            torch.testing.assert_close(b[c], torch.cat([p[0][c] for p in parts]))
        rows = torch.cat([p[1] for p in parts])
        shard, inc, row = decode_keys(keys.numpy())
        assert keys.shape == (12, BURN + SEQ) and (inc[keys >= 0] == 0).all()
        np.testing.assert_array_equal(np.where(keys >= 0, row, -1), rows.numpy())
        want_shard = np.repeat(drawn, [counts[j] for j in drawn])
        assert (shard[:, BURN] == want_shard).all() and (shard[keys >= 0] == want_shard.repeat(BURN + SEQ).reshape(
            12, -1)[keys.numpy() >= 0]).all()  # every step of a slice in its anchor's shard
        assert (b['g'][:, :, 0][b['mask']] // 1000 % 2 == torch.from_numpy(want_shard)[:, None].expand(
            -1, BURN + SEQ)[b['mask']]).all()  # each shard holds its writer's episodes only
        torch.testing.assert_close(gens, torch.cat([p[2] for p in parts]))
        if prioritized:
            p = np.concatenate([mems[j].sampler.get_priority(r[:, BURN]).numpy() for j, (_, r, _) in zip(drawn, parts)])
            low = min(m.sampler.totals()[1] for m in mems)
            np.testing.assert_allclose(b['weight'][:, 0].numpy(), (p / low) ** -0.5, rtol=1e-6)
            n = sum(m.n_valid for m in mems)
            raw = per_weights(p, 0.5, None, p_min=low, n_rows=n, total=sum(totals))
            np.testing.assert_allclose(raw, (n * p / sum(totals)) ** -0.5, rtol=1e-9)
        td = torch.from_numpy(rng.random((12, SEQ)).astype(np.float32))
        rr.update_td(td, keys, gens)
        at = 0
        for j, (_, r, g) in zip(drawn, parts):
            mems[j].update_td(td[at:at + counts[j]], r, g); at += counts[j]
        for j, got in enumerate(rr.apply(lambda m: (m.td_errors.clone(), m.sampler.base.copy()))):
            torch.testing.assert_close(got[0], mems[j].td_errors)
            np.testing.assert_array_equal(got[1], mems[j].sampler.base)

def test_per_slice_td_errors_and_bad_keys():
    "One TD error per slice lands on every learning step of it; keys of another shape are refused, nothing sent"
    rr, mems = _filled(True)
    b, keys = rr.sample(6)
    rr.update_td(torch.full((6,), 2.), keys)
    shard, _, row = decode_keys(keys.numpy())
    tds = rr.apply(lambda m: m.td_errors.clone())
    learn = keys[:, BURN:].numpy()
    for i in range(6):
        for t in range(SEQ):
            if learn[i, t] >= 0: assert tds[shard[i, BURN]][row[i, BURN + t]] == 2.
    with pytest.raises(ExperienceReplayException, match='keys'): rr.update_td(torch.ones(6), keys[:, :2])
    with pytest.raises(ExperienceReplayException, match='td_errors'): rr.update_td(torch.ones(5), keys)

def test_each_writer_keeps_to_one_shard():
    "Four writers over two shards: writer w's batches all in shard w % 2, its episodes whole there"
    rr, _ = _filled(False, writers=4, steps=20)
    assert rr.shard_rows == [40, 40] and rr.sent == [40, 40]
    for j, g in enumerate(rr.apply(lambda m: m.memory['g'][:, 0].numpy())):
        assert set((g // 1000 % 2).tolist()) == {j}
        for w in (j, j + 2): assert (np.diff(g[g // 1000 == w]) == 1).all()  # in the order it wrote them

def test_shards_resume_from_their_checkpoints(tmp_path):
    "Shards checkpointed, then made again from their folders: a new client samples the same slices and weights"
    rr, _ = _filled(True, folder=tmp_path)
    for s in rr.shards: s.checkpoint()
    b1, k1 = rr.sample(10)
    again = RayReplay(partial(_mem, True), 2, seed=3, prefetch=0, local=True, folder=tmp_path)
    assert [s.restored for s in again.shards] == [30, 30] and again.shard_rows == [30, 30]
    b2, k2 = again.sample(10)
    _, inc, _ = decode_keys(k2.numpy())
    assert (inc[k2 >= 0] == 1).all()  # a new incarnation: updates sampled before it are dropped
    torch.testing.assert_close(np.where(k1 >= 0, decode_keys(k1.numpy())[2], -1),
                               np.where(k2 >= 0, decode_keys(k2.numpy())[2], -1))
    for c in b1: torch.testing.assert_close(b1[c], b2[c])

@pytest.fixture(scope='module')
def local_ray():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield
    ray.shutdown()

def test_slices_from_shard_actors(local_ray):
    "Shard actors on Ray: slices drawn over both, each inside one shard, and TD errors applied where their rows are"
    rr = RayReplay(partial(_mem, True), 2, seed=3, prefetch=2)
    try:
        rng = np.random.default_rng(0)
        for w in range(2): rr.add(_episodes(w, 30, rng), writer=w)
        seen = set()
        for _ in range(3):
            b, keys, gens = rr.sample(16, generations=True)
            shard, _, row = decode_keys(keys.numpy())
            on = keys.numpy() >= 0
            assert (b['mask'].numpy() == on).all()
            assert (b['g'][:, :, 0].numpy()[on] // 1000 == np.broadcast_to(shard[:, BURN:BURN + 1], on.shape)[on]).all()
            rr.update_td(torch.full((16, SEQ), 5.), keys, gens)
            seen |= set(shard[:, BURN].tolist())
        rr.flush()
        assert seen == {0, 1}
        assert all(bool((t == 5.).any()) for t in rr.apply(lambda m: m.td_errors.clone()))
    finally: rr.close()
