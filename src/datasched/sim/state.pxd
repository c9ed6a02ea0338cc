# The C types of sim/state.py's compiled build (datasched/_compiled.py): the simulated engine
# as an extension type (EngineState <- DataMoves <- MasterTurns <- SharedFetches <- SharedDisks
# <- SubjobRuns <- SimEngine, one chain), every field its parts keep declared here, on the
# base, so that their methods read them from the object's struct instead of its dictionary.
# Declarations only; the .py is the source. ``__dict__`` stays for subclasses' own fields.

from datasched.core.dispatch cimport EventPump
from datasched.core.scheduler cimport Scheduler
from datasched.sim.recorder cimport Recorder

cdef class EngineState:
    cdef dict __dict__
    cdef public Scheduler scheduler
    cdef public object space
    cdef public object cost
    cdef public object now
    cdef public object replacement
    cdef public list caches
    cdef public Recorder rec
    cdef public object result
    cdef public list _runs
    cdef public list _heap
    cdef public object _seq
    cdef public object _versions
    cdef public list _slot_node
    cdef public dict _jobs
    cdef public set _user_ready
    cdef public dict _user_recent
    cdef public dict _warm
    cdef public object _file_grain
    cdef public object _world
    cdef public dict _fetching
    cdef public dict _rates
    cdef public list _default_rates
    cdef public object _network
    cdef public dict _pins
    cdef public object _faults
    cdef public set _down
    cdef public object _check
    cdef public list _arrivals
    cdef public object _arrived
    cdef public object _max_backlog
    cdef public object _halt
    cdef public EventPump _pump
    cdef public object _readers
    cdef public dict _disk_readers
    cdef public object _record_packets
    cdef public object _follow_up
    cdef public list _followers
    cdef public object _follow_pending
    cdef public object _close_arrivals
    cdef public object _handled_before
    cdef public object _in_flight
    cdef public object _master
    cdef public object _per_packet
