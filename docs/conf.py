"""Sphinx configuration of the documentation site.

`tools/docs_site.py` turns the notebooks in `nbs/` into the pages under `docs/_build/src` (nbdev's processors run their
`show_doc` cells; everything else keeps its stored outputs) and then builds them with this configuration:
`sphinx-build -c docs docs/_build/src docs/_site`. Run it as `make docs`."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from fastrl_replay import __version__

project = 'fastrl_replay'
author = 'fastrl_replay developers'
copyright = 'fastrl_replay developers, Apache-2.0'
version = release = __version__

extensions = ['myst_nb']
# myst-nb writes its copies of the notebooks next to the output folder; keep them inside docs/_build
import myst_nb.sphinx_ext
myst_nb.sphinx_ext.OUTPUT_FOLDER = '_build/jupyter_execute'
root_doc = 'index'
source_suffix = {'.ipynb': 'myst-nb'}
exclude_patterns = ['**.ipynb_checkpoints']

# the notebooks are never executed here: their stored outputs are the documentation
nb_execution_mode = 'off'
nb_render_markdown_format = 'myst'  # show_doc writes markdown: signatures, docments and docstrings
nb_merge_streams = True
myst_enable_extensions = ['dollarmath', 'colon_fence', 'attrs_block']
myst_heading_anchors = 4
# module notebooks start their API sections at `###` under a `#` title
suppress_warnings = ['myst.header', 'mystnb.unknown_mime_type']

html_theme = 'sphinx_book_theme'
html_title = 'fastrl_replay'
html_favicon = '_static/favicon.svg'
html_static_path = ['_static', '_build/static']  # _build/static holds plotly.min.js, copied there by tools/docs_site.py
html_css_files = ['custom.css']
html_js_files = ['plotly.min.js', 'plotly-fit.js']  # one copy of plotly.js for every figure of every page: no network at view time;
# plotly-fit.js redraws a figure when its column changes width
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
html_theme_options = {
    'show_toc_level': 2,
    'navigation_with_keys': False,
    'use_download_button': False,
    'use_fullscreen_button': False,
    'home_page_in_toc': True,
}
html_context = {'default_mode': 'light'}
# one search box: the button in the page header (the sidebar's search field would be a second)
html_sidebars = {'**': ['navbar-logo.html', 'icon-links.html', 'sbt-sidebar-nav.html']}
