"""The Dash dashboard: `popvision dashboard PROFILE [PROFILE_B]`.

``app.create_app(paths)`` builds the app (the shell in ``app.py``, one module per page under
``pages/``). Pages read profiles only through ``data`` (a cached ``popvision_py.open`` Report per
profile key), draw with the pure builders in ``figures`` (a module per page), and name components
through ``ids``.
"""
