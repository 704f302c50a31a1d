"""Example workflows, loaded by default (``PARKWAY_IMPORTS=examples`` unless something else is set).

- ``deploy.plan`` (``examples.deploy``): asks permission to deploy a service and when; then appends the
  deploy to a file in the run's workspace through a journaled ``never`` tool.
- ``signin.ask`` (``examples.signin``): asks for a user name and a one-time code, the code marked
  sensitive: stored encrypted until its continuation commits, then erased.
- ``release.request`` (``examples.release``): the README's team approval (docs/teams.md): two of
  ``team:oncall`` must approve, a nudge after ten minutes, ``team:leads`` may approve too after an hour.
"""

from examples import deploy, release, signin

__all__ = ["deploy", "release", "signin"]
