"""Release A of the fleet's workflow code (``tests.releases``)."""

from tests.releases import release

release("a")
