"The plots: whole subplot titles, frames that move only the marker traces, capped frames, clear errors."
import json, re, subprocess, sys, textwrap
import numpy as np, pytest, torch
import plotly.graph_objects as go
import plotly.io as pio
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.plots import (get_steps, plot_replay_stats, plot_losses, plot_returns, figures_to_html, plot_priorities,
                                 plot_sample_counts, setup_plotly)
from fastrl_replay.data.synth import synth_transitions, synth_replay_learner

COLS = ['td_error', 'reward', 'action', 'done', 'step']

def memory(n=20, max_sz=20):
    er = ExperienceReplay(max_sz=max_sz, warmup_sz=1, seed=0) + synth_transitions(n)
    er.update_td(torch.linspace(0, 1, len(er)), torch.arange(len(er)))
    return er

def titles(fig): return [a.text for a in fig.layout.annotations]
def lines(fig): return [t for t in fig.data if t.mode == 'lines+markers']

@pytest.mark.parametrize('columns', ['reward', ['reward'], 'td_error', ' step '])
def test_one_column_title_is_whole(columns):
    name = (columns[0] if isinstance(columns, list) else columns).strip()
    fig = plot_replay_stats(memory(), columns)
    assert titles(fig) == [name]  # fastrl's one-row grid titled the subplot with one character
    assert len(fig.data) == 2 and fig.data[0].name == name

@pytest.mark.parametrize('n_cols', [1, 2, 3, 5])
def test_several_column_titles_are_whole(n_cols):
    fig = plot_replay_stats(memory(), ','.join(COLS[:3]), n_cols=n_cols)
    assert titles(fig) == COLS[:3]
    axes = [k for k in fig.layout.to_plotly_json() if k.startswith('xaxis')]
    assert len(axes) == -(-3 // n_cols) * min(n_cols, 3)

@pytest.mark.parametrize('k', [1, 2, 3, 4, 5])
def test_frames_move_only_markers(k):
    er = memory()
    fig = plot_replay_stats(er, COLS[:k], n_cols=2)
    markers = [i for i, t in enumerate(fig.data) if t.mode == 'markers']
    assert markers == list(range(1, 2 * k, 2))
    assert [(fig.data[i].marker.color, fig.data[i].marker.size) for i in markers] == [('red', 10)] * k
    assert len(fig.frames) == len(er)
    for j, f in enumerate(fig.frames):
        assert f.name == str(j) and list(f.traces) == markers and len(f.data) == k
        assert not set(f.traces) & {i for i, t in enumerate(fig.data) if t.mode == 'lines+markers'}
        for c, d in zip(COLS[:k], f.data): assert (d.x[0], d.y[0]) == (j, float(er.memory[c][j, 0]))
    for c, t in zip(COLS[:k], lines(fig)):  # the lines hold the whole column, whatever the frames do
        np.testing.assert_array_equal(t.y, er.memory[c][:, 0].double().numpy())
        np.testing.assert_array_equal(t.x, np.arange(len(er)))

@pytest.mark.parametrize('n,max_frames', [(1000, 200), (1000, 7), (1000, 2), (201, 200), (5, 200), (1, 200), (10, 1)])
def test_max_frames_caps_and_spans(n, max_frames):
    er = memory(n, max_sz=n)
    fig = plot_replay_stats(er, 'step', max_frames=max_frames)
    rows = [int(f.data[0].x[0]) for f in fig.frames]
    assert len(rows) == min(n, max_frames) and rows == sorted(set(rows))
    assert rows[0] == 0 and (max_frames == 1 or rows[-1] == n - 1)
    assert [f.data[0].y[0] for f in fig.frames] == rows  # `step` counts the rows
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [str(r) for r in rows]
    assert [list(s.args[0]) for s in steps] == [[f.name] for f in fig.frames]
    play = fig.layout.updatemenus[0].buttons[0]
    assert list(play.args[0]) == [f.name for f in fig.frames] and play.args[1]['frame']['duration'] == 500

def test_a_million_rows_make_few_frames():
    er = ExperienceReplay(max_sz=1_000_000, warmup_sz=1) + {'reward': torch.zeros(1_000_000, 1)}
    fig = plot_replay_stats(er, 'reward')
    assert len(fig.frames) == 200 and fig.layout.sliders[0].steps[-1].label == '999999'

def test_wide_column_is_its_mean():
    er = memory()
    fig = plot_replay_stats(er, 'state,reward')
    assert titles(fig) == ['state (mean)', 'reward']
    np.testing.assert_allclose(fig.data[0].y, er.memory['state'].double().mean(1).numpy())
    assert fig.frames[3].data[0].y[0] == pytest.approx(er.memory['state'][3].double().mean().item())
    img = ExperienceReplay(max_sz=4, warmup_sz=1) + {'obs': torch.arange(4 * 6, dtype=torch.uint8).reshape(4, 2, 3)}
    fig = plot_replay_stats(img, 'obs')
    assert titles(fig) == ['obs (mean)'] and list(fig.data[0].y) == [2.5, 8.5, 14.5, 20.5]

def test_bad_columns_raise():
    er = memory()
    for cols, msg in [('rewards', "'rewards'"), ('td_error,nope', "'nope'"), (['reward', 'Reward'], "'Reward'"),
                      ('', 'one or more columns'), ([], 'one or more columns'), ('reward,', 'one or more columns')]:
        with pytest.raises(ExperienceReplayException, match=msg): plot_replay_stats(er, cols)
    with pytest.raises(ExperienceReplayException, match='empty memory'): plot_replay_stats(ExperienceReplay())
    with pytest.raises(ExperienceReplayException, match='empty memory'):
        plot_replay_stats(ExperienceReplay(warmup_sz=0) + synth_transitions(0))
    with pytest.raises(ExperienceReplayException, match='max_frames'): plot_replay_stats(er, max_frames=0)

def test_bad_arguments_exact_messages():
    er = memory()
    for call, msg in [(lambda: plot_replay_stats(er, 'td_error,rewards'),
                       "column 'rewards' is not in the memory, whose columns are " + str(er.keys)),
                      (lambda: plot_replay_stats(ExperienceReplay(), 'td_error'), 'cannot plot an empty memory: add transitions first'),
                      (lambda: plot_replay_stats(er, n_cols=0), 'n_cols must be a positive int, got 0'),
                      (lambda: plot_replay_stats(er, n_cols=True), 'n_cols must be a positive int, got True'),
                      (lambda: plot_replay_stats(er, max_frames=2.), 'max_frames must be a positive int, got 2.0'),
                      (lambda: plot_replay_stats(er, ''), "columns must name one or more columns, got ''")]:
        with pytest.raises(ExperienceReplayException) as e: call()
        assert str(e.value) == msg
    for call, msg in [(lambda: plot_returns([]), 'no returns to plot'),
                      (lambda: plot_returns([1.], window=0), 'window must be a positive int, got 0'),
                      (lambda: plot_returns([1.], window=1.5), 'window must be a positive int, got 1.5'),
                      (lambda: plot_losses(synth_replay_learner()), 'the recorder holds no training losses: fit the learner first')]:
        with pytest.raises(ValueError) as e: call()
        assert str(e.value) == msg
    assert issubclass(ExperienceReplayException, ValueError)

def test_get_steps():
    assert get_steps(2) == [['0', '1'], get_steps()[1]]
    assert get_steps(5, atomic=True)[0] == ['5']
    assert get_steps()[1]['frame'] == dict(duration=50, redraw=False) and get_steps()[1]['mode'] == 'immediate'

def test_figures_to_html():
    figs = [plot_replay_stats(memory(), 'reward'), plot_returns([1., 2, 3]), plot_returns([4., 5])]
    for inc, cdn, inline in [('cdn', 1, False), (True, 0, True), (False, 0, False)]:
        html = figures_to_html(figs, include_plotlyjs=inc)
        assert html.startswith('<html><head>') and html.endswith('</body></html>')
        assert html.count('<html>') == html.count('<body>') == 1
        assert html.count('class="plotly-graph-div"') == 3 and html.count('Plotly.newPlot(') == 3
        assert html.count('src="https://cdn.plot.ly/') == cdn
        assert html.count('plotly.js v') == inline  # the bundle's banner: inlined at most once
    assert figures_to_html([]) == '<html><head><meta charset="utf-8" /></head><body>\n\n</body></html>'

def test_training_plots():
    learn = synth_replay_learner(n_batches=4, bs=10, cbs=ExperienceReplayCallback(bs=8, max_sz=50, warmup_sz=10, seed=0))
    with learn.no_bar(), learn.no_logging(): learn.fit(2)
    fig = plot_losses(learn.recorder)
    assert isinstance(fig, go.Figure) and len(fig.data) == 1 and fig.data[0].mode == 'lines'
    assert list(fig.data[0].x) == list(range(8)) and list(fig.data[0].y) == [float(l) for l in learn.recorder.losses]
    with pytest.raises(ValueError, match='no training losses'): plot_losses(synth_replay_learner())
    fig = plot_returns(np.arange(6.), window=3)
    assert [t.mode for t in fig.data] == ['markers', 'lines'] and list(fig.data[0].x) == list(range(6))
    assert list(fig.data[1].y) == [0, 0.5, 1, 2, 3, 4]
    with pytest.raises(ValueError, match='window'): plot_returns([1.], window=1.5)

def test_priority_plots():
    mem = PrioritizedExperienceReplay(bs=5, max_sz=30, warmup_sz=11, seed=0)
    learn = synth_replay_learner(n_batches=3, bs=10, cbs=ExperienceReplayCallback(mem))
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    fig = plot_priorities(mem, bins=7)
    assert fig.layout.xaxis.title.text == 'priority' and len(fig.data[0].x) == 7 and fig.layout.yaxis.type == 'log'
    counts, edges = np.histogram(mem.get_priority(torch.arange(30)).numpy(), bins=7)
    np.testing.assert_array_equal(fig.data[0].y, counts)
    np.testing.assert_array_equal(fig.data[0].x, (edges[:-1] + edges[1:]) / 2)
    np.testing.assert_array_equal(fig.data[0].width, np.diff(edges))
    counts = plot_sample_counts(mem)
    assert list(counts.data[0].x) == list(range(30)) and counts.data[0].y.sum() == 10  # two trained batches of 5
    er = memory()
    fig = plot_priorities(er)  # no priorities: |td_error|
    assert fig.layout.xaxis.title.text == '|td_error|' and fig.layout.title.text == '|td_error| of 20 stored rows'
    np.testing.assert_array_equal(fig.data[0].y, np.histogram(er.memory['td_error'][:, 0].abs().numpy(), bins=50)[0])
    with pytest.raises(ExperienceReplayException, match='bins'): plot_priorities(er, bins=0)

def test_a_large_memory_makes_a_small_page():
    "Figures of 50,000 rows and 20,000 losses hold a few thousand points each: the page without plotly.js stays small"
    n = 50_000
    mem = PrioritizedExperienceReplay(bs=5, max_sz=n, warmup_sz=1, seed=0) + synth_transitions(n)
    td = torch.from_numpy(np.random.default_rng(0).exponential(size=n)).float()
    td[31_337] = 100.  # one outlier
    mem.update_td(td, torch.arange(n))
    figs = [plot_replay_stats(mem, 'td_error,reward', max_frames=100), plot_priorities(mem), plot_sample_counts(mem)]
    line = figs[0].data[0]
    assert 3_990 <= len(line.x) <= 4_000 and line.x[0] == 0 and line.x[-1] == n - 1 and 31_337 in line.x and line.y.max() == 100.
    assert len(figs[0].data[2].x) <= 4_000 and len(figs[2].data[0].x) <= 4_000
    class Rec: losses = list(np.linspace(1, 0, 20_000))
    figs.append(plot_losses(Rec()))
    assert 3_990 <= len(figs[-1].data[0].x) <= 4_000 and figs[-1].data[0].y[0] == 1 and figs[-1].data[0].y[-1] == 0
    page = figures_to_html(figs, include_plotlyjs=False, show=False)
    assert len(page) < 250_000, len(page)

def test_setup_plotly_outside_ipython():
    "In a plain Python process (a fresh one: the notebooks run in this one leave an IPython shell behind) nothing is set"
    code = ('import plotly.io as pio; before = pio.renderers.default\n'
            'from fastrl_replay.plots import setup_plotly\n'
            'print(setup_plotly() is None and pio.renderers.default == before)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == 'True'

def test_setup_plotly_in_a_notebook_works_offline():
    "In a fresh notebook kernel, plotly.js comes once, inline, with the first figure; no figure loads anything from a CDN"
    kernel = textwrap.dedent('''
        import json
        from execnb.shell import CaptureShell
        sh = CaptureShell()
        sh.run("from fastrl_replay.plots import setup_plotly, plot_returns\\nsetup_plotly()")
        outs = [sh.run(f"plot_returns([1., 2., {i}])") for i in range(3)]
        print(json.dumps([''.join(o['data'].get('text/html', '')) for out in outs for o in out if 'data' in o]))
    ''')  # its own process: plotly's renderers are global state that other tests in this one change
    r = subprocess.run([sys.executable, '-c', kernel], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    htmls = json.loads(r.stdout.splitlines()[-1])
    bundles = [h for h in htmls if len(h) > 1_000_000 and 'plotly.js' in h]
    assert len(bundles) == 1 and bundles[0] in ''.join(htmls[:2]), [len(h) for h in htmls]
    assert sum(h.count('Plotly.newPlot(') for h in htmls) == 3
    assert not any(re.search(r'<script[^>]*src=|import\s*"http', h) for h in htmls)  # nothing loaded from the network

def _notebook_outputs(*cells, kernel=True):
    "The outputs of `cells` run in a fresh process: a Jupyter kernel of this Python (ipykernel, through nbclient), or execnb's shell"
    code = textwrap.dedent(f'''
        import json, nbformat
        from nbclient import NotebookClient
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in {list(cells)!r}])
        NotebookClient(nb, timeout=600, kernel_name='python3').execute()
        print(json.dumps([c.outputs for c in nb.cells]))
    ''' if kernel else f'''
        import json
        from execnb.shell import CaptureShell
        sh = CaptureShell()
        print(json.dumps([sh.run(c) for c in {list(cells)!r}]))
    ''')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])

def _htmls(outputs) -> list: return [''.join(o['data'].get('text/html', '')) for out in outputs for o in out if 'data' in o]

def test_figures_render_offline_in_a_jupyter_kernel_with_no_set_up_call():
    "In a real kernel plotly would store only its JSON mime type (blank in the HTML export); the library's figures come as offline HTML"
    outs = _notebook_outputs('from fastrl_replay.all import *\nimport plotly.io as pio\nprint(pio.renderers.default)',
                             'plot_returns([1., 2., 3.])', 'plot_losses(type("R", (), {"losses": [3., 2., 1.]})())')
    assert outs[0][0]['text'].strip() == 'plotly_mimetype'  # plotly's own choice in a kernel
    htmls = _htmls(outs[1:])
    bundles = [h for h in htmls if len(h) > 1_000_000 and 'plotly.js' in h]
    assert len(bundles) == 1 and bundles[0] in ''.join(_htmls(outs[1:2])), [len(h) for h in htmls]  # plotly.js once, inline
    assert sum(h.count('Plotly.newPlot(') for h in htmls) == 2  # each figure as HTML, which an HTML export keeps as it is
    assert not any(re.search(r'<script[^>]*src=|import\s*"http', h) for h in htmls)  # nothing loaded from the network
    assert not any('application/vnd.plotly.v1+json' in o.get('data', {}) for out in outs for o in out)

def test_a_chosen_renderer_is_left_alone():
    "A renderer the user chose before the first figure stays; plotly's Jupyter default is replaced by the offline one"
    outs = _notebook_outputs("import plotly.io as pio\nfrom fastrl_replay.plots import plot_returns\npio.renderers.default = 'json'",
                             "f = plot_returns([1., 2.])\nprint(pio.renderers.default)",
                             "pio.renderers.default = 'plotly_mimetype+notebook'\nf = plot_returns([1., 2.])\nprint(pio.renderers.default)",
                             kernel=False)
    assert [''.join(o[0]['text']).strip() for o in outs[1:]] == ['json', 'notebook_offline']
