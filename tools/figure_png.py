"""A picture of a notebook's figure for README.md, which GitHub shows without running plotly.js:
`python tools/figure_png.py nbs/index.ipynb fig nbs/images/td_error.png` runs the notebook's code cells (exported and
hidden ones included) in one namespace, takes the plotly figure named `fig` and draws it in headless Chromium (Debian's
`chromium`, as `make docs-test` uses) to a PNG. Run it again when the figure changes."""
import json, sys, tempfile
from pathlib import Path

def run_cells(nb_path) -> dict:
    "The namespace after running the notebook's code cells in order (`#|` directives are comments to Python)"
    ns = {'__name__': '__main__'}
    for c in json.loads(Path(nb_path).read_text())['cells']:
        if c['cell_type'] == 'code': exec(compile(''.join(c['source']), str(nb_path), 'exec'), ns)
    return ns

def figure_png(fig, out, width=900, height=450, chromium='/usr/bin/chromium'):
    "Draw the plotly figure `fig` to the PNG file `out`"
    from playwright.sync_api import sync_playwright
    fig = fig.update_layout(width=width, height=height)
    with tempfile.TemporaryDirectory() as d:
        page = Path(d)/'fig.html'
        page.write_text(fig.to_html(include_plotlyjs=True, full_html=True, auto_play=False))
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium, args=['--no-sandbox'])
            pg = b.new_page(viewport={'width': width + 40, 'height': height + 40})
            pg.goto(page.as_uri()); pg.wait_for_selector('.main-svg')
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            pg.locator('.plotly-graph-div').screenshot(path=str(out))
            b.close()

if __name__ == '__main__':
    nb, name, out = sys.argv[1:4]
    figure_png(run_cells(nb)[name], out)
    print(f'{out}: {Path(out).stat().st_size:,} bytes')
