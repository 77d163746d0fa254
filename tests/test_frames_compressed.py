"""The compressed frame tier: bit-exact against the plain frame storage, checkpointed through the persist format, and
refusing a bad or foreign state whole. The storage × sampler suite (`test_storage_sampler_pairs.py`, storage 'zframe')
runs it against the reference models with every sampler; here what is its own."""
import copy
import numpy as np, pytest, torch, zstandard as zstd
from fastrl_replay.memory.core import Replay, UniformSampler, ExperienceReplayException
from fastrl_replay.memory.prioritized import PrioritizedSampler
from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
from fastrl_replay.memory.persist import load_memory
from test_storage_sampler_pairs import assert_same_state, assert_same_batch

SHAPE = (6, 5)

def frames(n, seed=0):
    "Frames that change a little from step to step, as game frames do"
    rng = np.random.default_rng(seed)
    f = np.zeros((n, *SHAPE), np.uint8)
    f[0] = rng.integers(0, 256, SHAPE)
    for i in range(1, n):
        f[i] = f[i - 1]
        f[i].flat[rng.integers(0, f[i].size, 3)] = rng.integers(0, 256, 3)
    return f

def fill(storage, n, seed=0):
    "Steps of 3 environments interleaved, episodes of 2 to 9 steps, some truncated (with their final frames)"
    rng, fr = np.random.default_rng(seed), frames(n + 1, seed)
    for s in range(n):
        end = rng.random()
        trunc, term = 0.1 < end < 0.2, end < 0.1
        storage.add_step(fr[s], s % 4, float(s % 7), term, truncated=trunc, next_observation=255 - fr[s] if trunc else None, env_id=s % 3)
    return storage

def pair(max_sz, block, **kw):
    kw = dict(stack_size=4, n_steps=3, gamma=0.9, **kw)
    return FrameStorage(SHAPE, max_sz, **kw), CompressedFrameStorage(SHAPE, max_sz, block=block, **kw)

@pytest.mark.parametrize('max_sz,block,n', [(50, 8, 37), (50, 8, 173), (47, 8, 200), (5, 8, 23), (64, 1, 100), (30, 30, 95)])
def test_every_row_and_transition_equals_the_plain_storage(max_sz, block, n):
    "Frames at every row and every valid transition, bit for bit, across block ends, wraps, a partial last block and blocks larger than the ring"
    plain, packed = pair(max_sz, block)
    fill(plain, n); fill(packed, n)
    rows = np.arange(max_sz)
    np.testing.assert_array_equal(packed.frames_at(rows), plain.obs)
    np.testing.assert_array_equal(packed.frames_at(rows.reshape(-1, 1)[::-1]), plain.obs[::-1, None])
    valid = plain.valid(rows)
    np.testing.assert_array_equal(packed.valid(rows), valid)
    idx = torch.from_numpy(np.flatnonzero(valid))
    assert_same_batch(packed.gather(idx), plain.gather(idx))

def test_memory_is_the_compressed_blocks():
    "nbytes: the per-step arrays, the open block and the compressed blocks; far below the plain storage for slowly changing frames"
    plain, packed = pair(512, 32)
    fill(plain, 512); fill(packed, 512)
    blocks = sum(len(b) for b in packed.blocks)
    assert packed.nbytes() == plain.nbytes() - plain.obs.nbytes + blocks + packed.stage.nbytes
    assert blocks < plain.obs.nbytes / 3  # frames of 30 bytes changing in 3 a step: 3,968 bytes for 15,360

def memory(storage, seed=0): return Replay(storage, PrioritizedSampler(alpha=0.6, seed=seed), bs=8, warmup_sz=8)

def test_checkpoint_round_trip_through_the_persist_format(tmp_path):
    "save and load_memory: the same state and the same samples, before and after more steps"
    m = memory(CompressedFrameStorage(SHAPE, 40, block=6, stack_size=4, n_steps=3, gamma=0.9))
    fill(m.storage, 97)
    m.sampler.added(0, len(m.storage))
    m.save(tmp_path/'ckpt')
    r = load_memory(tmp_path/'ckpt')
    assert type(r.storage) is CompressedFrameStorage and r.storage.block == 6
    assert_same_state(r.state_dict(), m.state_dict())
    for _ in range(3):
        (b1, i1), (b2, i2) = m.sample(), r.sample()
        assert torch.equal(i1, i2); assert_same_batch(b1, b2)
    fill(m.storage, 11, seed=1); fill(r.storage, 11, seed=1)
    np.testing.assert_array_equal(r.storage.frames_at(np.arange(40)), m.storage.frames_at(np.arange(40)))

def damaged(state, what):
    s = copy.deepcopy(state)
    f = s['frames']
    if what == 'flipped byte': f['blob'][len(f['blob']) // 2] ^= 0xFF
    elif what == 'offsets backwards': f['offsets'][2], f['offsets'][3] = f['offsets'][3], f['offsets'][2]
    elif what == 'offsets past the blob': f['offsets'][-1] += 1
    elif what == 'block of other frames':  # a valid zstd frame that decodes to the wrong number of bytes
        other = zstd.ZstdCompressor().compress(bytes(10))
        sizes = np.diff(f['offsets']); sizes[0] = len(other)
        blob = np.concatenate([np.frombuffer(other, np.uint8), f['blob'][f['offsets'][1]:]])
        f['blob'], f['offsets'] = blob, np.concatenate([[0], np.cumsum(sizes)])
    elif what == 'open block elsewhere': f['open_block'] = (f['open_block'] + 1) % 7
    elif what == 'stage of another shape': f['stage'] = f['stage'][:, :-1]
    elif what == 'blob of floats': f['blob'] = f['blob'].astype(np.float32)
    elif what == 'other block size': f['block'] = 5
    elif what == 'no frames': del s['frames']
    return s

DAMAGE = ['flipped byte', 'offsets backwards', 'offsets past the blob', 'block of other frames', 'open block elsewhere',
          'stage of another shape', 'blob of floats', 'other block size', 'no frames']

@pytest.mark.parametrize('what', DAMAGE)
def test_a_damaged_state_is_refused_and_changes_nothing(what):
    src = fill(CompressedFrameStorage(SHAPE, 40, block=6, stack_size=4, n_steps=3), 97)
    dst = fill(CompressedFrameStorage(SHAPE, 40, block=6, stack_size=4, n_steps=3), 55, seed=2)
    before = copy.deepcopy(dst.state_dict())
    with pytest.raises((ExperienceReplayException, KeyError, TypeError)) as e: dst.load_state_dict(damaged(src.state_dict(), what))
    assert e.type is ExperienceReplayException, e.value
    assert_same_state(dst.state_dict(), before)

def test_states_of_the_other_frame_storage_are_refused():
    "A plain storage's state does not load into a compressed one, nor the reverse: the kinds differ"
    plain, packed = pair(40, 6)
    fill(plain, 50); fill(packed, 50)
    with pytest.raises(ExperienceReplayException, match='CompressedFrameStorage'): packed.load_state_dict(plain.state_dict())
    with pytest.raises(ExperienceReplayException, match='CompressedFrameStorage'): plain.load_state_dict(packed.state_dict())

def test_bad_steps_are_refused_and_change_nothing():
    st = fill(CompressedFrameStorage(SHAPE, 40, block=6, stack_size=4, n_steps=3), 47)
    before = copy.deepcopy(st.state_dict())
    for bad in (lambda: st.add_step(np.zeros((6, 4), np.uint8), 0, 0., False),  # another frame shape
                lambda: st.add_step(np.zeros(SHAPE, np.float32) + .5, 0, 0., False),  # not a uint8 frame
                lambda: st.add_step(np.zeros(SHAPE, np.uint8), 0, float('nan'), False),
                lambda: st.add({'state': np.zeros((3, *SHAPE), np.uint8), 'action': np.zeros(3), 'reward': np.array([0., 1., np.inf]),
                                'terminated': np.zeros(3, bool)})):
        with pytest.raises(ExperienceReplayException): bad()
        assert_same_state(st.state_dict(), before)

def test_settings_are_checked():
    for kw, msg in ((dict(block=0), 'block'), (dict(level=23), 'level must be an int from 1 to 22'),
                    (dict(storage_dir='/tmp/x'), 'keeps its compressed blocks in RAM')):
        with pytest.raises(ExperienceReplayException, match=msg): CompressedFrameStorage(SHAPE, 10, **kw)
    s = CompressedFrameStorage(SHAPE, 10, block=4, level=7, stack_size=2)
    assert (s.settings()['block'], s.settings()['level'], 'storage_dir' in s.settings()) == (4, 7, False)

@pytest.mark.parametrize('cls', [FrameStorage, CompressedFrameStorage])
def test_plain_steps_are_stored_as_checked_steps_and_bad_ones_refused(cls):
    "Steps of plain Python values take a shorter path of checks: the same rows as steps of NumPy values, and the same refusals, leaving the storage as it was"
    kw = dict(block=4) if cls is CompressedFrameStorage else {}
    plain, numpy_ = (cls(SHAPE, 16, stack_size=2, n_steps=2, gamma=0.5, **kw) for _ in range(2))
    fr = frames(24)
    for s in range(24):  # wraps around
        term, trunc = s % 7 == 6, s % 11 == 10
        plain.add_step(fr[s], s % 4, float(s % 5) - 1.5, term, truncated=trunc, next_observation=255 - fr[s] if trunc else None, env_id=s % 2)
        numpy_.add_step(fr[s], np.int64(s % 4), np.float32(s % 5 - 1.5), np.bool_(term), truncated=np.array(trunc),
                        next_observation=255 - fr[s] if trunc else None, env_id=s % 2)
    assert_same_state(plain.state_dict(), numpy_.state_dict())
    assert np.array_equal(plain.frames_at(np.arange(16)), numpy_.frames_at(np.arange(16)))
    before = copy.deepcopy(plain.state_dict())
    bad = [dict(reward=float('nan')), dict(reward=0.1), dict(reward=1e39), dict(action=2 ** 63), dict(env_id=-1), dict(env_id=2 ** 31),
           dict(observation=fr[0].astype(np.int16) + 256), dict(observation=fr[0][:-1]), dict(terminal=2), dict(truncated=True)]
    for b in bad:
        step = dict(observation=fr[0], action=1, reward=1., terminal=False) | {k: v for k, v in b.items() if k in ('observation', 'action', 'reward', 'terminal')}
        with pytest.raises(ExperienceReplayException): plain.add_step(**step, **{k: v for k, v in b.items() if k in ('env_id', 'truncated')})
    assert_same_state(plain.state_dict(), before)
