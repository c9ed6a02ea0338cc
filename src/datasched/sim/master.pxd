# The C types of sim/master.py's compiled build (datasched/_compiled.py): a link of the simulated
# engine's chain of bases; its fields are declared on the base (sim/state.pxd).
# Declarations only; the .py is the source.

from datasched.sim.moves cimport DataMoves

cdef class MasterTurns(DataMoves):
    pass
