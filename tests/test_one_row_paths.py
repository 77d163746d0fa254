"""The ways one transition gets in: `+` of a one-row batch of tensors or arrays (read by value and packed into the row),
the same row through the checked one-row path, `append` without a batch dimension, and one batch of all the rows. Each
stores the same values, the pointer and length move alike, and what one refuses leaves the memory as it was."""
import copy, pickle
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory import experience_replay as xr
from fastrl_replay.memory.experience_replay import ExperienceReplay

def row(i:int) -> dict:
    return dict(state=torch.tensor([[i, i + .5, -i, 2. * i]]), action=torch.tensor([[i % 3]]), reward=torch.tensor([[i / 4]]),
                done=torch.tensor([[i % 5 == 0]]))

def filled(rows, max_sz=4) -> ExperienceReplay:
    er = ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0)
    for r in rows: er + r
    return er

def unchanged(er, before):
    return all(torch.equal(er.memory[k], v) for k, v in before[0].items()) and (er.pointer, len(er)) == before[1]

def snapshot(er): return {k: v.clone() for k, v in er.memory.items()}, (er.pointer, len(er))

def test_exact_rows_are_stored_as_given_across_the_wrap():
    er = filled([row(i) for i in range(6)])
    assert er.storage._values is not None  # these columns are written by value
    m = er.memory
    assert m['state'].tolist() == [[4., 4.5, -4., 8.], [5., 5.5, -5., 10.], [2., 2.5, -2., 4.], [3., 3.5, -3., 6.]]
    assert m['action'][:, 0].tolist() == [1, 2, 2, 0] and m['reward'][:, 0].tolist() == [1., 1.25, .5, .75]
    assert m['done'][:, 0].tolist() == [False, True, False, False] and len(er) == 4

def test_views_and_other_layouts_store_their_values():
    er = filled([row(0)])
    neg = neg_view(torch.tensor([[-1., 2., 0., 4.]]))
    strided = torch.arange(8.).reshape(4, 2).T[:1]  # [[0, 2, 4, 6]], not contiguous
    assert not strided.is_contiguous() and strided.shape == (1, 4)
    er + {**row(1), 'state': neg}
    er + {**row(2), 'state': strided}
    er + dict(reversed(list(row(3).items())))  # keys in another order
    assert er.memory['state'][1:].tolist() == [[-1., 2., 0., 4.], [0., 2., 4., 6.], [3., 3.5, -3., 6.]]

def test_tensors_outside_plain_ones_store_their_values():
    "A tensor that requires grad, a Parameter, an inference tensor, one tensor in two columns, a 1x1 row of a strided tensor"
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    er + {'a': torch.zeros(1, 2), 'b': torch.zeros(1, 1), 'c': torch.zeros(1, 1)}
    w = torch.tensor([[1., 2.]], requires_grad=True)
    with torch.inference_mode(): inf = torch.tensor([[5., 6.]])
    one = torch.tensor([[7.]])
    er + {'a': w, 'b': torch.tensor([[1.]]), 'c': torch.tensor([[2.]])}
    er + {'a': torch.nn.Parameter(torch.tensor([[3., 4.]])), 'b': one, 'c': one}
    er + {'a': inf, 'b': torch.arange(6.).reshape(2, 3)[:1, 1:2], 'c': torch.tensor([[8.]])}
    m = er.memory
    assert m['a'].tolist() == [[0., 0.], [1., 2.], [3., 4.], [5., 6.]]
    assert m['b'][:, 0].tolist() == [0., 1., 7., 1.] and m['c'][:, 0].tolist() == [0., 2., 7., 8.]
    assert w.requires_grad and w.grad is None and len(er) == 4
    with torch.inference_mode(): er + {'a': torch.tensor([[9., 9.]]), 'b': one, 'c': one}  # inside inference mode too
    assert er.memory['a'][0].tolist() == [9., 9.] and er.pointer == 1

def neg_view(x:torch.Tensor) -> torch.Tensor:
    "A negative view of float32 or float64 `x` with the values of `x`"
    res = torch.complex(torch.zeros_like(x), -x).conj().imag
    assert res.is_neg() and torch.allclose(res, x, rtol=0, atol=0, equal_nan=True)
    return res

def test_conjugated_complex_numbers_store_their_values():
    z = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    z + {'z': torch.tensor([[1 + 2j]]), 'a': torch.tensor([[1.]])}
    z + {'z': torch.tensor([[3 + 4j]]).conj(), 'a': torch.tensor([[2.]])}
    assert z.storage._values is None  # complex numbers: the checked path
    assert z.memory['z'][:, 0].tolist() == [1 + 2j, 3 - 4j] and z.memory['a'][:, 0].tolist() == [1., 2.]

def test_rows_that_do_not_fit_are_refused_and_change_nothing():
    er = filled([row(0), row(1)])
    before = snapshot(er)
    bad = [({**row(2), 'state': torch.zeros(1, 3)}, "column 'state'"),
           ({**row(2), 'state': torch.zeros(1, 1, 4)}, "column 'state'"),
           ({**row(2), 'state': torch.zeros(4)}, "column 'state'"),
           ({**row(2), 'action': torch.tensor([[1.5]])}, "column 'action'"),
           ({**row(2), 'state': torch.tensor([[1, 2, 3, 4]])}, "column 'state': dtype int64 cannot be stored as float32"),
           ({**row(2), 'done': torch.tensor([[1]])}, "column 'done': dtype int64 cannot be stored as bool"),
           ({**row(2), 'reward': torch.zeros(1, 1, device='meta')}, "column 'reward': expected a tensor with values"),
           ({**row(2), 'extra': torch.zeros(1, 1)}, 'extra'),
           ({k: v for k, v in row(2).items() if k != 'done'}, 'missing')]
    for b, msg in bad:
        with pytest.raises(ExperienceReplayException, match=msg): er + b
        assert unchanged(er, before), msg
    er + {**row(2), 'action': torch.tensor([[2]], dtype=torch.int32)}  # a narrower integer is cast
    er + {**row(3), 'reward': torch.tensor([[0.1]], dtype=torch.float64)}  # a wider float is rounded
    assert er.memory['action'][:, 0].tolist() == [0, 1, 2, 0] and er.memory['reward'][3, 0].item() == np.float32(0.1)

def test_a_copy_writes_its_own_rows():
    "The plan of a one-row write views the block of rows: a deep copy and a pickle make their own"
    er = filled([row(i) for i in range(3)])
    for other in (copy.deepcopy(er), pickle.loads(pickle.dumps(er))):
        other + row(7)
        other.append({'state': np.full(4, 9, np.float32), 'action': np.array([2]), 'reward': np.array([.5], np.float32),
                      'done': np.array([True])})
        assert other.memory['state'][:, 0].tolist() == [9., 1., 2., 7.] and other.pointer == 1 and len(other) == 4
        assert other.memory['action'][:, 0].tolist() == [2, 1, 2, 1]
        assert other.memory['done'][:, 0].tolist() == [True, False, False, False]
        assert other.sample(4)[0]['state'].shape == (4, 4)
    assert er.memory['state'][:, 0].tolist() == [0., 1., 2.] and len(er) == 3 and er.pointer == 3
    assert er.storage.column('state')[3].tolist() == [0., 0., 0., 0.]  # the row after them untouched

def test_a_loaded_state_writes_into_its_own_block():
    er = filled([row(i) for i in range(3)])
    twin = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    twin.load_state_dict(er.state_dict())
    twin + row(8)
    assert twin.memory['state'][3, 0].item() == 8. and len(er) == 3 and er.storage.column('state')[3].tolist() == [0.] * 4

# A transition of every kind of column the value path packs, and forms a one-row batch of it may take
COLUMNS = {'f32': ((3,), np.float32), 'f64': ((), np.float64), 'f16': ((2,), np.float16), 'i64': ((), np.int64),
           'i32': ((1,), np.int32), 'u8': ((2,), np.uint8), 'i8': ((), np.int8), 'b': ((), np.bool_)}

def values(draw_floats, draw_ints, i:int) -> dict:
    "Row `i` of a transition as NumPy values without a batch dimension"
    res = {}
    for k, (shape, dt) in COLUMNS.items():
        n = int(np.prod(shape))
        if np.dtype(dt).kind == 'f': v = np.asarray(draw_floats[i * 8:i * 8 + n] or [0.] * n, dt)
        elif dt is np.bool_: v = np.asarray([x % 2 == 0 for x in draw_ints[i * 8:i * 8 + n]] or [False] * n)
        else:
            info = np.iinfo(dt)
            v = np.asarray([min(max(x, info.min), info.max) for x in draw_ints[i * 8:i * 8 + n]] or [0] * n, dt)
        res[k] = v.reshape(shape) if len(v) == n else np.zeros(shape, dt)
    return res

FORMS = {  # a one-row batch of a transition's values
    'tensors': lambda t: {k: torch.from_numpy(np.array(v))[None] for k, v in t.items()},
    'arrays': lambda t: {k: np.array(v)[None] for k, v in t.items()},
    'negated views': lambda t: {k: neg_view(torch.from_numpy(np.array(v))[None]) if COLUMNS[k][1] in (np.float32, np.float64)
                                else torch.from_numpy(np.array(v))[None] for k, v in t.items()},
    'strided': lambda t: {k: torch.from_numpy(np.repeat(np.array(v)[None], 2, axis=0))[::2] for k, v in t.items()},
    'keys reversed': lambda t: dict(reversed([(k, torch.from_numpy(np.array(v))[None]) for k, v in t.items()])),
    'requires grad': lambda t: {k: torch.from_numpy(np.array(v))[None].requires_grad_() if np.dtype(COLUMNS[k][1]).kind == 'f'
                                else torch.from_numpy(np.array(v))[None] for k, v in t.items()},
}

def same_memory(a:ExperienceReplay, b:ExperienceReplay) -> bool:
    "The same pointer, length and bytes of every stored value (NaN payloads aside: values are read as numbers)"
    if (a.pointer, len(a)) != (b.pointer, len(b)): return False
    for k in a.storage.keys:
        x, y = a.memory[k].numpy(), b.memory[k].numpy()
        if x.dtype.kind == 'f' and not np.array_equal(np.isnan(x), np.isnan(y)): return False
        if not np.array_equal(np.where(np.isnan(x), 0, x) if x.dtype.kind == 'f' else x,
                              np.where(np.isnan(y), 0, y) if y.dtype.kind == 'f' else y): return False
        if x.dtype.kind == 'f' and not np.array_equal(np.signbit(x) & ~np.isnan(x), np.signbit(y) & ~np.isnan(y)): return False
    return True

@settings(max_examples=60, deadline=None)
@given(floats=st.lists(st.floats(width=16), max_size=80), ints=st.lists(st.integers(-2**63, 2**63 - 1), max_size=80),
       forms=st.lists(st.sampled_from(sorted(FORMS)), min_size=1, max_size=9), max_sz=st.integers(1, 5))
def test_every_one_row_path_stores_what_one_batch_stores(floats, ints, forms, max_sz):
    rows = [values(floats, ints, i) for i in range(len(forms))]
    mk = lambda: ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0)
    plus, by_value, checked, appended, batch = mk(), mk(), mk(), mk(), mk()
    batch + {k: np.stack([r[k] for r in rows]) for k in COLUMNS}
    for i, (f, r) in enumerate(zip(forms, rows)):
        plus + FORMS[f](r)
        appended.append(r)
        checked + FORMS[f](r)
        checked.storage._values = None  # the checked one-row path from the second row on
        if not i: by_value + FORMS[f](r)  # the first row makes the columns
        else:
            p = by_value.storage._put_values(FORMS[f](r))
            assert p >= 0, f  # every form is written by value
            by_value.sampler.added(p, 1)
    for other in (checked, appended, plus, by_value):
        assert same_memory(other, batch), forms

@settings(max_examples=30, deadline=None)
@given(forms=st.lists(st.sampled_from(sorted(FORMS)), min_size=1, max_size=6), bad=st.sampled_from(['shape', 'dtype', 'key', 'meta']))
def test_a_row_one_path_refuses_every_path_refuses_and_nothing_changes(forms, bad):
    rows = [values([.5 * i for i in range(80)], list(range(80)), i) for i in range(len(forms) + 1)]
    mk = lambda: ExperienceReplay(bs=2, max_sz=3, warmup_sz=1, seed=0)
    plus, checked = mk(), mk()
    for f, r in zip(forms, rows):
        plus + FORMS[f](r); checked + FORMS[f](r)
    checked.storage._values = None
    b = FORMS[forms[0]](rows[-1])
    b = {'shape': {**b, 'f32': torch.zeros(1, 4)}, 'dtype': {**b, 'i8': torch.zeros(1, dtype=torch.int64)},
         'key': {**b, 'extra': torch.zeros(1)}, 'meta': {**b, 'f64': torch.zeros(1, dtype=torch.float64, device='meta')}}[bad]
    for er in (plus, checked):
        before = snapshot(er)
        with pytest.raises(ExperienceReplayException): er + b
        assert unchanged(er, before)
    assert same_memory(plus, checked)

# Columns of one value and of several, of each kind the value path reads, a bool of several values among them
SHAPED = {'f32': ((3,), np.float32), 'b3': ((3,), np.bool_), 'r': ((1,), np.float32), 'i64': ((), np.int64),
          'f16': ((2,), np.float16), 'u8': ((2,), np.uint8)}

def near_shapes(shape:tuple) -> list[tuple]:
    "The shape of one row of a column of trailing `shape`, first, and shapes near it that are not"
    res = [(1, *shape), (1, *shape, 1), (1, 1, *shape), shape, (2, *shape), (0, *shape), (1,), ()]
    if shape: res += [(1, shape[0] + 1), (1, max(shape[0] - 1, 0)), (1, shape[0], 2)]
    return list(dict.fromkeys(res))

def value_path_agrees(seed:int, shapes:dict, wide:str|None, arrays:bool) -> bool:
    "Whether the value path writes a row in `shapes` (`wide` in float64) as the checked path does, or if not exact, not"
    rng = np.random.default_rng(seed)
    def col(shape, dt):
        v = rng.integers(0, 2, shape).astype(dt) if dt is np.bool_ else (rng.standard_normal(shape) * 100).astype(dt)
        v = np.array(v)  # an array of a 0-d shape too
        return v if arrays else torch.from_numpy(v)
    first = {k: col((2, *s), dt) for k, (s, dt) in SHAPED.items()}
    mk = lambda: ExperienceReplay(bs=2, max_sz=3, warmup_sz=1, seed=0, memory=first)
    by_value, checked = mk(), mk()
    checked.storage._values = None
    b = {k: col(shapes[k], np.float64 if k == wide and dt is not np.bool_ else dt) for k, (_, dt) in SHAPED.items()}
    exact = all(shapes[k] == (1, *s) for k, (s, _) in SHAPED.items()) and wide in (None, 'b3')
    before = snapshot(by_value)
    p = by_value.storage._put_values(b)
    if p < 0: return not exact and unchanged(by_value, before)
    by_value.sampler.added(p, 1)
    checked + b  # the checked path takes every row the value path takes, and stores the same bytes
    return exact and same_memory(by_value, checked) and all(np.array_equal(by_value.memory[k].numpy(),
                                                                           checked.memory[k].numpy()) for k in SHAPED)

ONE_ROW = {k: (1, *s) for k, (s, _) in SHAPED.items()}

@pytest.mark.parametrize('arrays', [False, True])
@pytest.mark.parametrize('off, shape', [pytest.param(k, x, id=f'{k}{x}') for k, (s, _) in SHAPED.items()
                                         for x in near_shapes(s)[1:]])
def test_a_column_in_another_shape_is_left_to_the_checked_path(off, shape, arrays):
    assert value_path_agrees(0, {**ONE_ROW, off: shape}, None, arrays)

def test_values_moved_between_columns_are_left_to_the_checked_path():
    "As many values in all, one more in one column and one fewer in another"
    for arrays in (False, True): assert value_path_agrees(1, {**ONE_ROW, 'f32': (1, 4), 'f16': (1, 1)}, None, arrays)

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), wide=st.sampled_from([None, *SHAPED]), arrays=st.booleans())
def test_the_value_path_writes_the_checked_paths_bytes(seed, wide, arrays):
    "Any values of one row, or a column `wide` in float64 (which the checked path rounds, and the value path leaves)"
    assert value_path_agrees(seed, ONE_ROW, wide, arrays)

def test_a_tensor_subclass_is_read_by_value():
    "A `Parameter` has a tensor's dtype and values: the value path takes it past the first column, `+` wherever it is"
    er = filled([row(0)])
    p = er.storage._put_values({**row(1), 'state': torch.nn.Parameter(torch.tensor([[1., 2., 3., 4.]])),
                                'reward': torch.nn.Parameter(torch.tensor([[.25]]))})
    assert p == 1 and er.memory['state'][1].tolist() == [1., 2., 3., 4.] and er.memory['reward'][1, 0].item() == .25
    er + {**row(2), 'action': torch.nn.Parameter(torch.tensor([[2]]), requires_grad=False)}  # the first column
    assert er.memory['action'][:, 0].tolist() == [0, 1, 2] and er.pointer == 3
