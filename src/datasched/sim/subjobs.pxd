# The C types of sim/subjobs.py's compiled build (datasched/_compiled.py): a link of the simulated
# engine's chain of bases, whose fields are declared on the base (sim/state.pxd), and a running
# subjob's record as an extension type, built without a Python frame. Declarations only; the
# .py is the source.

cimport cython

from datasched.core.intervals cimport IntervalSet
from datasched.sim.disks cimport SharedDisks

cdef class _Run:
    cdef public object subjob
    cdef public double start_s
    cdef public list segments
    cdef public list ends
    cdef public IntervalSet local
    cdef public IntervalSet fetched
    cdef public object pin
    cdef public list peer_pins
    cdef public object fetch
    cdef public object version
    cdef public bint fill_duplicates
    cdef public object turns

cdef class SubjobRuns(SharedDisks):
    @cython.locals(run=_Run, data=IntervalSet, local=IntervalSet, other=IntervalSet)
    cpdef _start(self, action)
    @cython.locals(k=Py_ssize_t, t0=list, t1=list, fetched=IntervalSet)
    cpdef _start_plain(self, action, node, IntervalSet local, IntervalSet other, cpu)
    @cython.locals(
        run=_Run, released=IntervalSet, release=IntervalSet, data=IntervalSet,
        k=Py_ssize_t, segments=list, kept=list, ends=list,
    )
    cpdef _shrink(self, action)
    @cython.locals(
        run=_Run, processed=IntervalSet, remaining=IntervalSet, fetched_files=IntervalSet,
        completed=IntervalSet,
    )
    cpdef _leave(self, slot, finished)

@cython.locals(k=Py_ssize_t)
cpdef tuple _position(_Run run, double elapsed)
