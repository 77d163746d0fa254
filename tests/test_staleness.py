"One staleness mark for every sampler: a TD update for a row overwritten after it was handed out is skipped, on every path."
import numpy as np, pytest, torch
from fastrl_replay.memory.core import NEW, OUT, STALE
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERExperienceReplay
from fastrl_replay.compat.reagent import CircularReplayBuffer
from fastrl_replay.memory.persist import load_memory
from fastrl_replay.compat.reagent import ReplayBuffer, PrioritizedReplayBuffer
from fastrl_replay.compat.cpprb import PrioritizedReplayBuffer as CpprbPrioritized
from fastrl_replay.test_utils import synth_transitions

def late_update(m, add):
    "Sample `m`, overwrite every row with `add()`, then update the sampled rows: the update must be skipped"
    _, idxs = m.sample()
    td_before = m.td_errors.clone()
    add()
    assert (m.sampler.handed[idxs] == STALE).all()
    m.update_td(torch.full((len(idxs),), 9.), idxs)
    assert m.sampler.n_stale == len(idxs)
    assert torch.equal(m.td_errors, td_before * 0)  # the rows are new: TD error 0, not the late 9
    _, again = m.sample()  # handed out since written: the update counts
    m.update_td(torch.full((len(again),), 5.), again)
    assert m.sampler.n_stale == len(idxs) and (m.td_errors[again] == 5.).all()

MEMORIES = {
    'uniform': lambda: ExperienceReplay(bs=3, max_sz=6, warmup_sz=1, seed=0),
    'prioritized': lambda: PrioritizedExperienceReplay(bs=3, max_sz=6, warmup_sz=1, seed=0),
    'laber': lambda: LaBERExperienceReplay(bs=3, max_sz=6, warmup_sz=1, seed=0, m=2, score=lambda b: b['reward'][:, 0].abs() + 1),
}

@pytest.mark.parametrize('kind', MEMORIES)
def test_local_memories_skip_a_late_update(kind):
    m = MEMORIES[kind]() + synth_transitions(6)
    late_update(m, lambda: m + synth_transitions(6, start=6))

@pytest.mark.parametrize('prioritized', [False, True])
def test_frame_storage_skips_a_late_update(prioritized):
    buf = CircularReplayBuffer((2,), 1, 4, 2, observation_dtype=np.int32, prioritized=prioritized, seed=0)
    def steps(lo):
        for s in range(lo, lo + 4): buf.add(np.array([s + 1, 0], np.int32), 0, 1., s % 4 == 3)
    steps(0)
    late_update(buf, lambda: steps(4))

def test_marks_follow_hand_outs_and_writes():
    "A row is NEW until handed out, OUT once handed out, STALE once overwritten after that, and OUT again when handed out again"
    m = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0) + synth_transitions(4)
    assert m.sampler.handed.tolist() == [NEW] * 4
    _, idxs = m.sample()
    out = sorted(set(idxs.tolist()))
    assert [i for i, h in enumerate(m.sampler.handed.tolist()) if h == OUT] == out
    m + synth_transitions(4, start=4)
    assert [i for i, h in enumerate(m.sampler.handed.tolist()) if h == STALE] == out
    assert m.sampler.fresh(range(4)).tolist() == [i not in out for i in range(4)]
    m.update_td(torch.ones(4), torch.arange(4))  # rows never handed out take updates: a caller who knows the rows
    assert m.td_errors.tolist() == [0. if i in out else 1. for i in range(4)]

def test_marks_survive_a_checkpoint(tmp_path):
    m = ExperienceReplay(bs=3, max_sz=6, warmup_sz=1, seed=0) + synth_transitions(6)
    _, idxs = m.sample()
    m + synth_transitions(6, start=6)
    m.save(tmp_path/'m')
    twin = load_memory(tmp_path/'m')
    assert torch.equal(twin.sampler.handed, m.sampler.handed)
    twin.update_td(torch.full((3,), 9.), idxs)
    assert twin.sampler.n_stale == 3 and (twin.td_errors == 0).all()

def test_reagent_uniform_sample_index_batch_is_guarded():
    buf = ReplayBuffer(stack_size=1, replay_capacity=6, batch_size=4, seed=0)
    for t in range(6): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    idx = buf.sample_index_batch(4)
    for t in range(6, 12): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    buf.update_td(torch.full((4,), 5.), idx)
    assert buf.sampler.n_stale == 4 and (buf.td_errors == 0).all()

def test_reagent_set_priority_after_sample_index_batch_is_guarded():
    "Dopamine's agents set priorities computed from a sample: those of rows overwritten since are skipped"
    buf = PrioritizedReplayBuffer(1, 6, 4, seed=0)
    for t in range(6): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    idx = buf.sample_index_batch(4)
    before = buf.get_priority(np.arange(6)).tolist()
    for t in range(6, 12): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    buf.set_priority(idx, np.full(4, 7.))
    assert buf.sampler.n_stale == 4 and buf.get_priority(np.arange(6)).tolist() == before
    idx = buf.sample_index_batch(4)
    buf.set_priority(idx, np.full(4, 7.))  # handed out since written: applied
    assert (buf.get_priority(idx) == 7.).all() and buf.sampler.n_stale == 4

@pytest.mark.parametrize('kind', MEMORIES)
def test_marks_never_wrap(kind):
    "A row handed out and then overwritten 300 times (more than an int8 counts) is still stale: the mark saturates at STALE, it counts nothing"
    m = MEMORIES[kind]() + synth_transitions(6)
    _, idxs = m.sample()
    out = sorted(set(idxs.tolist()))
    for k in range(1, 301):
        m + synth_transitions(6, start=6 * k)
        if k in (1, 2, 127, 128, 255, 256, 300):
            assert m.sampler.handed.tolist() == [STALE if i in out else NEW for i in range(6)], k
    m.update_td(torch.full((3,), 9.), idxs)
    assert m.sampler.n_stale == 3 and m.td_errors.tolist() == [0.] * 6

@pytest.mark.parametrize('check', [False, True])
def test_cpprb_check_for_update_is_the_mark(check):
    "cpprb's guard (a row written since the last sample keeps its priority) is the sampler's mark: each sample marks every row handed out"
    r = CpprbPrioritized(4, {'obs': {}}, alpha=1., eps=0., check_for_update=check, seed=0)
    r.add(obs=np.arange(4), priorities=[1, 1, 1, 1])
    r.update_priorities([3], [8])  # written after the buffer was made and before any sample: stale with check_for_update, as in cpprb
    r.sample(4)
    if check: assert r.replay.sampler.handed.tolist() == [OUT] * 4
    r.add(obs=4, priorities=2)  # row 0 is overwritten after the sample
    if check: assert r.replay.sampler.handed.tolist() == [STALE, OUT, OUT, OUT]
    r.update_priorities([0], [50])  # late: stale with check_for_update
    r.update_priorities([1], [3])
    assert r.get_max_priority() == (3. if check else 50.)
    assert r.replay.sampler.get_priority([0, 1, 3]).tolist() == ([2., 3., 1.] if check else [50., 3., 8.])
    assert r.replay.sampler.n_stale == (2 if check else 0)
    r.sample(4)
    r.update_priorities([0], [60])  # sampled since: applied
    assert r.get_max_priority() == 60. and r.replay.sampler.get_priority([0]).tolist() == [60.]
    assert r.replay.sampler.n_stale == (2 if check else 0)
    r.clear()
    r.add(obs=np.arange(2), priorities=[1, 1])
    r.update_priorities([1], [9])  # written since the buffer was emptied, before any sample
    assert r.replay.sampler.n_stale == (1 if check else 0) and r.get_max_priority() == (1. if check else 9.)

@pytest.mark.parametrize('prioritized', [False, True])
def test_ray_shard_skips_a_late_update(prioritized):
    "A shard's TD updates, carried to it with its next sample, go through the memory's mark"
    from fastrl_replay.distributed import ReplayShard
    shard = ReplayShard(lambda i: MEMORIES['prioritized' if prioritized else 'uniform']())
    shard.add(synth_transitions(6))
    out = shard.sample(3)
    shard.add(synth_transitions(6, start=6))
    assert shard.update_td(np.full(3, 9., np.float32), out['rows'], shard.incarnation) == 0
    assert shard.memory.sampler.n_stale == 3 and shard.memory.td_errors.tolist() == [0.] * 6
    again = shard.sample(3, [])
    shard.update_td(np.full(3, 5., np.float32), again['rows'], shard.incarnation)
    assert shard.memory.sampler.n_stale == 3 and (shard.memory.td_errors[torch.from_numpy(again['rows'])] == 5.).all()
