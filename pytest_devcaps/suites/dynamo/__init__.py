"""Device-generic torch.compile (Dynamo) suite.

Run it with ``pytest --pyargs pytest_devcaps.suites.dynamo``; every case runs once per selected
device (and dtype, where it takes one) through the plugin's ``device``/``dtype`` fixtures.
Counting and graph cases use ``backend="eager"``/``"aot_eager"``; only ``test_inductor.py``
compiles with real Inductor, gated on the ``compile.inductor`` capability.
"""
