"""gradpress: a parameter server with sparse and quantised gradient codecs (docs/python.md).

``gradpress.torch`` makes any PyTorch model and training loop a gradpress worker::

    import gradpress.torch as gp
    opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                  model.named_parameters(), config="configs/lenet_fmnist_m5.yaml")
    gp.broadcast_parameters(model, opt)

``pip install .`` (setup.py) installs the package with its compiled part, ``gradpress._C``,
and the ``gradpress-server`` binary (``gradpress/bin/``). In a developer's build tree the
CMake build puts ``_C`` in ``build/python/gradpress/``; with
``PYTHONPATH=build/python:python`` both halves import as one package (the line below joins
every ``gradpress`` directory on the path).
"""
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
__version__ = "0.1.0"
