"Inputs that once slipped past the checks: each must raise cleanly, or be stored exactly, with nothing half-written."
import numpy as np, pytest, torch
from fastai.callback.core import Callback
from fastrl_replay.core import BD
from fastrl_replay.memory.experience_replay import ExperienceReplay, ExperienceReplayException
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.test_utils import synth_replay_learner

def two_cols(n=4, a=0., b=0.): return {'a': torch.full((n, 1), a), 'b': torch.full((n, 1), b)}

def test_ndarray_subclass_is_stored(tmp_path):
    er = ExperienceReplay(4, 4, 0) + two_cols()
    mm = np.memmap(tmp_path/'b.dat', dtype=np.float32, mode='w+', shape=(2, 1)); mm[:] = 5
    er + {'a': torch.full((2, 1), 9.), 'b': mm}
    assert er.memory['a'].flatten().tolist() == [9., 9., 0., 0.] and er.memory['b'].flatten().tolist() == [5., 5., 0., 0.]

@pytest.mark.parametrize('make', [lambda: np.arange(2, dtype=np.float32)[::-1].reshape(2, 1).copy()[::-1],
                                  lambda: np.array([[1.], [2.]], dtype='>f4'),
                                  lambda: torch.tensor([[1.], [2.]], dtype=torch.complex64).conj()])
def test_unusual_layouts_are_stored_or_refused_whole(make):
    er = ExperienceReplay(4, 4, 0) + two_cols()
    v = make()
    try: er + {'a': torch.full((2, 1), 9.), 'b': v}
    except ExperienceReplayException:
        assert er.memory['a'].flatten().tolist() == [0.] * 4  # refused whole
    else:
        expected = np.asarray(v.resolve_conj() if isinstance(v, torch.Tensor) else v, dtype=np.float32).flatten().tolist()
        assert er.memory['b'].flatten().tolist()[:2] == expected

def test_memory_view_written_back_into_itself():
    er = ExperienceReplay(4, 4, 0) + {'a': torch.arange(6.)[:, None]}
    assert er.memory['a'].flatten().tolist() == [4., 5., 2., 3.] and er.pointer == 2
    er + er.memory  # rows 4,5,2,3 land at 2,3,0,1 as if added one at a time
    assert er.memory['a'].flatten().tolist() == [2., 3., 4., 5.]

def test_none_column_is_refused():
    er = ExperienceReplay(4, 4, 0) + two_cols()
    with pytest.raises(ExperienceReplayException, match="column 'a': expected a tensor"): er + {'a': None, 'b': torch.ones(2, 1)}
    assert er.memory['b'].flatten().tolist() == [0.] * 4

def test_empty_first_batch_is_refused():
    er = ExperienceReplay(4, 8, 0)
    with pytest.raises(ExperienceReplayException, match='at least one column'): er + {}
    er + {'a': torch.ones(2, 1)}
    assert er.keys == ['a', 'td_error']

def test_int64_into_float64_is_lossy():
    er = ExperienceReplay(4, 4, 0) + {'a': torch.zeros(1, 1, dtype=torch.float64)}
    with pytest.raises(ExperienceReplayException, match='int64 cannot be stored as float64'): er + {'a': torch.tensor([[2**53 + 1]])}
    er + {'a': torch.tensor([[7]], dtype=torch.int32)}  # exact
    assert er.memory['a'].flatten().tolist() == [0., 7.]

def test_bfloat16_into_float32_is_lossless():
    er = ExperienceReplay(4, 4, 0) + {'a': torch.zeros(1, 1)}
    er + {'a': torch.tensor([[1.5]], dtype=torch.bfloat16)}
    assert er.memory['a'].flatten().tolist() == [0., 1.5]

@pytest.mark.parametrize('td', [np.array([1e300, 1.]), torch.tensor([1e300, 1.], dtype=torch.float64)])
def test_update_td_overflowing_the_column_is_refused(td):
    er = ExperienceReplay(4, 4, 0) + two_cols()
    with pytest.raises(ExperienceReplayException, match='NaN or inf'): er.update_td(td, [0, 1])
    assert er.memory['td_error'].abs().sum().item() == 0

@pytest.mark.parametrize('idx,rows', [(np.int64(2), [2]), (torch.tensor(2), [2]), (np.array(1), [1]),
                                      (range(4, 0, -1), [4, 3, 2, 1]), (torch.tensor([True, False, True, False, False]), [0, 2])])
def test_bd_index_forms_keep_the_batch_dim(idx, rows):
    b = BD(a=torch.arange(5)[:, None], s=torch.zeros(5, 3))
    assert b[idx]['a'].flatten().tolist() == rows and b[idx]['s'].shape == (len(rows), 3) and b[idx].bs() == len(rows)

def test_memory_index_forms():
    er = ExperienceReplay(4, 5, 0) + {'a': torch.arange(5)[:, None]}
    assert er[np.int64(1)].memory['a'].flatten().tolist() == [1]
    assert er[torch.tensor(3)].memory['a'].flatten().tolist() == [3]
    with pytest.raises(ExperienceReplayException, match="columns are read from `memory`"): er['a']
    with pytest.raises(ExperienceReplayException, match='does not fit'): er[(0, 1)]
    with pytest.raises(ExperienceReplayException, match='bool'): er[True]

def test_small_misuses_raise_replay_exceptions():
    ExperienceReplay().update_td([], [])  # nothing to write, nothing stored: fine
    with pytest.raises(ExperienceReplayException, match='out of range'): ExperienceReplay().update_td([1.], [0])
    er = ExperienceReplay(4, 4, 0) + two_cols()
    with pytest.raises(ExperienceReplayException, match='bs must be a positive int'): er.sample(-1)
    with pytest.raises(ExperienceReplayException, match='bs must be a positive int'): ExperienceReplay(bs=True)
    with pytest.raises(ExperienceReplayException, match='either a generator or a seed'): ExperienceReplay(generator=torch.Generator(), seed=1)
    with pytest.raises(ExperienceReplayException): ExperienceReplay(4, 4, 0) + {'a': np.array([[1]], dtype='datetime64[s]')}

def test_td_error_set_late_lands_on_its_own_rows():
    "A callback that reports TD errors after the replay callback's `after_loss` still writes to the right rows, and its report wins"
    class LateTD(Callback):
        order = 0
        def __init__(self): self.writes = []
        def after_loss(self):
            if not self.training: return
            b = self.xb[0]
            td = torch.full((len(b.idxs),), float(len(self.writes) + 1))
            b.set_td_error(td)
            self.writes.append((b.idxs.clone(), td))
    late = LateTD()
    learn = synth_replay_learner(n_batches=3, bs=10, cbs=[ExperienceReplayCallback(bs=4, max_sz=30, warmup_sz=10, seed=0), late])
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    expected = torch.zeros(30)
    for idxs, td in late.writes: expected[idxs] = td
    assert len(late.writes) == 3 and torch.equal(learn.experience_replay.memory.memory['td_error'].flatten(), expected)
