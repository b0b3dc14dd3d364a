package policy

// exportPlanIsPure is the optional swapper export behind sdk.PurePlanner;
// instantiate reads it once after init, under the start deadline, so a
// module that misbehaves there fails its instantiation like any other.
const exportPlanIsPure = "plan_is_pure"

// PurePlan reports whether the swapper claims sdk.PurePlanner: its
// plan_is_pure export returned 1 after init. A module without the export,
// or one that is not running (crash-looping, closed), is not pure. The
// router asks once, when it starts.
func (s *Swapper) PurePlan() bool {
	in := s.sv.in
	return in != nil && s.sv.disabled == nil && in.pure
}
