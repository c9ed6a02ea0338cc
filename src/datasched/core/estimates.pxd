# The C types of core/estimates.py's compiled build (datasched/_compiled.py): the scheduler's
# books as an extension type (Estimates <- Commands <- Scheduler, one chain), every field the
# three classes keep declared here, on the base, so that the methods of all three read them
# from the object's struct instead of its dictionary. Declarations only; the .py is the source.
# ``__dict__`` stays: tests wrap ``handle`` on an instance, and subclasses may add fields.

cimport cython

from datasched.core.directory cimport CacheDirectory
from datasched.core.intervals cimport IntervalSet
from datasched.core.state cimport Running

cdef class Estimates:
    cdef dict __dict__
    # The policy's view of the cluster.
    cdef public object topology
    cdef public object space
    cdef public object cost
    cdef public object policy
    cdef public object replicator
    cdef public object min_subjob_events
    cdef public object now
    cdef public dict jobs
    cdef public object job_queue
    cdef public dict running
    cdef public CacheDirectory directory
    cdef public object completed
    cdef public object failed
    cdef public list slot_node
    cdef public list node_slots
    cdef public list node_running
    cdef public object arrivals_closed
    cdef public object stimulus_id
    cdef public object history
    cdef public dict left_cpu_s
    cdef public object fastest_s_per_event
    cdef public object slowest_s_per_event
    # The books behind the commands.
    cdef public list _nodes
    cdef public set _lost
    cdef public list _idle
    cdef public set _reserved
    cdef public list _rates
    cdef public dict _replacements
    cdef public dict _splits
    cdef public set _parked
    cdef public dict _fetches
    cdef public object _transfers
    cdef public dict _pins
    cdef public object _pin_ids
    cdef public object _wakes
    cdef public object _subjob_ids
    cdef public dict _states
    cdef public object _event_kind
    cdef public object _validating
    cdef public object _since_check
    cdef public object _trace
    cdef public object _recording
    cdef public object _observed
    cdef public object _changes
    cdef public list _out
    cdef public list _freed
    cdef public object _by_end
    cdef public object _split_index
    cdef public object _reads
    cdef public dict _handlers
    cdef public object _started_hook
    cdef public object _reads_fixed
    # Methods of the hot path, typed (``cpdef``: still called and patched as Python methods).
    cpdef s_per_event_on(self, slot, IntervalSet data, cpu_s_per_event=*)
    cpdef _push_end(self, Running r)
    cpdef balanced_share(self, slot, target, IntervalSet rest)
