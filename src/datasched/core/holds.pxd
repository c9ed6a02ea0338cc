# The C types of core/holds.py's compiled build (datasched/_compiled.py): a base extension
# type for both caches. Declarations only; the .py is the source.

cdef class Holds:
    cdef public dict _pins
    cdef public object _pin_ids
    cdef public dict _fetches
    cdef public object _fetch_ids
    cpdef _held(self, data)
