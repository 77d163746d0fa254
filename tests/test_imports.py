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

# --- the import graph, read from the source: module-level and function-level imports alike ---------------------------
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent/'fastrl_replay'

def module_name(path:Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)

def imports_of(path:Path, modules:set) -> set:
    "The package's modules that `path` imports anywhere in its body, functions included"
    me, found = module_name(path), set()
    package = me if path.name == '__init__.py' else me.rpartition('.')[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import): names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:  # relative: from the package `level - 1` steps above this module's
                up = package.split('.')[:len(package.split('.')) - (node.level - 1)]
                base = '.'.join(up + ([base] if base else []))
            names = [base] + [f'{base}.{a.name}' for a in node.names]  # `from pkg import module` names a module too
        else: continue
        found |= {n for n in names if n in modules}
    return found - {me}

def import_graph() -> dict:
    paths = [p for p in PKG.rglob('*.py') if '__pycache__' not in p.parts and p.name != '_modidx.py']
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}

def cycles(graph:dict) -> list:
    "The strongly connected components of more than one module (Tarjan)"
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index: visit(v)
    return out

def test_the_graph_reader_sees_function_level_imports():
    g = import_graph()
    assert 'fastrl_replay.forgetting' in g['fastrl_replay.cli']  # imported inside `_forgetting`
    assert 'fastrl_replay.agents.dqn_ray' in g['fastrl_replay.cli']  # imported inside `_learner`
    assert {'fastrl_replay.agents.dqn', 'fastrl_replay.distributed'} <= g['fastrl_replay.agents.dqn_ray']
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]

def test_the_package_has_no_import_cycle():
    g = import_graph()
    assert cycles(g) == []
    assert 'fastrl_replay.agents.dqn' not in g['fastrl_replay.distributed']  # Ray knows nothing of a DQN
    assert 'fastrl_replay.distributed' not in g['fastrl_replay.agents.dqn']  # and the DQN nothing of Ray


def test_importing_the_library_prints_no_warning():
    "fastai's `torch.jit.script` FutureWarning is hidden where the package first imports fastai, with the default filters"
    r = subprocess.run([sys.executable, '-c', 'import fastrl_replay.all, fastrl_replay.cli, fastrl_replay.plots'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == '' and r.stdout == '', r.stderr
    # with every warning shown once (`-W default`), as pytest and a careful user see them: pandas' deprecation of the
    # option fastai sets is hidden too
    r = subprocess.run([sys.executable, '-W', 'default', '-c', 'import fastrl_replay.all, fastrl_replay.cli, fastrl_replay.plots'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == '' and r.stdout == '', r.stderr
    r = subprocess.run([sys.executable, '-c', 'import fastrl_replay, warnings; warnings.simplefilter("error"); import torch.jit; torch.jit.script(lambda x: x)'],
                       capture_output=True, text=True, timeout=300)
    assert 'torch.jit.script` is deprecated' in r.stderr  # the warning is still raised outside the package's own import
