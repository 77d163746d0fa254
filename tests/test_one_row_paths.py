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
