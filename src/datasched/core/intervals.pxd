# The C types of core/intervals.py's compiled build (datasched/_compiled.py): IntervalSet as an
# extension type, its fields read directly where the reader knows the type. The .py is the
# source and the reference; this file only declares. Fields other modules read stay public.

from datasched.core.search cimport after as _after, before as _before

cdef class IntervalSet:
    cdef public list _starts
    cdef public list _stops
    cdef public object length
    cdef public object _hash
