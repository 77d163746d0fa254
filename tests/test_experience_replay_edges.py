"Named edge cases, bad input that must leave the memory untouched, and the statistics of uniform sampling."
import numpy as np, pytest, torch
from fastrl_replay.core import BD, TensorBatch
from fastrl_replay.memory.experience_replay import ExperienceReplay, ExperienceReplayException, WarmupNotReached
from fastrl_replay.test_utils import synth_transitions

def steps(er): return er.memory['step'].flatten().tolist()

def state(er):
    "Everything observable about a memory, copied"
    return er.pointer, len(er), {k: v.clone() for k, v in (er.memory or {}).items()}

def assert_same(a, b):
    assert a[:2] == b[:2] and a[2].keys() == b[2].keys()
    for k in a[2]: assert torch.equal(a[2][k], b[2][k]), k

def test_max_sz_one():
    er = ExperienceReplay(bs=3, max_sz=1, warmup_sz=1, seed=0)
    er + synth_transitions(1)
    assert (er.pointer, len(er), steps(er)) == (1, 1, [0])
    er + synth_transitions(1, start=1)
    assert (er.pointer, len(er), steps(er)) == (1, 1, [1])
    er + synth_transitions(4, start=2)
    assert (er.pointer, len(er), steps(er)) == (1, 1, [5])
    b, idxs = er.sample()
    assert idxs.tolist() == [0, 0, 0] and b['step'].flatten().tolist() == [5, 5, 5]

def test_batch_of_exactly_max_sz():
    er = ExperienceReplay(max_sz=6, warmup_sz=1) + synth_transitions(6)
    assert (er.pointer, len(er), steps(er)) == (6, 6, [0, 1, 2, 3, 4, 5])
    er + synth_transitions(2, start=6) + synth_transitions(6, start=8)
    assert (er.pointer, len(er), steps(er)) == (2, 6, [12, 13, 8, 9, 10, 11])

def test_batch_larger_than_max_sz():
    er = ExperienceReplay(max_sz=5, warmup_sz=1) + synth_transitions(12)
    assert (er.pointer, len(er), steps(er)) == (2, 5, [10, 11, 7, 8, 9])
    er + synth_transitions(11, start=12)  # from pointer 2: row j lands at (2 + j) % 5
    assert (er.pointer, len(er), steps(er)) == (3, 5, [20, 21, 22, 18, 19])

def test_split_that_ends_exactly_at_max_sz():
    er = ExperienceReplay(max_sz=8, warmup_sz=1) + synth_transitions(8) + synth_transitions(5, start=8)
    assert er.pointer == 5
    er + synth_transitions(3, start=13)  # rows 5..7: ends on the last row, pointer stays at max_sz
    assert (er.pointer, steps(er)) == (8, [8, 9, 10, 11, 12, 13, 14, 15])
    er + synth_transitions(1, start=16)
    assert (er.pointer, steps(er)[0]) == (1, 16)

def test_split_across_the_end():
    er = ExperienceReplay(max_sz=8, warmup_sz=1) + synth_transitions(6) + synth_transitions(5, start=6)
    assert (er.pointer, steps(er)) == (3, [8, 9, 10, 3, 4, 5, 6, 7])

def test_repeated_indices_last_write_wins():
    er = ExperienceReplay(max_sz=10, warmup_sz=1) + synth_transitions(10)
    er.update_td(torch.tensor([1., 2., 3., 4., 5.]), torch.tensor([7, 2, 7, 2, 7]))
    td = er.memory['td_error'].flatten()
    assert td[7].item() == 5. and td[2].item() == 4. and td.sum().item() == 9.

def test_compiled_and_general_update_td_agree():
    "Tensors from `sample` and a loss take the compiled pass; lists take the general one: the same writes, last wins"
    g = torch.Generator().manual_seed(0)
    fast, slow = (ExperienceReplay(max_sz=50, warmup_sz=1) + synth_transitions(50) for _ in range(2))
    for _ in range(20):
        idxs, td = torch.randint(50, (64,), generator=g), torch.randn(64, 1, generator=g)
        fast.update_td(td, idxs)
        slow.update_td(td.flatten().tolist(), idxs.tolist())
    assert torch.equal(fast.memory['td_error'], slow.memory['td_error'])

def test_update_td_accepts_every_documented_form():
    er = ExperienceReplay(bs=4, max_sz=10, warmup_sz=1, seed=0) + synth_transitions(10)
    er.update_td(TensorBatch(torch.ones(2, 1)), [0, 1])
    er.update_td(np.array([2., 2.], dtype=np.float32), np.array([2, 3]))
    er.update_td([3., 3.], (4, 5))
    _, idxs = er.sample()
    er.update_td(torch.full((4,), 9.), idxs)
    expected = [1., 1., 2., 2., 3., 3., 0., 0., 0., 0.]
    for i in idxs.tolist(): expected[i] = 9.
    assert er.memory['td_error'].flatten().tolist() == expected
    er.update_td(torch.zeros(0), [])  # nothing to write
    assert er.memory['td_error'].flatten().tolist() == expected

def test_inputs_are_copied_and_detached():
    b = synth_transitions(3)
    b['state'].requires_grad_(True)
    er = ExperienceReplay(max_sz=4, warmup_sz=1) + b
    assert not er.memory['state'].requires_grad
    with torch.no_grad(): b['state'].add_(100.)
    assert er.memory['state'].max().item() < 2.
    np_batch = {k: v.detach().numpy() for k, v in synth_transitions(2, start=3).items()}
    er + np_batch + (BD({k: TensorBatch(v) for k, v in synth_transitions(1, start=5).items()}),)
    assert steps(er) == [4, 5, 2, 3] and er.pointer == 2

GOOD = synth_transitions(4, start=100)
BAD_BATCHES = {
    'missing column': ({k: v for k, v in GOOD.items() if k != 'done'}, "missing ['done']"),
    'extra column': ({**GOOD, 'bonus': torch.zeros(4, 1)}, "extra ['bonus']"),
    'wrong trailing shape': ({**GOOD, 'state': torch.zeros(4, 5)}, "column 'state': expected shape (n, 4), got (4, 5)"),
    'wrong rank': ({**GOOD, 'reward': torch.zeros(4)}, "column 'reward': expected shape (n, 1), got (4,)"),
    'different batch sizes': ({**GOOD, 'action': torch.zeros(3, 1, dtype=torch.int64)}, "'action': 3"),
    'lossy dtype': ({**GOOD, 'step': GOOD['step'].float()}, "column 'step': dtype float32 cannot be stored as int64"),
    'int64 into float32': ({**GOOD, 'reward': GOOD['reward'].long()}, "dtype int64 cannot be stored as float32"),
    'complex into float32': ({**GOOD, 'reward': GOOD['reward'].to(torch.complex64)}, "dtype complex64 cannot be stored as float32"),
    '0-d column': ({**GOOD, 'reward': torch.tensor(1.)}, "column 'reward': expected a leading batch dimension"),
    'not a tensor': ({**GOOD, 'reward': [1., 2., 3., 4.]}, "column 'reward': expected a tensor"),
    'NaN td_error': ({**GOOD, 'td_error': torch.tensor([[0.], [float('nan')], [0.], [0.]])}, "'td_error' holds NaN or inf"),
    'inf td_error': ({**GOOD, 'td_error': torch.tensor([[0.], [0.], [float('inf')], [0.]])}, "'td_error' holds NaN or inf"),
    'tuple of two': ((GOOD, GOOD), 'got a tuple of 2 elements'),
    'not a mapping': (torch.zeros(4, 4), 'got Tensor'),
}

@pytest.mark.parametrize('name', BAD_BATCHES)
def test_bad_batch_leaves_memory_unchanged(name):
    bad, msg = BAD_BATCHES[name]
    er = ExperienceReplay(max_sz=10, warmup_sz=1) + synth_transitions(8)
    er.update_td(torch.arange(8.), torch.arange(8))
    before = state(er)
    with pytest.raises(ExperienceReplayException, match=None) as e: er + bad
    assert msg in str(e.value)
    assert_same(before, state(er))
    er + synth_transitions(3, start=8)  # still usable: the wrap is unaffected
    assert er.pointer == 1 and steps(er)[:2] == [10, 1]

@pytest.mark.parametrize('bad,msg', [
    ({**GOOD, 'reward': torch.zeros(3, 1)}, "'reward': 3"),
    ({**GOOD, 'td_error': torch.zeros(4, 2)}, "column 'td_error': expected shape (n, 1)"),
    ({**GOOD, 'reward': torch.tensor(0.)}, 'leading batch dimension'),
])
def test_bad_first_batch_allocates_nothing(bad, msg):
    er = ExperienceReplay(max_sz=10, warmup_sz=1)
    with pytest.raises(ExperienceReplayException) as e: er + bad
    assert msg in str(e.value)
    assert er.memory is None and len(er) == 0 and er.pointer == 0
    er + GOOD
    assert steps(er) == [100, 101, 102, 103]

@pytest.mark.parametrize('td,idxs,msg', [
    (torch.ones(2), [0, 10], 'indices [10] are out of range for a memory of 10 rows'),
    (torch.ones(2), [-1, 0], 'indices [-1] are out of range'),
    (torch.tensor([1., float('nan')]), [0, 1], 'NaN or inf'),
    (torch.tensor([float('-inf'), 1.]), [0, 1], 'NaN or inf'),
    (torch.ones(3), [0, 1], 'expected shape (2,) or (2, 1) for 2 indices, got (3,)'),
    (torch.ones(2, 2), [0, 1], 'got (2, 2)'),
    (torch.ones(2), [0.5, 1.5], 'indices must be a 1-d sequence of ints'),
    (torch.ones(2), [[0, 1]], 'indices must be a 1-d sequence of ints'),
    # what `sample` and a loss give (int64 and float32 tensors) goes through one compiled pass first
    (torch.ones(2), torch.tensor([0, 10]), 'indices [10] are out of range for a memory of 10 rows'),
    (torch.ones(2, 1), torch.tensor([-1, 0]), 'indices [-1] are out of range'),
    (torch.tensor([1., float('nan')]), torch.tensor([0, 1]), 'NaN or inf'),
    (torch.tensor([[float('inf')], [1.]]), torch.tensor([0, 1]), 'NaN or inf'),
])
def test_bad_update_td_writes_nothing(td, idxs, msg):
    er = ExperienceReplay(max_sz=10, warmup_sz=1) + synth_transitions(10)
    er.update_td(torch.arange(10.), torch.arange(10))
    before = state(er)
    with pytest.raises(ExperienceReplayException) as e: er.update_td(td, idxs)
    assert msg in str(e.value)
    assert_same(before, state(er))

@pytest.mark.parametrize('kwargs,msg', [
    (dict(max_sz=10, warmup_sz=11), 'warmup_sz must be an int between 0 and max_sz=10, got 11'),
    (dict(max_sz=0), 'max_sz must be a positive int, got 0'),
    (dict(bs=-1), 'bs must be a positive int, got -1'),
    (dict(warmup_sz=-1), 'warmup_sz must be an int between 0'),
])
def test_bad_settings(kwargs, msg):
    with pytest.raises(ExperienceReplayException) as e: ExperienceReplay(**kwargs)
    assert msg in str(e.value)

def test_reverse_add_raises():
    er = ExperienceReplay(max_sz=4, warmup_sz=1) + synth_transitions(2)
    for f in (lambda: 0 + er, lambda: sum([er, er]), lambda: synth_transitions(1) + er):
        with pytest.raises(ExperienceReplayException, match='memory must be on the left'): f()

def test_index_errors_and_forms():
    er = ExperienceReplay(max_sz=10, warmup_sz=1) + synth_transitions(14)
    assert steps(er[torch.tensor([0, 3])]) == [10, 13] and steps(er[-1]) == [9] and steps(er[np.array([4])]) == [4]
    for bad in (10, -11, [0, 10]):
        with pytest.raises(ExperienceReplayException, match='does not fit a memory of 10 rows'): er[bad]
    with pytest.raises(ExperienceReplayException, match='cannot index an empty memory'): ExperienceReplay()[0]

def test_warmup_boundary():
    er = ExperienceReplay(bs=2, max_sz=10, warmup_sz=5, seed=0) + synth_transitions(4)
    with pytest.raises(WarmupNotReached, match='holds 4 rows and sampling needs 5'): er.sample()
    er + synth_transitions(1, start=4)
    assert er.sample()[0].bs() == 2
    with pytest.raises(WarmupNotReached, match='holds 0 rows'): ExperienceReplay(warmup_sz=0).sample()

def test_sampling_is_reproducible():
    fill = synth_transitions(50)
    a = ExperienceReplay(bs=32, max_sz=50, warmup_sz=1, seed=7, memory=fill)
    b = ExperienceReplay(bs=32, max_sz=50, warmup_sz=1, seed=7, memory=fill)
    assert all(torch.equal(a.sample()[1], b.sample()[1]) for _ in range(5))
    torch.manual_seed(3); c = ExperienceReplay(bs=32, max_sz=50, warmup_sz=1, memory=fill)
    torch.manual_seed(3); d = ExperienceReplay(bs=32, max_sz=50, warmup_sz=1, memory=fill)
    assert torch.equal(c.sample()[1], d.sample()[1])
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    e = ExperienceReplay(bs=8, max_sz=50, warmup_sz=1, generator=g1, memory=fill)
    assert torch.equal(e.sample()[1], torch.randint(50, (8,), generator=g2))

def test_slicing_does_not_disturb_sampling():
    a = ExperienceReplay(bs=16, max_sz=30, warmup_sz=1, seed=5, memory=synth_transitions(30))
    b = ExperienceReplay(bs=16, max_sz=30, warmup_sz=1, seed=5, memory=synth_transitions(30))
    sub = a[2:20]
    sub.sample()
    assert torch.equal(a.sample()[1], b.sample()[1])

def test_uniform_sampling_chi_square():
    "Counts over 200,000 seeded draws from 20 rows fit the uniform distribution"
    er = ExperienceReplay(bs=1000, max_sz=20, warmup_sz=1, seed=0, memory=synth_transitions(20))
    counts = torch.bincount(torch.cat([er.sample()[1] for _ in range(200)]), minlength=20).double()
    chi2 = ((counts - 10_000) ** 2 / 10_000).sum().item()
    assert chi2 < 43.82  # 0.1% critical value of chi-square with 19 degrees of freedom

def test_memory_is_a_view_in_storage_order():
    er = ExperienceReplay(max_sz=4, warmup_sz=1) + synth_transitions(6)
    assert steps(er) == [4, 5, 2, 3]
    assert er.memory['step'].data_ptr() == er.memory['step'].data_ptr()
    assert er.keys == ['state', 'next_state', 'action', 'reward', 'done', 'episode_id', 'step', 'td_error']

@pytest.mark.cuda
def test_cuda_storage_and_sampling():
    er = ExperienceReplay(bs=8, max_sz=16, warmup_sz=4, device='cuda', seed=0)
    er + synth_transitions(10) + synth_transitions(10, start=10).to('cuda')
    assert er.memory['state'].device.type == 'cuda' and steps(er)[:4] == [16, 17, 18, 19]
    b, idxs = er.sample()
    assert idxs.device.type == 'cuda' and b['state'].device.type == 'cuda'
    assert torch.equal(b['step'], er.memory['step'][idxs])
    er.update_td(torch.ones(8, device='cuda'), idxs)
    er.update_td(torch.tensor([1., 2.]), [3, 3])
    assert er.memory['td_error'][3].item() == 2.
    twin = ExperienceReplay(bs=8, max_sz=16, warmup_sz=4, device='cuda', seed=0, memory=er.memory)
    assert torch.equal(twin.sample()[1], ExperienceReplay(bs=8, max_sz=16, warmup_sz=4, device='cuda', seed=0, memory=er.memory).sample()[1])

def _storage_state(er):
    import copy
    return copy.deepcopy(er.storage.state_dict())

def _per_column(s):
    "The state `s` of a block of rows as an array per column, as a storage outside RAM gives it"
    rows, cols = torch.from_numpy(s.pop('rows')), s['columns']
    for k, c in cols.items():
        dt = getattr(torch, c['dtype'])
        width = dt.itemsize * int(torch.tensor(c['shape']).prod())
        c['data'] = rows[:, c.pop('offset'):][:, :width].contiguous().view(dt).reshape(len(rows), *c['shape'])
    return s

CONTRADICTIONS = {  # a change to a storage's state of 5 rows in a ring of 8, and the refusal
    'pointer away from len': (lambda s: s.update(pointer=2), 'len=5 and pointer=2: a ring of 8 rows that is not full has its pointer at its length'),
    'len past max_sz': (lambda s: s.update(len=9, pointer=9), 'len=9 and pointer=9 must be ints in [0, 8]'),
    'len not an int': (lambda s: s.update(len=5.0), 'len=5.0 and pointer=5 must be ints in [0, 8]'),
    'rows without columns': (lambda s: (s.update(columns=None), s.pop('rows')), 'len=5 with no columns: rows come with the columns of a first batch'),
    'no columns at all': (lambda s: s.update(columns={}), 'columns: expected a dict of at least one column, got {}'),
    'dtype no torch dtype': (lambda s: s['columns']['step'].update(dtype='Tensor'), "column 'step': expected the name of a torch dtype, got 'Tensor'"),
    'dtype not a name': (lambda s: s['columns']['step'].update(dtype=None), "column 'step': expected the name of a torch dtype, got None"),
    'negative dimension': (lambda s: s['columns']['state'].update(shape=(-4,)), "column 'state': expected a shape of ints >= 0, got (-4,)"),
    'shape not a tuple': (lambda s: s['columns']['state'].update(shape=4), "column 'state': expected a shape of ints >= 0, got 4"),
    'missing len': (lambda s: s.pop('len'), "the state lacks ['len']"),
    'data of another dtype': (lambda s: (_per_column(s), s['columns']['step'].update(data=s['columns']['step']['data'].int())),
                              "column 'step': expected values of shape (8, 1) int64, got ((8, 1), 'int32')"),
    'data of fewer rows': (lambda s: (_per_column(s), s['columns']['state'].update(data=s['columns']['state']['data'][:5])),
                           "column 'state': expected values of shape (8, 4) float32, got ((5, 4), 'float32')"),
    'data missing': (lambda s: (_per_column(s), s['columns']['state'].pop('data')),
                     "column 'state': expected values of shape (8, 4) float32, got NoneType"),
}

@pytest.mark.parametrize('case', sorted(CONTRADICTIONS))
def test_storage_refuses_a_state_that_contradicts_itself(case):
    "A storage's own `check_state` reads what a state means, not only its bytes; a refused state changes nothing"
    import re
    src = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0) + synth_transitions(5)
    state = _storage_state(src)
    edit, msg = CONTRADICTIONS[case]
    edit(state)
    dst = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0) + synth_transitions(3, start=20)
    before = (dst.storage.pointer, len(dst.storage), {k: v.clone() for k, v in dst.storage.memory.items()})
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): dst.storage.load_state_dict(state)
    assert_same(before, (dst.storage.pointer, len(dst.storage), dst.storage.memory))

def test_a_full_ring_has_its_pointer_anywhere_and_the_states_that_mean_it_load():
    src = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0) + synth_transitions(11)
    state = _storage_state(src)
    assert (state['len'], state['pointer']) == (8, 3)
    dst = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0)
    dst.storage.load_state_dict(state)
    dst.storage.load_state_dict(_per_column(_storage_state(src)))
    assert steps(src) == dst.storage.memory['step'].flatten().tolist() and dst.storage.pointer == 3

def test_a_state_of_a_reserved_column_is_refused():
    from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
    import re
    src = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0) + {**synth_transitions(3), 'weight': torch.ones(3, 1)}
    per = PrioritizedExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0)
    with pytest.raises(ExperienceReplayException, match=re.escape("column 'weight' is reserved")):
        per.storage.load_state_dict(_storage_state(src))
    assert per.storage.memory is None
