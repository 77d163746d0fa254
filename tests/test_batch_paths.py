"""`+` of a batch of many rows: tensors or arrays in the columns' dtypes and shapes are copied straight into the block
of rows (`_put_rows`, one record a row for a column of several values); any other batch takes the checked path. Both
store the same bytes, and a batch that does not fit is refused, the memory as it was, whatever layout came before."""
import copy, pickle
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay

COLUMNS = {'f32': ((3,), np.float32), 'f64': ((), np.float64), 'f16': ((2,), np.float16), 'i64': ((), np.int64),
           'i32': ((1,), np.int32), 'u8': ((2, 2), np.uint8), 'b': ((), np.bool_)}

def rows(rng, n:int) -> dict:
    "`n` rows of every column as NumPy arrays, floats with NaNs of several payloads and signed zeros among them"
    res = {}
    for k, (shape, dt) in COLUMNS.items():
        if np.dtype(dt).kind == 'f':
            v = rng.standard_normal((n, *shape)).astype(dt)
            bits = v.view(np.uint16 if v.itemsize == 2 else np.uint32 if v.itemsize == 4 else np.uint64)
            info = np.finfo(dt)
            nan = bits.dtype.type((1 << (info.bits - 1)) - 1)  # all ones but the sign: a NaN with a full payload
            bits[rng.random(bits.shape) < .1] = nan
            v[rng.random(v.shape) < .1] = -0.
        elif dt is np.bool_: v = rng.random((n, *shape)) < .5
        else: v = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, (n, *shape), dtype=dt, endpoint=True)
        res[k] = v
    return res

def neg_view(x:torch.Tensor) -> torch.Tensor:
    "A negative view of float32 or float64 `x` with the bytes of `x`"
    res = torch.complex(torch.zeros_like(x), -x).conj().imag
    assert res.is_neg()
    return res

FORMS = {  # a batch of the rows `r`
    'tensors': lambda r: {k: torch.from_numpy(v.copy()) for k, v in r.items()},
    'arrays': lambda r: {k: v.copy() for k, v in r.items()},
    'views of wider rows': lambda r: {k: torch.from_numpy(np.concatenate([v, v], axis=-1))[..., :v.shape[-1]]
                                      if v.ndim > 1 else torch.from_numpy(v.copy()) for k, v in r.items()},
    'every other row': lambda r: {k: torch.from_numpy(np.repeat(v, 2, axis=0))[::2] for k, v in r.items()},
    'values across': lambda r: {k: torch.from_numpy(np.ascontiguousarray(np.swapaxes(v, 0, -1))).transpose(0, -1)
                                if v.ndim > 1 else torch.from_numpy(v.copy()) for k, v in r.items()},
    'keys reversed': lambda r: dict(reversed([(k, torch.from_numpy(v.copy())) for k, v in r.items()])),
    'requires grad': lambda r: {k: torch.from_numpy(v.copy()).requires_grad_() if v.dtype.kind == 'f'
                                else torch.from_numpy(v.copy()) for k, v in r.items()},
    'an array, then tensors': lambda r: {k: v.copy() if i == 0 else torch.from_numpy(v.copy())
                                         for i, (k, v) in enumerate(r.items())},
    'a tensor, then arrays': lambda r: {k: torch.from_numpy(v.copy()) if i == 0 else v.copy()
                                        for i, (k, v) in enumerate(r.items())},
    'negated views': lambda r: {k: neg_view(torch.from_numpy(v.copy())) if v.dtype in (np.float32, np.float64)
                                else torch.from_numpy(v.copy()) for k, v in r.items()},
}

def same_bytes(a:ExperienceReplay, b:ExperienceReplay) -> bool:
    "The same pointer, length and every byte of the block of rows"
    return (a.pointer, len(a)) == (b.pointer, len(b)) and np.array_equal(a.storage._rows, b.storage._rows)

def checked_only(er:ExperienceReplay) -> ExperienceReplay:
    "`er` with its plans of direct writes dropped: every batch takes the checked path"
    er.storage._values = er.storage._copies = None
    return er

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6),
       forms=st.lists(st.sampled_from(sorted(FORMS)), min_size=6, max_size=6), max_sz=st.integers(1, 12))
def test_direct_copies_store_the_bytes_the_checked_path_stores(seed, sizes, forms, max_sz):
    rng = np.random.default_rng(seed)
    mk = lambda: ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0)
    first = rows(rng, 2)
    direct, checked = mk() + FORMS['arrays'](first), checked_only(mk() + FORMS['arrays'](first))
    direct.storage._values = None  # one-row batches are copied too, not packed by value
    assert direct.storage._copies is not None
    for n, f in zip(sizes, forms):
        r = rows(rng, n)
        direct + FORMS[f](r)
        checked + FORMS[f](r)
        assert same_bytes(direct, checked), (n, f)

def test_a_batch_of_exact_tensors_is_copied_directly():
    er = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0) + FORMS['tensors'](rows(np.random.default_rng(0), 2))
    r = rows(np.random.default_rng(1), 3)
    assert er.storage._put_rows(FORMS['tensors'](r)) == (2, 3)
    assert (er.pointer, len(er)) == (5, 5)
    for k, v in r.items(): assert er.memory[k][2:5].numpy().tobytes() == v.tobytes()
    # what the direct copy leaves to the checked path: it writes nothing and says so
    for other in ('requires grad', 'negated views', 'values across'):
        assert er.storage._put_rows(FORMS[other](r)) is None and er.pointer == 5, other
    assert er.storage._put_rows(FORMS['tensors'](rows(np.random.default_rng(2), 4))) is None  # past the end of the ring

def snapshot(er): return er.storage._rows.copy(), er.pointer, len(er)
def unchanged(er, before): return np.array_equal(er.storage._rows, before[0]) and (er.pointer, len(er)) == before[1:]

BAD = {  # a batch that does not fit the memory, after batches of 3 rows made the layout the direct copy keeps
    'a wider dtype of ints': (lambda b: {**b, 'i32': b['i32'].to(torch.int64)}, "column 'i32': dtype int64"),
    'floats into ints': (lambda b: {**b, 'i64': b['i64'].double()}, "column 'i64': dtype float64"),
    'another shape': (lambda b: {**b, 'f32': torch.zeros(3, 4)}, r"column 'f32': expected shape \(n, 3\)"),
    'one more dimension': (lambda b: {**b, 'b': b['b'][:, None]}, r"column 'b': expected shape \(n, \)"),
    'rows that differ': (lambda b: {**b, 'f64': b['f64'][:2]}, 'columns must share their batch size'),
    'a 0-d column': (lambda b: {**b, 'f64': b['f64'][0]}, "column 'f64': expected a leading batch dimension"),
    'an extra column': (lambda b: {**b, 'x': b['f64']}, r"extra \['x'\]"),
    'a missing column': (lambda b: {k: v for k, v in b.items() if k != 'u8'}, r"missing \['u8'\]"),
    'a meta tensor': (lambda b: {**b, 'f16': torch.zeros(3, 2, dtype=torch.float16, device='meta')}, 'meta tensor'),
    'a list': (lambda b: {**b, 'f64': b['f64'].tolist()}, "column 'f64': expected a tensor"),
}

@pytest.mark.parametrize('case', sorted(BAD))
def test_batches_that_do_not_fit_are_refused_after_a_kept_layout(case):
    rng = np.random.default_rng(0)
    er = ExperienceReplay(bs=2, max_sz=10, warmup_sz=1, seed=0)
    for _ in range(2): er + FORMS['tensors'](rows(rng, 3))
    assert er.storage._layout[0] == 3  # the layout of batches of 3 rows is kept
    before = snapshot(er)
    make, msg = BAD[case]
    with pytest.raises(ExperienceReplayException, match=msg): er + make(FORMS['tensors'](rows(rng, 3)))
    assert unchanged(er, before)
    er + FORMS['tensors'](rows(rng, 3))  # the memory goes on as before
    assert (er.pointer, len(er)) == (9, 9)

def test_a_one_row_batch_of_another_shape_is_refused():
    "A flag of shape (1, 1, 1) holds one value like a (1,) column's row, and is still refused"
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    er + {'x': torch.zeros(1, 2), 'd': torch.zeros(1, 1, dtype=torch.bool)}
    before = snapshot(er)
    for d in (torch.ones(1, 1, 1, dtype=torch.bool), np.ones((1, 1, 1), bool)):
        with pytest.raises(ExperienceReplayException, match=r"column 'd': expected shape \(n, 1\)"):
            er + {'x': torch.ones(1, 2), 'd': d}
        assert unchanged(er, before)

def test_copies_and_loaded_states_copy_into_their_own_block():
    rng = np.random.default_rng(0)
    er = ExperienceReplay(bs=2, max_sz=6, warmup_sz=1, seed=0) + FORMS['tensors'](rows(rng, 3))
    before = snapshot(er)
    twin = ExperienceReplay(bs=2, max_sz=6, warmup_sz=1, seed=0)
    twin.load_state_dict(er.state_dict())
    r = rows(rng, 2)
    for other in (copy.deepcopy(er), pickle.loads(pickle.dumps(er)), twin):
        other + FORMS['tensors'](r)
        assert other.memory['f32'][3:].numpy().tobytes() == r['f32'].tobytes() and other.pointer == 5
    assert unchanged(er, before)

def test_a_batch_read_from_the_memory_is_added_as_it_was():
    "A batch of views of the block itself, overlapping the rows it is written to, is read whole before they are written"
    er = ExperienceReplay(bs=2, max_sz=8, warmup_sz=1, seed=0) + FORMS['tensors'](rows(np.random.default_rng(0), 5))
    expected = {k: er.storage.column(k).clone() for k in COLUMNS}
    er + {k: er.storage.column(k)[3:6] for k in COLUMNS}  # rows 3 to 5 written at rows 5 to 7
    for k, v in expected.items(): assert er.storage.column(k)[5:8].numpy().tobytes() == v[3:6].numpy().tobytes(), k
