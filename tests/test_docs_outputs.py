"""The stored outputs are the documentation: each notebook page shows what its code makes, and no stored figure
disagrees with the code above it. Read from the notebooks alone, with no browser and nothing run.

The cells a page shows are its code cells but for those nbdev and `tools/docs_site.py` leave out: exported and hidden
cells, `default_exp`, `show_doc` cells (the site renders their entries) and cells of tests alone. Of those:

1. a page stores the outputs of at least one (a page whose code shows nothing was never run with `--save`);
2. a cell whose last statement shows a value (a name, an attribute, a literal, a comparison, a call of `print`,
   `display`, a `plot_*` function or a builtin that builds a value) stores it, unless `nbdev-test` skips the cell
   (`#| slow`, `notest`, `cuda`: run with `--flags` to store those) or never runs it (`#| eval: false`);
3. a stored figure of a memory (`plot_replay_stats`) has as many rows as the notebook asserts the memory holds, with
   `test_eq(len(mem), N)` before the figure (`mem[::k]` has N / k): fixing the code without running it again fails here,
   and a figure of a memory whose length the notebook never states fails too."""
import ast, base64, json, math, re, sys
from pathlib import Path
import numpy as np, pytest

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'
sys.path.insert(0, str(ROOT/'tools'))
from docs_site import split_directives, is_test_only

NOTEBOOKS = sorted(p for p in NBS.rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)
LEFT_OUT = {'export', 'exporti', 'exports', 'hide', 'default_exp'}
SKIPPED = {'slow', 'notest', 'cuda'}  # the flags nbdev-test skips (`tst_flags` in pyproject.toml)
PLOTLY_MIME = 'application/vnd.plotly.v1+json'

def parse(src:str):
    "The code `src` as an AST, with IPython's magic and shell lines blanked; None if it is not Python"
    try: return ast.parse('\n'.join('' if l.lstrip().startswith(('%', '!')) else l for l in src.splitlines()))
    except SyntaxError: return None

def is_show_doc_only(src:str) -> bool:
    "Whether every statement of `src` is a `show_doc(...)` call"
    t = parse(src)
    return bool(t and t.body) and all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and
                                      getattr(s.value.func, 'id', None) == 'show_doc' for s in t.body)

def shown_cells(nb:dict) -> list:
    "(directives, code, outputs) of each code cell the notebook's page shows"
    res = []
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        d, src = split_directives(''.join(c['source']))
        if LEFT_OUT & set(d) or d.get('include') == 'false' or not src.strip(): continue
        if is_show_doc_only(src) or (is_test_only(src) and not c.get('outputs')): continue
        res.append((d, src, c.get('outputs', [])))
    return res

VALUE_CALLS = {'print', 'display', 'dict', 'list', 'tuple', 'set', 'sorted', 'len', 'round', 'str', 'repr', 'sum',
               'min', 'max', 'type', 'Markdown', 'HTML', 'figures_to_html'}

def shows_a_value(src:str) -> bool:
    "Whether running `src` shows something: a `print`/`display` anywhere, or a last statement whose value is not None"
    t = parse(src)
    if not t or not t.body: return False
    calls = [n.func for n in ast.walk(t) if isinstance(n, ast.Call)]
    if any(getattr(f, 'id', None) in ('print', 'display') for f in calls): return True
    last = t.body[-1]
    if not isinstance(last, ast.Expr): return False
    if not isinstance(last.value, ast.Call): return True  # a name, an attribute, a literal, a comparison, ...
    f = last.value.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ''
    return name in VALUE_CALLS or name.startswith('plot_')  # any other call may return None

# ---- figures as stored ---------------------------------------------------------------------------------------------
def plotly_figures(output:dict) -> list:
    "The figures (`data` and `layout`) of a stored output: plotly's JSON mime type, or its HTML (`Plotly.newPlot`)"
    data = output.get('data', {})
    if PLOTLY_MIME in data: return [data[PLOTLY_MIME]]
    html, res, dec = ''.join(data.get('text/html', '')), [], json.JSONDecoder()
    for m in re.finditer(r'Plotly\.newPlot\(\s*"[^"]*",\s*', html):
        traces, i = dec.raw_decode(html, m.end())
        layout, _ = dec.raw_decode(html, re.compile(r'\s*,\s*').match(html, i).end())
        res.append(dict(data=traces, layout=layout))
    return res

def values(v) -> np.ndarray:
    "A trace's array as stored: a list, or plotly's typed array (`{'dtype': 'i2', 'bdata': base64}`)"
    if isinstance(v, dict) and 'bdata' in v: return np.frombuffer(base64.b64decode(v['bdata']), dtype=v['dtype'])
    return np.asarray(v)

def memory_rows(fig:dict) -> int|None:
    "Rows of the memory a `plot_replay_stats` figure draws (its `row=` slider ends on the last); None for other figures"
    sliders = fig['layout'].get('sliders', [])
    if not sliders or sliders[0].get('currentvalue', {}).get('prefix') != 'row=': return None
    last = int(sliders[0]['steps'][-1]['label']) + 1
    line = values(fig['data'][0]['x'])
    assert int(line.max()) + 1 == last, 'the curve and the slider of the figure disagree on the rows'
    return last

# ---- what the code says ----------------------------------------------------------------------------------------------
def plotted_memories(src:str) -> list:
    "(memory expression, step) of each `plot_replay_stats(mem)` or `plot_replay_stats(mem[::k])` call in `src`"
    res = []
    for n in ast.walk(parse(src) or ast.Module(body=[], type_ignores=[])):
        if isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'plot_replay_stats' and n.args:
            a, step = n.args[0], 1
            sl = a.slice if isinstance(a, ast.Subscript) else None
            if isinstance(sl, ast.Slice) and sl.lower is sl.upper is None and sl.step:
                a, step = a.value, ast.literal_eval(sl.step)
            res.append((ast.unparse(a), step))
    return res

def stated_lengths(sources:list) -> dict:
    "Each `test_eq(len(mem), N)` (or `assert len(mem) == N`) in `sources`, in order: the last N stated for each `mem`"
    res = {}
    for src in sources:
        for n in ast.walk(parse(src) or ast.Module(body=[], type_ignores=[])):
            if isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'test_eq' and len(n.args) == 2: a, b = n.args
            elif isinstance(n, ast.Compare) and [type(o) for o in n.ops] == [ast.Eq]: a, b = n.left, n.comparators[0]
            else: continue
            is_len = isinstance(a, ast.Call) and getattr(a.func, 'id', None) == 'len' and len(a.args) == 1
            if is_len and isinstance(b, ast.Constant): res[ast.unparse(a.args[0])] = b.value
    return res

def figure_problems(nb:dict) -> list:
    "Stored memory figures whose row count is not the one the code before them states"
    problems, before = [], []
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        src = ''.join(c['source'])
        before.append(src)
        figs = [f for o in c.get('outputs', []) for f in plotly_figures(o) if memory_rows(f) is not None]
        if not figs: continue
        mems, stated = plotted_memories(src), stated_lengths(before)
        at = f'cell {c["id"]}:'
        if len(mems) != len(figs):
            problems.append(f'{at} {len(figs)} stored memory figures, {len(mems)} plot_replay_stats calls'); continue
        for (mem, step), fig in zip(mems, figs):
            if mem not in stated:
                problems.append(f'{at} no test_eq(len({mem}), N) states the rows of the memory its figure draws')
                continue
            rows, said = memory_rows(fig), math.ceil(stated[mem] / step)
            if rows != said:
                shown = mem + (f'[::{step}]' if step > 1 else '')
                problems.append(f'{at} the stored figure of {shown} has {rows:,} rows, '
                                f'the code says {said:,}: run the notebook again with nbdev-test --save')
    return problems

# ---- the checks' own tests ---------------------------------------------------------------------------------------
def _cell(src, *outputs, cid='c'): return dict(cell_type='code', id=cid, metadata={}, source=src, outputs=list(outputs))
def _figure_output(rows:int, html=True) -> dict:
    import plotly.io as pio
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    from fastrl_replay.data.synth import synth_transitions
    from fastrl_replay.plots import plot_replay_stats
    mem = ExperienceReplay(max_sz=rows, warmup_sz=1) + synth_transitions(rows)
    fig = plot_replay_stats(mem, 'reward', max_frames=7)
    if html: data = {'text/html': pio.to_html(fig, include_plotlyjs=False, full_html=False)}
    else: data = {PLOTLY_MIME: json.loads(fig.to_json())}
    return dict(output_type='display_data', metadata={}, data=data)

def test_shown_cells_and_values():
    nb = dict(cells=[_cell('#| export\ndef f(): pass'), _cell('#| hide\nx'), _cell('show_doc(f)'),
                     _cell('test_eq(1, 1)'), _cell('x = 1\nx'), _cell('#| slow\ny = 2\ny')])
    assert [s for _, s, _ in shown_cells(nb)] == ['x = 1\nx', 'y = 2\ny']
    shows = ('x', 'a.b', '(1, x)', 'print(1)\nx = 2', 'dict(a=1)', 'plot_returns(r)')
    silent = ('fig.show()', 'mem.close()', 'x = 1', 'for i in r: f(i)', '%time x = 1')
    assert [shows_a_value(s) for s in shows + silent] == [True] * len(shows) + [False] * len(silent)

def test_figures_are_read_from_html_and_from_plotly_json():
    for html in (True, False):
        (fig,) = plotly_figures(_figure_output(300, html))
        assert memory_rows(fig) == 300
    assert plotly_figures(dict(output_type='stream', name='stdout', text='x')) == []

def test_a_stale_figure_and_an_unstated_memory_are_found():
    code = 'mem = ExperienceReplay(max_sz=1_000)\nmem + batch\ntest_eq(len(mem), 300)'
    ok = dict(cells=[_cell(code), _cell('plot_replay_stats(mem, "reward")', _figure_output(300), cid='f')])
    assert figure_problems(ok) == []
    stale = dict(cells=[_cell(code.replace('300', '250')), ok['cells'][1]])
    assert figure_problems(stale) == ['cell f: the stored figure of mem has 300 rows, the code says 250: '
                                      'run the notebook again with nbdev-test --save']
    tenth = dict(cells=[_cell(code.replace('300', '3_000')),
                        _cell('fig = plot_replay_stats(mem[::10], "reward")\nfig', _figure_output(300), cid='f')])
    assert figure_problems(tenth) == []
    unstated = dict(cells=[_cell('mem = ExperienceReplay()'), ok['cells'][1]])
    assert figure_problems(unstated) == ['cell f: no test_eq(len(mem), N) states the rows of the memory its figure '
                                         'draws']

# ---- the notebooks -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize('path', NOTEBOOKS, ids=[p.relative_to(NBS).as_posix() for p in NOTEBOOKS])
def test_a_page_stores_what_its_code_shows(path):
    cells = shown_cells(json.loads(path.read_text()))
    run = f'run nbdev-test {path.relative_to(ROOT)} --save'
    assert not cells or any(outs for _, _, outs in cells), f'{path.name}: no cell of the page has stored outputs: {run}'
    missing = [src.splitlines()[-1] for d, src, outs in cells
               if shows_a_value(src) and not outs and not SKIPPED & set(d) and d.get('eval') != 'false']
    assert missing == [], f'{path.name}: cells that show a value store no output (their last lines above): {run}'

@pytest.mark.parametrize('path', NOTEBOOKS, ids=[p.relative_to(NBS).as_posix() for p in NOTEBOOKS])
def test_stored_memory_figures_match_the_code(path):
    assert figure_problems(json.loads(path.read_text())) == []

def test_the_memory_figures_are_checked():
    "The figures this checks are there: the index's, the tutorials' and the plots page's"
    def figures(p):
        return [f for c in json.loads(p.read_text())['cells'] for o in c.get('outputs', []) for f in plotly_figures(o)]
    checked = {p.relative_to(NBS).as_posix() for p in NOTEBOOKS if any(memory_rows(f) for f in figures(p))}
    assert {'index.ipynb', 'tutorials/01_learner_cartpole.ipynb', '07_plots.ipynb'} <= checked, checked
