import importlib.abc, importlib.metadata, os, sys, torch, pytest

# two test workers share two cores: one torch thread each keeps them from oversubscribing
torch.set_num_threads(1)
os.environ.setdefault('OMP_NUM_THREADS', '1')

# FASTRL_REPLAY_ABSENT=isal,...: those modules fail to import, as if not installed, so that the library's fallbacks
# (zlib's CRC-32 for isal's) run on a machine that has them (`make compat`)
ABSENT = frozenset(m for m in os.environ.get('FASTRL_REPLAY_ABSENT', '').split(',') if m)

class AbsentModules(importlib.abc.MetaPathFinder):
    "An import finder under which the modules named in `ABSENT`, and their submodules, are not found"
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in ABSENT:
            raise ModuleNotFoundError(f'No module named {name!r} (FASTRL_REPLAY_ABSENT)', name=name)
        return None

if ABSENT:
    if imported := sorted(ABSENT & {m.partition('.')[0] for m in sys.modules}):
        raise pytest.UsageError(f'FASTRL_REPLAY_ABSENT: {imported} were imported before the tests began')
    sys.meta_path.insert(0, AbsentModules())

def _crc32_source() -> str:
    "The module whose CRC-32 the checkpoints use"
    from fastrl_replay.memory import persist
    return persist.crc32.__module__

def pytest_configure(config):
    if 'isal' in ABSENT and _crc32_source() != 'zlib':
        raise pytest.UsageError(f"FASTRL_REPLAY_ABSENT=isal, yet checkpoints use {_crc32_source()}'s CRC-32")

def pytest_report_header(config):
    "The versions under test, numba's JIT off (NUMBA_DISABLE_JIT=1), and the modules made absent"
    v = importlib.metadata.version
    res = [f"torch {torch.__version__}, numpy {v('numpy')}, numba {v('numba')}, fastai {v('fastai')}"]
    if os.environ.get('NUMBA_DISABLE_JIT', '0') not in ('', '0'):
        res.append("numba's JIT disabled: its kernels run as Python")
    if ABSENT: res.append(f"absent: {', '.join(sorted(ABSENT))}; checkpoints' CRC-32 from {_crc32_source()}")
    return res

def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason='needs a CUDA device')
    for item in items:
        if 'cuda' in item.keywords and not torch.cuda.is_available(): item.add_marker(skip)
