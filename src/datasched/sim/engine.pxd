# The C types of sim/engine.py's compiled build (datasched/_compiled.py): a link of the simulated
# engine's chain of bases; its fields are declared on the base (sim/state.pxd).
# Declarations only; the .py is the source.

cimport cython

from datasched.core.dispatch cimport EventPump
from datasched.sim.subjobs cimport SubjobRuns

cdef class SimEngine(SubjobRuns):
    @cython.locals(pump=EventPump)
    cpdef bint _step(self) except -1
    cpdef bint _over(self) except -1
