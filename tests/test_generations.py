"Write generations: a row handed out, overwritten and handed out again (A, write, B) is told apart on every path, so a late update from A is dropped."
import numpy as np, pytest, torch
from gymnasium import spaces
from fastrl_replay.memory.core import OUT, NEW, ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERExperienceReplay
from fastrl_replay.memory.persist import load_memory
from fastrl_replay.compat.reagent import (CircularReplayBuffer, ReplayBuffer as ReAgentBuffer, PrioritizedReplayBuffer as ReAgentPrioritized,
                                          OutOfGraphPrioritizedReplayBuffer)
from fastrl_replay.compat.cpprb import ReplayBuffer as CpprbBuffer, PrioritizedReplayBuffer as CpprbPrioritized
from fastrl_replay.compat.sb3 import ReplayBuffer as SB3Buffer, PrioritizedReplayBuffer as SB3Prioritized
from fastrl_replay.callback import ReplayBatch
from fastrl_replay.test_utils import synth_transitions

MEMORIES = {
    'uniform': lambda: ExperienceReplay(bs=8, max_sz=4, warmup_sz=1, seed=0),
    'prioritized': lambda: PrioritizedExperienceReplay(bs=8, max_sz=4, warmup_sz=1, seed=0),
    'prioritized-torch-tree': lambda: PrioritizedExperienceReplay(bs=8, max_sz=4, warmup_sz=1, seed=0, tree_backend='torch'),  # the tensor path a GPU tree takes
    'laber': lambda: LaBERExperienceReplay(bs=8, max_sz=4, warmup_sz=1, seed=0, m=2, score=lambda b: b['reward'][:, 0].abs() + 1),
}

def rows_of(idxs) -> list: return sorted(set(torch.as_tensor(idxs).tolist()))

@pytest.mark.parametrize('kind', MEMORIES)
def test_a_late_update_to_a_row_handed_out_again_is_dropped(kind):
    m = MEMORIES[kind]() + synth_transitions(4)
    _, ia, ga = m.sample(generations=True)
    m + synth_transitions(4, start=4)  # every slot written a second time
    _, ib, gb = m.sample(generations=True)
    assert ga.tolist() == [1] * 8 and gb.tolist() == [2] * 8 and m.sampler.written.tolist() == [2] * 4
    again = set(rows_of(ia)) & set(rows_of(ib))
    assert again  # rows of A handed out again in B: their marks say OUT, so only the generations tell A's update apart
    assert all(m.sampler.handed[i] == OUT for i in again)
    m.update_td(torch.full((8,), 9.), ia, ga)
    assert m.sampler.n_stale == 8 and m.td_errors.tolist() == [0.] * 4
    m.update_td(torch.full((8,), 5.), ib, gb)
    assert m.sampler.n_stale == 8 and m.td_errors.tolist() == [5. if i in rows_of(ib) else 0. for i in range(4)]
    if kind.startswith('prioritized'):
        p = m.sampler.get_priority(torch.arange(4)).tolist()
        assert p == pytest.approx([(5 + 1e-6) ** 0.6 if i in rows_of(ib) else 1. for i in range(4)])

def test_the_marks_alone_let_a_late_update_through():
    "Without generations the fallback guard applies A's update to a row handed out again in B: what generations fix"
    m = MEMORIES['uniform']() + synth_transitions(4)
    _, ia = m.sample()
    m + synth_transitions(4, start=4)
    _, ib = m.sample()
    m.update_td(torch.full((8,), 9.), ia)
    again = set(rows_of(ia)) & set(rows_of(ib))
    assert m.td_errors.tolist() == [9. if i in again else 0. for i in range(4)] and m.sampler.n_stale == sum(i not in again for i in ia.tolist())

def test_exact_rows_and_generations_of_a_seeded_uniform_memory():
    m = ExperienceReplay(bs=3, max_sz=4, warmup_sz=1, seed=0) + synth_transitions(4) + synth_transitions(2, start=4)  # rows 0 and 1 written twice
    assert m.sampler.written.tolist() == [2, 2, 1, 1]
    _, ia, ga = m.sample(generations=True)
    assert ia.tolist() == [0, 3, 1] and ga.tolist() == [2, 1, 2]
    m + synth_transitions(1, start=6)  # row 2
    m + synth_transitions(2, start=7)  # rows 3 and 0
    _, ib, gb = m.sample(generations=True)
    assert m.sampler.written.tolist() == [3, 2, 2, 2] and ib.tolist() == [0, 3, 3] and gb.tolist() == [3, 2, 2]
    m.update_td(torch.tensor([1., 2., 3.]), ia, ga)  # rows 0 and 3 were written since A; row 1 was not
    assert m.td_errors.tolist() == [0., 3., 0., 0.] and m.sampler.n_stale == 2
    m.update_td(torch.tensor([4., 5., 6.]), ib, gb)  # row 3 twice: the last wins
    assert m.td_errors.tolist() == [4., 3., 0., 6.] and m.sampler.n_stale == 2

def test_one_row_and_wrapping_adds_count_writes():
    m = ExperienceReplay(bs=2, max_sz=5, warmup_sz=1, seed=0)
    for t in range(3): m.append({k: v[0] for k, v in synth_transitions(1, start=t).items()})
    assert m.sampler.written.tolist() == [1, 1, 1, 0, 0]
    m + synth_transitions(4, start=3)  # rows 3, 4, 0, 1: wraps
    assert m.sampler.written.tolist() == [2, 2, 1, 1, 1]
    m + synth_transitions(12, start=7)  # more than max_sz at once: only the last 5 are written, one to each row
    assert m.sampler.written.tolist() == [3, 3, 2, 2, 2]

def test_bad_generations_are_refused_and_change_nothing():
    m = MEMORIES['prioritized']() + synth_transitions(4)
    _, i, g = m.sample(generations=True)
    before = (m.td_errors.clone(), m.sampler.get_priority(torch.arange(4)).clone(), m.sampler.n_stale)
    for bad in (g[:3], g.float(), [[1] * 8]):
        with pytest.raises(ExperienceReplayException, match='expected 8 write generations, one int per index'):
            m.update_td(torch.ones(8), i, bad)
    assert torch.equal(m.td_errors, before[0]) and torch.equal(m.sampler.get_priority(torch.arange(4)), before[1]) and m.sampler.n_stale == before[2]
    u = MEMORIES['uniform']() + synth_transitions(4)
    _, i, g = u.sample(generations=True)
    with pytest.raises(ExperienceReplayException, match='expected 8 write generations'): u.update_td(torch.ones(8), i, g[:2])
    assert u.td_errors.tolist() == [0.] * 4

def test_generations_survive_a_checkpoint(tmp_path):
    m = ExperienceReplay(bs=3, max_sz=4, warmup_sz=1, seed=0) + synth_transitions(4) + synth_transitions(2, start=4)
    _, i, g = m.sample(generations=True)
    m + synth_transitions(3, start=6)
    m.save(tmp_path/'m')
    twin = load_memory(tmp_path/'m')
    assert twin.sampler.written.tolist() == m.sampler.written.tolist() == [3, 2, 2, 2]
    assert i.tolist() == [0, 3, 1] and g.tolist() == [2, 1, 2]
    twin.update_td(torch.tensor([1., 2., 3.]), i, g)  # rows 0 and 3 were written since, row 1 was not
    assert twin.sampler.n_stale == 2 and twin.td_errors.tolist() == [0., 3., 0., 0.]

@pytest.mark.parametrize('prioritized', [False, True])
def test_frame_storage_drops_a_late_update(prioritized):
    buf = CircularReplayBuffer((2,), 1, 4, 8, observation_dtype=np.int32, prioritized=prioritized, seed=0)
    def steps(lo):
        for s in range(lo, lo + 4): buf.add(np.array([s + 1, 0], np.int32), 0, 1., s % 4 == 3)
    steps(0)
    _, ia, ga = buf.sample(generations=True)
    steps(4)
    _, ib, gb = buf.sample(generations=True)
    assert ga.tolist() == [1] * 8 and gb.tolist() == [2] * 8 and set(rows_of(ia)) & set(rows_of(ib))
    buf.update_td(torch.full((8,), 9.), ia, ga)
    assert buf.sampler.n_stale == 8 and buf.td_errors.tolist() == [0.] * 4
    buf.update_td(torch.full((8,), 5.), ib, gb)
    assert buf.sampler.n_stale == 8 and buf.td_errors.tolist() == [5. if i in rows_of(ib) else 0. for i in range(4)]
    if prioritized:  # `draw` and `set_priority`, the frame memory's own calls
        ic, gc = buf.draw(8, generations=True)
        steps(8)
        buf.set_priority(ic, np.full(8, 7.), generations=gc)
        assert buf.sampler.n_stale == 16 and 7. not in buf.get_priority(torch.arange(4)).tolist()

def test_callback_batch_carries_generations():
    m = MEMORIES['uniform']() + synth_transitions(4)
    rows, i, g = m.sample(generations=True)
    b = ReplayBatch.of(rows, i, g)
    assert b.generations is g and ReplayBatch.of(rows, i).generations is None
    m + synth_transitions(4, start=4)
    m.update_td(torch.ones(8), b.idxs, b.generations)  # what the callback's after_batch does with them
    assert m.sampler.n_stale == 8 and m.td_errors.tolist() == [0.] * 4

@pytest.mark.parametrize('check', [False, True])
def test_cpprb_update_priorities_with_generations(check):
    r = CpprbPrioritized(4, {'obs': {}}, alpha=1., eps=0., check_for_update=check, seed=0)
    r.add(obs=np.arange(4), priorities=[1, 1, 1, 1])
    a = r.sample(8, generations=True)
    r.add(obs=np.arange(4, 8), priorities=[2, 2, 2, 2])  # every row written again
    b = r.sample(8, generations=True)
    assert a['generations'].tolist() == [1] * 8 and b['generations'].tolist() == [2] * 8 and 'generations' not in r.sample(2)
    assert set(a['indexes'].tolist()) & set(b['indexes'].tolist())
    r.update_priorities(a['indexes'], np.full(8, 50.), generations=a['generations'])
    assert r.replay.sampler.n_stale == 8 and r.replay.sampler.get_priority(np.arange(4)).tolist() == [2.] * 4 and r.get_max_priority() == 2.
    r.update_priorities(b['indexes'], np.full(8, 3.), generations=b['generations'])
    assert r.replay.sampler.n_stale == 8 and r.get_max_priority() == 3.
    assert r.replay.sampler.get_priority(np.arange(4)).tolist() == [3. if i in b['indexes'].tolist() else 2. for i in range(4)]

def test_cpprb_uniform_sample_stamps_the_rows_it_draws():
    r = CpprbBuffer(6, {'obs': {'dtype': np.int64}})
    r.add(obs=np.arange(6))
    assert r.replay.sampler.handed.tolist() == [NEW] * 6
    np.random.seed(0)
    drawn = r.sample(3)['obs'].ravel().tolist()  # row i holds obs i
    assert drawn == [4, 5, 0]
    assert r.replay.sampler.handed.tolist() == [OUT if i in drawn else NEW for i in range(6)]

def test_sb3_uniform_sampler_keeps_nothing_per_row():
    "SB3's buffers take no TD errors back: the uniform adapter's sampler keeps no marks, generations nor TD errors"
    buf = SB3Buffer(6, spaces.Box(-10, 10, (1,), np.float32), spaces.Discrete(2), device='cpu', seed=0)
    for t in range(6): buf.add(np.array([[t]], np.float32), np.array([[t + 1]], np.float32), np.array([0]), np.array([0.]), np.array([False]), [{}])
    drawn = buf.sample(3).observations[:, 0].long().tolist()  # row i holds observation i
    assert drawn == [4, 5, 0]
    s = buf.replay.sampler
    assert not s.per_row and not any(hasattr(s, k) for k in ('handed', 'written', '_td'))
    with pytest.raises(ExperienceReplayException, match='keeps no TD errors'): buf.replay.update_td([1.], [4])

def test_sb3_prioritized_update_td_with_generations():
    buf = SB3Prioritized(4, spaces.Box(-10, 10, (1,), np.float32), spaces.Discrete(2), device='cpu', seed=0)
    add = lambda t: buf.add(np.array([[t]], np.float32), np.array([[t + 1]], np.float32), np.array([0]), np.array([0.]), np.array([False]), [{}])
    for t in range(4): add(t)
    a = buf.sample(8)
    for t in range(4, 8): add(t)
    b = buf.sample(8)
    assert a.generations.tolist() == [1] * 8 and b.generations.tolist() == [2] * 8
    buf.update_td(torch.full((8,), 9.), a.indexes, a.generations)
    assert buf.replay.sampler.n_stale == 8 and buf.replay.td_errors.tolist() == [0.] * 4
    buf.update_td(torch.full((8,), 5.), b.indexes, b.generations)
    assert buf.replay.td_errors.tolist() == [5. if i in rows_of(b.indexes) else 0. for i in range(4)] and buf.replay.sampler.n_stale == 8

def test_reagent_sample_index_batch_and_update_td_with_generations():
    buf = ReAgentBuffer(stack_size=1, replay_capacity=6, batch_size=8, seed=0)
    for t in range(6): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    ia, ga = buf.sample_index_batch(8, generations=True)
    assert torch.equal(buf.sample_index_batch(2), torch.tensor([3, 2]))  # without generations: the indices alone, as ReAgent
    for t in range(6, 12): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    ib, gb = buf.sample_index_batch(8, generations=True)
    assert ga.tolist() == [1] * 8 and gb.tolist() == [2] * 8 and set(ia.tolist()) & set(ib.tolist())
    buf.update_td(torch.full((8,), 9.), ia, ga)
    assert buf.sampler.n_stale == 8 and buf.td_errors.tolist() == [0.] * 6
    buf.update_td(torch.full((8,), 5.), ib, gb)
    assert buf.td_errors.tolist() == [5. if i in rows_of(ib) else 0. for i in range(6)] and buf.sampler.n_stale == 8

@pytest.mark.parametrize('make', [lambda: ReAgentPrioritized(1, 6, 8, seed=0),
                                  lambda: OutOfGraphPrioritizedReplayBuffer((1,), 1, 6, 8, observation_dtype=np.float32, seed=0)],
                         ids=['reagent', 'dopamine'])
def test_set_priority_with_generations(make):
    "Dopamine's agents set priorities computed from `sample_index_batch`: with the generations it gave, a late one is dropped"
    buf = make()
    for t in range(6): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    ia, ga = buf.sample_index_batch(8, generations=True)
    for t in range(6, 12): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    ib, gb = buf.sample_index_batch(8, generations=True)
    before = buf.get_priority(np.arange(6)).tolist()
    assert set(np.asarray(ia).tolist()) & set(np.asarray(ib).tolist()) and list(ga) == [1] * 8 and list(gb) == [2] * 8
    buf.set_priority(ia, np.full(8, 7.), generations=ga)
    assert buf.sampler.n_stale == 8 and buf.get_priority(np.arange(6)).tolist() == before
    buf.set_priority(ib, np.full(8, 3.), generations=gb)
    assert buf.sampler.n_stale == 8
    assert buf.get_priority(np.arange(6)).tolist() == [3. if i in np.asarray(ib).tolist() else p for i, p in enumerate(before)]

@pytest.mark.parametrize('prioritized', [False, True])
def test_ray_shard_drops_a_late_update(prioritized):
    "The shard hands out generations with its rows and takes them back with the TD updates"
    from fastrl_replay.distributed import ReplayShard
    shard = ReplayShard(lambda i: MEMORIES['prioritized' if prioritized else 'uniform']())
    shard.add(synth_transitions(4))
    a = shard.sample(8)
    shard.add(synth_transitions(4, start=4))
    b = shard.sample(8, [])
    assert a['generations'].tolist() == [1] * 8 and b['generations'].tolist() == [2] * 8 and set(a['rows'].tolist()) & set(b['rows'].tolist())
    assert shard.update_td(np.full(8, 9., np.float32), a['rows'], shard.incarnation, a['generations']) == 0
    assert shard.memory.sampler.n_stale == 8 and shard.memory.td_errors.tolist() == [0.] * 4
    shard.sample(1, [(np.full(8, 5., np.float32), b['rows'], shard.incarnation, b['generations'])])  # an update riding on a sample request
    assert shard.memory.sampler.n_stale == 8
    assert shard.memory.td_errors.tolist() == [5. if i in b['rows'].tolist() else 0. for i in range(4)]

def test_local_ray_replay_passes_generations():
    from fastrl_replay.distributed import RayReplay, decode_keys
    r = RayReplay(lambda i: MEMORIES['uniform'](), n_shards=2, bs=8, warmup_sz=1, seed=0, prefetch=0, local=True)
    try:
        r + synth_transitions(4); r + synth_transitions(4, start=4)  # one batch to each shard
        _, ka, ga = r.sample(generations=True)
        r + synth_transitions(4, start=8); r + synth_transitions(4, start=12)  # every row of both shards written again
        _, kb, gb = r.sample(generations=True)
        assert ga.tolist() == [1] * 8 and gb.tolist() == [2] * 8 and len(r.sample()) == 2
        r.update_td(torch.full((8,), 9.), ka, ga)
        assert sum(s.memory.sampler.n_stale for s in r.shards) == 8 and all(s.memory.td_errors.tolist() == [0.] * 4 for s in r.shards)
        r.update_td(torch.full((8,), 5.), kb, gb)
        shard, _, rows = decode_keys(kb.numpy())
        assert sum(s.memory.sampler.n_stale for s in r.shards) == 8
        assert [s.memory.td_errors.tolist() for s in r.shards] == [[5. if i in rows[shard == j].tolist() else 0. for i in range(4)] for j in range(2)]
    finally: r.close()

import warnings
INT32 = torch.iinfo(torch.int32)

@pytest.mark.parametrize('kind', MEMORIES)
@pytest.mark.parametrize('n', [1, 3])  # one row (its own path) and a compiled run of rows
def test_generations_are_int32_that_wrap_and_still_tell_a_late_update(kind, n):
    m = MEMORIES[kind]() + synth_transitions(4)
    assert m.sampler.written.dtype == torch.int32
    m.sampler.written[:] = INT32.max  # slots written 2 ** 31 - 1 times: the next write wraps to the smallest int32
    _, i, g = m.sample(generations=True)
    assert set(g.tolist()) == {INT32.max}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # NumPy's note that the one-row path's int32 wrapped
        m + synth_transitions(n, start=4)
    assert m.sampler.written.tolist() == [INT32.min] * n + [INT32.max] * (4 - n)
    m.update_td(torch.ones(8), i, g)  # rows written since were handed out at INT32.max: dropped; the others kept
    assert m.sampler.n_stale == sum(r < n for r in i.tolist())
    assert m.td_errors.tolist() == [0.] * n + [1. if r in i.tolist() else 0. for r in range(n, 4)]

def test_an_older_state_s_int64_generations_load_wrapped_and_bad_ones_are_refused():
    m = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0) + synth_transitions(4)
    state = m.state_dict()
    old = {**state, 'sampler': {**state['sampler'], 'written': torch.tensor([1, 2 ** 31 + 5, 2 ** 40, 0])}}
    twin = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    twin.load_state_dict(old)
    assert twin.sampler.written.dtype == torch.int32 and twin.sampler.written.tolist() == [1, INT32.min + 5, 0, 0]
    before = twin.sampler.written.clone()
    for bad in (torch.tensor([1, 2, 3, -1]), torch.tensor([1., 2., 3., 4.]), np.array([1, 2, 3, 4], np.uint32),
                torch.tensor([1, 2, 3], dtype=torch.int32)):
        with pytest.raises(ExperienceReplayException, match='write generations'):
            twin.load_state_dict({**state, 'sampler': {**state['sampler'], 'written': bad}})
        assert torch.equal(twin.sampler.written, before)

def test_the_tensor_path_counts_generations_up_with_the_same_wrap():
    "Samplers whose marks live on an accelerator count with tensors: the same int32 wrap as the host's compiled pass"
    from fastrl_replay.memory.core import _next_generation
    g = torch.tensor([INT32.max, INT32.min, -1, 0, 41], dtype=torch.int32)
    assert _next_generation(g).tolist() == [INT32.min, INT32.min + 1, 0, 1, 42]
    assert _next_generation(g).dtype == torch.int32
