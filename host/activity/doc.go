// Package activity owns the activity log: one row per model request (its
// id, model, client, priority, status, waits, TTFT, tokens and speed,
// duration and arrival time), kept in the activity table of Loadout's
// state file (host/statedb, the file the job queue uses) and read back by
// GET /api/activity (host/proxy's ActivityLog).
//
// Writes never touch a request's path: Record, called by the proxy when a
// response ends (proxy.Config.OnRequest), only offers the summary to a
// bounded channel, and drops and counts it (loadout_activity_dropped_total)
// when the channel is full. One goroutine takes summaries off the channel
// and inserts them in batches, one transaction each; the same goroutine
// prunes rows older than MaxAge and beyond the newest MaxRows, in bounded
// batches, every PruneInterval. Close drains the channel before it returns.
//
// It imports host/proxy for the shapes it stores and returns
// (RequestSummary, ActivityFilter, ActivityRecord) and nothing of HTTP;
// host/proxy reaches it only through its ActivityLog interface.
package activity
