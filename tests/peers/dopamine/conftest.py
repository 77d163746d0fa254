"Running Dopamine's tests under pytest as their own `__main__` runs them (`tf.compat.v1.disable_v2_behavior()`, then `tf.test.main()`): TensorFlow 1 behaviour, absl's flags marked parsed (its test case reads --test_tmpdir), and all of them in one worker (each test's setUp empties and recreates the same /tmp/dopamine_tests directory)"
import pytest
import tensorflow as tf
from absl import flags

tf.compat.v1.disable_v2_behavior()
flags.FLAGS.mark_as_parsed()

def pytest_collection_modifyitems(config, items):
    for item in items:
        if '/tests/peers/dopamine/' in str(item.fspath): item.add_marker(pytest.mark.xdist_group('dopamine'))
