# The C types of core/directory.py's compiled build (datasched/_compiled.py): the cache
# directory as an extension type, its per-event methods dispatched in C where the caller knows
# the type, their loops over C integers (bounds read into typed locals: events are integers
# below 2**63) and the segment map's indices C integers. Declarations only; the .py is the
# source.

cimport cython

from datasched.core.search cimport after as _after, before as _before
from datasched.core.intervals cimport IntervalSet, cut_out, overlap_count, splice_in

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

    @cython.locals(starts=list)
    cpdef cached_length(self, int node, IntervalSet data)

    @cython.locals(
        starts=list, stops=list, t0=list, t1=list,
        a=cython.longlong, b=cython.longlong, d=cython.longlong, k=Py_ssize_t, i=Py_ssize_t,
    )
    cpdef bint covers(self, int node, IntervalSet data) except -1

    @cython.locals(starts=list, stops=list, t0=list, t1=list, k=Py_ssize_t)
    cpdef add(self, int node, IntervalSet data)

    @cython.locals(starts=list, stops=list, t0=list, t1=list, k=Py_ssize_t)
    cpdef remove(self, int node, IntervalSet data)

    @cython.locals(
        firsts=list, cb=list, ch=list, keep_b=list, keep_h=list, sets=dict, at=bint,
        c=Py_ssize_t, i=Py_ssize_t, n=Py_ssize_t, s=Py_ssize_t, j=Py_ssize_t, lo=Py_ssize_t,
        k=Py_ssize_t,
    )
    cpdef _update(self, a, b, int node, bint add)

    @cython.locals(whole=bint)
    cpdef _update_within(
        self, list cb, list ch, Py_ssize_t s, bint at, a, b, int node, bint add
    )
