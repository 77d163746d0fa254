"Memory checkpoints: exact round trips for every storage x sampler, refused damage and edits, atomic saves under SIGKILL, mapped storages."
import zlib
import copy, errno, json, math, os, random, re, shutil, signal, tempfile, threading, time
from pathlib import Path
import numpy as np, pytest, torch
from fastrl_replay.memory.core import ExperienceReplayException, Replay, UniformSampler
from fastrl_replay.memory.experience_replay import ColumnStorage, ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedSampler, PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERSampler, LaBERExperienceReplay
from fastrl_replay.memory.frames import FrameStorage, CompressedFrameStorage
from fastrl_replay.memory.continual import ReservoirReplay
from fastrl_replay.errors import ReplayError
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


def bits(t:torch.Tensor) -> torch.Tensor:
    "Tensor `t` as integers of its width, so that equal NaNs compare equal"
    t = t.detach().cpu()
    return t if t.dtype == torch.bool else t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b, path='state'):
    "Assert two states are equal, arrays exactly"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a: same(a[k], b[k], f'{path}.{k}')
    elif isinstance(a, (torch.Tensor, np.ndarray)):
        a, b = torch.as_tensor(np.array(a) if isinstance(a, np.ndarray) else a), torch.as_tensor(np.array(b) if isinstance(b, np.ndarray) else b)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b)), path  # NaN included
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
def test_round_trip_every_pair(tmp_path, store, kind, io):
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
    ('version', 'format version 99; this library reads version 3'),
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
    pieces, chunks = [], persist._c_pieces
    monkeypatch.setattr(persist, 'PIECE', 4096)
    monkeypatch.setattr(persist, '_c_pieces', lambda x: [pieces.append(len(p)) or p for p in chunks(x)])
    (tmp_path/'arrays').mkdir()
    entry = persist.write_array(a, tmp_path, 0)
    persist.check_entry(entry, 0, 'here')
    root = os.open(tmp_path, os.O_RDONLY)
    try: back = persist.read_array(root, entry, tmp_path)
    finally: os.close(root)
    assert back.shape == a.shape and np.array_equal(back, a)
    assert entry['crc32'] == zlib.crc32(np.ascontiguousarray(a).tobytes())
    assert max(pieces, default=0) <= 4096 if a.flags.c_contiguous or a.ndim == 0 else 4096 + a[:1].nbytes
    assert sum(pieces) == a.nbytes


def big_memory(rows=25_000):
    "A memory whose block of rows (48 bytes a row, 1.2 MB) is written in several pieces"
    m = ExperienceReplay(bs=16, max_sz=rows, warmup_sz=16, seed=4)
    m + {'obs': torch.randn(rows + 123, 8), 'action': torch.arange(rows + 123)[:, None], 'done': torch.arange(rows + 123)[:, None] % 7 == 0}
    return m


def rows_entry(root):
    man = json.loads((root/MANIFEST).read_text())
    return man, man['arrays'][man['state']['storage']['rows']['__array__']]


@pytest.fixture(params=['plain', 'direct'])
def io(request):
    "Large arrays written through the page cache (the default) or past it (`set_direct_io(True)`)"
    from fastrl_replay.memory.direct_io import set_direct_io
    before = set_direct_io(request.param == 'direct')
    yield request.param
    set_direct_io(before)


def direct_io_works(d:Path) -> bool:
    "Whether the file system of `d` opens files for direct I/O (tmpfs does not)"
    try: os.close(os.open(d/'probe', os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError: return False
    finally: (d/'probe').unlink(missing_ok=True)
    return True


def refuse_direct_io(monkeypatch, when:str='open'):
    "A file system that opens no file for direct I/O (tmpfs), or one that opens it and then refuses its writes"
    real_open, real_write, direct = os.open, os.write, set()
    def no_direct_open(path, flags, *a, **k):
        if flags & os.O_DIRECT and when == 'open': raise OSError(errno.EINVAL, 'Invalid argument')
        fd = real_open(path, flags, *a, **k)
        if flags & os.O_DIRECT: direct.add(fd)
        return fd
    def no_direct_write(fd, data):
        if fd in direct: direct.discard(fd); raise OSError(errno.EINVAL, 'Invalid argument')
        return real_write(fd, data)
    monkeypatch.setattr(os, 'open', no_direct_open)
    monkeypatch.setattr(os, 'write', no_direct_write)


def test_the_files_are_the_same_bytes_whichever_way_they_were_written(tmp_path, monkeypatch):
    "Plain or direct, durable or not, or direct refused by the file system: the same files, byte for byte; NumPy reads each"
    from fastrl_replay.memory.direct_io import set_direct_io
    m = big_memory()
    ways = {'plain': (False, True), 'plain, no flush': (False, False), 'direct': (True, True), 'direct, no flush': (True, False)}
    try:
        for name, (direct, durable) in ways.items():
            set_direct_io(direct)
            m.save(tmp_path/name, durable=durable)
        for when in ('open', 'write'):
            with monkeypatch.context() as mp:
                refuse_direct_io(mp, when)
                m.save(tmp_path/f'direct refused at {when}')
    finally: set_direct_io(False)
    files = sorted(p.relative_to(tmp_path/'plain') for p in (tmp_path/'plain').rglob('*') if p.is_file())
    for name in [*ways, 'direct refused at open', 'direct refused at write']:
        assert sorted(p.relative_to(tmp_path/name) for p in (tmp_path/name).rglob('*') if p.is_file()) == files
        for f in files: assert (tmp_path/name/f).read_bytes() == (tmp_path/'plain'/f).read_bytes(), (name, f)
    man, e = rows_entry(tmp_path/'plain')
    raw = (tmp_path/'plain'/e['file']).read_bytes()
    assert int.from_bytes(raw[8:10], 'little') + 10 == 4096 and len(raw) == 4096 + e['nbytes']  # the values start the second page
    assert np.array_equal(np.load(tmp_path/'plain'/e['file']), m.storage._rows) and e['crc32'] == zlib.crc32(m.storage._rows)
    small = man['arrays'][man['state']['sampler']['td']['__array__']]  # under 1 MB: exactly what np.save writes
    np.save(tmp_path/'td.npy', m.sampler._td.numpy())
    assert (tmp_path/'plain'/small['file']).read_bytes() == (tmp_path/'td.npy').read_bytes()


def test_direct_io_writes_large_arrays_past_the_page_cache_where_it_can(tmp_path, monkeypatch):
    if not direct_io_works(tmp_path): pytest.skip('the file system refuses direct I/O')
    m = big_memory()
    set_direct_io = type(m).save.__globals__['direct_io_on'].__globals__['set_direct_io']  # the backend this memory's save runs
    opened, real_open = [], os.open
    monkeypatch.setattr(os, 'open', lambda p, flags, *a, **k: opened.append(bool(flags & os.O_DIRECT)) or real_open(p, flags, *a, **k))
    try:
        m.save(tmp_path/'plain')
        assert not any(opened)
        assert set_direct_io(True) is False
        m.save(tmp_path/'direct')
    finally: assert set_direct_io(False) is True
    assert sum(opened) == 1  # the block of rows only: the other arrays are under 1 MB
    twin = load_memory(tmp_path/'direct')
    same(twin.state_dict(), m.state_dict())
    assert torch.equal(twin.sample()[1], m.sample()[1])


def test_a_durable_save_flushes_every_file_and_directory_and_one_without_flushes_none(tmp_path, monkeypatch):
    m = big_memory(rows=300)
    flushed = []
    monkeypatch.setitem(type(m).save.__globals__, '_fsync', lambda p, durable=True: durable and flushed.append(Path(p)))
    m.save(tmp_path/'ck', durable=False)
    assert flushed == []
    m.save(tmp_path/'ck')
    names = {p.name for p in flushed}
    assert {'manifest.json', 'manifest.json.crc32', 'arrays', tmp_path.name} <= names and '0.npy' in names
    assert flushed[-1] == tmp_path  # the parent, once the new directory is in place


@pytest.mark.parametrize('damage,where', [('truncated', -9), ('flipped', 4096 + 777_777), ('flipped', -3)])
def test_damage_to_a_large_file_is_refused(tmp_path, damage, where, io):
    big_memory().save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f = tmp_path/'ck'/e['file']
    raw = bytearray(f.read_bytes())
    if damage == 'truncated': del raw[where:]
    else: raw[where] ^= 16  # one bit in a middle piece, or in the last
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


def as_version(root, version:int):
    "Turn the checkpoint at `root` into what version 1 or 2 wrote: no seal, no tags"
    man = json.loads((root/MANIFEST).read_text())
    man.update(version=version, settings=untag(man['settings']), state=untag(man['state']))
    (root/(MANIFEST + SEAL)).unlink()
    (root/MANIFEST).write_text(json.dumps(man))
    return man


DATA = Path(__file__).parent/'data'
OLD = [DATA/'memory_v2_per', DATA/'memory_v2_crb', *sorted((DATA/'td_in_storage').glob('*_*'))]


@pytest.mark.parametrize('path', OLD, ids=[p.name for p in OLD])
def test_checkpoints_of_an_older_format_are_refused_saying_how_to_convert_them(path):
    "tests/data holds checkpoints the version-2 writer made: refused, named, with the conversion, and nothing made"
    assert json.loads((path/MANIFEST).read_text())['version'] == 2 and not (path/(MANIFEST + SEAL)).exists()
    with pytest.raises(CheckpointError, match=re.escape(
            f'{path/MANIFEST}: format version 2, an older format this release no longer reads (it reads version 3); convert it '
            'with the fastrl_replay release that wrote it: with it, `load_memory(path).save(path)` writes version 3')):
        load_memory(path)


@pytest.mark.parametrize('version', [1, 2])
def test_a_version_1_or_2_made_from_a_save_is_refused_and_a_memory_loaded_into_is_left_as_it_was(tmp_path, version):
    m = per_fixture()
    m.save(tmp_path/'ck')
    as_version(tmp_path/'ck', version)
    into = per_fixture()
    before = copy.deepcopy(into.state_dict())
    with pytest.raises(CheckpointError, match=f'format version {version}, an older format'): load_into(into, tmp_path/'ck')
    same(into.state_dict(), before)


def per_fixture():
    m = PrioritizedExperienceReplay(bs=4, max_sz=30, warmup_sz=4, seed=2, beta_steps=10)
    m + synth_transitions(45, start=4)
    b, i = m.sample(); m.update_td(torch.linspace(0.1, 2., 4), i)
    return m


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
                         '/manifest.json: state.sampler.max_priority: expected a finite number > 0, got {"__float__": "nan"}'),
    'max_priority -1': (lambda ck, man: man['state']['sampler'].update(max_priority=-1), True, '/manifest.json: state.sampler.max_priority: expected a finite number > 0, got -1'),
    'max_priority below a priority': (lambda ck, man: man['state']['sampler'].update(max_priority=0.5), True,
                                      '/manifest.json: the state does not fit a PrioritizedExperienceReplay: the state holds a priority of 1.0, above its largest so far, 0.5'),
    'negative clock': (lambda ck, man: man['state']['sampler'].update(clock=-3), True, '/manifest.json: state.sampler.clock: expected an int >= 0, got -3'),
    'len 2.5': (lambda ck, man: man['state']['storage'].update(len=2.5), True, '/manifest.json: state.storage.len: expected an int >= 0, got 2.5'),
    'pointer past the capacity': (lambda ck, man: man['state']['storage'].update(pointer=3001), True, '/manifest.json: state.storage.pointer: 3001, past the 3000 rows'),
    'swapped files': (lambda ck, man: (man['arrays'][0].update(file='arrays/1.npy'), man['arrays'][1].update(file='arrays/0.npy')), True,
                      "/manifest.json: arrays[0].file: expected 'arrays/0.npy', got 'arrays/1.npy'"),
    'swapped references': (swap_refs, True, '/manifest.json: the state does not fit a PrioritizedExperienceReplay: the block of rows: '
                                            'expected (3000, row bytes) uint8, got Tensor (3000,) torch.int8'),
    'flipped header byte': (lambda ck, man: flip_header_brace(ck/'arrays'/'0.npy'), True,
                            "/arrays/0.npy: not a whole .npy array: its header cannot be read (TokenError: ('EOF in multi-line statement', (2, 0)))"),
    'missing state key': (lambda ck, man: man['state']['sampler'].pop('n_samples'), True,
                          '/manifest.json: the state does not fit a PrioritizedExperienceReplay: the state holds n_samples=None, not an int >= 0'),
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
    from fastrl_replay.memory import persist
    allocated, allocate = [], persist.page_aligned_zeros
    monkeypatch.setattr(persist, 'page_aligned_zeros', lambda shape, *a, **k: allocated.append(math.prod(shape)) or allocate(shape, *a, **k))
    with pytest.raises(CheckpointError, match=f'^{re.escape(str(ck) + message)}$'): load_memory(ck)
    assert max(allocated, default=0) <= 3000 * 64  # nothing larger than the arrays the checkpoint holds was allocated
    monkeypatch.undo()
    assert [p for p, d in opened if d is None] == [str(ck)]  # every other file opened relative to the checkpoint's directory
    assert not any(p.startswith(('/', '..')) or '..' in p.split('/') for p, d in opened if d is not None)
    assert sorted(str(p) for p in tmp_path.rglob('*')) == before and not Path('/tmp/elsewhere').exists()  # nothing made


# Fuzzing: any change to a manifest or an array header is refused with CheckpointError or loads a memory that round-trips exactly

from hypothesis import HealthCheck, event, given, settings, strategies as st

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


def compressed(sampler):
    m = Replay(CompressedFrameStorage((3, 3), max_sz=24, block=4, stack_size=2, n_steps=2), sampler, bs=8, warmup_sz=8)
    for t in range(35):
        m.storage.add_step(np.full((3, 3), t % 5, np.uint8), t % 4, np.float32(t / 4), t % 11 == 10, truncated=t % 13 == 12,
                           next_observation=np.full((3, 3), 200 + t, np.uint8), env_id=t % 2)
        m.sampler.added((m.storage.add_count - 1) % 24, 1)
    return m


def continual(sampler):
    m = ReservoirReplay(max_sz=12, bs=4, warmup_sz=4, seed=0)
    m + synth_transitions(30)
    return m


FUZZED = {'uniform': lambda: columns(SAMPLERS['uniform']()), 'per': lambda: columns(SAMPLERS['per']()),
          'laber': lambda: columns(SAMPLERS['laber']()), 'continual': lambda: continual(None),
          'frames': lambda: frames(SAMPLERS['per']()), 'compressed frames': lambda: compressed(SAMPLERS['per']())}


@pytest.fixture(scope='module', params=list(FUZZED))
def small(request, tmp_path_factory):
    "A checkpoint of each kind of memory, sampled and updated a few times"
    m = FUZZED[request.param]()
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
        numba_cache = '__pycache__' in Path(full).parts and full.endswith(('.nbi', '.nbc'))  # a kernel compiled on first use
        if not (full == str(inside) or full.startswith(str(inside) + os.sep) or numba_cache):
            raise AssertionError(f'opened {full}, outside {inside}')
        return real(path, flags, *a, dir_fd=dir_fd, **k)
    return fake


NUMBERS = st.sampled_from([-5, -1, 0, 1, 2, 3, 7, 11, 12, 23, 24, 25, 29, 30, 31, 2**31, 2**63, 0.5, 2.5, -0.0, 1e308])
SAME_SIZE = {1: ['uint8', 'int8', 'bool'], 2: ['int16', 'float16'], 4: ['int32', 'float32'], 8: ['int64', 'float64']}


def odd_value(dtype:np.dtype):
    "Values of `dtype` no save writes in most places: negatives, huge ones, NaN, infinities"
    if dtype.kind == 'f': return st.sampled_from([np.nan, np.inf, -np.inf, -1., -0., 0., 1., 1e300, 5e-324])
    if dtype.kind == 'b': return st.booleans()
    info = np.iinfo(dtype)
    return st.sampled_from(sorted({max(info.min, min(info.max, v)) for v in (-2**40, -1, 0, 1, 2, 3, 7, 23, 24, 31, 255, 2**31, 2**62)}))


def edit_array(ck:Path, man:dict, data):
    "Change an array's values, dtype or length, and write its entry's dtype, shape, size and CRC-32 to match, as a deliberate edit would"
    if not man.get('arrays'): return
    e = man['arrays'][data.draw(st.integers(0, len(man['arrays']) - 1), label='array')]
    if not isinstance(e, dict) or not isinstance(e.get('file'), str) or not (ck/e['file']).is_file(): return
    try: a = np.load(ck/e['file'], allow_pickle=False)
    except Exception: return  # a header an earlier change broke
    how = data.draw(st.sampled_from(['value', 'relabel', 'rows']), label='array change')
    if how == 'value' and a.size:
        flat = a.reshape(-1).copy()
        with np.errstate(over='ignore'): flat[data.draw(st.integers(0, a.size - 1), label='element')] = data.draw(odd_value(a.dtype), label='to')
        a = flat.reshape(a.shape)
    elif how == 'relabel':
        new = np.dtype(data.draw(st.sampled_from([d for d in SAME_SIZE[a.dtype.itemsize] if d != a.dtype.name]), label='dtype'))
        a, e['dtype'] = (a.view(new) if a.ndim else a.reshape(1).view(new).reshape(())), new.name
    elif how == 'rows' and a.ndim:
        a = np.resize(a, (data.draw(st.integers(0, len(a) + 3), label='rows'), *a.shape[1:]))
    np.save(ck/e['file'], a)
    e.update(shape=list(a.shape), nbytes=a.nbytes, crc32=zlib.crc32(np.ascontiguousarray(a).tobytes()))


@settings(max_examples=120, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_checkpoints_are_refused_or_round_trip(small, data, monkeypatch):
    "Changes to the manifest, to array headers, and to array values resealed as a deliberate edit would (every CRC-32 recomputed): "
    "each is refused with CheckpointError, or loads a memory that samples, and saves and loads again exactly"
    work = Path(tempfile.mkdtemp(dir=small))
    try:
        ck, outside = work/'ck', work/'outside.npy'
        shutil.copytree(small/'ck', ck)
        np.save(outside, np.arange(30 * 64, dtype=np.uint8).reshape(30, 64))  # what a path outside would find; it must stay as it is
        watched = outside.read_bytes()
        man = json.loads((ck/MANIFEST).read_text())
        for _ in range(data.draw(st.integers(1, 2), label='changes')):
            how = data.draw(st.sampled_from(['replace', 'delete', 'header', 'number', 'number', 'array', 'array', 'array']), label='how')
            if how == 'header':
                f = data.draw(st.sampled_from(sorted((ck/'arrays').glob('*.npy'))), label='file')  # the files, whatever the manifest now says
                raw = bytearray(f.read_bytes())
                end = raw.index(b'\n') + 1 if b'\n' in raw else len(raw)
                raw[data.draw(st.integers(0, end - 1), label='byte')] ^= data.draw(st.integers(1, 255), label='bits')
                f.write_bytes(bytes(raw))
                continue
            if how == 'array':
                edit_array(ck, man, data)
                continue
            paths = [p for p in tree_paths(man) if p and (how != 'number' or type(at(man, p)) in (int, float))]
            if not paths: continue
            path = data.draw(st.sampled_from(paths), label='path')
            parent = at(man, path[:-1])
            if how == 'delete': del parent[path[-1]]
            else: parent[path[-1]] = data.draw(NUMBERS if how == 'number' else JSON, label='value')
        raw = json.dumps(man).encode()
        (ck/MANIFEST).write_bytes(raw)
        if data.draw(st.integers(0, 4), label='sealed again') > 0: (ck/(MANIFEST + SEAL)).write_text(f'{zlib.crc32(raw)}\n')
        log = []
        with monkeypatch.context() as mp:
            mp.setattr(os, 'open', watched_open(ck, log))
            try: memory = load_memory(ck)
            except CheckpointError: memory = None
        event('refused' if memory is None else 'loaded')
        assert outside.read_bytes() == watched and sorted(p.name for p in work.iterdir()) == ['ck', 'outside.npy']
        if memory is not None:  # a consistent checkpoint: what loaded saves and loads again exactly, and samples as a memory does
            memory.save(work/'again')
            same(load_memory(work/'again').state_dict(), memory.state_dict())
            if isinstance(memory.sampler, LaBERSampler): memory.sampler.score = score
            if len(memory) >= memory.warmup_sz:
                try: memory.sample()
                except ReplayError: pass  # a memory with nothing to draw says so
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


def test_a_kind_that_moved_loads_from_its_former_name(tmp_path):
    "A checkpoint naming `memory.circular.CircularReplayBuffer`, where the class was before it moved to `compat.reagent`, loads as it in a fresh process"
    thin_memories()[3].save(tmp_path/'crb')
    man = json.loads((tmp_path/'crb'/MANIFEST).read_text())
    write_manifest(tmp_path/'crb', {**man, 'kind': 'fastrl_replay.memory.circular.CircularReplayBuffer'})
    assert load_in_fresh_process(tmp_path/'crb', 'fastrl_replay.compat.reagent', 'm.replay_capacity') == \
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


@pytest.mark.parametrize('where', [4096 + 5, 4096 + 700_000, -3])  # the first piece, a later one, the last partial page
def test_a_flipped_bit_is_refused_and_leaves_the_memory_loaded_into_as_it_was(tmp_path, where, monkeypatch, io):
    from fastrl_replay.memory import persist
    monkeypatch.setattr(persist, 'PIECE', 1 << 19)  # the 1.2 MB block in three pieces
    m, into = big_memory(), big_memory(rows=25_000)
    into + {'obs': torch.ones(10, 8), 'action': torch.zeros(10, 1, dtype=torch.long), 'done': torch.zeros(10, 1, dtype=torch.bool)}
    before = copy.deepcopy(into.state_dict())
    m.save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f = tmp_path/'ck'/e['file']
    raw = bytearray(f.read_bytes()); raw[where] ^= 1; f.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=f"{re.escape(e['file'])}: checksum \\d+ does not match the manifest's {e['crc32']}"):
        load_into(into, tmp_path/'ck')
    same(into.state_dict(), before)


def test_a_file_cut_short_while_it_is_read_is_refused(tmp_path, monkeypatch, io):
    from fastrl_replay.memory import persist
    big_memory().save(tmp_path/'ck')
    man, e = rows_entry(tmp_path/'ck')
    f, allocate = tmp_path/'ck'/e['file'], persist.page_aligned_zeros
    def cut_then_allocate(shape, *a, **k):  # the file loses its end after its size was checked, before it is read
        if math.prod(shape) * np.dtype(a[0] if a else k.get('dtype', np.uint8)).itemsize >= 1 << 20: os.truncate(f, f.stat().st_size - 10_000)
        return allocate(shape, *a, **k)
    monkeypatch.setattr(persist, 'page_aligned_zeros', cut_then_allocate)
    with pytest.raises(CheckpointError, match=f"{re.escape(e['file'])}: not a whole .npy array: the file ended early"): load_memory(tmp_path/'ck')
