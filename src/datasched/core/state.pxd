# The C types of core/state.py's compiled build (datasched/_compiled.py): a running subjob's
# record as an extension type, its times C doubles, read directly where the reader knows the
# type (cache-oriented splitting's split choice). Declarations only; the .py is the source.

cdef class Running:
    cdef public object subjob
    cdef public object slot
    cdef public double start_s
    cdef public double s_per_event
    cdef public object state
    cdef public double end_s
