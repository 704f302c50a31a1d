"""Release B of the fleet's workflow code (``tests.releases``)."""

from tests.releases import release

release("b")
