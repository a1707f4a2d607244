# Type stubs for the compiled extension max._core (crates/python). The public names are
# re-exported, with docs, by max.driver, max.engine, max.graph and max.graph.weights.
from . import driver as driver
from . import dtype as dtype
from . import engine as engine
from . import graph as graph
from . import tuning as tuning
from . import weights as weights
