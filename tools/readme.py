"""Render `nbs/index.ipynb` as README.md (GitHub markdown), the way nbdev-readme does without Quarto."""
import json, re, sys
from pathlib import Path

def _directives(src):
    return {m.group(1) for m in re.finditer(r'^#\|\s*([\w-]+)', src, re.M)}

def _code(src): return '\n'.join(l for l in src.splitlines() if not l.startswith('#|')).strip()

def _output_text(o):
    if o.get('output_type') == 'stream': return ''.join(o['text'])
    data = o.get('data', {})
    if 'text/markdown' in data: return None, ''.join(data['text/markdown'])
    if 'text/plain' in data: return ''.join(data['text/plain'])
    return ''

def render_readme(nb_path) -> str:
    "The README text for the notebook at `nb_path`"
    nb, parts = json.loads(Path(nb_path).read_text()), []
    for c in nb['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown': parts.append(re.sub(r'\]\(images/', '](nbs/images/', src.strip())); continue  # README.md is one folder up
        if c['cell_type'] != 'code' or 'hide' in _directives(src): continue
        code = _code(src)
        if code and 'hide_input' not in _directives(src): parts.append(f'```python\n{code}\n```')
        for o in c.get('outputs', []):
            t = _output_text(o)
            if isinstance(t, tuple): parts.append(t[1].strip())
            elif t.strip(): parts.append(f'```\n{t.rstrip()}\n```')
    return '\n\n'.join(p for p in parts if p) + '\n'

if __name__ == '__main__': print(render_readme(sys.argv[1] if len(sys.argv) > 1 else 'nbs/index.ipynb'), end='')
