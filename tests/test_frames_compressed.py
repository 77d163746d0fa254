"""The compressed frame tier: bit-exact against the plain frame storage, checkpointed through the persist format, and
refusing a bad or foreign state whole. The storage × sampler suite (`test_storage_sampler_pairs.py`, storage 'zframe')
runs it against the reference models with every sampler; here what is its own."""
import copy, zlib
import numpy as np, pytest, torch, zstandard as zstd
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.memory.core import Replay, UniformSampler, ExperienceReplayException
from fastrl_replay.memory.prioritized import PrioritizedSampler
from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
from fastrl_replay.memory.persist import load_memory
from test_storage_sampler_pairs import assert_same_state, assert_same_batch

SHAPE = (6, 5)

def frames(n, seed=0, shape=SHAPE, changes=3):
    "Frames of `shape` that change a little (`changes` pixels) from step to step, as game frames do"
    rng = np.random.default_rng(seed)
    f = np.zeros((n, *shape), np.uint8)
    f[0] = rng.integers(0, 256, shape)
    for i in range(1, n):
        f[i] = f[i - 1]
        f[i].flat[rng.integers(0, f[i].size, changes)] = rng.integers(0, 256, changes)
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
    assert_same_frames_and_transitions(plain, packed)
    np.testing.assert_array_equal(packed.frames_at(np.arange(max_sz).reshape(-1, 1)[::-1]), plain.obs[::-1, None])

def test_memory_is_the_compressed_blocks():
    "nbytes: the per-step arrays, the open block, the compressed blocks and their seals; far below the plain storage"
    plain, packed = pair(512, 32)
    fill(plain, 512); fill(packed, 512)
    blocks = sum(len(b) for b in packed.blocks)
    assert packed.nbytes() == plain.nbytes() - plain.obs.nbytes + blocks + packed.stage.nbytes + 4 * packed.n_blocks
    assert blocks < plain.obs.nbytes / 3  # frames of 30 bytes changing in 3 a step: 3,904 bytes for 15,360

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
    elif what == 'flipped dictionary': f['dictionary'] = f['dictionary'] ^ 1  # no longer the dictionary the blocks were written with
    elif what == 'dictionary untrained': f['trained'] = False
    elif what == 'dictionary of ints': f['dictionary'] = f['dictionary'].astype(np.int64)
    elif what == 'dictionary dropped': del f['dictionary']
    return s

DAMAGE = ['flipped byte', 'offsets backwards', 'offsets past the blob', 'block of other frames', 'open block elsewhere',
          'stage of another shape', 'blob of floats', 'other block size', 'no frames']

DICT_DAMAGE = ['flipped dictionary', 'dictionary untrained', 'dictionary of ints', 'dictionary dropped']

@pytest.mark.parametrize('what', DAMAGE + DICT_DAMAGE)
def test_a_damaged_state_is_refused_and_changes_nothing(what):
    kw = dict(dictionary_frames=64, dictionary_size=512) if what in DICT_DAMAGE else {}
    C = 80 if kw else 40
    src = fill(CompressedFrameStorage(SHAPE, C, block=6, stack_size=4, n_steps=3, **kw), 97)
    dst = fill(CompressedFrameStorage(SHAPE, C, block=6, stack_size=4, n_steps=3, **kw), 55, seed=2)
    assert len(src.dictionary) == (512 if kw else 0)
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
                    (dict(storage_dir='/tmp/x'), 'keeps its compressed blocks in RAM'), (dict(dictionary_frames=-1), 'dictionary_frames'),
                    (dict(dictionary_size=255), 'dictionary_size must be an int of at least 256 bytes'), (dict(dictionary_size=1e4), 'dictionary_size'),
                    (dict(part=0), 'part'), (dict(part=2.5), 'part')):
        with pytest.raises(ExperienceReplayException, match=msg): CompressedFrameStorage(SHAPE, 10, **kw)
    s = CompressedFrameStorage(SHAPE, 10, block=4, part=3, level=7, stack_size=2, dictionary_frames=9, dictionary_size=300)
    assert ({k: s.settings()[k] for k in ('block', 'part', 'level', 'dictionary_frames', 'dictionary_size')}, 'storage_dir' in s.settings()) == (
        dict(block=4, part=3, level=7, dictionary_frames=9, dictionary_size=300), False)
    assert [CompressedFrameStorage(SHAPE, 10, block=b).part for b in (1, 8)] == [1, 8]  # by default one zstd block a block

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

# --- the zstd dictionary trained on the first frames ---------------------------------------------------------------------

def with_dictionary(max_sz, block=8, frames=64, **kw):
    "A plain storage and a compressed one that trains a dictionary of 1,024 bytes once `frames` frames are stored"
    kw = dict(stack_size=4, n_steps=3, gamma=0.9, **kw)
    return FrameStorage(SHAPE, max_sz, **kw), CompressedFrameStorage(SHAPE, max_sz, block=block, dictionary_frames=frames, dictionary_size=1024, **kw)

def assert_same_frames_and_transitions(plain, packed):
    rows = np.arange(plain.max_sz)
    np.testing.assert_array_equal(packed.frames_at(rows), plain.obs)
    valid = plain.valid(rows)
    np.testing.assert_array_equal(packed.valid(rows), valid)
    idx = torch.from_numpy(np.flatnonzero(valid))
    assert_same_batch(packed.gather(idx), plain.gather(idx))

def test_the_dictionary_is_trained_once_and_every_block_is_compressed_with_it():
    "Before `dictionary_frames` frames the blocks need no dictionary; the block that reaches them trains one and compresses every closed block again with it"
    plain, packed = with_dictionary(200)
    fill(plain, 63); fill(packed, 63)
    assert (packed.trained, packed.dictionary) == (False, b'')
    assert len(zstd.ZstdDecompressor().decompress(packed.blocks[0])) == 8 * 30  # a block without a dictionary
    assert_same_frames_and_transitions(plain, packed)
    fill(plain, 1, seed=5); fill(packed, 1, seed=5)  # the 64th frame closes the 8th block
    assert packed.trained and len(packed.dictionary) == 1024 and packed.open_block == 8
    for b in packed.blocks[:8]:
        with pytest.raises(zstd.ZstdError): zstd.ZstdDecompressor().decompress(b)  # each needs the dictionary now
    assert_same_frames_and_transitions(plain, packed)
    d = packed.dictionary
    fill(plain, 333, seed=1); fill(packed, 333, seed=1)  # wraps
    assert packed.dictionary == d
    assert_same_frames_and_transitions(plain, packed)
    assert packed.nbytes() == (plain.nbytes() - plain.obs.nbytes + sum(map(len, packed.blocks)) + packed.stage.nbytes
                               + 4 * packed.n_blocks + 1024)

def test_the_dictionary_makes_the_blocks_smaller():
    "The same 500 steps of slowly changing frames: 2,406 bytes of blocks with the dictionary, 2,607 without"
    sizes = []
    for frames in (64, 0):
        _, packed = with_dictionary(200, frames=frames)
        fill(packed, 500)
        sizes.append(sum(map(len, packed.blocks)))
    assert sizes == [2406, 2607]

@pytest.mark.parametrize('max_sz,frames', [(200, 16), (40, 41), (40, 0)])
def test_no_dictionary_when_training_fails_or_is_not_wanted(max_sz, frames):
    "Two blocks are too few samples to train on, a ring smaller than `dictionary_frames` never holds them, 0 asks for none: blocks without a dictionary, read exactly"
    plain, packed = with_dictionary(max_sz, frames=frames)
    fill(plain, 300); fill(packed, 300)
    assert (packed.trained, packed.dictionary) == (True, b'')
    assert_same_frames_and_transitions(plain, packed)

@pytest.mark.parametrize('n', [40, 64, 97, 333])  # before the training, at it, after it, after a wrap
def test_a_checkpoint_holds_the_dictionary_and_resumes_exactly(tmp_path, n):
    "save and load_memory: the same dictionary, blocks and samples; from before the training, the restored memory trains the same dictionary"
    m = memory(CompressedFrameStorage(SHAPE, 200, block=8, stack_size=4, n_steps=3, gamma=0.9, dictionary_frames=64, dictionary_size=1024))
    fill(m.storage, n)
    m.sampler.added(0, len(m.storage))
    m.save(tmp_path/'ckpt')
    r = load_memory(tmp_path/'ckpt')
    assert (r.storage.dictionary, r.storage.trained, r.storage.blocks) == (m.storage.dictionary, m.storage.trained, m.storage.blocks)
    assert len(m.storage.dictionary) == (0 if n < 64 else 1024)
    assert_same_state(r.state_dict(), m.state_dict())
    for _ in range(3):
        (b1, i1), (b2, i2) = m.sample(), r.sample()
        assert torch.equal(i1, i2); assert_same_batch(b1, b2)
    fill(m.storage, 150, seed=1); fill(r.storage, 150, seed=1)
    assert len(r.storage.dictionary) == 1024
    assert (r.storage.dictionary, r.storage.blocks) == (m.storage.dictionary, m.storage.blocks)
    np.testing.assert_array_equal(r.storage.frames_at(np.arange(200)), m.storage.frames_at(np.arange(200)))

def test_a_state_from_before_dictionaries_loads_and_trains_when_its_frames_are_enough():
    "A state without 'dictionary' and 'trained' (written before the compressed tier had them) loads; its next block closed trains the dictionary"
    plain, new = with_dictionary(200)
    old = CompressedFrameStorage(SHAPE, 200, block=8, stack_size=4, n_steps=3, gamma=0.9, dictionary_frames=0)
    fill(plain, 120); fill(old, 120)
    state = old.state_dict()
    state['frames'] = {k: v for k, v in state['frames'].items() if k not in ('dictionary', 'trained')}
    new.load_state_dict(state)
    assert (new.trained, new.dictionary) == (False, b'')
    assert_same_frames_and_transitions(plain, new)
    fill(plain, 8, seed=1); fill(new, 8, seed=1)  # closes the block of rows 120-127
    assert new.trained and len(new.dictionary) == 1024
    assert_same_frames_and_transitions(plain, new)

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(max_sz=st.integers(1, 160), block=st.integers(1, 9), frames=st.sampled_from([0, 1, 24, 48, 96, 200]), n=st.integers(1, 400),
       seed=st.integers(0, 2 ** 16), part=st.sampled_from([None, 1, 2, 3]))
def test_every_read_is_exact_with_and_without_a_dictionary(max_sz, block, frames, n, seed, part):
    "Episodes ending (terminated or truncated), three interleaved environments, wraps, partial last blocks, parts of blocks, training before, at or after a wrap, or failing: every frame and transition is the plain storage's"
    kw = dict(stack_size=3, n_steps=2, gamma=0.5)
    plain = FrameStorage(SHAPE, max_sz, **kw)
    packed = CompressedFrameStorage(SHAPE, max_sz, block=block, part=part, dictionary_frames=frames, dictionary_size=512, **kw)
    fr, steps = globals()['frames'](n + 1, seed), np.random.default_rng(seed).integers(0, 10, n).tolist()  # 0: terminated, 1: truncated
    for s, e in enumerate(steps):
        term, trunc = e == 0, e == 1
        for m in (plain, packed): m.add_step(fr[s], e, float(e), term, truncated=trunc, next_observation=255 - fr[s] if trunc else None, env_id=e % 3)
    closes = [s for s in range(len(steps)) if (s % max_sz) % block == block - 1 or s % max_sz == max_sz - 1]  # steps that close a block
    assert packed.trained == (not 0 < frames <= max_sz or any(s + 1 >= frames for s in closes))
    assert packed.trained or packed.dictionary == b''
    assert_same_frames_and_transitions(plain, packed)

# --- reads: whole blocks decoded with zstandard, blocks written in parts or whole --------------------------------------

BIG = (32, 40)  # frames of 1,280 bytes

def big_frames(n, seed=0): return frames(n, seed, BIG, 40)

def fill_big(storages, n, seed=0):
    fr, rng = big_frames(n, seed), np.random.default_rng(seed)
    for s in range(n):
        end = rng.random()
        for m in storages: m.add_step(fr[s], s % 4, float(s % 7), end < 0.1, truncated=0.1 < end < 0.2, next_observation=255 - fr[s] if 0.1 < end < 0.2 else None, env_id=s % 3)

def big_pair(max_sz, block, part, n):
    "A plain and a compressed storage of `BIG` frames (dictionary trained at frame 64), both holding the same `n` steps"
    kw = dict(stack_size=4, n_steps=3, gamma=0.9)
    plain = FrameStorage(BIG, max_sz, **kw)
    packed = CompressedFrameStorage(BIG, max_sz, block=block, part=part, dictionary_frames=64, dictionary_size=1024, **kw)
    fill_big([plain, packed], n)
    return plain, packed

def zstd_blocks(frame:bytes) -> int:
    "How many zstd blocks a zstd frame holds, read from their headers"
    p = zstd.get_frame_parameters(frame)
    pos = zstd.frame_header_size(frame)
    n, last = 0, False
    while not last:
        h = int.from_bytes(frame[pos:pos + 3], 'little')
        last, kind, size = h & 1, (h >> 1) & 3, h >> 3
        pos += 3 + (1 if kind == 1 else size)
        n += 1
    assert pos + 4 * p.has_checksum == len(frame)
    return n

@pytest.mark.parametrize('max_sz,block,part,n', [(100, 8, 4, 90), (100, 8, 4, 333), (61, 8, 3, 200), (100, 8, None, 250), (37, 5, 2, 120)])
def test_blocks_written_in_parts_read_exactly(max_sz, block, part, n):
    "Frames of 1,280 bytes, blocks ending a zstd block every `part` rows (the whole block by default), a dictionary trained at frame 64: every frame and transition is the plain storage's"
    plain, packed = big_pair(max_sz, block, part, n)
    p = packed.part
    assert p == (block if part is None else part)
    closed = [b for b in range(packed.n_blocks) if packed.blocks[b]]
    assert [zstd_blocks(packed.blocks[b]) for b in closed] == [-(-packed.block_rows(b) // p) for b in closed]
    assert_same_frames_and_transitions(plain, packed)
    rng = np.random.default_rng(n)
    for _ in range(20):  # samples' shapes of rows: any rows, repeated, in any order
        rows = rng.integers(0, max_sz, (7, 5))
        np.testing.assert_array_equal(packed.frames_at(rows), plain.obs[rows])

@pytest.mark.parametrize('block', [8, 16])
def test_blocks_written_whole_read_exactly_in_a_storage_writing_parts(block):
    "A state whose blocks are one zstd block each (the default, as every block was before parts; blocks of 8 or 16, with a dictionary) loads into a storage writing parts of 4 rows; old and new blocks read exactly"
    kw = dict(stack_size=4, n_steps=3, gamma=0.9, dictionary_frames=8 * block, dictionary_size=1024, block=block)  # trained on 8 blocks
    C = 12 * block
    plain, whole, parts = FrameStorage(BIG, C, stack_size=4, n_steps=3, gamma=0.9), CompressedFrameStorage(BIG, C, **kw), CompressedFrameStorage(BIG, C, part=4, **kw)
    fill_big([plain, whole], C + C // 2)  # wraps: the cursor in block 6
    assert {zstd_blocks(b) for b in whole.blocks} == {1} and whole.trained and len(whole.dictionary) == 1024
    parts.load_state_dict(whole.state_dict())
    assert (parts.part, parts.blocks) == (4, whole.blocks)
    assert_same_frames_and_transitions(plain, parts)
    fill_big([plain, parts], 40, seed=1)  # 40 rows written again from block 6 on, in parts of 4 rows: 5 blocks of 8, or 2 of 16, closed
    k = 40 // block
    assert sorted(zstd_blocks(b) for b in parts.blocks) == [1] * (12 - k) + [block // 4] * k
    assert_same_frames_and_transitions(plain, parts)

@pytest.mark.parametrize('shape', [SHAPE, BIG])
def test_every_block_is_a_standard_zstd_frame_of_its_rows(shape):
    "Any zstd decoder given the storage's dictionary decodes each closed block to the frames of its rows, without a checksum"
    kw = dict(stack_size=4, n_steps=3, gamma=0.9)
    plain, packed = FrameStorage(shape, 90, **kw), CompressedFrameStorage(shape, 90, dictionary_frames=64, dictionary_size=1024, **kw)
    if shape == SHAPE: fill(plain, 250); fill(packed, 250)
    else: fill_big([plain, packed], 250)
    assert packed.trained and len(packed.dictionary) == 1024
    dctx = zstd.ZstdDecompressor(dict_data=zstd.ZstdCompressionDict(packed.dictionary))
    for b in range(packed.n_blocks):
        assert not zstd.get_frame_parameters(packed.blocks[b]).has_checksum  # the seal stands for zstd's checksum
        frames = np.frombuffer(dctx.decompress(packed.blocks[b]), np.uint8).reshape(-1, *shape)
        assert len(frames) == packed.block_rows(b)
        if b != packed.open_block: np.testing.assert_array_equal(frames, plain.obs[b * 8:b * 8 + 8])  # the open one: the pass before
    assert_same_frames_and_transitions(plain, packed)

def test_rows_out_of_range_are_refused():
    _, packed = pair(40, 8)
    fill(packed, 50)
    for rows in ([0, 40], [-1, 3], [[5, 100]]):
        with pytest.raises(ExperienceReplayException, match='expected row indices from 0 to 39'): packed.frames_at(np.array(rows))

@pytest.mark.parametrize('n', [30, 97])
def test_reads_of_rows_repeated_in_any_order_and_shape(n):
    "Rows repeated, reversed, in runs that cross blocks, none, and in the open block: each frame the plain storage's"
    plain, packed = big_pair(40, 8, None, n)
    rng = np.random.default_rng(n)
    for rows in (np.arange(40)[::-1], np.repeat(rng.integers(0, 40, 12), 3), rng.integers(0, 40, (7, 5)),
                 np.arange(3, 19).reshape(2, 8), np.array([], np.int64), np.array(packed.open_block * 8 + 1)):
        np.testing.assert_array_equal(packed.frames_at(rows), plain.obs[rows])

def legacy(state, storage):
    "`state` as written before seals: blocks with zstd's checksum of their frames, and no 'seals'"
    f = state['frames']
    d = zstd.ZstdCompressionDict(storage.dictionary) if storage.dictionary else None
    cz = zstd.ZstdCompressor(level=3, dict_data=d, write_checksum=True, write_dict_id=False)
    dz = zstd.ZstdDecompressor(dict_data=d)
    blocks = [f['blob'][a:z].tobytes() for a, z in zip(f['offsets'][:-1], f['offsets'][1:])]
    blocks = [cz.compress(dz.decompress(b)) if b else b'' for b in blocks]
    f = {k: v for k, v in f.items() if k != 'seals'}
    f['blob'] = np.frombuffer(b''.join(blocks), np.uint8).copy()
    f['offsets'] = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(np.int64)
    return {**state, 'frames': f}

def test_a_state_from_before_seals_loads_checked_by_zstds_checksum():
    "Blocks with zstd's checksum and no seals load, sealed as they load, and read exactly; a bad checksum, or neither, is refused"
    plain, packed = with_dictionary(80)
    fill(plain, 150); fill(packed, 150)
    old = legacy(packed.state_dict(), packed)
    fresh = with_dictionary(80)[1]
    fresh.load_state_dict(copy.deepcopy(old))
    assert_same_frames_and_transitions(plain, fresh)
    np.testing.assert_array_equal(fresh.seals, [seal(b, s, fresh.dictionary) for b, s in zip(fresh.blocks, serials(fresh))])
    bad = copy.deepcopy(old)
    f = bad['frames']
    f['blob'][f['offsets'][2] - 1] ^= 0xFF  # the last byte of block 1: its checksum
    before = copy.deepcopy(fresh.state_dict())
    with pytest.raises(ExperienceReplayException, match=r'block 1 .* does not decode'): fresh.load_state_dict(bad)
    unsealed = packed.state_dict()
    unsealed['frames'] = {k: v for k, v in unsealed['frames'].items() if k != 'seals'}  # blocks without checksums
    with pytest.raises(ExperienceReplayException, match="expected a seal, or a block with zstd's checksum"):
        fresh.load_state_dict(unsealed)
    assert_same_state(fresh.state_dict(), before)

def serials(st):
    "The serial of each block's first row, as the storage's blocks hold them (the open block: the pass before)"
    adds, C = st.add_count, st.max_sz
    s = [adds - 1 - (adds - 1 - b * st.block) % C for b in range(st.n_blocks)]
    s[st.open_block] = adds - (adds % C - st.open_block * st.block) - C
    return s

def seal(block:bytes, serial:int, dictionary:bytes) -> int:
    "A block's seal: the CRC-32 of the serial of its first row (8 bytes, little-endian), then of its bytes, from the dictionary's"
    return zlib.crc32(block, zlib.crc32(serial.to_bytes(8, 'little', signed=True), zlib.crc32(dictionary))) if block else 0
