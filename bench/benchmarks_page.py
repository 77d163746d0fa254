"""The benchmarks page of the documentation, made from the stored results in `bench/stored/*.json`.

Each stored result is one measurement: its `title`, the `date` it was measured, the `machine`, the `command` that
measured it and either its `text` (the figures with what they mean, in markdown) or the `runs` of a timing script
(a list of rates per setting, as `bench/threads_bench.py` writes them; `units` names their unit per workload). The
page lists them in file-name order. `tools/docs_site.py` adds it to the site; `python bench/benchmarks_page.py` prints it."""
import json, statistics
from pathlib import Path

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

def section(r: dict) -> str:
    "The markdown of one stored result: its title, when, where and how it was measured, then its figures"
    head = f"## {r['title']}\n\n*Measured {r['date']} on {r['machine']}.*\n\n```sh\n{r['command']}\n```"
    body = r['text'] if 'text' in r else runs_table(r)
    return head + '\n\n' + body + ('\n\n' + r['note'] if r.get('note') else '')

def results() -> list:
    return [json.loads(p.read_text()) for p in sorted(STORED.glob('*.json'))]

def benchmarks_markdown() -> str:
    return '\n\n'.join([INTRO, *map(section, results())]) + '\n'

def benchmarks_notebook() -> dict:
    "The page as a notebook of markdown cells, the form `tools/docs_site.py` renders"
    cells = [INTRO, *map(section, results())]
    return dict(cells=[dict(cell_type='markdown', id=f'cell-{i}', metadata={}, source=c) for i, c in enumerate(cells)],
                metadata={'language_info': {'name': 'python'}}, nbformat=4, nbformat_minor=5)

if __name__ == '__main__': print(benchmarks_markdown())
