# The C types of sim/recorder.py's compiled build (datasched/_compiled.py): the recorder as an
# extension type, its fields read from its struct, and what a subjob's end books (``ran``) a C
# method the simulated engine calls directly (sim/state.pxd). Declarations only; the .py is
# the source.

cimport cython

from datasched.core.intervals cimport IntervalSet

cdef class Recorder:
    cdef public set measured
    cdef public dict times
    cdef public object run
    cdef public object _bytes_per_event
    cdef public object _scheduler
    cdef public object _metrics
    cdef public object _held
    cdef public object _residual
    cdef public object ended

    @cython.locals(counts=list)
    cpdef ran(
        self, job_id, start_s, end_s, tuple by_source, IntervalSet processed, tertiary_bytes
    )
