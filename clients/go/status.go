package holdfast

// WaitingForWorkload reports whether Status says the job has no Workload yet (Kueue mode:
// Status names the Workload once Kueue has made it), as opposed to waiting at a gate with
// one. A finished job waits for nothing.
func WaitingForWorkload(st *Status) bool {
	return st.Mode == ModeKueue && st.Workload == nil && st.State.Kind != ObjectStateKindFinished
}

// HoldInstance is the instance of the hold in force, if one is and its instance is readable.
func (st *Status) HoldInstance() (uint64, bool) {
	if st.Hold == nil || st.Hold.Instance == nil {
		return 0, false
	}
	return *st.Hold.Instance, true
}
