"README.md, the front door: short, with the install, the headline example and its picture, and links that lead somewhere."
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT/'README.md').read_text()
SITE = 'https://fastrl-replay.github.io/fastrl_replay/'

def page(nb:Path) -> str:
    "The site page of notebook `nb`, named as nbdev names it: the number prefix dropped"
    return re.sub(r'^\d+[a-z]?_', '', nb.stem)

def test_readme_is_short():
    assert len(README.split()) < 1_200, len(README.split())

def test_readme_has_the_install_and_the_headline_example_with_its_output_and_picture():
    install = README.split('## Install', 1)[1].split('\n## ', 1)[0]
    assert 'pip install .' in install and 'make demo' in install and 'make test' in install
    assert 'ExperienceReplayCallback(memory)' in README and 'Learner(' in README and "GymLoop('CartPole-v1'" in README
    assert re.search(r'```\n\[\d+\.0(, \d+\.0){9}\]\n```', README)  # the example's output: ten greedy returns
    (img,) = re.findall(r'!\[[^\]]+\]\(([^)]+)\)', README)
    assert (ROOT/img).is_file() and (ROOT/img).stat().st_size < 200_000

def test_readme_links_every_tutorial_and_existing_pages():
    links = set(re.findall(re.escape(SITE) + r'([\w./-]+)\.html', README))
    tutorials = {f'tutorials/{page(nb)}' for nb in (ROOT/'nbs'/'tutorials').glob('*.ipynb')}
    assert tutorials <= links, tutorials - links
    pages = {page(nb) for nb in (ROOT/'nbs').glob('*.ipynb')} | tutorials | {'benchmarks'}
    assert links <= pages, links - pages
    assert 'benchmarks' in links
