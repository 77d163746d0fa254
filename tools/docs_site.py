"""Build the documentation site from the notebooks, offline: `python tools/docs_site.py` (what `make docs` runs).

1. nbdev's processors turn every notebook under `nbs/` into `_proc/` (only those changed since the last build):
   they run the import, export and `show_doc` cells, so each `show_doc` output is the markdown of a signature, its
   docments and its docstring, and they drop exported and hidden cells. No other cell runs: the stored outputs are
   the documentation.
2. Each processed notebook becomes a page source under `docs/_build/src/`, named like nbdev names its pages
   (`06a_memory.experience_replay.ipynb` -> `memory.experience_replay.html`): the title and summary become a heading,
   the remaining `#|` directives are stripped (`echo: false` hides the input), backticked names of documented
   symbols link to their API entries, and plotly outputs lose their CDN scripts, so that the one `plotly.min.js`
   shipped in the site draws them. The home page gets the table of contents: `nbs/tutorials/` first, then every
   other notebook in file-name order, so a new notebook gets its page without any change here.
3. Sphinx with myst-nb renders those pages into `docs/_site/` with the configuration in `docs/conf.py`.
   Unchanged pages are not rewritten, so Sphinx rebuilds only what changed; when a page's title changes, or a page
   comes or goes, every page is written again, since each carries the sidebar."""
import argparse, ast, functools, importlib, inspect, json, re, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS, DOCS = ROOT/'nbs', ROOT/'docs'
BUILD, SITE = DOCS/'_build', DOCS/'_site'
SRC, STATIC = BUILD/'src', BUILD/'static'
TUTORIALS = 'tutorials'

def process_notebooks(n_workers=2, force=False) -> Path:
    "Run nbdev's docs processors over `nbs/` into `_proc/` (cached by modification time, unless `force`)"
    from nbdev.serve import proc_nbs
    return Path(proc_nbs(str(NBS), n_workers=n_workers, force=force))

def processed(proc: Path) -> list:
    "The processed notebooks under `proc`, in file-name order (folders and files starting with `.` or `_` left out)"
    return sorted((p for p in proc.rglob('*.ipynb') if not any(o.startswith(('.', '_')) for o in p.relative_to(proc).parts)),
                  key=lambda p: p.relative_to(proc).as_posix())

# ---- directives ----------------------------------------------------------------------------------------------
_re_directive = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')

def split_directives(src: str):
    "The leading `#| key: value` lines of a code cell as a dict, and the rest of the source"
    lines, d = src.splitlines(), {}
    while lines and (m := _re_directive.match(lines[0])):
        d[m.group(1)] = m.group(2).lower() or 'true'; lines.pop(0)
    return d, '\n'.join(lines).strip('\n')

# ---- plotly, offline ---------------------------------------------------------------------------------------------
_re_cdn_script = re.compile(r'<script\b[^>]*\bsrc\s*=\s*["\']https?://[^"\']*["\'][^>]*>\s*</script>', re.I)
_re_cdn_import = re.compile(r'<script\b[^>]*type\s*=\s*["\']module["\'][^>]*>\s*import\s+["\']https?://[^"\']*["\']\s*;?\s*</script>', re.I)
_re_script = re.compile(r'<script\b[^>]*>.*?</script>', re.I|re.S)
_re_body = re.compile(r'<body[^>]*>(.*)</body>', re.I|re.S)

def offline_html(html: str):
    "`html` without the scripts it loads from the network, `None` if nothing but configuration scripts is left"
    if (m := _re_body.search(html)): html = m.group(1)  # a whole document, e.g. `figures_to_html`: keep its body
    html = _re_cdn_import.sub('', _re_cdn_script.sub('', html))
    return html if _re_script.sub('', html).strip() else None

def plotly_json_html(fig: dict) -> str:
    "A stored `application/vnd.plotly.v1+json` figure as a div drawn by the site's plotly.js"
    import plotly.io as pio
    return pio.to_html(fig, include_plotlyjs=False, full_html=False)

PLOTLY_MIME = 'application/vnd.plotly.v1+json'

def fix_outputs(outputs: list) -> list:
    "`outputs` with plotly figures as offline divs and without what only loads scripts from the network"
    res = []
    for o in outputs:
        data = o.get('data')
        if data is not None:
            if not data: continue  # an execute_result whose value was displayed instead (plotly's figures)
            if PLOTLY_MIME in data:
                data['text/html'] = plotly_json_html(data.pop(PLOTLY_MIME))
            if 'text/html' in data:
                html = offline_html(''.join(data['text/html']))
                if html is None: continue
                data['text/html'] = html
        res.append(o)
    return res

# ---- links to the API entries ------------------------------------------------------------------------------------
_re_backticks = re.compile(r'(?<!\[)`([A-Za-z_][\w.]*?)(?:\(\))?`(?!\]\()')

def make_id(name: str) -> str:
    "The HTML id Sphinx gives the section titled `name`"
    from docutils.nodes import make_id
    return make_id(name)

def api_entries(nbs: list) -> dict:
    "Each name that has a `show_doc` entry, mapped to `(page, anchor)` (its first entry)"
    res = {}
    for page, nb in nbs:
        for c in nb['cells']:
            for name in c['metadata'].get('api', []): res.setdefault(name, (page, make_id(name)))
    return res

def linkify(md: str, page: str, entries: dict) -> str:
    "Link backticked names of documented symbols in the markdown `md` of `page` to their entries, outside headings and code"
    depth = page.count('/')
    def link(m):
        name = m.group(1)
        if name not in entries: return m.group(0)
        target, anchor = entries[name]
        href = ('' if target == page else '../'*depth + target + '.html') + '#' + anchor
        return f'<a class="reference internal" href="{href}"><code class="docutils literal notranslate">{m.group(0)[1:-1]}</code></a>'
    lines, fence = md.splitlines(), False
    for i, l in enumerate(lines):
        if l.lstrip().startswith(('```', '~~~')): fence = not fence
        elif not fence and not l.startswith(('    ', '#')): lines[i] = _re_backticks.sub(link, l)  # headings stay plain
    return '\n'.join(lines)

@functools.lru_cache(None)
def docs_url() -> str:
    "The address the site is published at, from `pyproject.toml` (`[project.urls] Documentation`), with a final `/`"
    import tomllib
    return tomllib.loads((ROOT/'pyproject.toml').read_text())['project']['urls']['Documentation'].rstrip('/') + '/'

def local_links(md: str, page: str) -> str:
    "`md` with links to pages of the published site (README.md's, which must work on GitHub) made links to the pages' sources, which Sphinx resolves"
    return re.sub(r'\]\(' + re.escape(docs_url()) + r'([^)#]*?)\.html', lambda m: '](' + '../' * page.count('/') + m.group(1) + '.ipynb', md)

# ---- pages -------------------------------------------------------------------------------------------------------
def frontmatter(cell) -> dict:
    "The YAML front matter nbdev's processors put in a raw first cell (title, description, output-file)"
    import yaml
    src = ''.join(cell['source']).strip()
    return yaml.safe_load(src.strip('-').strip()) or {} if src.startswith('---') else {}

def page_name(rel: Path, fm: dict) -> str:
    "The page of the notebook `rel` (relative to `nbs/`): nbdev's output file, in the notebook's folder"
    stem = Path(fm.get('output-file') or rel.name).stem
    return (rel.parent/stem).as_posix()

# ---- API entries: parameter tables and source links --------------------------------------------------------------
@functools.lru_cache(None)
def symbols() -> dict:
    "Each documented symbol of the library by the name its `show_doc` heading shows (`Class.method`), as `(module, file)`"
    from fastrl_replay._modidx import d
    res = {}
    for mod, syms in d['syms'].items():
        for full, (_, file) in syms.items(): res.setdefault(full[len(mod) + 1:], (mod, file))
    return res

def resolve(name: str):
    "The object a `show_doc` heading names, or `None` if it is not a symbol of the library"
    if name not in symbols(): return None
    mod, file = symbols()[name]
    try:
        obj = importlib.import_module(mod)
        for part in name.split('.'): obj = getattr(obj, part)
        return obj
    except Exception: return None

@functools.lru_cache(None)
def repo_url() -> str:
    "The repository's web address and branch, from `pyproject.toml`, for source links"
    import tomllib
    cfg = tomllib.loads((ROOT/'pyproject.toml').read_text())
    return cfg['project']['urls']['Repository'].rstrip('/') + '/blob/' + cfg.get('tool', {}).get('nbdev', {}).get('branch', 'main')

def source_link(name: str, obj) -> str | None:
    "A link to the line of the library's source that defines `obj`"
    try:
        fn = inspect.unwrap(obj.fget if isinstance(obj, property) else obj)
        line = inspect.getsourcelines(fn)[1]
    except (TypeError, OSError): return None
    return f'{repo_url()}/{symbols()[name][1]}#L{line}'

def params_table(obj) -> str:
    "The parameters of `obj` as a markdown table (name, type, default, details) from its signature and docments; '' if none"
    from fastcore.docments import DocmentTbl
    try: md = DocmentTbl(obj)._repr_markdown_()
    except Exception: return ''
    rows = [l for l in md.splitlines()[2:] if l.strip()]
    if not rows: return ''
    return '\n'.join(['| Parameter | Type | Default | Details |', '| --- | --- | --- | --- |', *rows])

_re_comment = re.compile(r'\s+#(?![^\'"]*[\'"]\s*[,)]).*$')
def signature_without_comments(md: str) -> str:
    "The first code fence of a `show_doc` entry without the trailing docments comments that the table shows"
    m = re.search(r'```python\n(.*?)\n```', md, re.S)
    if not m: return md
    sig = '\n'.join(_re_comment.sub('', l) for l in m.group(1).splitlines())
    return md[:m.start(1)] + sig + md[m.end(1):]

def api_details(md: str, names: list) -> str:
    "`md` of one `show_doc` entry with its source link after the heading and its parameter table after the docstring"
    if len(names) != 1 or (obj := resolve(names[0])) is None: return md
    if (tbl := params_table(obj)): md = signature_without_comments(md) + '\n\n' + tbl
    if (url := source_link(names[0], obj)):
        md = re.sub(r'^(\{\.api-entry\}\n#{1,6} .*)$', lambda m: m.group(1) + f'\n\n<a class="api-source" href="{url}">source</a>',
                    md, count=1, flags=re.M)
    return md

@functools.lru_cache(None)
def library_namespace() -> dict:
    "Every name of every module of the library, the names a module defines taking precedence over those it imports"
    from fastrl_replay._modidx import d
    mods = [importlib.import_module(m) for m in d['syms']]
    ns = {k: v for m in mods for k, v in vars(m).items() if getattr(v, '__module__', None) == m.__name__}
    for m in mods:
        for k, v in vars(m).items(): ns.setdefault(k, v)
    return ns

def default_exp(rel: Path) -> str | None:
    "The module `nbs/rel` exports to (its `#| default_exp`), or `None`"
    for c in json.loads((NBS/rel).read_text())['cells']:
        if c['cell_type'] == 'code' and (m := re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M)): return m.group(1)
    return None

_re_show_doc = re.compile(r'^show_doc\((.+)\)\s*$', re.M)
def show_doc_outputs(src: str, outs: list, module: str | None = None) -> list:
    "The outputs of every `show_doc` call of a cell: the kernel displays only the last one, so the others are rendered here"
    calls = _re_show_doc.findall(src)
    if len(calls) < 2: return outs
    from nbdev.showdoc import show_doc
    ns = {**library_namespace(), **(vars(importlib.import_module(f'fastrl_replay.{module}')) if module else {}), 'show_doc': show_doc}
    res = []
    for args in calls[:-1]:
        try: md = eval(f'show_doc({args})', ns)._repr_markdown_()
        except Exception as e: raise ValueError(f'show_doc({args}) names no object of the library: {e}') from None
        res.append({'output_type': 'display_data', 'metadata': {}, 'data': {'text/markdown': md}})
    return res + outs

def show_doc_cell(cell, directives, module: str | None = None):
    "The markdown cell showing what a hidden `show_doc` cell displays (names resolved in `module` first), or `None` for other cells"
    outs = cell.get('outputs', [])
    if directives.get('echo') != 'false' or not outs or not all('text/markdown' in o.get('data', {}) for o in outs): return None
    outs = show_doc_outputs(split_directives(''.join(cell.get('source', '')))[1], outs, module)
    # a markdown cell rather than an output: its heading is a section of the page, listed in the page's contents
    names, mds = [], []
    for o in outs:
        md, found = api_headings(re.sub(r'^\s*---\s*\n', '', ''.join(o['data']['text/markdown'])).strip())
        names += found; mds.append(api_details(md, found))
    return dict(cell_type='markdown', metadata={'api': names}, source='\n\n'.join(mds))

_re_heading = re.compile(r'^(#{1,6})\s+(.+?)\s*$')
def api_headings(md: str):
    "`md` with its headings marked as API entries (`{.api-entry}`, `_` and `*` escaped), and the names they show"
    lines, names, fence = md.splitlines(), [], False
    for i, l in enumerate(lines):
        if l.lstrip().startswith(('```', '~~~')): fence = not fence
        elif not fence and (m := _re_heading.match(l)):
            names.append(m.group(2))
            lines[i] = '{.api-entry}\n' + m.group(1) + ' ' + re.sub(r'([_*])', r'\\\1', m.group(2))
    return '\n'.join(lines), names

TEST_CALLS = re.compile(r'^(test_\w*|expect_fail)$')
def is_test_only(src: str) -> bool:
    "Whether every statement of the code `src` is a test (`assert`, `test_eq(...)`, `test_fail(...)`, ...): such a cell checks, it does not teach"
    try: tree = ast.parse(src)
    except SyntaxError: return False
    def test(s): return isinstance(s, ast.Assert) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                                                       and isinstance(s.value.func, ast.Name) and bool(TEST_CALLS.match(s.value.func.id)))
    return bool(tree.body) and all(test(s) for s in tree.body)

README_ONLY = '<!-- README only -->'  # a markdown cell for README.md alone, e.g. a picture of a figure the page shows drawn

def copy_images():
    "Put `nbs/images/` next to the page sources, where the pages' `images/...` links find them"
    if (NBS/'images').is_dir(): shutil.copytree(NBS/'images', SRC/'images', dirs_exist_ok=True)

def to_page(nb: dict, module: str | None = None) -> tuple[dict, dict]:
    "A processed notebook (of library module `module`) as the notebook Sphinx renders (a title, no directives, no hidden input), and its front matter"
    cells, fm = nb['cells'], {}
    if cells and cells[0]['cell_type'] == 'raw': fm = frontmatter(cells.pop(0))
    head = [f"# {fm['title']}"] if fm.get('title') else []
    if fm.get('description'): head.append('> ' + fm['description'])
    out = [dict(cell_type='markdown', metadata={}, source='\n\n'.join(head))] if head else []
    for c in cells:
        src = ''.join(c.get('source', ''))
        if c['cell_type'] == 'markdown':
            if src.strip().startswith(('<!-- WARNING: THIS FILE WAS AUTOGENERATED', README_ONLY)): continue
            out.append(dict(cell_type='markdown', metadata={}, source=src))
        elif c['cell_type'] == 'code':
            d, src = split_directives(src)
            if d.get('include') == 'false': continue
            if (doc := show_doc_cell(c, d, module)) is not None:
                out.append(doc); continue
            outputs = fix_outputs(c.get('outputs', []))
            if is_test_only(src) and not outputs: continue  # tests stay in the notebook; the page shows the lesson
            tags = (['remove-input'] if d.get('echo') == 'false' or not src.strip() else []) + \
                   (['remove-output'] if d.get('output') == 'false' else [])
            if not src.strip() and not outputs: continue
            out.append(dict(cell_type='code', execution_count=None, metadata={'tags': tags} if tags else {},
                            outputs=outputs, source=src))
    for i, c in enumerate(out): c['id'] = f'cell-{i}'
    meta = {'kernelspec': {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'},
            'language_info': {'name': 'python'}}
    return dict(cells=out, metadata=meta, nbformat=4, nbformat_minor=5), fm

CONTRIBUTOR_PAGES = {'test_utils', 'project_layout'}  # pages for those who work on the library, not its API reference
EXTRA_PAGES = {'benchmarks'}  # the measurements, made from `bench/stored/` (`extra_pages`)

def markdown_page(md: str) -> dict:
    "A page of one markdown cell"
    return dict(cells=[dict(cell_type='markdown', id='cell-0', metadata={}, source=md)],
                metadata={'language_info': {'name': 'python'}}, nbformat=4, nbformat_minor=5)

def extra_pages() -> list:
    "Pages made from files other than notebooks: the benchmarks (from `bench/stored/*.json`) and the project layout"
    sys.path.insert(0, str(ROOT/'bench'))
    try: from benchmarks_page import benchmarks_notebook
    finally: sys.path.pop(0)
    return [('benchmarks', benchmarks_notebook()), ('project_layout', markdown_page((DOCS/'project_layout.md').read_text()))]

def distinct_titles(pages: list, titles: dict):
    "Give pages that share a title (a sidebar entry twice) their page name after it: 'Checkpoints (memory.persist)', '... (tutorial)'"
    seen = [t for t in titles.values() if t]
    for name, nb in pages:
        t = titles.get(name)
        if not t or seen.count(t) < 2: continue
        first = nb['cells'][0]
        first['source'] = first['source'].replace(f'# {t}', f'# {t} ({"tutorial" if name.startswith(TUTORIALS + "/") else name})', 1)

def toctree(caption: str, pages: list) -> str:
    if not pages: return ''
    return '\n'.join(['```{toctree}', ':hidden:', ':maxdepth: 1', f':caption: {caption}', '', *pages, '```'])

SIDEBAR = BUILD/'sidebar.json'  # the last build's sidebar: when it changes, every page is written again

def sidebar_of(pages: list) -> str:
    "What every page's sidebar shows: each page's name and title, in order, as JSON"
    def title(nb): return next((c['source'].split('\n')[0] for c in nb['cells'][:1] if c['cell_type'] == 'markdown'), '')
    return json.dumps([(n, title(nb)) for n, nb in pages], ensure_ascii=False)

def write_if_changed(p: Path, text: str) -> bool:
    if p.exists() and p.read_text() == text: return False
    p.parent.mkdir(parents=True, exist_ok=True); p.write_text(text); return True

def make_sources(proc: Path) -> list:
    "Write the page sources under `docs/_build/src`; return the page names"
    pages, titles = [], {}
    for p in processed(proc):
        rel = p.relative_to(proc)
        page, fm = to_page(json.loads(p.read_text()), default_exp(rel) if (NBS/rel).exists() else None)
        pages.append((page_name(rel, fm), page)); titles[pages[-1][0]] = fm.get('title')
    pages += extra_pages()
    names = [n for n, _ in pages]
    distinct_titles(pages, titles)
    dup = {n for n in names if names.count(n) > 1}
    if dup: raise SystemExit(f'two notebooks make the same page: {sorted(dup)}')
    if 'index' not in names: raise SystemExit('nbs/index.ipynb is missing: it is the home page')
    entries = api_entries(pages)
    for name, nb in pages:
        for c in nb['cells']:
            if c['cell_type'] == 'markdown': c['source'] = local_links(linkify(c['source'], name, entries), name)
    tutorials = [n for n in names if n.startswith(TUTORIALS + '/')]
    extra = [n for n in names if n in EXTRA_PAGES]
    contributing = [n for n in names if n in CONTRIBUTOR_PAGES]
    modules = [n for n in names if n != 'index' and n not in tutorials + extra + contributing]
    index = dict(pages)['index']
    toc = [toctree('Tutorials', tutorials), toctree('API reference', modules), toctree('Measurements', extra),
           toctree('Contributing', contributing)]
    index['cells'].append(dict(cell_type='markdown', metadata={}, source='\n\n'.join(t for t in toc if t)))
    write_if_changed(SIDEBAR, sidebar_of(pages))
    keep = set()
    for name, nb in pages:
        dest = SRC/f'{name}.ipynb'; keep.add(dest)
        write_if_changed(dest, json.dumps(nb, indent=1, ensure_ascii=False))
    for p in list(SRC.rglob('*.ipynb')):
        if p not in keep: p.unlink()
    return names

def copy_plotly_js():
    "Put the installed plotly's `plotly.min.js` in the site's static files (once for the whole site)"
    import plotly
    src = Path(plotly.__file__).parent/'package_data'/'plotly.min.js'
    dest = STATIC/'plotly.min.js'
    if not dest.exists() or dest.stat().st_size != src.stat().st_size:
        STATIC.mkdir(parents=True, exist_ok=True); shutil.copyfile(src, dest)

def sphinx(out: Path, fresh=False, every_page=False):
    "Render the page sources into `out`; `every_page` writes the pages whose source did not change too (a new sidebar)"
    args = [sys.executable, '-m', 'sphinx', '-b', 'html', '-q', '-c', str(DOCS), '-d', str(BUILD/'doctrees'), str(SRC), str(out)]
    if fresh: args.insert(3, '-E')
    elif every_page: args.insert(3, '-a')
    subprocess.run(args, check=True, cwd=ROOT)

def prune(out: Path, names: list):
    "Remove pages of notebooks that no longer exist: Sphinx leaves the HTML of a deleted source behind"
    keep = set(names) | {'genindex', 'search'}
    for p in out.rglob('*.html'):
        rel = p.relative_to(out)
        if not rel.parts[0].startswith('_') and rel.with_suffix('').as_posix() not in keep: p.unlink()

def build(out: Path = SITE, fresh=False) -> list:
    "Build the site into `out`; return its page names"
    t0 = time.time()
    if fresh:
        shutil.rmtree(BUILD, ignore_errors=True); shutil.rmtree(out, ignore_errors=True)
    proc = process_notebooks(force=fresh)
    before = SIDEBAR.read_text() if SIDEBAR.exists() else None
    names = make_sources(proc)
    copy_images()
    copy_plotly_js()
    sphinx(out, fresh, every_page=SIDEBAR.read_text() != before)  # Sphinx rewrites only changed pages: the others would keep an old sidebar
    prune(out, names)
    print(f'{len(names)} pages in {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} ({time.time()-t0:.1f} s)')
    return names

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--fresh', action='store_true', help='discard the previous build (processed notebooks, page sources, Sphinx) first')
    a = ap.parse_args()
    build(fresh=a.fresh)
