import os, torch, pytest

# two test workers share two cores: one torch thread each keeps them from oversubscribing
torch.set_num_threads(1)
os.environ.setdefault('OMP_NUM_THREADS', '1')

def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason='needs a CUDA device')
    for item in items:
        if 'cuda' in item.keywords and not torch.cuda.is_available(): item.add_marker(skip)
