"""A frame storage's state loads only when its parts agree: blocks in their places, each the block of exactly the rows
it claims, and counters, links, final observations and streams that fit the cursor and each other. The edits are made
on the state itself, so no checkpoint's CRC-32 stands in their way (as when an editor seals a checkpoint again)."""
import copy, zlib
import numpy as np, pytest, torch, zstandard as zstd
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
from test_storage_sampler_pairs import assert_same_state, assert_same_batch
from test_frames_compressed import SHAPE, fill

C, BLOCK, KW = 80, 6, dict(stack_size=4, n_steps=3, gamma=0.9)  # 14 blocks, the last of 2 rows

def packed(n=150):
    "A compressed storage of 3 environments' steps, some truncated, its dictionary trained at frame 64, after `n` steps"
    return fill(CompressedFrameStorage(SHAPE, C, block=BLOCK, dictionary_frames=64, dictionary_size=512, **KW), n)

def plain(n=150): return fill(FrameStorage(SHAPE, C, **KW), n)

def blocks_of(state) -> list:
    f = state['frames']
    return [f['blob'][a:z].tobytes() for a, z in zip(f['offsets'][:-1].tolist(), f['offsets'][1:].tolist())]

def with_blocks(state, blocks):
    "`state` holding `blocks` in place of its own: the blob and its offsets made again"
    f = state['frames']
    f['blob'] = np.frombuffer(b''.join(blocks), np.uint8).copy()
    f['offsets'] = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(np.int64)
    return state

def seal(block:bytes, serial:int, dictionary:bytes) -> int:
    "A block's seal as an editor would compute it: CRC-32 of its first row's serial (8 bytes), then of its bytes"
    if not block: return 0
    return zlib.crc32(block, zlib.crc32(serial.to_bytes(8, 'little', signed=True), zlib.crc32(dictionary)))

def first_serial(st, b:int) -> int:
    adds = st.add_count
    return adds - 1 - (adds - 1 - b * BLOCK) % C

def recompressed(st, b:int, rows:int) -> bytes:
    "Block `b` compressed again holding `rows` rows (its own, then frames of the next block), as a valid zstd frame"
    frames = st.frames_at(np.arange(b * BLOCK, b * BLOCK + rows) % C)
    d = zstd.ZstdCompressionDict(st.dictionary) if st.dictionary else None
    cz = zstd.ZstdCompressor(level=3, dict_data=d, write_checksum=False, write_dict_id=False)
    return cz.compress(frames.tobytes())

def swap(state, a, b, seals=False):
    bl = blocks_of(state)
    bl[a], bl[b] = bl[b], bl[a]
    if seals: state['frames']['seals'][[a, b]] = state['frames']['seals'][[b, a]]
    return with_blocks(state, bl)

def resized(st, state, b, rows):
    "Block `b` holding `rows` rows, resealed for its place, as a careful editor would"
    bl = blocks_of(state)
    bl[b] = recompressed(st, b, rows)
    state['frames']['seals'][b] = seal(bl[b], first_serial(st, b), st.dictionary)
    return with_blocks(state, bl)

def dropped(state, b, shift=False):
    bl = blocks_of(state)
    if shift: bl = bl[:b] + bl[b + 1:] + [b'']
    else: bl[b] = b''
    s = state['frames']['seals'].copy()
    if shift: s[b:] = np.append(s[b + 1:], 0)
    else: s[b] = 0
    state['frames']['seals'] = s
    return with_blocks(state, bl)

def stage_changed(st, state):
    f = state['frames']
    k = st.add_count % C - st.open_block * BLOCK  # rows of the open block written this pass (the rest: the pass before)
    f['stage'] = f['stage'].copy()
    f['stage'][k + 1] ^= 1
    return state

def set_frames(state, key, v):
    state['frames'][key] = v
    return state

BLOCK_EDITS = {  # name: what it does to a state of `packed()` (the storage given, for its frames and dictionary)
    'two blocks swapped': lambda st, s: swap(s, 2, 3),
    'two blocks swapped with their seals': lambda st, s: swap(s, 2, 3, seals=True),
    'the open block swapped with another': lambda st, s: swap(s, st.open_block, (st.open_block + 5) % 14, seals=True),
    'a block dropped': lambda st, s: dropped(s, 4),
    'a block dropped, the next moved up': lambda st, s: dropped(s, 4, shift=True),
    'a block of one row fewer, resealed': lambda st, s: resized(st, s, 1, BLOCK - 1),
    'a block of one row more, resealed': lambda st, s: resized(st, s, 1, BLOCK + 1),
    'the last block of a full block, resealed': lambda st, s: resized(st, s, 13, BLOCK),
    'a seal changed': lambda st, s: s['frames']['seals'].__setitem__(0, s['frames']['seals'][0] ^ 1) or s,
    'seals of int64': lambda st, s: set_frames(s, 'seals', s['frames']['seals'].astype(np.int64)),
    'seals one short': lambda st, s: set_frames(s, 'seals', s['frames']['seals'][:-1]),
    "stage rows of the pass before changed": stage_changed,
    'the cursor moved by a row': lambda st, s: s.__setitem__('add_count', s['add_count'] + 1) or s,
    'the cursor moved by a block': lambda st, s: s.__setitem__('add_count', s['add_count'] + BLOCK) or s,
    'the open block moved': lambda st, s: set_frames(s, 'open_block', (s['frames']['open_block'] + 1) % 14),
    'the stage of another dtype': lambda st, s: set_frames(s, 'stage', s['frames']['stage'].astype(np.int16)),
}

def assert_refused(st, state):
    "Loading `state` into `st` raises the library's exception and changes nothing"
    before = copy.deepcopy(st.state_dict())
    with pytest.raises(Exception) as e: st.load_state_dict(state)
    assert e.type is ExperienceReplayException, e.value
    assert_same_state(st.state_dict(), before)
    return str(e.value)

@pytest.mark.parametrize('what', BLOCK_EDITS)
def test_blocks_out_of_place_or_not_covering_their_rows_are_refused(what):
    src = packed()
    state = copy.deepcopy(src.state_dict())
    edited = BLOCK_EDITS[what](src, state)
    assert edited is state
    assert_refused(packed(55), edited)

def test_a_block_for_rows_never_written_is_refused():
    "In the first pass, a block where no row was written yet (even sealed as if it were) does not load"
    src = packed(40)  # rows 0 to 39 written: blocks 7 to 13 never closed
    state = copy.deepcopy(src.state_dict())
    bl = blocks_of(state)
    assert bl[7:] == [b''] * 7
    bl[9] = bl[2]
    state['frames']['seals'][9] = seal(bl[9], 9 * BLOCK, src.dictionary)
    msg = assert_refused(packed(20), with_blocks(state, bl))
    assert 'block 9 (rows 54 to 59) was never closed' in msg

def test_messages_say_what_was_expected_and_got():
    src = packed()
    msg = assert_refused(packed(55), swap(copy.deepcopy(src.state_dict()), 2, 3))
    assert 'block 2 (rows 12 to 17) is not the block of serials' in msg and 'expected' in msg
    msg = assert_refused(packed(55), dropped(copy.deepcopy(src.state_dict()), 4))
    assert 'block 4 (rows 24 to 29) is missing: expected the frames of serials 104 to 109, got no block' in msg
    msg = assert_refused(packed(55), resized(src, copy.deepcopy(src.state_dict()), 1, BLOCK - 1))
    assert 'block 1 (rows 6 to 11) does not decode to its 6 frames' in msg

def stored_row(s, cond) -> tuple[int, np.ndarray]:
    "The first stored row of state `s` where `cond(arrays, serials)` holds, and the serial of every row"
    a, adds = s['arrays'], s['add_count']
    serials = adds - 1 - (adds - 1 - np.arange(C)) % C
    return int(np.flatnonzero(cond(a, serials) & (serials >= 0))[0]), serials

def prev_forward(s):
    r, ser = stored_row(s, lambda a, ser: a['prev'] >= 0)
    s['arrays']['prev'][r] = ser[r] + 1

def next_past_cursor(s):
    r, _ = stored_row(s, lambda a, ser: a['next'] >= 0)
    s['arrays']['next'][r] = s['add_count']

def next_elsewhere(s):
    "A later stored serial, in range, whose step does not link back"
    r, _ = stored_row(s, lambda a, ser: (a['next'] >= 0) & (a['next'] + 1 < s['add_count']))
    s['arrays']['next'][r] += 1

def episode_changed(s):
    r, _ = stored_row(s, lambda a, ser: (a['prev'] >= 0) & (a['next'] >= 0))
    s['arrays']['episode'][r] += 1

def final_key_dropped(s):
    r, _ = stored_row(s, lambda a, ser: a['final_key'] >= 0)
    s['arrays']['final_key'][r] = -1

def set_to(key, f): return lambda s: s.__setitem__(key, f(s))
def set_array(key, f): return lambda s: s['arrays'].__setitem__(key, f(s['arrays'][key]))

STEP_EDITS = {  # name: what it does to the state every frame storage writes
    'add_count negative': set_to('add_count', lambda s: -1),
    'add_count a float': set_to('add_count', lambda s: s['add_count'] + .5),
    'n_episodes below the episode ids': set_to('n_episodes', lambda s: s['n_episodes'] - 1),
    'final_lo past final_hi': set_to('final_lo', lambda s: s['final_hi'] + 1),
    'final_hi one more': set_to('final_hi', lambda s: s['final_hi'] + 1),
    'finals of another dtype': set_to('finals', lambda s: s['finals'].astype(np.int16)),
    'finals fewer than kept': set_to('finals', lambda s: s['finals'][:s['final_hi'] - s['final_lo'] - 1]),
    'a prev link forward': prev_forward,
    'a next link past the cursor': next_past_cursor,
    'a next link to a step that does not link back': next_elsewhere,
    'an episode id changed mid-episode': episode_changed,
    'a truncated step without its final key': final_key_dropped,
    'an environment streamed twice': lambda s: s['streams'].__setitem__((1, 0), s['streams'][0, 0]),
    "a stream's last step past the cursor": lambda s: s['streams'].__setitem__((0, 1), s['add_count']),
    "a stream's end flag against its step": lambda s: s['streams'].__setitem__((0, 2), 1 - s['streams'][0, 2]),
    'streams of floats': set_to('streams', lambda s: s['streams'].astype(np.float64)),
    'arrays of max_sz - 1 rows': set_array('prev', lambda a: a[:-1]),
    'actions of int32': set_array('action', lambda a: a.astype(np.int32)),
    'another capacity': set_to('max_sz', lambda s: C + 1),
    'final_lo missing': lambda s: s.pop('final_lo'),
    'arrays not a dict': set_to('arrays', lambda s: list(s['arrays'].values())),
}

@pytest.mark.parametrize('kind', ['plain', 'compressed'])
@pytest.mark.parametrize('what', STEP_EDITS)
def test_counters_links_finals_and_streams_that_disagree_are_refused(kind, what):
    make = plain if kind == 'plain' else packed
    src = make()
    assert src.final_hi - src.final_lo >= 2 and len(src.streams) == 3  # kept final observations, three environments
    state = copy.deepcopy(src.state_dict())
    before = copy.deepcopy(state)
    STEP_EDITS[what](state)
    with pytest.raises(AssertionError): assert_same_state(state, before)  # the edit changed the state
    assert_refused(make(55), state)

@pytest.mark.parametrize('kind', ['plain', 'compressed'])
@pytest.mark.parametrize('n', [0, 5, 40, 79, 80, 150, 333])
def test_an_unedited_state_round_trips_exactly(kind, n):
    "Empty, in the first pass, at its end, after wraps: the state loads whole, and reads and goes on as the original"
    make = plain if kind == 'plain' else packed
    src, dst = make(n), make(55)
    dst.load_state_dict(copy.deepcopy(src.state_dict()))
    assert_same_state(dst.state_dict(), src.state_dict())
    rows = np.arange(C)
    np.testing.assert_array_equal(dst.frames_at(rows), src.frames_at(rows))
    valid = src.valid(rows)
    np.testing.assert_array_equal(dst.valid(rows), valid)
    idx = torch.from_numpy(np.flatnonzero(valid))
    assert_same_batch(dst.gather(idx), src.gather(idx))
    fill(src, 23, seed=4); fill(dst, 23, seed=4)  # and both go on alike
    assert_same_state(dst.state_dict(), src.state_dict())
