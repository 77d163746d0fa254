"What the tests of stopped and resumed runs share: a bit-for-bit comparison of states, and a stop at a step count"
import numpy as np, torch
from fastai.callback.core import Callback, CancelFitException


def bytes_of(a) -> bytes:
    "The bytes of a tensor or an array, so that equal NaNs compare equal"
    t = torch.as_tensor(a).detach().cpu()
    if t.dtype != torch.bool: t = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t.numpy().tobytes()


def same(a, b, path='state'):
    "Assert that two trees of checkpoint data are equal, tensors and arrays bit for bit (NaN included)"
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a: same(a[k], b[k], f'{path}.{k}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)): same(x, y, f'{path}[{i}]')
    elif isinstance(a, (torch.Tensor, np.ndarray)):
        assert a.dtype == b.dtype and a.shape == b.shape and bytes_of(a) == bytes_of(b), path
    else: assert a == b or (a != a and b != b), (path, a, b)  # NaN: a loss before any trained batch


class StopAt(Callback):
    "Stop the fit, as a crash would, once the loop has taken `steps` environment steps"
    order = 80
    def __init__(self, steps): self.steps = steps
    def after_batch(self):
        if self.dls.train.dataset.stats().env_steps >= self.steps: raise CancelFitException()
