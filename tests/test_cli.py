"The installed `fastrl-replay` console script, end to end, with a tiny budget."
import json, subprocess, sys
import pytest
from pathlib import Path

EXE = Path(sys.executable).parent/'fastrl-replay'

def run(*args): return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=300)

def test_train_writes_its_report(tmp_path):
    r = run('train', '--steps', '1500', '--replay-size', '1000', '--seed', '3', '--out', str(tmp_path), '--quiet')
    assert r.returncode == 0, r.stderr
    assert 'greedy return over 20 episodes' in r.stdout
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith('dqn-CartPole-v1-seed3-')
    assert sorted(p.name for p in run_dir.iterdir()) == ['metrics.json', 'model.pth', 'report.html']
    m = json.loads((run_dir/'metrics.json').read_text())
    assert {'eval_mean', 'eval_std', 'env_steps', 'wall_s', 'seed', 'env'} <= m.keys()
    assert m['seed'] == 3 and m['env'] == 'CartPole-v1' and m['env_steps'] >= 1500 and len(m['eval_returns']) == 20
    assert m['memory_rows'] == 1000 and m['memory_bytes_per_transition'] == 94.1  # the memory's arrays over its 1,000 rows
    page = (run_dir/'report.html').read_text()
    assert 'bytes per transition' in page
    assert page.count('class="plotly-graph-div"') == 3 and '<script src="http' not in page  # plotly.js inlined: offline

def test_report_of_a_short_run_is_titled_readable_offline_and_light(tmp_path):
    "`--steps 5000`: the first epoch is all warm-up, and the report shows `—` there, never nan or None"
    import re
    r = run('train', '--steps', '5000', '--out', str(tmp_path), '--quiet')
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    page = (run_dir/'report.html').read_text()
    scripts = re.findall(r'<script\b[^>]*>(.*?)</script>', page, re.S)
    bundles = [s for s in scripts if len(s) > 1_000_000 and 'plotly.js' in s[:2000]]
    assert len(bundles) == 1  # plotly.js inlined once, for every figure
    assert len(page.encode()) - len(bundles[0].encode()) < 1_000_000, len(page) - len(bundles[0])
    assert not re.search(r'<script\b[^>]*\bsrc=|<link\b', page)  # nothing loaded from elsewhere: works offline
    assert 'Plotly.animate' not in page  # the td_error animation waits for its ▶ button
    assert '<title>DQN on CartPole-v1: seed 0, uniform replay</title>' in page and '<style>' in page
    text = re.sub(r'<script\b[^>]*>.*?</script>', '', page, flags=re.S)
    cells = re.findall(r'<t[hd][^>]*>(.*?)</t[hd]>', text)
    assert not {'nan', 'None', 'null', 'NaN'} & set(cells), cells
    assert not any(re.fullmatch(r'-?[\d,]*\.\d{4,}', c) for c in cells), cells  # rounded
    for label, value in [('learning rate', '0.001'), ('replay memory capacity', '50,000'), ('environment steps', '5,000'), ('seed', '0')]:
        assert f'<tr><th>{label}</th><td>{value}</td></tr>' in text, label
    epochs = re.search(r'<h2>Epochs</h2><table>(.*?)</table>', text).group(1)
    head = re.findall(r'<th>(.*?)</th>', epochs)
    assert head == ['epoch', 'train loss', 'valid loss', 'return', 'episodes', 'epsilon', 'valid return'], head
    rows = [re.findall(r'<td[^>]*>(.*?)</td>', r) for r in re.findall(r'<tr>(.*?)</tr>', epochs)][1:]
    col = {n: [r[head.index(n)] for r in rows] for n in head}
    assert len(rows) == 10 and [col[n][0] for n in head[:2] + head[3:6]] == ['1', '—', '—', '—', '—']  # all warm-up
    assert all('—' not in r for r in rows[1:]), rows
    assert '—' not in col['valid return'] + col['valid loss']  # greedy episodes after every epoch, the first too
    metrics = json.loads((run_dir/'metrics.json').read_text())
    from fastrl_replay.runs import _fmt
    assert [_fmt(v) for v in metrics['valid_returns']] == col['valid return']  # the validation's return per epoch

def test_prioritized_report_adds_priorities_and_draw_counts(tmp_path):
    r = run('train', '--steps', '1200', '--replay-size', '1000', '--replay', 'per', '--out', str(tmp_path), '--quiet')
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir/'metrics.json').read_text())['replay'] == 'per'
    page = (run_dir/'report.html').read_text()
    assert page.count('class="plotly-graph-div"') == 5 and 'priority of' in page and 'draws per row' in page

def test_bad_options_give_clear_messages(tmp_path):
    r = run('train', '--env', 'CartPol-v1', '--out', str(tmp_path))
    assert r.returncode == 2 and "unknown gymnasium environment 'CartPol-v1'; did you mean CartPole-v1" in r.stderr
    r = run('train', '--steps', '0')
    assert r.returncode == 2 and "argument --steps: expected a positive integer, got '0'" in r.stderr
    r = run('train', '--replay', 'her')
    assert r.returncode == 2 and "argument --replay: invalid choice: 'her' (choose from 'uniform', 'per', 'laber')" in r.stderr
    r = run('train', '--replay-size', 'lots')
    assert r.returncode == 2 and "argument --replay-size: expected a positive integer, got 'lots'" in r.stderr
    r = run('train', '--env', 'Pendulum-v1', '--steps', '100', '--out', str(tmp_path))
    assert r.returncode == 2 and 'DQN needs discrete actions' in r.stderr
    assert not any(tmp_path.iterdir())  # nothing written for a refused run

def test_demo_runs_the_callback_and_writes_its_metrics(tmp_path):
    r = run('demo', '--epochs', '1', '--out', str(tmp_path), '--quiet')
    assert r.returncode == 0, r.stderr
    assert '19 batches cancelled while the memory warmed up, 31 trained on replayed samples' in r.stdout
    assert 'FutureWarning' not in r.stderr and 'torch.jit.script' not in r.stderr  # fastai's import-time warning is hidden
    (run_dir,) = tmp_path.iterdir()
    m = json.loads((run_dir/'metrics.json').read_text())
    assert (m['batches_cancelled'], m['batches_trained'], m['memory_rows']) == (19, 31, 500)

def test_bad_counts_and_settings_exact_messages(tmp_path):
    r = run('demo', '--epochs', '0', '--out', str(tmp_path))
    assert r.returncode == 2 and "fastrl-replay demo: error: argument --epochs: expected a positive integer, got '0'" in r.stderr
    r = run('train', '--replay-size', '-5', '--out', str(tmp_path))
    assert r.returncode == 2 and "argument --replay-size: expected a positive integer, got '-5'" in r.stderr
    assert not any(tmp_path.iterdir())

def test_run_train_refuses_bad_settings_before_training(tmp_path):
    from fastrl_replay.runs import run_train
    for kwargs, msg in [(dict(replay='her'), "replay must be 'uniform', 'per' or 'laber', got 'her'"),
                        (dict(steps=9), 'steps must be at least 10, got 9'),
                        (dict(env='CartPol-v1'), "unknown gymnasium environment 'CartPol-v1'; did you mean CartPole-v1")]:
        with pytest.raises(ValueError) as e: run_train(out=str(tmp_path), **kwargs)
        assert str(e.value).startswith(msg)
    assert not any(tmp_path.iterdir())

def test_bad_arguments_are_refused_before_torch_is_imported():
    "The arguments are parsed first: a bad count or a `--help` answers without importing torch or fastai"
    code = ('import sys, contextlib, io\nfrom fastrl_replay.cli import main\n'
            'for argv in (["train", "--steps", "0"], ["demo", "--epochs", "x"], ["--help"]):\n'
            '    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):\n'
            '        try: main(argv)\n'
            '        except SystemExit as e: print(e.code, file=sys.__stdout__)\n'
            'print(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "fastai", "numpy"}))')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split('\n')[:4] == ['2', '2', '0', '[]'], r.stdout + r.stderr
    r = run('train', '--steps', '0')
    assert r.returncode == 2 and "expected a positive integer, got '0'" in r.stderr

@pytest.mark.parametrize('case', ['env', 'out_file', 'out_unmakeable', 'resume_file'])
def test_train_reports_a_run_that_cannot_start_in_one_line(tmp_path, case):
    "A bad `ALE/` id, an `--out` or `--resume` that is not a folder: one line on stderr, exit status 2, no traceback"
    f = tmp_path/'file'; f.write_text('x')
    args = {'env': ['--env', 'ALE/NoSuchGame-v5', '--out', str(tmp_path)], 'out_file': ['--out', str(f)],
            'out_unmakeable': ['--out', str(f/'run')], 'resume_file': ['--resume', str(f)]}[case]
    r = run('train', '--quiet', *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith('fastrl-replay: error: ') and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert {'env': 'ALE/NoSuchGame-v5', 'out_file': 'not a folder', 'out_unmakeable': str(f/'run'),
            'resume_file': 'not a folder'}[case] in r.stderr, r.stderr

def test_train_reports_a_full_disk_at_the_first_checkpoint(tmp_path, monkeypatch, capsys):
    "A disk that fills up when the first checkpoint is written: one line on stderr, exit status 2"
    import errno
    import fastrl_replay.checkpoint as ckpt
    from fastrl_replay.cli import main
    def full(path, *args, **kwargs): raise OSError(errno.ENOSPC, 'No space left on device', str(path))
    monkeypatch.setattr(ckpt, 'write_checkpoint', full)
    with pytest.raises(SystemExit) as e:
        main(['train', '--steps', '1500', '--replay-size', '1000', '--checkpoint-every', '500', '--out', str(tmp_path),
              '--quiet'])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and 'no space left on the device' in err and 'checkpoint' in err, err

