# Binary search over a list of Python ints, in C, for the compiled build of the hot path
# (datasched/_compiled.py): ``after`` is bisect.bisect_right, ``before`` bisect.bisect_left,
# for the sorted event bounds of interval lists, cache extents and the cache directory. A
# declaration file alone: core/intervals.py, core/cache.py and core/directory.py use the
# standard library's bisect where they run from their sources, and these (cimported by their
# .pxd files under the same names) where compiled. The standard library's bisect compares
# Python objects at every step (about 100 instructions a step, 16 % of cache-oriented
# splitting's instructions); these compare C integers (docs/performance.md, "The hot path
# compiled from its sources"). Bounds are events: integers below 2**63.

cdef inline Py_ssize_t after(list a, long long x, Py_ssize_t lo=0) except -1:
    cdef Py_ssize_t hi = len(a)
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < <long long>a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


cdef inline Py_ssize_t before(list a, long long x, Py_ssize_t lo=0) except -1:
    cdef Py_ssize_t hi = len(a)
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if <long long>a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo
