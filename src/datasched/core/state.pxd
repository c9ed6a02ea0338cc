# The C types of core/state.py's compiled build (datasched/_compiled.py): a job's record and a
# running subjob's as extension types (a running subjob's times C doubles), read directly
# where the reader knows the type (the scheduler's hot methods, cache-oriented splitting's
# split choice). Declarations only; the .py is the source.

from datasched.core.intervals cimport IntervalSet

cdef class JobState:
    cdef public object job
    cdef public object job_id
    cdef public object done_events
    cdef public object first_start_s
    cdef public object released_s
    cdef public object held_until
    cdef public dict live
    cdef public IntervalSet unissued
    cdef public object suspended
    cdef public set running_slots
    cdef public object cancelled
    cdef public object cancel_reason

cdef class Running:
    cdef public object subjob
    cdef public object slot
    cdef public double start_s
    cdef public double s_per_event
    cdef public object state
    cdef public double end_s
