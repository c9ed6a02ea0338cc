# The C types of core/commands.py's compiled build (datasched/_compiled.py): the middle of the
# scheduler's chain; its fields are declared on the base (core/estimates.pxd).
# Declarations only; the .py is the source.

cimport cython

from datasched.core.estimates cimport Estimates
from datasched.core.intervals cimport IntervalSet
from datasched.core.state cimport JobState, Running

cdef class Commands(Estimates):
    @cython.locals(i=Py_ssize_t)
    cpdef is_idle(self, slot)
    cpdef _transition(self, sj, to, Running r=*)
    cpdef _make_subjob(self, JobState js, IntervalSet data, cached_on, preemptible)
    cpdef start(self, sj, slot)
    @cython.locals(i=Py_ssize_t)
    cpdef _take_slot(self, slot)
    @cython.locals(r=Running, js=JobState)
    cpdef _launch(self, sj, slot)
    @cython.locals(r=Running, data=IntervalSet, rest=IntervalSet, give=IntervalSet)
    cpdef split_running(self, slot, target, pick=*)
