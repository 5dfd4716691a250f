"""A Kubernetes API emulator for tests: the real ``kubernetes`` client against an in-process server.

``server.Emulator`` is the server, ``store`` its object semantics, ``fixtures`` the pytest
fixtures (``emulator``, ``kube_api``, ``kube_namespace``) that other test packages import
into their ``conftest.py``. Tests only: nothing in ``kruntimes`` may import this package.
"""
