# The C types of core/dispatch.py's compiled build (datasched/_compiled.py): the event pump as
# an extension type, its fields read from its struct, and the two methods an engine calls
# for every event dispatched in C where the caller knows the type (sim/state.pxd).
# Declarations only; the .py is the source.

cdef class EventPump:
    cdef public object scheduler
    cdef public object _timer
    cdef public object _handler
    cdef public dict _on
    cdef public object _restamp
    cdef public object _external
    cdef public object _follow
    cdef public object _pumping
    cdef public object handled
    cdef public double scheduling_s

    cpdef emit(self, event)
    cpdef pump(self)
    cpdef handle(self, event)
