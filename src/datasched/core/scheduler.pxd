# The C types of core/scheduler.py's compiled build (datasched/_compiled.py): the end of the
# scheduler's chain; its fields are declared on the base (core/estimates.pxd).
# Declarations only; the .py is the source.

from datasched.core.commands cimport Commands

cdef class Scheduler(Commands):
    pass
