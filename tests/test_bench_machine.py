"""The machine record every benchmark stores (`bench/machine.py`) and the benchmarks page's machine lines and flags."""
import json, os, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'bench'))
import machine, benchmarks_page as page  # noqa: E402

def test_record_fields():
    "The record names this process's CPU, cores, versions, torch's capability and threads, and the load at start and end"
    r = machine.machine_record('cpprb', 'no-such-peer-dist', torch_threads=1)
    assert r['logical_cores'] == os.cpu_count() and 1 <= r['usable_cores'] <= r['logical_cores']
    assert r['cpu']['model'] and r['cpu']['architecture']
    assert r['versions']['no-such-peer-dist'] is None and r['versions']['numba'] and r['versions']['torch']
    assert r['torch']['threads'] == 1 and r['torch']['cpu_capability']
    assert set(r['load']) == {'start', 'end'} and r['started'] <= r['ended']
    json.dumps(r)  # stored as JSON

def test_vector_sets():
    "Vector instruction sets are picked from x86's and Arm's flags; SSE4a and look-alike flags (smep, fsgsbase) are not"
    flags = 'fpu sse sse2 ssse3 sse4_1 sse4_2 sse4a avx avx2 fma avx512f avx512_bf16 smep fsgsbase amx_tile'
    assert machine.vector_sets(flags) == ['sse', 'sse2', 'ssse3', 'sse4_1', 'sse4_2', 'avx', 'avx2', 'fma', 'avx512f',
                                          'avx512_bf16', 'amx_tile']
    assert machine.vector_sets('fp asimd evtstrm aes asimdhp sve sve2 sme') == ['asimd', 'asimdhp', 'sve', 'sve2', 'sme']

def test_records_distinct():
    "Each different record once, in order; a result without one counts as None"
    a, b = {'load': {'start': 1}}, {'load': {'start': 2}}
    assert machine.records([{'machine': a}, {'machine': b}, {'machine': a}, {}]) == [a, b, None]

def test_page_machine_lines():
    "A recorded result shows its CPU, vector sets, versions and each run's load; prose or a missing record is flagged"
    r = machine.machine_record('cpprb')
    shown = page.machine_lines({'machine': [r, dict(r, load={'start': 0.5, 'end': 7.25})]})
    assert shown.count('*Machine: ') == 1 and r['cpu']['model'] in shown and 'cpprb' in shown
    assert f"torch {r['versions']['torch']} (CPU capability {r['torch']['cpu_capability']}" in shown
    assert '0.5 → 7.25' in shown and 'not recorded' not in shown
    assert page.machine_lines({'machine': 'a 2-core machine'}) == '**Machine not recorded**: "a 2-core machine".'
    assert page.machine_lines({}) == '**Machine not recorded**.'
    assert 'not recorded** for some of its runs' in page.machine_lines({'machine': [r, None]})

def test_page_avx512_group():
    assert page.vector_line(['sse4_2', 'avx2', 'avx512f', 'avx512_bf16']) == 'SSE4.2, AVX2, AVX-512 (f, bf16)'
    assert page.vector_line([]) == 'none recorded'

def test_attach(tmp_path):
    "`--into` puts the results' records in a stored page, and the prose it held becomes its conditions"
    stored, res = tmp_path/'s.json', tmp_path/'r.jsonl'
    stored.write_text(json.dumps(dict(title='t', date='d', machine='shared with other jobs', command='c', text='x')))
    rec = {'cpu': {'model': 'm'}, 'load': {'start': 1, 'end': 2}}
    res.write_text('\n'.join(json.dumps(dict(v=i, machine=rec)) for i in range(3)) + '\n')
    machine.attach(stored, [res])
    s = json.loads(stored.read_text())
    assert s['machine'] == rec and s['conditions'] == 'shared with other jobs' and s['text'] == 'x'
