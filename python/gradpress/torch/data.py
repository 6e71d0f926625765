"""The job's dataset as gradpress-worker trains on it, for like-for-like comparisons."""
import os

from gradpress import _C
from gradpress import _config


def worker_data(config=None, rank=None, world_size=None, epoch=0, overrides=None):
    """``((train_images, train_labels), (test_images, test_labels))`` of the job's dataset
    (``dataset.name``, ``path``, ``subset``, ``test_subset``, ``train.seed``) exactly as
    gradpress-worker loads it: normalised float32 images [N, C, H, W] and int64 labels; the
    training part is this rank's share of ``epoch`` in its training order (batch i is rows
    ``[i * batch_size, (i + 1) * batch_size)``), so a Python loop sees the C++ worker's batches.
    Identity from the arguments, else ``RANK`` and ``WORLD_SIZE`` (0 and 1 when unset)."""
    config, overrides = _config.from_launch(config, overrides)
    rank = int(os.environ.get("RANK", 0)) if rank is None else int(rank)
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else int(world_size)
    return _C.worker_data(_config.config_path(config), _config.job_overrides(overrides=overrides),
                          rank, world_size, int(epoch))
