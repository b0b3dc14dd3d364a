package router

// SetProfile makes name the active profile (llama-swap's profiles:; "" is
// none). The switch is a turn of the run loop, like every other change of
// scheduling state: requests the loop took before it were routed under
// the old profile, requests after it under the new one. What a profile
// pins is the caller's to apply (host/proxy resolves the names); the
// router holds which profile is active, the one place it lives. As in
// llama-swap, switching loads and unloads nothing: a pinned target
// loads when a request for it comes. It returns the profile that was
// active before. After shutdown it changes nothing and returns "".
func (r *Router) SetProfile(name string) (previous string) {
	r.query(func() {
		previous = r.loop.profile
		if previous == name {
			return
		}
		r.loop.profile = name
		r.profile.Store(&name)
		r.log.Info("active profile changed", "profile", name, "previous", previous)
	})
	return previous
}

// Profile returns the active profile's name, "" for none: the run loop's
// latest switch (SetProfile), read without a turn of the loop so that
// every request may ask.
func (r *Router) Profile() string {
	if p := r.profile.Load(); p != nil {
		return *p
	}
	return ""
}
