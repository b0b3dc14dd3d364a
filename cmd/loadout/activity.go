package main

import (
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/loadout-dev/loadout/host/activity"
	"github.com/loadout-dev/loadout/host/proxy"
)

// activityOptions are serve's activity-log flags.
type activityOptions struct {
	maxAge  time.Duration
	maxRows int
}

func addActivityFlags(cmd *cobra.Command, o *activityOptions) {
	cmd.Flags().DurationVar(&o.maxAge, "activity-max-age", activity.DefaultMaxAge, "the activity log (/api/activity, kept in the --db file) keeps requests this long (negative: no age limit)")
	cmd.Flags().IntVar(&o.maxRows, "activity-max-rows", activity.DefaultMaxRows, "the activity log keeps at most this many newest requests; 0 turns the log off (negative: no row limit)")
}

// activityLog is the activity log as serve wires it; its zero value (no
// log) wires nothing.
type activityLog struct{ log *activity.Log }

// openActivity opens the activity log in the state file. When the default
// file (no --db) cannot be opened, the log is off: it logs why and returns
// no log, as startJobs does. Errors: an explicit --db that cannot be
// opened.
func openActivity(db string, o activityOptions, log *slog.Logger) (activityLog, error) {
	if o.maxRows == 0 {
		return activityLog{}, nil
	}
	path, err := statePath(db)
	if err == nil {
		var l *activity.Log
		l, err = activity.Open(path, activity.Options{MaxAge: o.maxAge, MaxRows: o.maxRows, Logger: log})
		if err == nil {
			log.Info("activity log open", "db", path, "max_age", o.maxAge, "max_rows", o.maxRows)
			return activityLog{log: l}, nil
		}
	}
	if db != "" {
		return activityLog{}, err
	}
	log.Warn("activity log disabled: its default database cannot be opened; give --db", "err", err)
	return activityLog{}, nil
}

// config sets the proxy's activity fields: the summaries in, the queries
// out.
func (a activityLog) config(c *proxy.Config) {
	if a.log != nil {
		c.OnRequest, c.Activity = a.log.Record, a.log
	}
}

// register adds the log's metrics to the proxy's registry.
func (a activityLog) register(h *proxy.Server) error {
	if a.log == nil {
		return nil
	}
	return a.log.Register(h.Registry())
}

// close writes what is buffered and closes the log.
func (a activityLog) close(log *slog.Logger) {
	if a.log == nil {
		return
	}
	if err := a.log.Close(); err != nil {
		log.Warn("activity log close", "err", err)
	}
}
