"How the package imports: it leaves the warnings filter alone, and its modules depend on one another in one direction."
import subprocess, sys, textwrap

def python(code):
    "Run `code` in a fresh interpreter; its stdout, stripped"
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()

def test_importing_the_library_leaves_the_warnings_filter_alone():
    out = python('''
        import warnings
        # the dependencies first: the filters they install on import are theirs
        import numpy, torch, numba, plotly.graph_objects, plotly.subplots, gymnasium
        import fastai.learner, fastai.callback.all, fastai.optimizer
        before = list(warnings.filters)
        import fastrl_replay.all, fastrl_replay.cli
        print([f for f in warnings.filters if f not in before] or 'unchanged', warnings.filters == before)
    ''')
    assert out == 'unchanged True', out

def test_the_command_line_does_not_import_the_test_utilities():
    out = python('''
        import sys
        import fastrl_replay.cli
        print(sorted(m for m in sys.modules if m == 'fastrl_replay.test_utils'))
    ''')
    assert out == '[]', out  # the command line trains on `data.synth`, not on the test utilities

def test_the_plots_import_no_memory():
    out = python('''
        import sys
        import fastrl_replay.plots
        print(sorted(m for m in sys.modules if m.startswith(('fastrl_replay.memory.', 'fastrl_replay.agents', 'fastrl_replay.data'))))
    ''')
    assert out == "[]", out  # the plots read memories, they do not import them (their checks come from `errors`)
