-- A jobs database as Loadout wrote it before tasks.job existed (the parsed
-- spec beside the raw one): store_test.go opens it to check the migration.
CREATE TABLE IF NOT EXISTS tasks (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	id TEXT NOT NULL UNIQUE,
	name TEXT NOT NULL,
	workload TEXT NOT NULL,
	executor TEXT NOT NULL,
	priority INTEGER NOT NULL,
	spec TEXT NOT NULL,
	state TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	next_run_at INTEGER NOT NULL DEFAULT 0,
	error TEXT NOT NULL DEFAULT '',
	cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state);
CREATE TABLE IF NOT EXISTS attempts (
	task_id TEXT NOT NULL REFERENCES tasks(id),
	attempt_no INTEGER NOT NULL,
	submission_id TEXT NOT NULL UNIQUE,
	status TEXT NOT NULL DEFAULT '',
	failure_kind TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	handle TEXT NOT NULL DEFAULT '',
	devices TEXT NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL DEFAULT 0,
	ended_at INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (task_id, attempt_no)
);
CREATE TABLE IF NOT EXISTS events (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id TEXT NOT NULL,
	at INTEGER NOT NULL,
	kind TEXT NOT NULL,
	from_state TEXT NOT NULL DEFAULT '',
	to_state TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_task ON events(task_id, id);
INSERT INTO tasks (id, name, workload, executor, priority, spec, state, created_at, updated_at, next_run_at, error)
	VALUES ('sft-20260301-142501-9f2c', 'sft-old', 'sft', 'local', 2, 'name: sft-old
workload: sft
command: echo trained
gpus_per_node: 2
priority: 2
', 'FAILED', 1772375101000000000, 1772375102000000000, 0, 'exit status 1');
INSERT INTO attempts (task_id, attempt_no, submission_id, status, failure_kind, message, handle, devices, started_at, ended_at)
	VALUES ('sft-20260301-142501-9f2c', 1, 'sft-20260301-142501-9f2c--a01', 'FAILED', 'INSUFFICIENT_RESOURCES', 'needs 2 GPUs', '', '', 1772375101100000000, 1772375101200000000);
INSERT INTO attempts (task_id, attempt_no, submission_id, status, failure_kind, message, handle, devices, started_at, ended_at)
	VALUES ('sft-20260301-142501-9f2c', 2, 'sft-20260301-142501-9f2c--a02', 'FAILED', 'USER_ERROR', 'exit status 1', '', '[0,1]', 1772375101300000000, 1772375102000000000);
