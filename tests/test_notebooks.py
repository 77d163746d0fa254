"Every notebook runs top to bottom as `nbdev-test` runs it, skipping the cells flagged in `tst_flags`."
from pathlib import Path
import pytest
from nbdev.config import get_config
from nbdev.test import test_nb as run_notebook

NBS = sorted(p for p in (Path(__file__).parent.parent/'nbs').glob('*.ipynb'))

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook(nb):
    cfg = get_config(nb.parent)
    ok, _ = run_notebook(nb, skip_flags=cfg.tst_flags, basepath=cfg.config_path, cell_timeout=cfg.get('cell_timeout', 600))
    assert ok, f'{nb.name} failed; its traceback is printed above'
