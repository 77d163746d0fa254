"Memory checkpoints: exact round trips for every storage x sampler, refused damage, atomic saves under SIGKILL, mapped storages."
import zlib
import copy, json, math, os, random, re, shutil, signal, tempfile, threading, time
from pathlib import Path
import numpy as np, pytest, torch
from fastrl_replay.memory.core import ExperienceReplayException, Replay, UniformSampler
from fastrl_replay.memory.experience_replay import ColumnStorage, ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedSampler, PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERSampler, LaBERExperienceReplay
from fastrl_replay.memory.frames import FrameStorage
from fastrl_replay.compat.reagent import CircularReplayBuffer
from fastrl_replay.memory.persist import load_memory, load_into, register_kind, CheckpointError, KINDS, MANIFEST, SEAL
from fastrl_replay.test_utils import synth_transitions


def score(b): return b['reward'].reshape(len(b['reward']), -1)[:, 0].float().abs() + 1.


def columns(sampler):
    m = Replay(ColumnStorage(max_sz=50), sampler, bs=8, warmup_sz=8)
    m + synth_transitions(70, start=3)  # wrapped once
    return m


def frames(sampler):
    m = Replay(FrameStorage((3, 3), max_sz=40, stack_size=2, n_steps=2), sampler, bs=8, warmup_sz=8)
    for t in range(55):
        m.storage.add_step(np.full((3, 3), t, np.uint8), t % 4, np.float32(t / 4), t % 11 == 10, truncated=t % 13 == 12,
                           next_observation=np.full((3, 3), 200 + t, np.uint8), env_id=t % 2)
        m.sampler.added((m.storage.add_count - 1) % 40, 1)
    return m


SAMPLERS = {'uniform': lambda: UniformSampler(seed=0),
            'per': lambda: PrioritizedSampler(seed=0, beta_steps=50),
            'laber': lambda: LaBERSampler(seed=0, score=score)}
PAIRS = [(s, k) for s in (columns, frames) for k in SAMPLERS]


def same(a, b, path='state'):
    "Assert two states are equal, arrays exactly"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a: same(a[k], b[k], f'{path}.{k}')
    elif isinstance(a, (torch.Tensor, np.ndarray)):
        a, b = torch.as_tensor(np.asarray(a) if isinstance(a, np.ndarray) else a), torch.as_tensor(np.asarray(b) if isinstance(b, np.ndarray) else b)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)): same(x, y, f'{path}[{i}]')
    else: assert a == b, (path, a, b)


def same_memory(a, b):
    "Assert two memories hold the same rows and sampler state; a storage loaded from an older format may lay its row block out otherwise"
    sa, sb = a.state_dict(), b.state_dict()
    same(sa['sampler'], sb['sampler'], 'state.sampler')
    assert len(a) == len(b)
    if isinstance(a.storage, ColumnStorage): same(dict(a.memory), dict(b.memory), 'memory')
    else: same(sa['storage'], sb['storage'], 'state.storage')


def advance(m, steps=3):
    "Sample and write TD errors back a few times; return what was drawn"
    out = []
    for i in range(steps):
        b, idxs = m.sample()
        m.update_td(torch.linspace(0.1, 2., len(idxs)) * (i + 1), idxs)
        out.append((idxs.clone(), {k: v.clone() for k, v in b.items()}))
    return out


@pytest.mark.parametrize('store,kind', PAIRS, ids=[f'{s.__name__}-{k}' for s, k in PAIRS])
def test_round_trip_every_pair(tmp_path, store, kind):
    m = store(SAMPLERS[kind]())
    advance(m)
    m.save(tmp_path/'ck')
    rng = torch.get_rng_state()
    twin = load_memory(tmp_path/'ck')
    assert torch.equal(torch.get_rng_state(), rng)  # loading leaves torch's global RNG alone
    assert type(twin) is Replay and type(twin.storage) is type(m.storage) and type(twin.sampler) is type(m.sampler)
    if kind == 'laber': twin.sampler.score = score  # a function is code: set again after loading
    same(twin.state_dict(), m.state_dict())
    for (i1, b1), (i2, b2) in zip(advance(m), advance(twin)):
        assert torch.equal(i1, i2)
        assert b1.keys() == b2.keys() and all(torch.equal(b1[k], b2[k]) for k in b1)
    same(twin.state_dict(), m.state_dict())


def test_laber_score_is_named_as_dropped(tmp_path):
    m = columns(SAMPLERS['laber']())
    m.save(tmp_path/'ck')
    assert json.loads((tmp_path/'ck'/MANIFEST).read_text())['dropped'] == ['settings.sampler.score']
    assert load_memory(tmp_path/'ck').sampler.score is None


def thin_memories():
    er = ExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=1)
    per = PrioritizedExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=2, alpha=0.7, beta=0.5, beta_steps=10, weight_norm='batch')
    lab = LaBERExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=3, m=3, variant='max', score=score)
    for m in (er, per, lab): m + synth_transitions(45, start=4)
    crb = CircularReplayBuffer((2, 2), 3, 25, 4, update_horizon=3, gamma=0.9, prioritized=True, seed=5, alpha=0.5)
    for t in range(33): crb.add(np.full((2, 2), t, np.uint8), t % 2, 1., t % 7 == 6)
    return [er, per, lab, crb]


@pytest.mark.parametrize('i', range(4), ids=['ExperienceReplay', 'PrioritizedExperienceReplay', 'LaBERExperienceReplay', 'CircularReplayBuffer'])
def test_thin_classes_come_back_as_themselves(tmp_path, i):
    m = thin_memories()[i]
    advance(m, 2)
    m.save(tmp_path/'ck')
    twin = type(m).load(tmp_path/'ck')
    assert type(twin) is type(m)
    if isinstance(m, LaBERExperienceReplay): twin.score = score
    assert twin.settings() == m.settings()
    for (i1, b1), (i2, b2) in zip(advance(m), advance(twin)):
        assert torch.equal(i1, i2) and all(torch.equal(b1[k], b2[k]) for k in b1)
    if isinstance(m, PrioritizedExperienceReplay):
        assert (twin.current_beta, twin.n_stale, twin.n_samples) == (m.current_beta, m.n_stale, m.n_samples)


def test_empty_memory_round_trip(tmp_path):
    ExperienceReplay(bs=2, max_sz=5, warmup_sz=2, seed=0).save(tmp_path/'ck')
    twin = load_memory(tmp_path/'ck')
    assert len(twin) == 0 and twin.memory is None
    twin + synth_transitions(3)
    assert len(twin) == 3


def test_wrong_class_and_unknown_kind(tmp_path):
    thin_memories()[3].save(tmp_path/'crb')
    with pytest.raises(CheckpointError, match='holds a CircularReplayBuffer checkpoint; ExperienceReplay.load'):
        ExperienceReplay.load(tmp_path/'crb')

    class LastRows(UniformSampler):
        "Draws only among the 5 newest rows"
        def draw(self, n): return (self.storage.pointer - 1 - torch.randint(5, (n,), generator=self.generator)) % len(self.storage)
    m = Replay(ColumnStorage(20), LastRows(seed=0), bs=3, warmup_sz=5)
    m + synth_transitions(12)
    m.save(tmp_path/'mine')
    with pytest.raises(CheckpointError, match="LastRows' is not a known Sampler class.*register_kind"):
        load_memory(tmp_path/'mine')
    try:
        register_kind(LastRows)
        assert torch.equal(load_memory(tmp_path/'mine').sample()[1], m.sample()[1])
    finally: KINDS.pop(f'{LastRows.__module__}.{LastRows.__qualname__}')
    with pytest.raises(ExperienceReplayException, match='only Replay, Storage and Sampler'): register_kind(dict)


def saved(tmp_path):
    m = PrioritizedExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=2)
    m + synth_transitions(20)
    m.save(tmp_path/'ck')
    return tmp_path/'ck', json.loads((tmp_path/'ck'/MANIFEST).read_text())


def seal(root, raw:bytes):
    "Write `raw` as the manifest and seal it again, as a deliberate edit would"
    (root/MANIFEST).write_bytes(raw)
    (root/(MANIFEST + SEAL)).write_text(f'{zlib.crc32(raw)}\n')


def write_manifest(root, m): seal(root, json.dumps(m).encode())


def first_big(m): return next(e for e in m['arrays'] if e['nbytes'] > 100)


@pytest.mark.parametrize('damage,message', [
    ('no manifest', 'manifest.json: missing'),
    ('bad json', 'manifest.json: not valid JSON'),
    ('version', 'format version 99; this library reads versions 1, 2, 3'),
    ('format', 'not a fastrl_replay.memory manifest'),
    ('missing array', '.npy: missing'),
    ('truncated', 'not a whole .npy array: the file holds 1911 bytes of values, its header declares 1920'),
    ('shape', 'expected (7,) uint8, the header declares (30, 64) uint8'),
    ('dtype', 'expected (30, 64) int8, the header declares (30, 64) uint8'),
    ('unknown dtype', "arrays[0].dtype: the manifest gives an unknown dtype 'load'"),
    ('unsealed', "manifest.json: checksum"),
    ('checksum', 'checksum'),
    ('kind', "'os' is not a known Replay class"),
    ('settings', 'the settings do not make a ColumnStorage'),
])
def test_damage_is_refused_and_named(tmp_path, damage, message):
    root, m = saved(tmp_path)
    e = first_big(m)
    f = root/e['file']
    if damage == 'no manifest': (root/MANIFEST).unlink()
    elif damage == 'bad json': seal(root, b'{"format": ')
    elif damage == 'version': write_manifest(root, {**m, 'version': 99})
    elif damage == 'format': write_manifest(root, {**m, 'format': 'pickle'})
    elif damage == 'missing array': f.unlink()
    elif damage == 'truncated': f.write_bytes(f.read_bytes()[:-9])
    elif damage == 'shape': e['shape'] = [7]; e['nbytes'] = 7; write_manifest(root, m)
    elif damage == 'dtype': e['dtype'] = 'int8'; write_manifest(root, m)
    elif damage == 'unsealed': (root/MANIFEST).write_text(json.dumps({**m, 'version': 2}))  # changed without the seal
    elif damage == 'unknown dtype': e['dtype'] = 'load'; write_manifest(root, m)
    elif damage == 'checksum':
        raw = bytearray(f.read_bytes()); raw[-3] ^= 4; f.write_bytes(bytes(raw))
    elif damage == 'kind': write_manifest(root, {**m, 'kind': 'os'})
    elif damage == 'settings': m['settings']['storage']['capacity'] = 3; write_manifest(root, m)
    before = sorted(p.name for p in tmp_path.rglob('*'))
    with pytest.raises(CheckpointError) as err: load_memory(root)
    assert message in str(err.value)
    if damage in ('missing array', 'truncated', 'shape', 'dtype', 'checksum'): assert e['file'] in str(err.value)
    assert sorted(p.name for p in tmp_path.rglob('*')) == before  # nothing made


def test_arrays_are_never_unpickled(tmp_path):
    root, m = saved(tmp_path)
    e = first_big(m)
    np.save(root/e['file'], np.full(e['shape'], {'x': 1}, dtype=object), allow_pickle=True)
    with pytest.raises(CheckpointError, match=rf"{e['file']}: expected \(30, 64\) uint8, the header declares \(30, 64\) object$"): load_memory(root)
    e['dtype'] = 'object'; write_manifest(root, m)  # a manifest that asks for objects is refused before any file is opened
    with pytest.raises(CheckpointError, match=r"arrays\[0\].dtype: the manifest gives an unknown dtype 'object'$"): load_memory(root)


def test_save_replaces_a_checkpoint_and_nothing_else(tmp_path):
    m = ExperienceReplay(bs=2, max_sz=10, warmup_sz=2, seed=0)
    m + synth_transitions(4)
    m.save(tmp_path/'ck')
    m + synth_transitions(3)
    m.save(tmp_path/'ck', durable=False)  # no fsync: atomic for a killed process, not for a power loss
    assert len(load_memory(tmp_path/'ck')) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ['ck']  # no temporary or old sibling left
    (tmp_path/'notes').mkdir(); (tmp_path/'notes'/'a.txt').write_text('keep')
    with pytest.raises(CheckpointError, match='is not a memory checkpoint: it is not replaced'): m.save(tmp_path/'notes')
    assert (tmp_path/'notes'/'a.txt').read_text() == 'keep'


def save_versions(path, out:int):
    "Save version after version of a memory to `path`, writing each finished version's number to file descriptor `out`"
    m = PrioritizedExperienceReplay(bs=8, max_sz=40_000, warmup_sz=8, seed=0)
    for v in range(10_000):
        m + {'state': torch.full((4_000, 17), float(v)), 'version': torch.full((4_000, 1), v)}
        m.save(path)
        os.write(out, f'{v}\n'.encode())


def test_a_killed_save_leaves_the_old_or_the_new_checkpoint(tmp_path):
    "SIGKILL a process that saves version after version, at random moments, and load after each kill"
    path, rng, interrupted = tmp_path/'ck', random.Random(0), 0
    for kill in range(24):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the saving process
            os.close(r)
            try: save_versions(path, w)
            finally: os._exit(0)
        os.close(w)
        with os.fdopen(r) as out:
            done = int(out.readline())  # one save finished in this process
            time.sleep(rng.uniform(0, 0.2))
            os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
            done = max([done, *(int(l) for l in out.read().split())])
        interrupted += any(tmp_path.glob('.ck.saving-*'))  # killed inside a save: its temporary directory is left
        m = load_memory(path)
        versions, counts = torch.unique(m.memory['version'], return_counts=True)
        v = int(versions[-1])
        assert v in (done, done + 1), (v, done)  # the last save that finished, or the one under way when killed
        assert versions.tolist() == list(range(max(v - 9, 0), v + 1)) and set(counts.tolist()) == {4000}
    assert interrupted >= 5, interrupted
    m.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['ck']  # leftovers of killed saves are cleared


def test_mapped_storage_is_copied_and_loads_only_into_a_place_given(tmp_path):
    er = ExperienceReplay(bs=4, max_sz=2000, warmup_sz=4, seed=0, storage_dir=tmp_path/'store')
    er + synth_transitions(1500)
    er.save(tmp_path/'ck')
    m = json.loads((tmp_path/'ck'/MANIFEST).read_text())
    assert all(e['file'] == f'arrays/{i}.npy' for i, e in enumerate(m['arrays']))  # the columns are copied into the checkpoint
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob('*')}
    with pytest.raises(CheckpointError, match=r"manifest.json: settings.storage.storage_dir: the memory kept its rows in memory-mapped files \(.*store\); "
                       'loading writes nothing unless told where: pass storage_dir, a directory for new files$'):
        load_memory(tmp_path/'ck')
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob('*')} == before  # nothing made or written
    twin = load_memory(tmp_path/'ck', storage_dir=tmp_path/'copy')
    assert twin.storage.files.path == tmp_path/'copy' and sorted(p.name for p in (tmp_path/'copy').iterdir()) == sorted(p.name for p in (tmp_path/'store').iterdir())
    assert torch.equal(twin.sample()[1], er.sample()[1]) and all(torch.equal(twin.memory[k], er.memory[k]) for k in er.keys)
    twin + synth_transitions(10)  # writes go to the new files only
    assert all(np.array_equal(np.load(tmp_path/'store'/p.name), er.storage.files.arrays[p.stem]) for p in (tmp_path/'store').iterdir())
    er + synth_transitions(10)
    assert len(load_memory(tmp_path/'ck', storage_dir=tmp_path/'again')) == 1500  # the checkpoint does not follow the memory's files
    with pytest.raises(CheckpointError, match="holds the memory's own files"): er.save(tmp_path/'store')
    with pytest.raises(CheckpointError, match='holds the arrays of another memory'): load_memory(tmp_path/'ck', storage_dir=tmp_path/'copy')
    into = ExperienceReplay(bs=4, max_sz=2000, warmup_sz=4, seed=9, storage_dir=tmp_path/'mine')
    load_into(into, tmp_path/'ck')  # a memory the caller made, with its own files
    assert into.storage.files.path == tmp_path/'mine' and torch.equal(into.memory['state'], twin.memory['state'][:1500])


def test_mapped_frames_round_trip(tmp_path):
    crb = CircularReplayBuffer((5, 5), 2, 60, 4, prioritized=True, seed=3, storage_dir=tmp_path/'frames')
    for t in range(80): crb.add(np.full((5, 5), t, np.uint8), t % 3, float(t), t % 17 == 16)
    crb.save(tmp_path/'ck')
    with pytest.raises(CheckpointError, match='pass storage_dir'): CircularReplayBuffer.load(tmp_path/'ck')
    twin = CircularReplayBuffer.load(tmp_path/'ck', storage_dir=tmp_path/'copy')
    assert np.array_equal(twin.storage.obs, crb.storage.obs) and Path(twin.storage.obs.filename) == tmp_path/'copy'/'obs.npy'
    assert torch.equal(twin.sample()[1], crb.sample()[1])
    with pytest.raises(ExperienceReplayException, match='holds the arrays of another memory'):
        CircularReplayBuffer((5, 5), 2, 60, 4, storage_dir=tmp_path/'frames')


@pytest.mark.parametrize('layout', ['contiguous', 'column of a row block', 'fortran', 'every third row', 'empty', 'scalar'])
def test_write_array_stores_any_layout_in_c_order_in_bounded_pieces(tmp_path, layout, monkeypatch):
    from fastrl_replay.memory import persist
    base = np.arange(5000 * 12, dtype=np.float32).reshape(5000, 12)
    a = {'contiguous': base, 'column of a row block': base[:, 2:7], 'fortran': np.asfortranarray(base), 'every third row': base[::3],
         'empty': base[:0], 'scalar': np.array(3.5)}[layout]
    pieces, chunks = [], persist._c_chunks
    monkeypatch.setattr(persist, '_c_chunks', lambda x: [pieces.append(len(p)) or p for p in chunks(x, nbytes=4096)])
    (tmp_path/'arrays').mkdir()
    entry = persist.write_array(a, tmp_path, 0, durable=False)
    persist.check_entry(entry, 0, 'here')
    root = os.open(tmp_path, os.O_RDONLY)
    try: back = persist.read_array(root, entry, tmp_path)
    finally: os.close(root)
    assert back.shape == a.shape and np.array_equal(back, a)
    assert entry['crc32'] == zlib.crc32(np.ascontiguousarray(a).tobytes())
    assert max(pieces, default=0) <= (a.nbytes if a.flags.c_contiguous else 4096)


def big_memory(rows=25_000):
    "A memory whose block of rows (48 bytes a row, 1.2 MB) passes the 1 MB from which arrays go to the disk directly"
    m = ExperienceReplay(bs=16, max_sz=rows, warmup_sz=16, seed=4)
    m + {'obs': torch.randn(rows + 123, 8), 'action': torch.arange(rows + 123)[:, None], 'done': torch.arange(rows + 123)[:, None] % 7 == 0}
    return m


def rows_entry(root):
    man = json.loads((root/MANIFEST).read_text())
    return man, man['arrays'][man['state']['storage']['rows']['__array__']]


def direct_io_works(d:Path) -> bool:
    "Whether the file system of `d` opens files for direct I/O (tmpfs does not)"
    try: os.close(os.open(d/'probe', os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError: return False
    finally: (d/'probe').unlink(missing_ok=True)
    return True


def test_a_large_block_is_written_directly_and_numpy_reads_it(tmp_path):
    m = big_memory()
    m.save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f = tmp_path/'ck'/e['file']
    raw = f.read_bytes()
    start = 4096 if direct_io_works(tmp_path) else 128  # the values start the second page of the file, or follow NumPy's own header
    assert int.from_bytes(raw[8:10], 'little') + 10 == start
    assert len(raw) == start + m.storage._rows.nbytes and e['crc32'] == zlib.crc32(m.storage._rows)
    assert np.array_equal(np.load(f), m.storage._rows)
    twin = load_memory(tmp_path/'ck')
    assert twin.storage._rows is not None and twin.storage._rows.ctypes.data % 4096 == 0  # packed, and ready to be written directly again
    same(twin.state_dict(), m.state_dict())
    assert torch.equal(twin.sample()[1], m.sample()[1])


def test_direct_io_refused_goes_through_the_page_cache(tmp_path, monkeypatch):
    import fcntl
    from fastrl_replay.memory import persist
    m = big_memory()
    real_write = os.write
    def no_direct_write(fd, data):  # a file system that opens files for direct I/O but refuses the writes
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT: raise OSError(22, 'Invalid argument')
        return real_write(fd, data)
    monkeypatch.setattr(persist.os, 'write', no_direct_write)
    m.save(tmp_path/'ck')
    monkeypatch.undo()
    if not direct_io_works(tmp_path): pytest.skip('the file system refuses direct I/O: every test here goes through the page cache')
    man, e = rows_entry(tmp_path/'ck')
    assert int.from_bytes((tmp_path/'ck'/e['file']).read_bytes()[8:10], 'little') + 10 == 4096  # written through the cache, its values still at byte 4,096
    m.save(tmp_path/'direct')
    real_fcntl = fcntl.fcntl
    def no_direct(fd, cmd, *a):  # a file system that refuses direct I/O (tmpfs)
        if cmd == fcntl.F_SETFL and a and a[0] & os.O_DIRECT: raise OSError(22, 'Invalid argument')
        return real_fcntl(fd, cmd, *a)
    monkeypatch.setattr(persist.fcntl, 'fcntl', no_direct)
    for ck in ('ck', 'direct'):
        twin = load_memory(tmp_path/ck)
        same(twin.state_dict(), m.state_dict())


def test_a_save_without_flush_goes_through_the_page_cache_into_a_file_allocated_whole(tmp_path, monkeypatch):
    from fastrl_replay.memory import persist
    m = big_memory()
    scope = type(m).save.__globals__  # the module the save runs in, whichever copy of it the session imported
    opened, allocated, real_open, real_allocate = [], [], os.open, scope['_allocate']
    monkeypatch.setattr(os, 'open', lambda path, flags, *a, **k: opened.append((Path(path).name, flags)) or real_open(path, flags, *a, **k))
    monkeypatch.setitem(scope, '_allocate', lambda fd, n: allocated.append(n) or real_allocate(fd, n))
    m.save(tmp_path/'ck', durable=False)
    monkeypatch.undo()
    assert not any(flags & os.O_DIRECT for _, flags in opened)
    man, e = rows_entry(tmp_path/'ck')
    f = tmp_path/'ck'/e['file']
    assert int.from_bytes(f.read_bytes()[8:10], 'little') + 10 == 4096  # values at byte 4,096, where a load can read them directly
    assert f.stat().st_size == 4096 + e['nbytes'] and e['nbytes'] >= persist.DIRECT_MIN
    assert len(allocated) == len(man['arrays']) and allocated[0] == f.stat().st_size  # every array through the cache, the block allocated whole
    assert e['crc32'] == zlib.crc32(f.read_bytes()[4096:])
    m.save(tmp_path/'flushed')
    assert rows_entry(tmp_path/'flushed')[1]['crc32'] == e['crc32']
    same(load_memory(tmp_path/'ck').state_dict(), m.state_dict())


@pytest.mark.parametrize('slow_pieces,switched_after', [((0, 1), 1), ((2, 3), 3), ((1, 3), None), ((), None)])
def test_a_save_without_flush_goes_directly_after_two_slow_pieces_in_a_row(tmp_path, monkeypatch, slow_pieces, switched_after):
    "A large array goes through the page cache PROBE bytes at a time, each piece timed; once SLOW_PIECES (2) in a row went slower than CACHE_MIN_RATE, the rest goes directly (O_DIRECT set on the file); a slow piece alone changes nothing: the same file either way"
    import fcntl
    m = big_memory(rows=100_000)  # a block of 4.8 MB: five pieces of 1 MB
    scope = type(m).save.__globals__
    monkeypatch.setitem(scope, 'PROBE', 1 << 20)
    monkeypatch.setitem(scope, 'CACHE_MIN_RATE', 1e7)  # a piece of 1 MB is slow past 0.1 s
    cached, write_all = [], scope['_write_all']
    def write(fd, data):
        if not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT and len(data) == 1 << 20:
            cached.append(len(data))
            if len(cached) - 1 in slow_pieces: time.sleep(0.15)
        write_all(fd, data)
    monkeypatch.setitem(scope, '_write_all', write)
    direct, real_fcntl = [], fcntl.fcntl
    def watch(fd, cmd, *a):
        if cmd == fcntl.F_SETFL and a and a[0] & os.O_DIRECT: direct.append(fd)
        return real_fcntl(fd, cmd, *a)
    monkeypatch.setattr(fcntl, 'fcntl', watch)
    m.save(tmp_path/'ck', durable=False)
    monkeypatch.undo()
    man, e = rows_entry(tmp_path/'ck')
    assert len(direct) == (0 if switched_after is None else 1)  # the block only: the sampler's arrays are under a page-aligned MB
    assert len(cached) == (e['nbytes'] >> 20 if switched_after is None else switched_after + 1)  # the pieces through the cache, up to the second slow one
    f = tmp_path/'ck'/e['file']
    assert f.stat().st_size == 4096 + e['nbytes'] and e['crc32'] == zlib.crc32(f.read_bytes()[4096:])
    m.save(tmp_path/'flushed')
    assert rows_entry(tmp_path/'flushed')[1]['crc32'] == e['crc32']
    same(load_memory(tmp_path/'ck').state_dict(), m.state_dict())


@pytest.mark.parametrize('advice', ['faults pages in', 'refused'])
def test_direct_loads_in_pieces_with_the_pages_faulted_in_ahead_or_not(tmp_path, monkeypatch, advice):
    from fastrl_replay.memory import persist
    m = big_memory(rows=100_000)  # a block of 4.8 MB: five pieces of 1 MB
    m.save(tmp_path/'ck')
    monkeypatch.setattr(persist, 'READ_PIECE', 1 << 20)
    if advice == 'refused': monkeypatch.setattr(persist, 'MADV_POPULATE_WRITE', -1)  # advice no kernel takes: the reads fault their own pages
    twin = load_memory(tmp_path/'ck')
    same(twin.state_dict(), m.state_dict())
    assert torch.equal(twin.sample()[1], m.sample()[1])


@pytest.mark.parametrize('threads', [1, 2])
@pytest.mark.parametrize('cached', [True, False])
def test_a_load_faults_in_each_piece_once_on_its_threads(tmp_path, monkeypatch, threads, cached):
    from fastrl_replay.memory import persist
    m = big_memory(rows=100_000)  # a block of 4.8 MB: five pieces of 1 MB, the sampler's arrays under 1 MB
    m.save(tmp_path/'ck')
    monkeypatch.setattr(persist, 'READ_PIECE', 1 << 20)
    monkeypatch.setattr(persist, 'FAULT_THREADS', threads)
    monkeypatch.setattr(persist, '_cached', lambda *a: cached)  # read through the page cache, or directly where the file system allows
    calls, fault = [], persist._fault_in
    monkeypatch.setattr(persist, '_fault_in', lambda address, n: calls.append((address, n, threading.get_ident())) or fault(address, n))
    twin = load_memory(tmp_path/'ck')
    rows = twin.storage._rows
    assert sorted((a - rows.ctypes.data, n) for a, n, _ in calls) == [(s, min(1 << 20, rows.nbytes - s)) for s in range(0, rows.nbytes, 1 << 20)]
    assert 1 <= len({t for *_, t in calls}) <= threads and threading.get_ident() not in {t for *_, t in calls}
    same(twin.state_dict(), m.state_dict())
    assert torch.equal(twin.sample()[1], m.sample()[1])


@pytest.mark.parametrize('damage,where', [('truncated', -9), ('flipped', 4096 + 777_777), ('flipped', -3)])
def test_damage_to_a_directly_written_file_is_refused(tmp_path, damage, where):
    big_memory().save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f = tmp_path/'ck'/e['file']
    raw = bytearray(f.read_bytes())
    if damage == 'truncated': del raw[where:]
    else: raw[where] ^= 16  # one bit in a whole page read directly, or in the last partial page
    f.write_bytes(bytes(raw))
    msg = 'not a whole .npy array' if damage == 'truncated' else 'checksum'
    with pytest.raises(CheckpointError, match=msg) as err: load_memory(tmp_path/'ck')
    assert e['file'] in str(err.value)


def untag(v):
    "Packed data as version 2 wrote it: tuples as lists, NumPy scalars as numbers"
    if isinstance(v, list): return [untag(x) for x in v]
    if not isinstance(v, dict): return v
    if v.keys() == {'__tuple__'}: return untag(v['__tuple__'])
    if v.keys() == {'__scalar__'}: return untag(v['__scalar__'][1])
    if v.keys() == {'__float__'}: return float(v['__float__'])
    return {k: untag(x) for k, x in v.items()}


def as_version_2(root):
    "Turn the checkpoint at `root` into what version 2 wrote: no seal, no tags"
    man = json.loads((root/MANIFEST).read_text())
    man.update(version=2, settings=untag(man['settings']), state=untag(man['state']))
    (root/(MANIFEST + SEAL)).unlink()
    (root/MANIFEST).write_text(json.dumps(man))
    return man


DATA = Path(__file__).parent/'data'


def per_fixture():
    m = PrioritizedExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=2, beta_steps=10)
    m + synth_transitions(45, start=4)
    b, i = m.sample(); m.update_td(torch.linspace(0.1, 2., 4), i)
    return m


def crb_fixture():
    c = CircularReplayBuffer((2, 2), 3, 25, 4, update_horizon=3, gamma=0.9, prioritized=True, seed=5, alpha=0.5)
    for t in range(33): c.add(np.full((2, 2), t, np.uint8), t % 2, 1., t % 7 == 6)
    return c


@pytest.mark.parametrize('name,make', [('memory_v2_per', per_fixture), ('memory_v2_crb', crb_fixture)])
def test_checkpoints_written_by_version_2_still_load(name, make):
    "tests/data holds checkpoints the version-2 writer made of these memories: they load as the memory rebuilt here"
    assert json.loads((DATA/name/MANIFEST).read_text())['version'] == 2 and not (DATA/name/(MANIFEST + SEAL)).exists()
    m, twin = make(), load_memory(DATA/name)
    assert type(twin) is type(m) and twin.settings() == m.settings()
    generations_start_at_0(twin, m)
    same_memory(twin, m)
    for (i1, b1), (i2, b2) in zip(advance(m), advance(twin)):
        assert torch.equal(i1, i2) and all(torch.equal(b1[k], b2[k]) for k in b1)
    into, built = make(), make()
    advance(into, 2)
    load_into(into, DATA/name)  # resume's path: into a memory made with the same settings
    generations_start_at_0(into, built)
    same_memory(into, built)


def generations_start_at_0(loaded, built):
    "A checkpoint written before samplers kept write generations loads with every row's generation 0 (the rest as saved); `built` counted its writes"
    assert torch.equal(loaded.sampler.written, torch.zeros_like(built.sampler.written)) and int(built.sampler.written.max()) > 0
    loaded.sampler.written.copy_(built.sampler.written)  # so that the rest of the state is compared exactly


def test_version_2_made_from_a_version_3_save_loads(tmp_path):
    m = per_fixture()
    m.save(tmp_path/'ck')
    as_version_2(tmp_path/'ck')
    same(load_memory(tmp_path/'ck').state_dict(), m.state_dict())


def test_version_1_checkpoints_with_an_array_per_column_still_load(tmp_path):
    "A version-1 checkpoint, made by splitting a saved block of rows into its columns, loads as the memory that was saved"
    m = big_memory(rows=300)
    m.save(tmp_path/'ck')
    as_version_2(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    st = man['state']['storage']
    rows = np.load(tmp_path/'ck'/e['file'])
    del st['rows']
    for k, c in st['columns'].items():
        dtype = np.dtype(c['dtype'])
        col = np.ascontiguousarray(np.ndarray((len(rows), *c['shape']), dtype, rows, c.pop('offset'), (rows.strides[0], *((dtype.itemsize,) if c['shape'] else ()))))
        np.save(tmp_path/'ck'/'arrays'/f'col_{k}.npy', col)
        man['arrays'].append(dict(lib='torch', dtype=c['dtype'], shape=list(col.shape), nbytes=col.nbytes, file=f'arrays/col_{k}.npy', crc32=zlib.crc32(col)))
        c['data'] = {'__array__': len(man['arrays']) - 1}
    man['version'] = 1
    (tmp_path/'ck'/MANIFEST).write_text(json.dumps(man))
    twin = load_memory(tmp_path/'ck')
    assert twin.storage._rows is None  # an array per column, kept as loaded
    for k in m.keys: assert torch.equal(twin.memory[k], m.memory[k]), k
    assert torch.equal(twin.sample()[1], m.sample()[1])


@pytest.mark.parametrize('name', ['columns_uniform', 'columns_per', 'frames_uniform', 'frames_per'])
def test_checkpoints_whose_storage_kept_the_td_errors_still_load(name):
    "Checkpoints written when the storage kept the TD errors (a `td_error` column, a frame storage's `td` array) load: the TD errors go to the sampler"
    data = Path(__file__).parent/'data'/'td_in_storage'
    want = json.loads((data/'expected.json').read_text())[name]
    m = load_memory(data/name)
    np.testing.assert_array_equal(m.td_errors.numpy(), np.array(want['td'], np.float32))
    assert 'td_error' not in (m.storage.keys if name.startswith('columns') else ())
    b, idxs = m.sample()  # the same draw and weights as the memory that was saved
    assert idxs.tolist() == want['idxs']
    if want['weight'] is not None: np.testing.assert_array_equal(b['weight'][:, 0].numpy(), np.array(want['weight'], np.float32))
    m.update_td(torch.full((len(idxs),), 9.), idxs)
    assert (m.td_errors[idxs] == 9.).all()


# Untrusted checkpoints: every finding of the probe, with the exact refusal

@pytest.fixture(scope='module')
def rows3000(tmp_path_factory):
    "A prioritized memory of 3,000 rows, full, saved once"
    m = PrioritizedExperienceReplay(bs=4, max_sz=3000, warmup_sz=4, seed=2)
    m + synth_transitions(3000)
    path = tmp_path_factory.mktemp('base')/'ck'
    m.save(path)
    return path


def set_npy_shape(f, shape:str):
    "Rewrite the shape in the header of `.npy` file `f`, keeping the header's length"
    raw = f.read_bytes()
    end = raw.index(b'\n') + 1
    head = raw[10:end].decode('latin1')
    new = (head[:head.index("'shape': (")] + f"'shape': {shape}, }}").ljust(len(head) - 1) + '\n'
    f.write_bytes(raw[:10] + new.encode('latin1') + raw[end:])


def flip_header_brace(f):
    raw = bytearray(f.read_bytes()); raw[raw.index(b'{')] = ord('x'); f.write_bytes(bytes(raw))


def swap_refs(ck, man):
    st = man['state']
    st['sampler']['handed'], st['storage']['rows'] = st['storage']['rows'], st['sampler']['handed']


def replace_with(ck, what):
    f = ck/'arrays'/'0.npy'
    f.unlink()
    if what == 'fifo': os.mkfifo(f)
    else: f.symlink_to(what)


def link_arrays_dir(ck, man):
    shutil.copytree(ck/'arrays', ck.parent/'elsewhere')
    shutil.rmtree(ck/'arrays'); (ck/'arrays').symlink_to(ck.parent/'elsewhere')


FINDINGS = {  # name: (change to the checkpoint and its manifest, whether the manifest is sealed again, the message after the checkpoint's path)
    'absolute file': (lambda ck, man: man['arrays'][0].update(file='/etc/passwd'), True, "/manifest.json: arrays[0].file: expected 'arrays/0.npy', got '/etc/passwd'"),
    'file outside': (lambda ck, man: man['arrays'][0].update(file='../outside.npy'), True, "/manifest.json: arrays[0].file: expected 'arrays/0.npy', got '../outside.npy'"),
    'symlink to a device': (lambda ck, man: replace_with(ck, '/dev/zero'), True, '/arrays/0.npy: not a regular file inside the checkpoint (a link, a FIFO, a device or a directory)'),
    'symlink outside': (lambda ck, man: replace_with(ck, ck.parent/'outside.npy'), True, '/arrays/0.npy: not a regular file inside the checkpoint (a link, a FIFO, a device or a directory)'),
    'arrays dir a symlink': (link_arrays_dir, True, '/arrays/0.npy: not a regular file inside the checkpoint (a link, a FIFO, a device or a directory)'),
    'fifo': (lambda ck, man: replace_with(ck, 'fifo'), True, '/arrays/0.npy: not a regular file inside the checkpoint (a link, a FIFO, a device or a directory)'),
    'storage_dir in settings': (lambda ck, man: man['settings']['storage'].update(storage_dir='/tmp/elsewhere'), True,
                                '/manifest.json: settings.storage.storage_dir: the memory kept its rows in memory-mapped files (/tmp/elsewhere); '
                                'loading writes nothing unless told where: pass storage_dir, a directory for new files'),
    'max_sz 30M in settings': (lambda ck, man: man['settings']['storage'].update(max_sz=30_000_000), True, '/manifest.json: state.storage.max_sz: 3000; the settings give 30000000'),
    'max_sz 30M': (lambda ck, man: (man['settings']['storage'].update(max_sz=30_000_000), man['state']['storage'].update(max_sz=30_000_000)), True,
                   '/manifest.json: settings.storage.max_sz: 30000000 rows, more than the arrays hold (3000); refused before allocating'),
    'max_sz 1e13': (lambda ck, man: (man['settings']['storage'].update(max_sz=10**13), man['state']['storage'].update(max_sz=10**13)), True,
                    '/manifest.json: settings.storage.max_sz: 10000000000000 rows, more than the arrays hold (3000); refused before allocating'),
    'header shape 2**70': (lambda ck, man: set_npy_shape(ck/'arrays'/'0.npy', '(1180591620717411303424,)'), True,
                           '/arrays/0.npy: expected (3000, 64) uint8, the header declares (1180591620717411303424,) uint8'),
    'shape 2**70 everywhere': (lambda ck, man: (set_npy_shape(ck/'arrays'/'0.npy', '(1180591620717411303424,)'), man['arrays'][0].update(shape=[2**70], nbytes=2**70)), True,
                               '/arrays/0.npy: not a whole .npy array: the file holds 192000 bytes of values, its header declares 1180591620717411303424'),
    'len 3000 to 1000': (lambda ck, man: man['state']['storage'].update(len=1000), False,
                         "/manifest.json: checksum <new> does not match manifest.json.crc32's <old>: the manifest was changed or damaged"),
    'len 3000 to 1000, sealed': (lambda ck, man: man['state']['storage'].update(len=1000), True,
                                 '/manifest.json: state.storage: len=1000 and pointer=3000: a ring of 3000 rows that is not full has its pointer at its length'),
    'dtype float32 to int32': (lambda ck, man: man['arrays'][2].update(dtype='int32'), True, '/arrays/2.npy: expected (3000,) int32, the header declares (3000,) float32'),
    'shape changed': (lambda ck, man: man['arrays'][2].update(shape=[1500, 2]), True, '/arrays/2.npy: expected (1500, 2) float32, the header declares (3000,) float32'),
    'column removed': (lambda ck, man: man['state']['storage']['columns'].pop('reward'), False,
                       "/manifest.json: checksum <new> does not match manifest.json.crc32's <old>: the manifest was changed or damaged"),
    'bs -5': (lambda ck, man: man['settings'].update(bs=-5), True, '/manifest.json: settings: bs must be an int >= 1 and warmup_sz an int >= 0, got -5 and 4'),
    'max_priority NaN': (lambda ck, man: man['state']['sampler'].update(max_priority={'__float__': 'nan'}), True,
                         '/manifest.json: state.sampler.max_priority: expected a finite number >= 0, got {"__float__": "nan"}'),
    'max_priority -1': (lambda ck, man: man['state']['sampler'].update(max_priority=-1), True, '/manifest.json: state.sampler.max_priority: expected a finite number >= 0, got -1'),
    'negative clock': (lambda ck, man: man['state']['sampler'].update(clock=-3), True, '/manifest.json: state.sampler.clock: expected a finite number >= 0, got -3'),
    'swapped files': (lambda ck, man: (man['arrays'][0].update(file='arrays/1.npy'), man['arrays'][1].update(file='arrays/0.npy')), True,
                      "/manifest.json: arrays[0].file: expected 'arrays/0.npy', got 'arrays/1.npy'"),
    'swapped references': (swap_refs, True, '/manifest.json: the state does not fit a PrioritizedExperienceReplay: the block of rows: '
                                            'expected (3000, row bytes) uint8, got Tensor (3000,) torch.int8'),
    'flipped header byte': (lambda ck, man: flip_header_brace(ck/'arrays'/'0.npy'), True,
                            "/arrays/0.npy: not a whole .npy array: its header cannot be read (TokenError: ('EOF in multi-line statement', (2, 0)))"),
    'missing state key': (lambda ck, man: man['state']['sampler'].pop('n_samples'), True, "/manifest.json: the state does not fit a PrioritizedExperienceReplay: 'n_samples'"),
    'missing manifest key': (lambda ck, man: man.pop('state'), True, "/manifest.json: expected the keys ['format', 'version', 'kind', 'settings', 'dropped', 'state', 'arrays'], "
                                                                     "got ['arrays', 'dropped', 'format', 'kind', 'settings', 'version']"),
    'missing settings key': (lambda ck, man: man['settings'].pop('sampler'), True,
                             "/manifest.json: settings: expected the keys ['kind', 'bs', 'warmup_sz', 'storage', 'sampler', 'fields'], "
                             "got ['bs', 'fields', 'kind', 'storage', 'warmup_sz']"),
}


@pytest.mark.parametrize('finding', FINDINGS)
def test_each_finding_is_refused_before_anything_is_made(rows3000, tmp_path, finding, monkeypatch):
    change, sealed, message = FINDINGS[finding]
    ck = tmp_path/'ck'
    shutil.copytree(rows3000, ck)
    np.save(tmp_path/'outside.npy', np.zeros((3000, 64), np.uint8))  # a valid array outside the checkpoint
    man = json.loads((ck/MANIFEST).read_text())
    change(ck, man)
    raw = json.dumps(man).encode()
    (ck/MANIFEST).write_bytes(raw)
    if sealed: (ck/(MANIFEST + SEAL)).write_text(f'{zlib.crc32(raw)}\n')
    message = message.replace('<new>', str(zlib.crc32(raw))).replace('<old>', (ck/(MANIFEST + SEAL)).read_text().strip())
    opened, real_open = [], os.open
    monkeypatch.setattr(os, 'open', lambda p, flags, *a, **k: opened.append((str(p), k.get('dir_fd'))) or real_open(p, flags, *a, **k))
    before = sorted(str(p) for p in tmp_path.rglob('*'))
    t = time.perf_counter()
    with pytest.raises(CheckpointError, match=f'^{re.escape(str(ck) + message)}$'): load_memory(ck)
    assert time.perf_counter() - t < 1  # nothing large was allocated (30M rows took 3.5 s)
    monkeypatch.undo()
    assert [p for p, d in opened if d is None] == [str(ck)]  # every other file opened relative to the checkpoint's directory
    assert not any(p.startswith(('/', '..')) or '..' in p.split('/') for p, d in opened if d is not None)
    assert sorted(str(p) for p in tmp_path.rglob('*')) == before and not Path('/tmp/elsewhere').exists()  # nothing made


# Fuzzing: any change to a manifest or an array header is refused with CheckpointError or loads a memory that round-trips exactly

from hypothesis import HealthCheck, given, settings, strategies as st

PATHS_OUT = ['../outside.npy', '/etc/passwd', 'arrays/../../outside.npy', 'arrays/1.npy', '/dev/zero', 'arrays', '']
LEAVES = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([0, 1, 2, 3, 29, 30, 31, -1, 2**31, 2**63])
          | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
          | st.sampled_from(PATHS_OUT + ['int8', 'float64', 'object', 'load', 'nan', 'inf', 'torch', 'numpy', 'uint8']))
JSON = st.recursive(LEAVES, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.sampled_from(['__array__', '__tuple__', '__scalar__', '__items__', '__float__', 'kind', 'shape', 'x']), c, max_size=2), max_leaves=6)


def tree_paths(v, prefix=()):
    "Every path into JSON data `v`"
    yield prefix
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items: yield from tree_paths(x, prefix + (k,))


def at(v, path):
    for k in path: v = v[k]
    return v


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    m = PrioritizedExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=2)
    m + synth_transitions(20)
    advance(m, 2)
    base = tmp_path_factory.mktemp('fuzz')
    m.save(base/'ck')
    return base


def watched_open(inside:Path, log:list):
    "os.open that records each path it is asked for, resolved against the directory of its dir_fd, and refuses to open one outside `inside`"
    real = os.open
    def fake(path, flags, *a, dir_fd=None, **k):
        full = os.path.normpath(os.path.join(os.readlink(f'/proc/self/fd/{dir_fd}'), path) if dir_fd is not None else os.path.abspath(path))
        log.append(full)
        if not (full == str(inside) or full.startswith(str(inside) + os.sep)): raise AssertionError(f'opened {full}, outside {inside}')
        return real(path, flags, *a, dir_fd=dir_fd, **k)
    return fake


@settings(max_examples=200, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_manifests_and_headers_are_refused_or_round_trip(small, data, monkeypatch):
    work = Path(tempfile.mkdtemp(dir=small))
    try:
        ck, outside = work/'ck', work/'outside.npy'
        shutil.copytree(small/'ck', ck)
        np.save(outside, np.arange(30 * 64, dtype=np.uint8).reshape(30, 64))  # what a path outside would find; it must stay as it is
        watched = outside.read_bytes()
        man = json.loads((ck/MANIFEST).read_text())
        for _ in range(data.draw(st.integers(1, 3), label='changes')):
            how = data.draw(st.sampled_from(['replace', 'delete', 'header']), label='how')
            if how == 'header':
                f = data.draw(st.sampled_from(sorted((ck/'arrays').glob('*.npy'))), label='array')  # the files, whatever the manifest now says
                raw = bytearray(f.read_bytes())
                end = raw.index(b'\n') + 1 if b'\n' in raw else len(raw)
                raw[data.draw(st.integers(0, end - 1), label='byte')] ^= data.draw(st.integers(1, 255), label='bits')
                f.write_bytes(bytes(raw))
                continue
            path = data.draw(st.sampled_from([p for p in tree_paths(man) if p]), label='path')
            parent = at(man, path[:-1])
            if how == 'delete': del parent[path[-1]]
            else: parent[path[-1]] = data.draw(JSON, label='value')
        raw = json.dumps(man).encode()
        (ck/MANIFEST).write_bytes(raw)
        if data.draw(st.booleans(), label='sealed again'): (ck/(MANIFEST + SEAL)).write_text(f'{zlib.crc32(raw)}\n')
        log = []
        with monkeypatch.context() as mp:
            mp.setattr(os, 'open', watched_open(ck, log))
            try: memory = load_memory(ck)
            except CheckpointError: memory = None
        assert outside.read_bytes() == watched and sorted(p.name for p in work.iterdir()) == ['ck', 'outside.npy']
        if memory is not None:  # a consistent checkpoint: what loaded saves and loads again exactly
            memory.save(work/'again')
            same(load_memory(work/'again').state_dict(), memory.state_dict())
    finally: shutil.rmtree(work)


@pytest.mark.parametrize('depth,message', [(500, 'nested deeper than 64 levels'), (100_000, 'not valid JSON (maximum recursion depth exceeded')])
def test_deeply_nested_manifests_are_refused(tmp_path, depth, message):
    ExperienceReplay(bs=2, max_sz=10, warmup_sz=2, seed=0).save(tmp_path/'ck')
    raw = (tmp_path/'ck'/MANIFEST).read_bytes()
    seal(tmp_path/'ck', raw[:-1] + b', "deep": ' + b'[' * depth + b']' * depth + b'}')
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path/'ck'/MANIFEST}: {message}")): load_memory(tmp_path/'ck')


def load_in_fresh_process(path, unimported:str, extra:str) -> list[str]:
    "The module, class, length and `extra` (an expression of `m`) of the memory at `path`, loaded by a process that has not imported module `unimported`"
    import subprocess, sys, textwrap
    code = textwrap.dedent(f'''
        import sys
        from fastrl_replay.memory.persist import load_memory
        assert {unimported!r} not in sys.modules
        m = load_memory({str(path)!r})
        print(type(m).__module__, type(m).__name__, len(m), {extra})
    ''')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_a_kind_whose_module_is_not_imported_loads(tmp_path):
    "Loading imports the library module a checkpoint's kind names, and only a library module"
    from fastrl_replay.memory.continual import ReservoirReplay
    m = ReservoirReplay(max_sz=10, bs=2, warmup_sz=2, seed=0)
    m + synth_transitions(15)
    m.save(tmp_path/'res')
    assert load_in_fresh_process(tmp_path/'res', 'fastrl_replay.memory.continual', 'm.seen') == ['fastrl_replay.memory.continual', 'ReservoirReplay', '10', '15']


def test_a_kind_that_moved_loads_from_its_former_name():
    "A checkpoint naming `memory.circular.CircularReplayBuffer`, written before the class moved to `compat.reagent`, loads as it in a fresh process"
    assert load_in_fresh_process(DATA/'memory_v2_crb', 'fastrl_replay.compat.reagent', 'm.replay_capacity') == \
        ['fastrl_replay.compat.reagent', 'CircularReplayBuffer', '25', '25']


def test_a_kind_cannot_import_a_module_outside_the_library(tmp_path):
    import json
    from fastrl_replay.memory.core import find_kind
    m = ExperienceReplay(max_sz=8, bs=2, warmup_sz=2)
    m + synth_transitions(4)
    m.save(tmp_path/'m')
    f = tmp_path/'m'/MANIFEST
    for kind in ('antigravity.Fly', 'fastrl_replay_evil.mod.C', 'fastrl_replay..x.C', 'fastrl_replay.memory._private.C'):
        man = json.loads(f.read_text()); man['settings']['storage']['kind'] = kind; write_manifest(tmp_path/'m', man)
        with pytest.raises(CheckpointError, match='is not a known Storage class'): load_memory(tmp_path/'m')
    assert find_kind('antigravity.Fly') is None and 'antigravity' not in __import__('sys').modules


@pytest.fixture(params=['from the page cache', 'from the disk'])
def read_path(request, monkeypatch):
    "Loads made to take one of their two ways of reading a large array (told by whether its file is in the page cache), with the direct reads counted"
    from fastrl_replay.memory import persist
    monkeypatch.setattr(persist, '_cached', lambda fd, start, n: request.param == 'from the page cache')
    direct, calls = persist._read_direct, []
    monkeypatch.setattr(persist, '_read_direct', lambda *a: calls.append(1) or direct(*a))
    monkeypatch.setattr(persist, 'READ_PIECE', 1 << 19)  # the 1.2 MB block in three pieces
    return request.param, calls


def test_both_read_paths_restore_the_memory_exactly(tmp_path, read_path):
    m = big_memory()
    m.save(tmp_path/'ck')
    twin = load_memory(tmp_path/'ck')
    same(twin.state_dict(), m.state_dict())
    assert len(read_path[1]) == (read_path[0] == 'from the disk' and direct_io_works(tmp_path))


@pytest.mark.parametrize('where', [4096 + 5, 4096 + 700_000, -3])  # the first piece, a later one, the last partial page
def test_both_read_paths_refuse_a_flipped_bit_and_leave_the_memory_as_it_was(tmp_path, read_path, where):
    m, into = big_memory(), big_memory(rows=25_000)
    into + {'obs': torch.ones(10, 8), 'action': torch.zeros(10, 1, dtype=torch.long), 'done': torch.zeros(10, 1, dtype=torch.bool)}
    before = copy.deepcopy(into.state_dict())
    m.save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f = tmp_path/'ck'/e['file']
    raw = bytearray(f.read_bytes()); raw[where] ^= 1; f.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=f"{re.escape(e['file'])}: checksum \\d+ does not match the manifest's {e['crc32']}"): load_into(into, tmp_path/'ck')
    same(into.state_dict(), before)


def test_both_read_paths_refuse_a_file_cut_short_while_it_is_read(tmp_path, read_path, monkeypatch):
    from fastrl_replay.memory import persist
    big_memory().save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f, allocate = tmp_path/'ck'/e['file'], persist.page_aligned_zeros
    def cut_then_allocate(shape, *a, **k):  # the file loses its end after its size was checked, before it is read
        if math.prod(shape) * np.dtype(a[0] if a else k.get('dtype', np.uint8)).itemsize >= 1 << 20: os.truncate(f, f.stat().st_size - 10_000)
        return allocate(shape, *a, **k)
    monkeypatch.setattr(persist, 'page_aligned_zeros', cut_then_allocate)
    with pytest.raises(CheckpointError, match=f"{re.escape(e['file'])}: not a whole .npy array: the file ended early"): load_memory(tmp_path/'ck')
