"""The Dash dashboard: `popvision dashboard PROFILE [PROFILE_B]`.

``app.create_app(paths)`` builds the app (the shell in ``app.py``, one module per page under
``pages/``). Pages read profiles only through ``data`` (a cached ``Report`` per profile key, opened
with the planner the CLI hands in, as ``popvision_py.open`` opens one), draw with the pure builders
in ``figures`` (a module per page), and name components through ``ids``.
"""
