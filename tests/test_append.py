"One transition at a time: `append` against `+` of the same rows, the forms a transition may take, and refused input."
from collections import namedtuple
from dataclasses import dataclass
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.persist import load_memory

SARS = namedtuple('SARS', 'state action reward nextState')


@dataclass
class Step:
    state: np.ndarray
    action: int
    reward: float
    done: bool


def steps(n, start=0):
    "n transitions as plain Python values and float32 arrays"
    return [dict(state=np.arange(4, dtype=np.float32) + t, action=t % 3, reward=float(t) / 4, done=t % 5 == 4) for t in range(start, start + n)]


def as_batch(rows):
    return {'state': torch.from_numpy(np.stack([r['state'] for r in rows])), 'action': torch.tensor([r['action'] for r in rows]),
            'reward': torch.tensor([r['reward'] for r in rows], dtype=torch.float32), 'done': torch.tensor([r['done'] for r in rows])}


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6), max_sz=st.integers(1, 12))
def test_append_one_at_a_time_equals_adding_the_batch(sizes, max_sz):
    one, batch, t = ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0), ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0), 0
    for n in sizes:
        rows = steps(n, t); t += n
        for r in rows: one.append(r)
        batch + as_batch(rows)
        assert (one.pointer, len(one)) == (batch.pointer, len(batch))
        for k in batch.keys: assert torch.equal(one.memory[k], batch.memory[k]), k
    assert torch.equal(one.sample()[1], batch.sample()[1])


def test_every_form_of_a_transition():
    er = ExperienceReplay(bs=2, max_sz=10, warmup_sz=1, seed=0, fields=('state', 'action', 'reward', 'done'))
    er.append(steps(1)[0])
    er.append(Step(np.full(4, 7, np.float32), 2, 0.5, True))
    er.append((np.zeros(4, np.float32), 1, -1.0, False))
    er.append([torch.ones(4), torch.tensor(0), 2.0, False])
    named = ExperienceReplay(bs=2, max_sz=10, warmup_sz=1)
    named.append(SARS(state=(10.3, 0.4, 0.2, 0.5), action=2, reward=10.0, nextState=(10.4, 0.4, 0.1, 0.5)))
    assert er.memory['action'].tolist() == [0, 2, 1, 0] and er.memory['reward'].tolist() == [0., .5, -1., 2.]
    assert (er.memory['state'].dtype, er.memory['action'].dtype, er.memory['reward'].dtype, er.memory['done'].dtype) == \
           (torch.float32, torch.int64, torch.float32, torch.bool)
    r = named.row(0)
    assert r.reward.item() == 10.0 and r.state.tolist() == pytest.approx([10.3, 0.4, 0.2, 0.5]) and r.state.dtype == torch.float32
    assert named.row(-1).action.item() == 2
    b, _ = named.sample()
    assert b.nextState.shape == (2, 4) and b.action.shape == (2,)


@pytest.mark.parametrize('bad,message', [
    (dict(steps(1)[0], action=1.5), "column 'action': the float 1.5 cannot be stored as int64"),
    (dict(steps(1)[0], action=2**63), "column 'action': the int 9223372036854775808 cannot be stored as int64"),
    (dict(steps(1)[0], done=1), "column 'done': the int 1 cannot be stored as bool"),
    (dict(steps(1)[0], state=np.zeros(5, np.float32)), "column 'state': expected shape (4,) for one transition, got (5,)"),
    (dict(steps(1)[0], state=np.zeros(4, np.int64)), "column 'state': dtype int64 cannot be stored as float32"),  # floats round; ints must fit
    (dict(steps(1)[0], state=np.zeros(4, np.complex128)), "column 'state': dtype complex128 cannot be stored as float32"),
    (dict(steps(1)[0], reward=(1.0, 2.0)), "column 'reward': expected shape () for one transition, got (2,)"),
    ({k: v for k, v in steps(1)[0].items() if k != 'done'}, "missing ['done'], extra []"),
    (dict(steps(1)[0], td_error=float('nan')), "'td_error' holds NaN"),
    (as_batch(steps(3)), "column 'state': expected shape (4,) for one transition, got (3, 4): a batch of 3 rows? add batches with `memory + batch`"),
    ((1, 2), 'a tuple when the memory was made with fields=(...)'),
])
def test_bad_transitions_are_refused_whole(bad, message):
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0)
    for r in steps(5): er.append(r)
    before = {k: v.clone() for k, v in er.memory.items()}, er.pointer, len(er)
    with pytest.raises(ExperienceReplayException) as e: er.append(bad)
    assert message in str(e.value)
    assert (er.pointer, len(er)) == before[1:] and all(torch.equal(er.memory[k], v) for k, v in before[0].items())


def test_plus_says_to_append_one_transition():
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1)
    er.append(steps(1)[0])
    with pytest.raises(ExperienceReplayException, match='add it with `memory.append'): er + Step(np.zeros(4, np.float32), 0, 0., False)
    with pytest.raises(ExperienceReplayException, match=r"expected shape \(n, 4\), got \(4,\)"): er + {k: np.asarray(v) for k, v in steps(1)[0].items()}


def test_prioritized_append_gives_new_rows_the_top_priority_and_fields_survive_a_checkpoint(tmp_path):
    per = PrioritizedExperienceReplay(bs=4, max_sz=8, warmup_sz=1, seed=0, fields=None)
    for r in steps(3): per.append(r)
    _, idxs = per.sample(); per.update_td(torch.full((4,), 3.), idxs)
    per.append(steps(1, 3)[0])
    assert per.get_priority(torch.tensor([3])).item() == pytest.approx(per.max_priority)
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0, fields=('state', 'action', 'reward', 'done'))
    er.append((np.zeros(4, np.float32), 1, 1., False))
    er.save(tmp_path/'ck')
    twin = load_memory(tmp_path/'ck')
    assert twin.fields == er.fields
    twin.append((np.ones(4, np.float32), 2, 0., True))
    assert twin.memory['action'].tolist() == [1, 2]


ONE_ROW_FORMS = {  # how a batch of one row may arrive, from the exact dtypes of the columns to values that are cast
    'numpy': lambda b: {k: v.numpy() for k, v in b.items()},
    'torch': lambda b: b,
    'cast losslessly': lambda b: {**{k: v.numpy() for k, v in b.items()}, 'state': b['state'].half().numpy(), 'action': b['action'].int().numpy()},
    'with td_error': lambda b: {**b, 'td_error': torch.full((1, 1), 0.5)},
    'non-contiguous': lambda b: {**b, 'state': torch.from_numpy(np.repeat(b['state'].numpy(), 2, axis=1)[:, ::2])},
}


@settings(max_examples=30, deadline=None)
@given(forms=st.lists(st.sampled_from(sorted(ONE_ROW_FORMS)), min_size=1, max_size=14), max_sz=st.integers(1, 6))
def test_plus_of_one_row_equals_the_same_rows_added_as_one_batch(forms, max_sz):
    one, forms = ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0), ['torch'] + forms  # the first row types the columns
    rows = steps(len(forms))
    for i, (f, r) in enumerate(zip(forms, rows)):
        one + ONE_ROW_FORMS[f](as_batch([r]))
        whole = as_batch(rows[:i + 1])
        whole['td_error'] = torch.tensor([[0.5 if g == 'with td_error' else 0.] for g in forms[:i + 1]])
        batch = ExperienceReplay(bs=2, max_sz=max_sz, warmup_sz=1, seed=0) + whole
        assert (one.pointer, len(one)) == (batch.pointer, len(batch))
        for k in batch.keys: assert torch.equal(one.memory[k], batch.memory[k]), (k, forms)


@pytest.mark.parametrize('bad, message', [
    (dict(td_error=np.array([[np.nan]], np.float32)), "'td_error' holds NaN or inf values"),
    (dict(state=np.zeros((1, 5), np.float32)), "column 'state': expected shape (n, 4), got (1, 5)"),
    (dict(extra=np.zeros((1, 1), np.float32)), 'extra'),
    (dict(action=torch.zeros(1, dtype=torch.float32)), "column 'action': dtype float32 cannot be stored as int64"),
])
def test_a_bad_one_row_batch_is_refused_whole_with_a_batch_message(bad, message):
    er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=1, seed=0) + as_batch(steps(3))
    before = {k: v.clone() for k, v in er.memory.items()}
    row = {k: v.numpy() for k, v in as_batch(steps(1, 3)).items()}
    with pytest.raises(ExperienceReplayException, match=message.replace('(', r'\(').replace(')', r'\)')): er + {**row, **bad}
    assert (er.pointer, len(er)) == (3, 3)
    for k, v in before.items(): assert torch.equal(er.memory[k], v), k
