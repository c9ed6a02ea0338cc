# The C types of core/commands.py's compiled build (datasched/_compiled.py): the middle of the
# scheduler's chain; its fields are declared on the base (core/estimates.pxd).
# Declarations only; the .py is the source.

from datasched.core.estimates cimport Estimates

cdef class Commands(Estimates):
    pass
