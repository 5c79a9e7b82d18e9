package holdfast

import "strings"

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

// String is the pod's name, with its node, what that node says and why it counts:
// "mnist-node-0-0-x7k2p (node n1, notReady, terminating)".
func (p RemainingPod) String() string {
	var about []string
	if p.Node != nil {
		about = append(about, "node "+*p.Node)
	}
	if p.NodeState != nil {
		about = append(about, string(*p.NodeState))
	}
	if p.Why != "" {
		about = append(about, string(p.Why))
	}
	if len(about) == 0 {
		return p.Name
	}
	return p.Name + " (" + strings.Join(about, ", ") + ")"
}
