# The C types of core/intervals.py's compiled build (datasched/_compiled.py): IntervalSet as an
# extension type, its fields read directly where the reader knows the type, and its operations
# C methods whose loops run over C integers: a bound read from a list into a typed local is
# converted once, then compared and added in C (events are integers below 2**63). The .py is
# the source and the reference; this file only declares. Fields other modules read stay public.

cimport cython

from datasched.core.search cimport after as _after, before as _before

cdef class IntervalSet:
    cdef public list _starts
    cdef public list _stops
    cdef public object length
    cdef public object _hash

    @cython.locals(
        s0=list, s1=list, o0=list, o1=list, t0=list, t1=list, starts=list, stops=list,
        big=IntervalSet, small=IntervalSet,
        a=cython.longlong, b=cython.longlong, c=cython.longlong, d=cython.longlong,
        lo=cython.longlong, hi=cython.longlong, length=cython.longlong,
        k=Py_ssize_t, m=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, na=Py_ssize_t, nb=Py_ssize_t,
    )
    cpdef IntervalSet union(self, IntervalSet other)

    @cython.locals(
        s0=list, s1=list, o0=list, o1=list, t0=list, t1=list, starts=list, stops=list,
        big=IntervalSet, small=IntervalSet, part=IntervalSet,
        a=cython.longlong, b=cython.longlong, c=cython.longlong, d=cython.longlong,
        lo=cython.longlong, hi=cython.longlong, length=cython.longlong,
        k=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, na=Py_ssize_t, nb=Py_ssize_t,
    )
    cpdef IntervalSet intersection(self, IntervalSet other)

    @cython.locals(
        s0=list, s1=list, o0=list, o1=list, starts=list, stops=list,
        a=cython.longlong, b=cython.longlong, c=cython.longlong, d=cython.longlong,
        n=Py_ssize_t, m=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t,
    )
    cpdef IntervalSet difference(self, IntervalSet other)

    @cython.locals(
        big=IntervalSet, small=IntervalSet, starts=list, stops=list, t0=list, t1=list,
        a=cython.longlong, b=cython.longlong, c=cython.longlong, d=cython.longlong,
        n=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t,
    )
    cpdef bint overlaps(self, IntervalSet other) except -1

    @cython.locals(
        other=IntervalSet, starts=list, stops=list, t0=list, t1=list, out=list, hit=bint,
        first=cython.longlong, last=cython.longlong,
        a=cython.longlong, b=cython.longlong, c=cython.longlong,
        n=Py_ssize_t, m=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t,
    )
    cpdef list overlaps_each(self, list others)

    @cython.locals(
        starts=list, stops=list, t0=list, t1=list,
        a=cython.longlong, b=cython.longlong, d=cython.longlong, k=Py_ssize_t, i=Py_ssize_t,
    )
    cpdef bint issubset(self, IntervalSet other) except -1

    @cython.locals(small=IntervalSet, big=IntervalSet)
    cpdef long long overlap_length(self, IntervalSet other) except? -1

    @cython.locals(
        s0=list, s1=list, starts=list, stops=list,
        a=cython.longlong, b=cython.longlong, length=cython.longlong,
        n=Py_ssize_t, k=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t,
    )
    cpdef IntervalSet clip(self, long long start, long long stop)

    @cython.locals(out=list, part=IntervalSet, t0=list, t1=list, a=cython.longlong, k=Py_ssize_t)
    cpdef list gaps(self, long long start, long long stop)

    @cython.locals(
        s0=list, s1=list, head_stops=list, rest_starts=list,
        length=cython.longlong, a=cython.longlong, b=cython.longlong,
        left=cython.longlong, cut=cython.longlong, i=Py_ssize_t,
    )
    cpdef tuple head(self, long long n)

    @cython.locals(s0=list, s1=list, length=cython.longlong, a=cython.longlong)
    cpdef IntervalSet drop(self, long long n)


cdef Py_ssize_t _SMALL
cdef IntervalSet _EMPTY

@cython.locals(
    k=Py_ssize_t, m=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t,
    a=cython.longlong, b=cython.longlong, x=cython.longlong, y=cython.longlong,
    first=cython.longlong, last=cython.longlong, kept_starts=list, kept_stops=list,
)
cpdef long long cut_out(
    list starts, list stops, list cut_starts, list cut_stops, long long length
) except? -1

@cython.locals(
    k=Py_ssize_t, m=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t,
    a=cython.longlong, b=cython.longlong, c=cython.longlong, d=cython.longlong,
)
cpdef long long splice_in(
    list starts, list stops, list add_starts, list add_stops, long long length
) except? -1

@cython.locals(
    a=cython.longlong, b=cython.longlong, c=cython.longlong, d=cython.longlong,
    total=cython.longlong, k=Py_ssize_t, m=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t,
)
cpdef long long overlap_count(list starts, list stops, list t0, list t1) except? -1

cpdef IntervalSet _new(list starts, list stops, object length)

@cython.locals(
    out_starts=list, out_stops=list, n=Py_ssize_t, k=Py_ssize_t,
    a=cython.longlong, b=cython.longlong, last=cython.longlong,
)
cpdef IntervalSet joined(list starts, list stops)
