"""The machine a benchmark ran on, recorded with its results: `machine_record(*peers)`.

The record holds the CPU (model, vendor, family, the vector instruction sets it has), the logical cores and how many of
them this process may run on, the memory, the versions of Python, torch, NumPy, numba, fastai, this library and each
peer the benchmark names (by distribution name), torch's CPU capability (the kernels it dispatches to) and threads, the
CPU numba compiles for, the thread, allocator and instruction-set variables set in the environment (`bench/avx2.sh`
sets the last), and the 1-minute load average when this module was imported (the run's start: a benchmark imports it
first) and when the record is made (the run's end). The CPU comes from Linux's /proc/cpuinfo, then `lscpu` for what it
lacks (the model name on Arm), then `platform`.

    python bench/machine.py                                    # this machine's record now, as JSON
    python bench/machine.py --into bench/stored/X.json R.json  # X.json's `machine`: the records in results R.json
"""
import argparse, json, os, platform, re, subprocess, time
from importlib import metadata
from pathlib import Path

LOAD_AT_START, STARTED = os.getloadavg()[0], time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())
CORE = ('torch', 'numpy', 'numba', 'fastai', 'fastrl_replay')
VECTOR = re.compile(r'(sse\d(_\d)?|sse|ssse3|avx.*|fma4?|f16c|amx.*|asimd.*|neon|sve.*|sme\d*)$')  # x86's, Arm's flags
AMD_FAMILIES = {'23': 'Zen, Zen+ or Zen 2', '25': 'Zen 3 or Zen 4', '26': 'Zen 5'}  # families 17h, 19h and 1Ah
SETTING_VARS = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'NUMBA_NUM_THREADS', 'NUMBA_CACHE_DIR', 'MALLOC_MMAP_THRESHOLD_',
                'ATEN_CPU_CAPABILITY', 'ONEDNN_MAX_CPU_ISA', 'MKL_ENABLE_INSTRUCTIONS', 'NPY_DISABLE_CPU_FEATURES',
                'NUMBA_CPU_NAME')  # threads, allocator, and the instruction sets the libraries may use

def fields(lines: list) -> dict:
    "`key: value` lines as a dict, the keys in lower case"
    return {k.strip().lower(): v.strip() for k, _, v in (l.partition(':') for l in lines) if v.strip()}

def cpu_fields() -> dict:
    "The first processor's fields in /proc/cpuinfo, with lscpu's where it lacks the model name; {} if neither answers"
    try: info = fields(Path('/proc/cpuinfo').read_text().split('\n\n')[0].splitlines())
    except OSError: info = {}
    if 'model name' in info: return info
    try: return fields(subprocess.run(['lscpu'], capture_output=True, text=True, timeout=10).stdout.splitlines()) | info
    except (OSError, subprocess.SubprocessError): return info

def vector_sets(flags: str) -> list:
    "The vector instruction sets among the CPU's flags (x86's `flags`, Arm's `Features`)"
    return [f for f in flags.split() if VECTOR.match(f) and f != 'sse4a']  # SSE4a: AMD's bit instructions, no vectors

def cpu() -> dict:
    "The CPU's model, vendor, family, model number, stepping and vector instruction sets"
    f = cpu_fields()
    vendor, family = f.get('vendor_id', f.get('vendor id', '')), f.get('cpu family', '')
    flags = f.get('flags', f.get('features', ''))
    return dict(model=f.get('model name', platform.processor() or platform.machine()), vendor=vendor, family=family,
                model_number=f.get('model', f.get('cpu part', '')), stepping=f.get('stepping', ''),
                generation=AMD_FAMILIES.get(family, '') if vendor == 'AuthenticAMD' else '',
                hypervisor='hypervisor' in flags.split(), vector=vector_sets(flags), architecture=platform.machine())

def memory_gib():
    "The machine's memory in GiB, None where the system does not say"
    try: return round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1)
    except (ValueError, OSError, AttributeError): return None

def version(dist: str):
    try: return metadata.version(dist)
    except metadata.PackageNotFoundError: return None

def numba_target():
    "The CPU numba compiles for: `NUMBA_CPU_NAME` if set, else LLVM's name for this host's ('znver5'); None without"
    if os.environ.get('NUMBA_CPU_NAME'): return os.environ['NUMBA_CPU_NAME']
    try: from llvmlite import binding
    except ImportError: return None
    return binding.get_host_cpu_name()

def torch_settings(threads=None) -> dict:
    "torch's CPU capability (the kernels it dispatches to), its threads (`threads`: the timed processes' own), the GPU"
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return dict(cpu_capability=torch.backends.cpu.get_cpu_capability(), threads=threads or torch.get_num_threads(),
                interop_threads=torch.get_num_interop_threads(), gpu=gpu)

def machine_record(*peers: str, # Distribution names of the peers whose versions the record gives
                   torch_threads: int = None): # torch's threads in the timed processes, where they set their own
    "This machine, the versions of the core libraries and `peers`, torch's settings, the load at the start and now"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    return dict(cpu=cpu(), logical_cores=os.cpu_count(), usable_cores=usable, memory_gib=memory_gib(),
                system=platform.platform(), python=platform.python_version(),
                versions={d: version(d) for d in dict.fromkeys((*CORE, *peers))}, torch=torch_settings(torch_threads),
                numba_target=numba_target(), environment={k: os.environ[k] for k in SETTING_VARS if k in os.environ},
                load=dict(start=round(LOAD_AT_START, 2), end=round(os.getloadavg()[0], 2)), started=STARTED,
                ended=time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))

def records(results: list) -> list:
    "The `machine` records of results (dicts, or JSON-lines rows), each different one once; None for a result without"
    return list({json.dumps(r.get('machine'), sort_keys=True): r.get('machine') for r in results}.values())

def read_results(path: Path) -> list:
    "The results in a JSON file (one) or a JSON-lines file (one a line)"
    text = path.read_text()
    try: return [json.loads(text)]
    except json.JSONDecodeError: return [json.loads(l) for l in text.splitlines() if l.strip()]

def attach(stored: Path, results: list):
    "Make the records in `results` files the stored result's `machine`; prose it held there becomes its `conditions`"
    rec = records([r for p in results for r in read_results(p)])
    s = json.loads(stored.read_text())
    if isinstance(s.get('machine'), str): s.setdefault('conditions', s['machine'])
    s['machine'] = rec[0] if len(rec) == 1 else rec
    stored.write_text(json.dumps(s, indent=1, ensure_ascii=False) + '\n')

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--into', type=Path, metavar='STORED', help='the stored result to put the records of RESULTS in')
    p.add_argument('results', type=Path, nargs='*', help='results files whose `machine` records go into STORED')
    p.add_argument('--peers', nargs='*', default=[], help='peer distributions whose versions the record names')
    a = p.parse_args()
    if a.into: attach(a.into, a.results)
    else: print(json.dumps(machine_record(*a.peers), indent=1))
