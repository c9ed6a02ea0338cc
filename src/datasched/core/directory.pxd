# The C types of core/directory.py's compiled build (datasched/_compiled.py): the cache
# directory as an extension type, its per-event methods dispatched in C where the caller knows
# the type. Declarations only; the .py is the source.

from datasched.core.search cimport after as _after, before as _before
from datasched.core.intervals cimport IntervalSet

cdef class CacheDirectory:
    cdef public list _bounds
    cdef public object _content
    cdef public list _firsts
    cdef public list _holders
    cdef public list _lengths
    cdef public object _prune_at
    cdef public dict _sets
    cdef public list _starts_of
    cdef public list _stops_of
    cpdef cached_length(self, int node, IntervalSet data)
    cpdef add(self, int node, IntervalSet data)
    cpdef remove(self, int node, IntervalSet data)
