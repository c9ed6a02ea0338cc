# The C types of core/cache.py's compiled build (datasched/_compiled.py): the range cache as
# an extension type, and the three methods a subjob's end calls on it dispatched in C where the
# caller knows the type. Declarations only; the .py is the source.

cimport cython

from datasched.core.search cimport after as _after, before as _before
from datasched.core.holds cimport Holds
from datasched.core.intervals cimport IntervalSet, joined

cdef long long _FLIP
cdef unsigned long long _OFFSET

@cython.locals(k=cython.double, bits=cython.longlong)
cpdef object _order(double key)

cdef class RangeCache(Holds):
    cdef public object _content
    cdef public list _heap
    cdef public object _keys
    cdef public object _seq
    cdef public object _seqs
    cdef public list _starts
    cdef public list _stops
    cdef public object _used
    cdef public object bytes_per_event
    cdef public object capacity_events
    cdef public object replacement

    @cython.locals(
        starts=list, stops=list, t0=list, t1=list, inner=list,
        hit_starts=list, hit_stops=list, gap_starts=list, gap_stops=list,
        a=cython.longlong, b=cython.longlong, first=cython.longlong, last=cython.longlong,
        e=cython.longlong, s=cython.longlong,
        k=Py_ssize_t, m=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t,
    )
    cpdef tuple partition(self, IntervalSet data)

    cpdef refresh(self, IntervalSet hit, stamp)
    cpdef tuple insert(self, IntervalSet data, stamp)
    cpdef _push(self, Py_ssize_t i)
    cpdef _entry(self, Py_ssize_t i)
    @cython.locals(
        heap=list, starts=list, stops=list, evicted=list, deferred=list,
        i=Py_ssize_t, start=cython.longlong, stop=cython.longlong, free=IntervalSet,
    )
    cpdef IntervalSet _evict(self, need, IntervalSet protect)
