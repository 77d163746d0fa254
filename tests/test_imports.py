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
        import fastrl_replay.cli, fastrl_replay.runs
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
    assert 'fastrl_replay.runs' in g['fastrl_replay.cli']  # imported inside `main` and `_train`, once the arguments are parsed
    assert 'fastrl_replay.agents.dqn_ray' in g['fastrl_replay.runs']  # imported inside `_learner`
    assert {'fastrl_replay.agents.dqn', 'fastrl_replay.distributed'} <= g['fastrl_replay.agents.dqn_ray']
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]

def test_the_package_has_no_import_cycle():
    g = import_graph()
    assert cycles(g) == []
    assert 'fastrl_replay.agents.dqn' not in g['fastrl_replay.distributed']  # Ray knows nothing of a DQN
    assert 'fastrl_replay.distributed' not in g['fastrl_replay.agents.dqn']  # and the DQN nothing of Ray


def test_importing_the_library_prints_no_warning():
    "fastai's import-time warnings are hidden where the package imports fastai (`importing_fastai`), with the default filters"
    r = subprocess.run([sys.executable, '-c', 'import fastrl_replay.all, fastrl_replay.runs, fastrl_replay.plots'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == '' and r.stdout == '', r.stderr
    # with every warning shown once (`-W default`), as pytest and a careful user see them: pandas' deprecation of the
    # option fastai sets is hidden too
    r = subprocess.run([sys.executable, '-W', 'default', '-c', 'import fastrl_replay.all, fastrl_replay.runs, fastrl_replay.plots'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == '' and r.stdout == '', r.stderr
    r = subprocess.run([sys.executable, '-c', 'import fastrl_replay, warnings; warnings.simplefilter("error"); import torch.jit; torch.jit.script(lambda x: x)'],
                       capture_output=True, text=True, timeout=300)
    assert 'torch.jit.script` is deprecated' in r.stderr  # the warning is still raised outside the package's own import


# --- what imports fastai, and what does not ---------------------------------------------------------------------
MEMORY = sorted(module_name(p) for p in (PKG/'memory').glob('*.py'))

def test_the_memories_import_no_fastai():
    "A replay memory is useful without a learner: the memory modules, `core` and `errors` import neither fastai nor pandas"
    out = python(f'''
        import sys
        import fastrl_replay, fastrl_replay.core, fastrl_replay.errors, {', '.join(MEMORY)}
        from fastrl_replay.memory.experience_replay import ExperienceReplay
        import torch
        er = ExperienceReplay(bs=2, max_sz=4, warmup_sz=0, seed=0)
        er + {{'state': torch.zeros(3, 2)}}
        print(len(er), sorted({{m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('fastai', 'pandas', 'matplotlib', 'sklearn')}}))
    ''')
    assert out == '3 []', out
    assert len(MEMORY) > 10

def test_tensor_batch_imports_fastai_on_first_use():
    "`fastrl_replay.core.TensorBatch` still works: `core` imports it, and with it fastai, when it is first asked for"
    out = python('''
        import sys, pickle, torch
        from fastrl_replay.core import BD
        before = 'fastai' in sys.modules
        from fastrl_replay.core import TensorBatch
        from fastai.torch_core import TensorBase
        tb = pickle.loads(pickle.dumps(TensorBatch(torch.ones(2, 1))))
        print(before, type(tb).__name__, isinstance(tb, TensorBase), TensorBatch.__module__)
    ''')
    assert out == 'False TensorBatch True fastrl_replay.tensor_batch', out

def test_help_imports_neither_torch_nor_fastai():
    "`fastrl-replay --help` parses its arguments before it imports what a command runs"
    out = python('''
        import sys, contextlib, io
        import fastrl_replay.cli
        for argv in (['--help'], ['train', '--help'], ['demo', '--help'], ['forgetting', '--help']):
            with contextlib.redirect_stdout(io.StringIO()) as f:
                try: fastrl_replay.cli.main(argv)
                except SystemExit as e: assert e.code == 0, (argv, e.code)
            assert 'usage: fastrl-replay' in f.getvalue(), argv
        print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('torch', 'fastai', 'numpy', 'plotly', 'gymnasium')}))
    ''')
    assert out == '[]', out
    script = Path(sys.executable).parent/'fastrl-replay'  # the console script itself, as installed
    if script.exists():
        r = subprocess.run([str(script), '--help'], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith('usage: fastrl-replay') and r.stderr == '', r.stderr

def fastai_imports_outside_the_helper(path:Path) -> list:
    "The lines of `path` that import fastai outside a `with importing_fastai():` block"
    bad = []
    def walk(node, inside):
        for n in ast.iter_child_nodes(node):
            if isinstance(n, ast.With):
                quiet = any(isinstance(i.context_expr, ast.Call) and getattr(i.context_expr.func, 'id', None) == 'importing_fastai' for i in n.items)
                walk(n, inside or quiet); continue
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ''] if isinstance(n, ast.ImportFrom) and not n.level else []
            if any(m == 'fastai' or m.startswith('fastai.') for m in names) and not inside: bad.append(n.lineno)
            walk(n, inside)
    walk(ast.parse(path.read_text()), False)
    return bad

def test_fastai_is_imported_only_inside_importing_fastai():
    "Whichever module of the package imports fastai first, fastai's import-time warnings stay hidden"
    found = {module_name(p): fastai_imports_outside_the_helper(p) for p in PKG.rglob('*.py') if '__pycache__' not in p.parts}
    assert {k: v for k, v in found.items() if v} == {}
    import tempfile
    with tempfile.TemporaryDirectory() as d:  # the checker sees a bare import, also inside a function
        f = Path(d)/'m.py'
        f.write_text('import os\nwith importing_fastai(): from fastai.learner import Learner\ndef f():\n    import fastai.layers\n')
        assert fastai_imports_outside_the_helper(f) == [4]

# --- `from fastrl_replay.all import *` gives what the README and the notebooks use ---------------------------------
import builtins, importlib, json, re
ROOT, NBS = PKG.parent, PKG.parent/'nbs'
# modules `all` leaves out on purpose: optional dependencies (Ray, SB3), names of the peers' APIs (the compat
# adapters' `ReplayBuffer`s), the test utilities and the command line
NOT_IN_ALL = ('fastrl_replay.compat', 'fastrl_replay.distributed', 'fastrl_replay.agents.dqn_ray', 'fastrl_replay.test_utils',
              'fastrl_replay.cli', 'fastrl_replay.runs')

def as_python(src:str) -> str:
    "A cell's source as Python: `%time` and `%timeit` leave their statement, other magics and shell lines are blanked"
    lines = [re.sub(r'^%%?time(it)?\s+(-\S+\s+)*', '', l) for l in src.splitlines()]
    return '\n'.join('' if l.lstrip().startswith(('%', '!')) else l for l in lines)

class Names(ast.NodeVisitor):
    "The names code reads, the names it binds anywhere (assignments, definitions, arguments, imports), and its star imports"
    def __init__(self): self.read, self.bound, self.stars = set(), set(), []
    def visit_Name(self, n): (self.read if isinstance(n.ctx, ast.Load) else self.bound).add(n.id)
    def visit_arg(self, n): self.bound.add(n.arg)
    def visit_FunctionDef(self, n): self.bound.add(n.name); self.generic_visit(n)
    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef
    def visit_Import(self, n): self.bound |= {(a.asname or a.name).split('.')[0] for a in n.names}
    def visit_ImportFrom(self, n):
        for a in n.names:
            if a.name == '*': self.stars.append(n.module)
            else: self.bound.add(a.asname or a.name)
    def visit_ExceptHandler(self, n):
        if n.name: self.bound.add(n.name)
        self.generic_visit(n)
    def visit_MatchAs(self, n):
        if n.name: self.bound.add(n.name)
        self.generic_visit(n)

def names_in(sources) -> Names:
    v = Names()
    for s in sources: v.visit(ast.parse(as_python(s)))
    return v

def notebook_code(p:Path) -> list: return [''.join(c['source']) for c in json.loads(p.read_text())['cells'] if c['cell_type'] == 'code']
def readme_code() -> list: return re.findall(r'```python\n(.*?)```', (ROOT/'README.md').read_text(), re.S)
def lessons() -> dict: return {'README.md': readme_code()} | {p.relative_to(NBS).as_posix(): notebook_code(p) for p in sorted(NBS.rglob('*.ipynb'))}

def public_names(module:str) -> set:
    "The `__all__` of a module of the package, read from its source (importing Ray or SB3 is not needed)"
    path = PKG.parent/(module.replace('.', '/') + '.py')
    if not path.exists(): path = path.with_suffix('')/'__init__.py'
    for n in ast.parse(path.read_text()).body:
        if isinstance(n, ast.Assign) and any(getattr(t, 'id', None) == '__all__' for t in n.targets): return set(ast.literal_eval(n.value))
    return set()

def used_from_all(sources) -> set:
    "Names the code reads that nothing in it binds but `from fastrl_replay.all import *` (empty without that import)"
    v = names_in(sources)
    if 'fastrl_replay.all' not in v.stars: return set()
    given = set(dir(builtins)) | v.bound | {'get_ipython', 'display'}
    for m in v.stars:
        if m != 'fastrl_replay.all': given |= set(getattr(importlib.import_module(m), '__all__', ()))
    return v.read - given

def imported_from_package(sources) -> set:
    "The public names the code imports by name from the package's modules (those `all` gives, explicitly or not)"
    res = set()
    for s in sources:
        for n in ast.walk(ast.parse(as_python(s))):
            if isinstance(n, ast.ImportFrom) and not n.level and (n.module or '').startswith('fastrl_replay'):
                m = n.module
                names = {a.name for a in n.names if a.name != '*'}
                if m == 'fastrl_replay.all': res |= names
                elif m != 'fastrl_replay' and not m.startswith(NOT_IN_ALL): res |= names & public_names(m)
    return res

def readme_listed() -> set:
    "The backticked names in README.md's prose that are public names of the package (`all`'s modules)"
    public = set().union(*(public_names(module_name(p)) for p in PKG.rglob('*.py') if '__pycache__' not in p.parts
                           and p.name not in ('_modidx.py', 'all.py') and not module_name(p).startswith(NOT_IN_ALL)))
    ticks = {t.split('.')[0] for t in re.findall(r'`([A-Za-z_][\w.]*)(?:\(\))?`', (ROOT/'README.md').read_text())}
    return ticks & public

def test_the_name_readers():
    code = ['from fastrl_replay.all import *\nimport torch\nfrom fastcore.test import *\nx = QNet(4, 2)\ndef f(a, *b, k=1): return a + len(b) + k + y',
            '%time z = [i for i in range(3)]\nfor j in z: print(j, BD, torch)\ntest_eq(x, x)\ntry: 1\nexcept ValueError as e: e']
    assert used_from_all(code) == {'QNet', 'y', 'BD'}  # test_eq comes from fastcore.test's star import
    assert used_from_all(code[1:]) == set()
    assert imported_from_package(['from fastrl_replay.agents.sac import sac_learner, _private, ActorCriticLoss\n'
                                  'from fastrl_replay.compat.cpprb import ReplayBuffer\nfrom fastrl_replay.all import BD']) == {'sac_learner', 'ActorCriticLoss', 'BD'}
    assert {'sac_learner', 'td3_learner', 'ExperienceReplay'} <= readme_listed()

def test_all_gives_what_the_readme_and_the_notebooks_use():
    "Every name read after `from fastrl_replay.all import *`, imported by name from the package, or named in the README is in `all`"
    import fastrl_replay.all
    have = set(dir(fastrl_replay.all))
    missing = {k: sorted((used_from_all(code) | imported_from_package(code)) - have) for k, code in lessons().items()}
    missing['README.md (named)'] = sorted(readme_listed() - have)
    assert {k: v for k, v in missing.items() if v} == {}
    assert any(used_from_all(code) for code in lessons().values())  # the README's example reads its names from `all`

def test_all_shadows_none_of_its_names():
    "Each name a module of `all` exports (`from m import *`) is that module's own object in `all`: no later module replaced it"
    import fastrl_replay.all as A
    stars = [n.module for n in ast.parse((PKG/'all.py').read_text()).body if isinstance(n, ast.ImportFrom) and n.names[0].name == '*']
    assert len(stars) > 20
    clash = {}
    for m in stars:
        mod = importlib.import_module(f'fastrl_replay.{m}')
        for n in mod.__all__:
            if getattr(A, n) is not getattr(mod, n): clash[n] = m
    assert clash == {}
