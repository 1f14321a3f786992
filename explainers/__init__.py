"""torch-explainers: the library code behind the executable explainers.

Every page of the site imports from here, so what a reader copies is the code
that the tests and the build ran.
"""

__version__ = "0.1.0"
