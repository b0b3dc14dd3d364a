package jobs

import (
	"regexp"
	"strings"
)

// Where the "insufficient resources" rules come from:
//   - verl checks ray._private.state.available_resources_per_node() at
//     start-up and raises "ValueError: Total available GPUs 0 is less than
//     total desired GPUs 8" (verl/single_controller/ray/base.py);
//   - Ray's job supervisor fails a job whose resources never came free
//     after RAY_JOB_START_TIMEOUT_SECONDS with error_type
//     JOB_SUPERVISOR_ACTOR_START_TIMEOUT (Ray Jobs REST API);
//   - the local executor not getting its devices (Start's StartError).
var insufficientRE = regexp.MustCompile(`Total available GPUs \d+ is less than total desired GPUs \d+`)

// rayStartTimeout is Ray's error_type for a job whose supervisor actor
// could not be scheduled in time.
const rayStartTimeout = "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"

// Classify says why a FAILED attempt failed, from its status: insufficient
// resources (retried), a user error (the job's own non-zero exit), or a
// runtime error (the executor's: a lost process, Ray's supervisor).
func Classify(st Status) FailureKind {
	switch {
	case st.ErrorType == rayStartTimeout,
		insufficientRE.MatchString(st.Message), insufficientRE.MatchString(st.LogTail):
		return FailureInsufficientResources
	case st.ErrorType == "" || strings.Contains(st.ErrorType, "ENTRYPOINT_COMMAND"):
		// No error type (the local executor, older Ray) or Ray's
		// JOB_ENTRYPOINT_COMMAND_ERROR: the job's command failed.
		if strings.Contains(st.Message, "lost") {
			return FailureRuntimeError
		}
		return FailureUserError
	default:
		return FailureRuntimeError
	}
}
