"""The K-Search world model: the decision tree of optimisation actions that policy and search both work on.

model.py holds the tree and its accessors, edits.py the proposer's edit operations, schema.py the JSON shape.
"""

from ksearch.errors import EditRejected, WorldModelError
from ksearch.worldmodel.model import ANALYSIS_HEADING, WorldModel

__all__ = ["ANALYSIS_HEADING", "EditRejected", "WorldModel", "WorldModelError"]
