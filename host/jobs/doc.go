// Package jobs owns Loadout's GPU job queue: tasks (a job spec as it was
// submitted, with its state), their attempts and an event log, kept in
// SQLite (store.go); the runner that admits tasks when their whole gang of
// GPUs is free, submits them to an executor, tracks them and retries the
// ones that lost a race for resources (runner.go); and the executors:
// local processes on GPUs leased from the same ledger as the models
// (local.go), and a Ray cluster's Jobs REST API (ray.go).
//
// # State machine
//
//	QUEUED → PENDING_RESOURCES → SUBMITTING → SUBMITTED → RUNNING → SUCCEEDED | FAILED | CANCELED
//
// A task waits in QUEUED or PENDING_RESOURCES until its gang (nnodes ×
// gpus_per_node GPUs, all at once) fits; QUEUED → SUBMITTING is taken
// directly when it fits at once. A task that needs no GPU never waits
// behind one that does. A waiting task's error names what holds the GPUs
// it waits for (models by id, pinned or persistent ones said so, jobs by
// id), and Submit warns when pinned or persistent models hold so many
// that the task cannot be placed until they are unloaded. An attempt that fails for insufficient
// resources (classify.go: verl's "Total available GPUs … is less than
// total desired GPUs", Ray's JOB_SUPERVISOR_ACTOR_START_TIMEOUT, the local
// executor not getting its devices) sends the task back to
// PENDING_RESOURCES with a backoff; any other failure is final. Every
// transition is compare-and-set in the store and leaves an event.
//
// # Restart
//
// Every write is committed before the step it records is taken, so after
// a restart (kill -9 included) the runner resumes: tasks still waiting stay
// queued, and every SUBMITTING, SUBMITTED or RUNNING attempt is looked up
// again by its submission id (Executor.Poll) rather than started twice.
//
// # What it must not do
//
// The package knows nothing of HTTP (host/proxy serves the API over a
// *Runner) nor of the router's internals: a local job that may evict idle
// models asks through the Evictor interface, which *router.Router
// implements.
package jobs
