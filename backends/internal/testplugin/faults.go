package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/loadout-dev/loadout/backends/sim"
	"github.com/loadout-dev/loadout/plugins"
)

// hangStart is a cmd backend whose Start never returns and ignores its
// context, as a plugin wedged in a start would.
type hangStart struct{ plugins.Backend }

func (hangStart) Start(context.Context, plugins.ModelSpec) (plugins.Started, error) {
	select {}
}

// crashValidate is a cmd backend that dies in Validate.
type crashValidate struct{ plugins.Backend }

func (crashValidate) Validate(context.Context, plugins.ModelSpec) ([]plugins.Problem, error) {
	fmt.Fprintln(os.Stderr, "testplugin: crashing in Validate")
	os.Exit(3)
	return nil, nil
}

// badPort answers Start with the upstream of a port nothing listens on,
// and otherwise keeps the model as started until Stop.
type badPort struct {
	plugins.Backend
	mu      sync.Mutex
	stopped map[string]chan struct{}
}

func (b *badPort) Start(_ context.Context, spec plugins.ModelSpec) (plugins.Started, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return plugins.Started{}, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // free again: nothing listens there
	b.mu.Lock()
	b.stopped[spec.Model] = make(chan struct{})
	b.mu.Unlock()
	return plugins.Started{Upstream: fmt.Sprintf("http://127.0.0.1:%d", port), Pids: []int{os.Getpid()}}, nil
}

func (b *badPort) Stop(_ context.Context, model string, _ time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.stopped[model]
	if !ok {
		return fmt.Errorf("%s: %w", model, plugins.ErrUnknownModel)
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
	return nil
}

func (b *badPort) Wait(ctx context.Context, model string) (plugins.Exit, error) {
	b.mu.Lock()
	ch, ok := b.stopped[model]
	b.mu.Unlock()
	if !ok {
		return plugins.Exit{}, fmt.Errorf("%s: %w", model, plugins.ErrUnknownModel)
	}
	select {
	case <-ch:
		return plugins.Exit{Requested: true}, nil
	case <-ctx.Done():
		return plugins.Exit{}, ctx.Err()
	}
}

// sleepy is the sim backend with sleep and residency as bookkeeping only
// (the simulated server keeps its memory): it exercises protocol version
// 2's calls across the plugin boundary.
type sleepy struct {
	*sim.Backend
	mu     sync.Mutex
	levels map[string]plugins.SleepLevel // asleep models
}

var (
	_ plugins.Sleeper           = (*sleepy)(nil)
	_ plugins.ResidencyReporter = (*sleepy)(nil)
)

func (s *sleepy) Capabilities(ctx context.Context) (plugins.Capabilities, error) {
	c, err := s.Backend.Capabilities(ctx)
	// Level 1 only, whatever the sim backend itself offers.
	c.Features = slices.DeleteFunc(c.Features, func(f string) bool {
		return f == plugins.FeatureSleep || f == plugins.FeatureSleepLevel2 || f == plugins.FeatureResidency
	})
	c.Features = append(c.Features, plugins.FeatureSleep, plugins.FeatureResidency)
	return c, err
}

func (s *sleepy) Sleep(ctx context.Context, model string, level plugins.SleepLevel, _ time.Duration) error {
	if level != plugins.SleepLevel1 {
		return fmt.Errorf("sleep level %d: %w", level, plugins.ErrNotSupported)
	}
	h, err := s.Health(ctx, model)
	if err != nil {
		return err
	}
	if !h.Ready {
		return fmt.Errorf("%s is %s: %w", model, h.State, plugins.ErrNotRunning)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.levels[model] = level
	return nil
}

func (s *sleepy) Wake(ctx context.Context, model string, _ time.Duration) error {
	if _, err := s.Health(ctx, model); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.levels, model)
	return nil
}

func (s *sleepy) Residency(ctx context.Context, model string) (plugins.Residency, error) {
	h, err := s.Health(ctx, model)
	if err != nil {
		return plugins.Residency{}, err
	}
	s.mu.Lock()
	level, asleep := s.levels[model]
	s.mu.Unlock()
	switch {
	case h.State == plugins.StateExited:
		return plugins.Residency{State: plugins.ResidencyStopped}, nil
	case asleep:
		return plugins.Residency{State: plugins.ResidencyAsleep, Level: level}, nil
	}
	st, err := s.Stats(ctx, model)
	return plugins.Residency{State: plugins.ResidencyRunning, DeviceBytes: st.MemoryBytes}, err
}

// serveV1Only serves b as a plugin built against protocol version 1 does:
// it takes the host to offer version 1 alone, so the handshake settles on
// 1 and the calls of version 2 answer UNIMPLEMENTED, as an old plugin's
// generated server does.
func serveV1Only(b plugins.Backend) {
	os.Setenv("PLUGIN_PROTOCOL_VERSIONS", "1")
	plugins.Serve(b)
}

// serveV3 answers the handshake with protocol version 3, newer than any
// host knows, and serves nothing.
func serveV3() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{
			ProtocolVersion:  3,
			MagicCookieKey:   plugins.MagicCookieKey,
			MagicCookieValue: plugins.MagicCookieValue,
		},
		Plugins:    plugin.PluginSet{"backend": emptyGRPCPlugin{}},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}

type emptyGRPCPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (emptyGRPCPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (emptyGRPCPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}
