# The C types of core/scheduler.py's compiled build (datasched/_compiled.py): the end of the
# scheduler's chain; its fields are declared on the base (core/estimates.pxd).
# Declarations only; the .py is the source.

cimport cython

from datasched.core.commands cimport Commands
from datasched.core.intervals cimport IntervalSet
from datasched.core.state cimport JobState, Running

cdef class Scheduler(Commands):
    @cython.locals(r=Running, js=JobState)
    cpdef _subjob_left(
        self, slot, subjob_id, IntervalSet remaining, IntervalSet added, IntervalSet evicted
    )
    @cython.locals(r=Running, released=IntervalSet, js=JobState)
    cpdef _on_shrunk(self, ev)
    cpdef handle(self, event)
    @cython.locals(js=JobState)
    cpdef _on_arrived(self, ev)
    cpdef _on_finished(self, ev)
    cpdef _after_subjob(self, JobState js)
    cpdef _complete(self, JobState js)
    @cython.locals(i=Py_ssize_t)
    cpdef _offer_freed(self)
