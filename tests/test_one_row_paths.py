"One transition added as a one-row batch of tensors is copied by address when every tensor is exactly its column's: each other case (a negative or conjugate view, a strided row, another dtype or shape, keys in another order) takes the checked path and stores the same values or is refused as before."
import numpy as np, pytest, torch
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay

def row(i:int) -> dict:
    return dict(state=torch.tensor([[i, i + .5, -i, 2. * i]]), action=torch.tensor([[i % 3]]), reward=torch.tensor([[i / 4]]),
                done=torch.tensor([[i % 5 == 0]]))

def filled(rows) -> ExperienceReplay:
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    for r in rows: er + r
    return er

def test_exact_rows_are_stored_as_given_across_the_wrap():
    er = filled([row(i) for i in range(6)])
    m = er.memory
    assert "try_add" in vars(er.storage)  # the address path is compiled for these columns
    assert m['state'].tolist() == [[4., 4.5, -4., 8.], [5., 5.5, -5., 10.], [2., 2.5, -2., 4.], [3., 3.5, -3., 6.]]
    assert m['action'][:, 0].tolist() == [1, 2, 2, 0] and m['reward'][:, 0].tolist() == [1., 1.25, .5, .75]
    assert m['done'][:, 0].tolist() == [False, True, False, False] and len(er) == 4

def test_views_and_other_layouts_store_their_values():
    er = filled([row(0)])
    neg = torch.tensor([[1 + 1j, 2 - 2j, 3 + 0j, -4j]]).conj().imag  # a negative view: its values are [-1, 2, 0, 4]
    assert neg.is_neg()
    strided = torch.arange(8.).reshape(4, 2).T[:1]  # [[0, 2, 4, 6]], not contiguous
    assert not strided.is_contiguous() and strided.shape == (1, 4)
    er + {**row(1), 'state': neg}
    er + {**row(2), 'state': strided}
    er + dict(reversed(list(row(3).items())))  # keys in another order
    assert er.memory['state'][1:].tolist() == [[-1., 2., 0., 4.], [0., 2., 4., 6.], [3., 3.5, -3., 6.]]

def test_rows_that_do_not_fit_are_refused_and_change_nothing():
    er = filled([row(0), row(1)])
    before = {k: v.clone() for k, v in er.memory.items()}
    bad = [({**row(2), 'state': torch.zeros(1, 3)}, "column 'state'"),
           ({**row(2), 'action': torch.tensor([[1.5]])}, "column 'action'"),
           ({**row(2), 'extra': torch.zeros(1, 1)}, 'extra'),
           ({k: v for k, v in row(2).items() if k != 'done'}, 'missing')]
    for b, msg in bad:
        with pytest.raises(ExperienceReplayException, match=msg): er + b
    assert len(er) == 2 and all(torch.equal(er.memory[k], v) for k, v in before.items())

def test_a_wider_float_is_cast_as_before():
    er = filled([row(0)])
    er + {**row(1), 'reward': torch.tensor([[0.1]], dtype=torch.float64)}
    assert er.memory['reward'][1, 0].item() == np.float32(0.1)

def test_a_copy_writes_its_own_rows():
    "The compiled one-row writes hold the arrays' addresses: a copy, a deep copy and a pickle compile their own, and write only into their own rows"
    import copy, pickle
    er = filled([row(i) for i in range(3)])
    for other in (copy.deepcopy(er), pickle.loads(pickle.dumps(er))):
        other + row(7)
        other.append({'state': np.full(4, 9, np.float32), 'action': np.array([2]), 'reward': np.array([.5], np.float32), 'done': np.array([True])})
        assert other.memory['state'][:, 0].tolist() == [9., 1., 2., 7.] and other.pointer == 1 and len(other) == 4  # the append wrapped to row 0
        assert other.memory['action'][:, 0].tolist() == [2, 1, 2, 1] and other.memory['done'][:, 0].tolist() == [True, False, False, False]
        assert other.sample(4)[0]['state'].shape == (4, 4)
    assert er.memory['state'][:, 0].tolist() == [0., 1., 2.] and len(er) == 3 and er.pointer == 3
    assert er.storage.column('state')[3].tolist() == [0., 0., 0., 0.]  # the row after them untouched

def test_tensors_the_guard_does_not_pass_take_the_checks_and_store_their_values():
    "A tensor that requires grad, a Parameter, an inference tensor, one tensor in two columns, a 1x1 row of a strided tensor: written by `try_add` all the same, with their values"
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    er + {'a': torch.zeros(1, 2), 'b': torch.zeros(1, 1), 'c': torch.zeros(1, 1)}
    st, w = er.storage, torch.tensor([[1., 2.]], requires_grad=True)
    with torch.inference_mode(): inf = torch.tensor([[5., 6.]])
    one = torch.tensor([[7.]])
    rows = [{'a': w, 'b': torch.tensor([[1.]]), 'c': torch.tensor([[2.]])},
            {'a': torch.nn.Parameter(torch.tensor([[3., 4.]])), 'b': one, 'c': one},
            {'a': inf, 'b': torch.arange(6.).reshape(2, 3)[:1, 1:2], 'c': torch.tensor([[8.]])}]
    assert [st.try_add(r) for r in rows] == [1, 2, 3]
    m = er.memory
    assert m['a'].tolist() == [[0., 0.], [1., 2.], [3., 4.], [5., 6.]] and m['b'][:, 0].tolist() == [0., 1., 7., 1.] and m['c'][:, 0].tolist() == [0., 2., 7., 8.]
    assert w.requires_grad and w.grad is None and len(er) == 4
    with torch.inference_mode(): assert st.try_add({'a': torch.tensor([[9., 9.]]), 'b': one, 'c': one}) == 0  # inside inference mode too

def test_negated_integers_and_conjugated_complex_numbers_store_their_values():
    "A negative view of integers is stored negated (`try_add` once copied its bytes unnegated); a conjugate view into a complex column, conjugated"
    er = filled([row(0)])
    neg = torch._neg_view(torch.tensor([[2]]))
    assert neg.is_neg() and neg.tolist() == [[-2]]
    assert er.storage.try_add({**row(1), 'action': neg}) == -1
    er + {**row(1), 'action': neg}
    assert er.memory['action'][:, 0].tolist() == [0, -2]
    z = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    z + {'z': torch.tensor([[1 + 2j]]), 'a': torch.tensor([[1.]])}
    z + {'z': torch.tensor([[3 + 4j]]).conj(), 'a': torch.tensor([[2.]])}
    assert z.memory['z'][:, 0].tolist() == [1 + 2j, 3 - 4j] and z.memory['a'][:, 0].tolist() == [1., 2.]

def test_the_guard_passes_only_what_the_checks_pass():
    "`_tensor_guard` passes exactly the plain tensors of the columns; every tensor the checks refuse it refuses too"
    from fastrl_replay.memory.experience_replay import _tensor_guard, _passes_nothing
    er = filled([row(0)])
    g = _tensor_guard(er.storage._cols)
    assert g is not _passes_nothing and g(*row(3).values())
    with torch.inference_mode(): inf = torch.zeros(1, 4)
    refused = {'grad': torch.zeros(1, 4, requires_grad=True), 'negative': torch._neg_view(torch.zeros(1, 4)),
               'strided': torch.zeros(1, 8)[:, ::2], 'float64': torch.zeros(1, 4, dtype=torch.float64), 'shape': torch.zeros(1, 5),
               'batch of 2': torch.zeros(2, 4), 'subclass': torch.nn.Parameter(torch.zeros(1, 4)), 'inference': inf,
               'array': np.zeros((1, 4), np.float32), 'meta': torch.zeros(1, 4, device='meta')}
    assert [k for k, v in refused.items() if g(*{**row(3), 'state': v}.values())] == []
    assert g(*{**row(3), 'state': torch.zeros(4, 1).T}.values())  # (1, 4) with strides (1, 1): contiguous
    assert not g(*{**row(3), 'action': torch.tensor([[1]], dtype=torch.int32)}.values()) and not g(*{**row(3), 'done': torch.tensor([[1]])}.values())

def test_refused_dtypes_change_nothing():
    er = filled([row(0), row(1)])
    before = {k: v.clone() for k, v in er.memory.items()}
    for b, msg in [({**row(2), 'state': torch.tensor([[1, 2, 3, 4]])}, "column 'state': dtype int64 cannot be stored as float32"),
                   ({**row(2), 'done': torch.tensor([[1]])}, "column 'done': dtype int64 cannot be stored as bool")]:
        assert er.storage.try_add(b) == -1
        with pytest.raises(ExperienceReplayException, match=msg): er + b
    assert len(er) == 2 and er.pointer == 2 and all(torch.equal(er.memory[k], v) for k, v in before.items())
    er + {**row(2), 'action': torch.tensor([[2]], dtype=torch.int32)}  # a narrower integer is cast, as before
    assert er.memory['action'][:, 0].tolist() == [0, 1, 2]


def test_tensor_guard_in_use_on_the_pinned_torch(monkeypatch):
    "On the torch release line the tests run with, one-row tensors are checked by torch's guard; on another line, by the checks alone"
    from fastrl_replay.memory import experience_replay as xr
    cols = [xr._Col('state', (4,), torch.float32, True), xr._Col('done', (), torch.bool, True)]
    good, bad = (torch.zeros(1, 4), torch.zeros(1, dtype=torch.bool)), (torch.zeros(1, 4, dtype=torch.float64), torch.zeros(1, dtype=torch.bool))
    guard = xr._tensor_guard(cols)
    assert torch.__version__.startswith(xr.GUARDED_TORCH) and guard is not xr._passes_nothing
    assert guard(*good) is True and guard(*bad) is False
    monkeypatch.setattr(xr, 'GUARDED_TORCH', '1.0.')
    assert xr._tensor_guard(cols) is xr._passes_nothing
