"""The benchmarks page of the documentation, made from the stored results in `bench/stored/*.json`.

Each stored result is one measurement: its `title`, the `date` it was measured, the `machine` (the record
`bench/machine.py` makes, or a list of them, one per invocation: CPU, vector instruction sets, cores, versions,
load), how the machine was shared (`conditions`, optional prose), the `command` that measured it and either its `text`
(the figures with what they mean, in markdown) or the `runs` of a timing script (a list of rates per setting, as
`bench/threads_bench.py` writes them; `units` names their unit per workload), and optionally `figures` (plotly figures
as JSON, drawn under the text by the site's one plotly.js, no network). A result whose `machine` is prose or
missing, or a list holding None, is flagged "machine not recorded". The page lists them in file-name order.
`tools/docs_site.py` adds it to the site; `python bench/benchmarks_page.py` prints it."""
import json, statistics
from pathlib import Path
from machine import CORE  # the libraries every record gives the version of; the others are the peers

STORED = Path(__file__).resolve().parent/'stored'

INTRO = """# Benchmarks

> What was measured, on which machine, when and with which command.

Each section below is one stored result from `bench/stored/`; a benchmark script run again writes its own result under
`bench/results/`, and a result worth keeping is copied to `bench/stored/`, from which this page is made. Timings on a
machine shared with other jobs vary from run to run by up to a third: compare figures measured together, in one run."""

def runs_table(r: dict) -> str:
    "A markdown table of the median rate per setting of a timing result, and the ratio to the first setting of each workload"
    rows, firsts = ['| workload | setting | median | runs |', '|---|---|---:|---|'], {}
    for key, rates in r['runs'].items():
        kind, setting = key.split(' ', 1)
        med = statistics.median(rates)
        ratio = '' if kind not in firsts else f' ({med / firsts[kind]:.2f}x)'
        firsts.setdefault(kind, med)
        unit = r.get('units', {}).get(kind, '')
        rows.append(f'| {kind} | {setting} | {med:,.0f} {unit}{ratio} | {", ".join(f"{x:,.0f}" for x in rates)} |')
    return '\n'.join(rows)

def vector_line(vector: list) -> str:
    "The vector instruction sets, AVX-512's extensions in one group: 'SSE4.2, AVX, AVX2, FMA, AVX-512 (f, bw, vl)'"
    base = [v.upper().replace('SSE4_', 'SSE4.') for v in vector if not v.startswith('avx512') and v != 'sse']
    ext = [v[len('avx512'):].lstrip('_') for v in vector if v.startswith('avx512')]
    return ', '.join(base + ([f"AVX-512 ({', '.join(ext)})"] if ext else [])) or 'none recorded'

def hardware(m: dict) -> str:
    "The CPU, its vector instruction sets, the cores and the memory of a machine record"
    c = m['cpu']
    family = f"{c['vendor']} family {c['family']} model {c['model_number']}" if c.get('family') else ''
    ident = ', '.join(x for x in (family, c.get('generation'), 'virtual machine' if c.get('hypervisor') else '') if x)
    return (f"{c['model']} ({ident}), {c['architecture']}; {vector_line(c['vector'])}; "
            f"{m['logical_cores']} logical cores, {m['usable_cores']} usable by the run; {m['memory_gib']} GiB")

def software(m: dict) -> str:
    "The versions, torch's CPU capability and threads, and the CPU numba compiles for, of a machine record"
    v, t = m['versions'], m['torch']
    gpu = f", GPU {t['gpu']}" if t.get('gpu') else ''
    core = (f"Python {m['python']}, torch {v['torch']} (CPU capability {t['cpu_capability']}, {t['threads']} "
            f"thread{'s' if t['threads'] != 1 else ''}{gpu}), NumPy {v['numpy']}, numba {v['numba']} (compiling for "
            f"{m.get('numba_target')}), fastai {v['fastai']}, fastrl_replay {v['fastrl_replay']}")
    peers = [f'{d} {x}' if x else f'{d} not installed' for d, x in v.items() if d not in CORE]
    env = [f'{k}={x}' for k, x in m.get('environment', {}).items()]
    return core + (f"; peers: {', '.join(peers)}" if peers else '') + (f"; {' '.join(env)}" if env else '')

def load(m: dict) -> str: return f"{m['load']['start']:g} → {m['load']['end']:g} ({m['started']})"

def machine_lines(r: dict) -> str:
    "The machines of a result: hardware and software once per distinct pair, with each run's load; a flag for the rest"
    recs = r.get('machine') if isinstance(r.get('machine'), list) else [r.get('machine')]
    groups = {}
    for m in recs:
        if isinstance(m, dict): groups.setdefault((hardware(m), software(m)), []).append(load(m))
    out = [f"*Machine: {hw}. Software: {sw}. 1-minute load average, start → end of each run: {'; '.join(loads)}.*"
           for (hw, sw), loads in groups.items()]
    if any(not isinstance(m, dict) for m in recs):
        prose = '; '.join(m for m in recs if isinstance(m, str))
        some = ' for some of its runs' if groups else ''
        out.append(f"**Machine not recorded**{some}" + (f': "{prose}"' if prose else '') + '.')
    return '\n\n'.join(out)

def section(r: dict) -> str:
    "The markdown of one stored result: its title, when, where and how it was measured, then its figures"
    cond = f"\n\n*Conditions: {r['conditions']}*" if r.get('conditions') else ''
    head = f"## {r['title']}\n\n*Measured {r['date']}.*\n\n{machine_lines(r)}{cond}\n\n```sh\n{r['command']}\n```"
    body = r['text'] if 'text' in r else runs_table(r)
    return head + '\n\n' + body + ('\n\n' + r['note'] if r.get('note') else '')

def results() -> list:
    return [json.loads(p.read_text()) for p in sorted(STORED.glob('*.json'))]

def benchmarks_markdown() -> str:
    return '\n\n'.join([INTRO, *map(section, results())]) + '\n'

def figure_html(fig: dict) -> str:
    "A stored plotly figure (JSON) as a div that the site's plotly.js draws: no script from the network"
    import plotly.io as pio
    return pio.to_html(fig, include_plotlyjs=False, full_html=False)

def figure_cell(fig: dict, i: int) -> dict:
    "A code cell whose output is the `i`th figure of a result and whose input the page hides"
    out = dict(output_type='display_data', metadata={}, data={'text/html': figure_html(fig)})
    return dict(cell_type='code', execution_count=None, metadata={'tags': ['remove-input']}, outputs=[out],
                source=f'# figures[{i}] of the stored result')  # myst-nb leaves out a cell without source

def result_cells(r: dict) -> list:
    "The cells of one stored result: its markdown, then its figures"
    figs = [figure_cell(f, i) for i, f in enumerate(r.get('figures', []))]
    return [dict(cell_type='markdown', metadata={}, source=section(r)), *figs]

def benchmarks_notebook() -> dict:
    "The page as a notebook, the form `tools/docs_site.py` renders: markdown cells, each figure's output after its result"
    cells = [dict(cell_type='markdown', metadata={}, source=INTRO), *(c for r in results() for c in result_cells(r))]
    for i, c in enumerate(cells): c['id'] = f'cell-{i}'
    meta = {'kernelspec': {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'},
            'language_info': {'name': 'python'}}  # as the notebook pages: myst-nb shows the figures' stored outputs
    return dict(cells=cells, metadata=meta, nbformat=4, nbformat_minor=5)

if __name__ == '__main__': print(benchmarks_markdown())
