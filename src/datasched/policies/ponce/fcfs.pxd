# The C types of policies/ponce/fcfs.py's compiled build (datasched/_compiled.py): the loop of
# cache-oriented splitting's split choice on a few slots, its running records read directly
# and its times and event counts in C (the same floats: the same operations in the same
# order). Declarations only; the .py is the source.

cimport cython

from datasched.core.intervals cimport IntervalSet
from datasched.core.state cimport Running

@cython.locals(r=Running, out=list)
cpdef list _settled(dict running, list data)

@cython.locals(
    k=Py_ssize_t, other=cython.longlong, r=Running, data=IntervalSet,
    a=cython.double, b=cython.double, saving=cython.double,
    end=cython.double, best_saving=cython.double, best_end=cython.double,
    length=cython.longlong, done=cython.longlong, n=cython.longlong, local=cython.longlong,
)
cpdef _best_of_settled(
    list settled, list settled_data, list cached, IntervalSet content, double now,
    long long minimum, double s_cache, double s_peer, double s_tertiary,
)
