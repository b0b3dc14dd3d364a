// Package plugins is the backend plugin protocol of loadout: what a backend
// author implements (Backend), how a plugin binary serves it (Serve), and how
// the host launches and drives a plugin process (Launch, Client).
//
// A backend plugin is a separate process speaking gRPC through
// hashicorp/go-plugin; the wire protocol is plugins/proto/backend.proto,
// version ProtocolVersion. The plugin owns its model servers' process groups
// and must make sure they die with it; the host owns the plugin process and
// learns of its death through Client.Done.
//
// It is a Go module of its own (github.com/loadout-dev/loadout/plugins), as
// the policy SDK is, so a backend plugin's module graph holds go-plugin and
// gRPC but nothing of the host (no wazero, SQLite or NVML). Its tests
// against real plugin processes live in the host's module (host/backend),
// which builds the test plugin.
//
// This package owns the protocol and its glue only. It knows nothing of
// scheduling, configuration or GPUs, and backends live under backends/.
package plugins
