"""The names of the registered backends (`engine.backend`), in a module that imports nothing.

`engine.config` validates `engine.backend` against them; it sits below the backends' modules (which
import it), so it reads the names here and never the registry's loader (`engine.backends.backend_class`),
which imports the backend modules. Adding a backend: its module in this package and its name here.
"""

BACKEND_NAMES = ("packet", "analytical", "alpha_beta", "phase", "hybrid", "ns3")
DEFAULT_BACKEND = BACKEND_NAMES[0]  # what a config that names no backend runs on
