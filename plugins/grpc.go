package plugins

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/loadout-dev/loadout/plugins/proto"
)

// grpcPlugin is the go-plugin glue of one protocol version: the server side
// wraps a Backend, the client side returns a grpcClient.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl    Backend
	version int
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterBackendServer(s, &grpcServer{impl: p.impl, version: p.version})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{rpc: pb.NewBackendClient(c)}, nil
}

// versionedPlugins are the plugin sets of every protocol version this
// package speaks, for go-plugin's negotiation (impl nil on the host side).
func versionedPlugins(impl Backend) map[int]plugin.PluginSet {
	sets := map[int]plugin.PluginSet{}
	for v := OldestProtocolVersion; v <= ProtocolVersion; v++ {
		sets[v] = plugin.PluginSet{pluginName: &grpcPlugin{impl: impl, version: v}}
	}
	return sets
}

// grpcServer serves a Backend over gRPC at a negotiated protocol version:
// the calls of a later version answer UNIMPLEMENTED, as a plugin built
// against that version would.
type grpcServer struct {
	pb.UnimplementedBackendServer
	impl    Backend
	version int
}

func (s *grpcServer) Start(ctx context.Context, req *pb.StartRequest) (*pb.StartResponse, error) {
	st, err := s.impl.Start(ctx, specFromPB(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.StartResponse{UpstreamUrl: st.Upstream, Pids: toInt32s(st.Pids)}, nil
}

func (s *grpcServer) Stop(ctx context.Context, req *pb.StopRequest) (*pb.StopResponse, error) {
	if err := s.impl.Stop(ctx, req.GetModel(), fromSeconds(req.GetTimeoutSeconds())); err != nil {
		return nil, toStatus(err)
	}
	return &pb.StopResponse{}, nil
}

func (s *grpcServer) Health(ctx context.Context, req *pb.HealthRequest) (*pb.HealthResponse, error) {
	h, err := s.impl.Health(ctx, req.GetModel())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.HealthResponse{Ready: h.Ready, State: stateToPB[h.State], Message: h.Message}, nil
}

func (s *grpcServer) Estimate(ctx context.Context, req *pb.EstimateRequest) (*pb.EstimateResponse, error) {
	e, err := s.impl.Estimate(ctx, specFromPB(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.EstimateResponse{Known: e.Known, BytesPerDevice: e.BytesPerDevice}, nil
}

func (s *grpcServer) Stats(ctx context.Context, req *pb.StatsRequest) (*pb.StatsResponse, error) {
	st, err := s.impl.Stats(ctx, req.GetModel())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.StatsResponse{Pids: toInt32s(st.Pids), MemoryBytes: st.MemoryBytes}, nil
}

func (s *grpcServer) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	c, err := s.impl.Capabilities(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CapabilitiesResponse{Name: c.Name, Version: c.Version, Features: c.Features}, nil
}

func (s *grpcServer) Wait(req *pb.WaitRequest, stream grpc.ServerStreamingServer[pb.ExitEvent]) error {
	e, err := s.impl.Wait(stream.Context(), req.GetModel())
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&pb.ExitEvent{
		ExitCode:   int32(e.Code),
		Signal:     e.Signal,
		Requested:  e.Requested,
		StderrTail: e.StderrTail,
	})
}

func (s *grpcServer) Validate(ctx context.Context, req *pb.ValidateRequest) (*pb.ValidateResponse, error) {
	problems, err := s.impl.Validate(ctx, specFromPB(req.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.ValidateResponse{Problems: make([]*pb.Problem, len(problems))}
	for i, p := range problems {
		resp.Problems[i] = &pb.Problem{Option: p.Option, Message: p.Message}
	}
	return resp, nil
}

func (s *grpcServer) Sleep(ctx context.Context, req *pb.SleepRequest) (*pb.SleepResponse, error) {
	sl, ok := s.impl.(Sleeper)
	if s.version < 2 || !ok {
		return nil, toStatus(fmt.Errorf("sleep: %w", ErrNotSupported))
	}
	if err := sl.Sleep(ctx, req.GetModel(), SleepLevel(req.GetLevel()), fromSeconds(req.GetTimeoutSeconds())); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SleepResponse{}, nil
}

func (s *grpcServer) Wake(ctx context.Context, req *pb.WakeRequest) (*pb.WakeResponse, error) {
	sl, ok := s.impl.(Sleeper)
	if s.version < 2 || !ok {
		return nil, toStatus(fmt.Errorf("wake: %w", ErrNotSupported))
	}
	if err := sl.Wake(ctx, req.GetModel(), fromSeconds(req.GetTimeoutSeconds())); err != nil {
		return nil, toStatus(err)
	}
	return &pb.WakeResponse{}, nil
}

func (s *grpcServer) Residency(ctx context.Context, req *pb.ResidencyRequest) (*pb.ResidencyResponse, error) {
	rr, ok := s.impl.(ResidencyReporter)
	if s.version < 2 || !ok {
		return nil, toStatus(fmt.Errorf("residency: %w", ErrNotSupported))
	}
	r, err := rr.Residency(ctx, req.GetModel())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ResidencyResponse{
		Residency:         residencyToPB[r.State],
		SleepLevel:        int32(r.Level),
		DeviceMemoryBytes: r.DeviceBytes,
		HostMemoryBytes:   r.HostBytes,
	}, nil
}

// grpcClient is a Backend that calls a plugin over gRPC.
type grpcClient struct {
	rpc pb.BackendClient
}

func (c *grpcClient) Start(ctx context.Context, spec ModelSpec) (Started, error) {
	resp, err := c.rpc.Start(ctx, &pb.StartRequest{Spec: specToPB(spec)})
	if err != nil {
		return Started{}, fromStatus(ctx, err)
	}
	return Started{Upstream: resp.GetUpstreamUrl(), Pids: toInts(resp.GetPids())}, nil
}

func (c *grpcClient) Stop(ctx context.Context, model string, timeout time.Duration) error {
	_, err := c.rpc.Stop(ctx, &pb.StopRequest{Model: model, TimeoutSeconds: timeout.Seconds()})
	return fromStatus(ctx, err)
}

func (c *grpcClient) Health(ctx context.Context, model string) (Health, error) {
	resp, err := c.rpc.Health(ctx, &pb.HealthRequest{Model: model})
	if err != nil {
		return Health{}, fromStatus(ctx, err)
	}
	return Health{Ready: resp.GetReady(), State: stateFromPB[resp.GetState()], Message: resp.GetMessage()}, nil
}

func (c *grpcClient) Estimate(ctx context.Context, spec ModelSpec) (Estimate, error) {
	resp, err := c.rpc.Estimate(ctx, &pb.EstimateRequest{Spec: specToPB(spec)})
	if err != nil {
		return Estimate{}, fromStatus(ctx, err)
	}
	return Estimate{Known: resp.GetKnown(), BytesPerDevice: resp.GetBytesPerDevice()}, nil
}

func (c *grpcClient) Stats(ctx context.Context, model string) (Stats, error) {
	resp, err := c.rpc.Stats(ctx, &pb.StatsRequest{Model: model})
	if err != nil {
		return Stats{}, fromStatus(ctx, err)
	}
	return Stats{Pids: toInts(resp.GetPids()), MemoryBytes: resp.GetMemoryBytes()}, nil
}

func (c *grpcClient) Capabilities(ctx context.Context) (Capabilities, error) {
	resp, err := c.rpc.Capabilities(ctx, &pb.CapabilitiesRequest{})
	if err != nil {
		return Capabilities{}, fromStatus(ctx, err)
	}
	return Capabilities{Name: resp.GetName(), Version: resp.GetVersion(), Features: resp.GetFeatures()}, nil
}

func (c *grpcClient) Wait(ctx context.Context, model string) (Exit, error) {
	stream, err := c.rpc.Wait(ctx, &pb.WaitRequest{Model: model})
	if err != nil {
		return Exit{}, fromStatus(ctx, err)
	}
	e, err := stream.Recv()
	if err != nil {
		return Exit{}, fromStatus(ctx, err)
	}
	return Exit{
		Code:       int(e.GetExitCode()),
		Signal:     e.GetSignal(),
		Requested:  e.GetRequested(),
		StderrTail: e.GetStderrTail(),
	}, nil
}

func (c *grpcClient) Validate(ctx context.Context, spec ModelSpec) ([]Problem, error) {
	resp, err := c.rpc.Validate(ctx, &pb.ValidateRequest{Spec: specToPB(spec)})
	if status.Code(err) == codes.Unimplemented {
		return nil, nil // a plugin older than Validate
	}
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	var problems []Problem
	for _, p := range resp.GetProblems() {
		problems = append(problems, Problem{Option: p.GetOption(), Message: p.GetMessage()})
	}
	return problems, nil
}

func (c *grpcClient) Sleep(ctx context.Context, model string, level SleepLevel, timeout time.Duration) error {
	_, err := c.rpc.Sleep(ctx, &pb.SleepRequest{Model: model, Level: int32(level), TimeoutSeconds: timeout.Seconds()})
	return fromStatus(ctx, err)
}

func (c *grpcClient) Wake(ctx context.Context, model string, timeout time.Duration) error {
	_, err := c.rpc.Wake(ctx, &pb.WakeRequest{Model: model, TimeoutSeconds: timeout.Seconds()})
	return fromStatus(ctx, err)
}

func (c *grpcClient) Residency(ctx context.Context, model string) (Residency, error) {
	resp, err := c.rpc.Residency(ctx, &pb.ResidencyRequest{Model: model})
	if err != nil {
		return Residency{}, fromStatus(ctx, err)
	}
	return Residency{
		State:       residencyFromPB[resp.GetResidency()],
		Level:       SleepLevel(resp.GetSleepLevel()),
		DeviceBytes: resp.GetDeviceMemoryBytes(),
		HostBytes:   resp.GetHostMemoryBytes(),
	}, nil
}

func specToPB(s ModelSpec) *pb.ModelSpec {
	return &pb.ModelSpec{
		Model:                     s.Model,
		Cmd:                       s.Cmd,
		CmdStop:                   s.CmdStop,
		Proxy:                     s.Proxy,
		CheckEndpoint:             s.CheckEndpoint,
		Env:                       s.Env,
		Port:                      int32(s.Port),
		Devices:                   toInt32s(s.Devices),
		HealthCheckTimeoutSeconds: s.HealthCheckTimeout.Seconds(),
		Options:                   s.Options,
	}
}

func specFromPB(s *pb.ModelSpec) ModelSpec {
	return ModelSpec{
		Model:              s.GetModel(),
		Cmd:                s.GetCmd(),
		CmdStop:            s.GetCmdStop(),
		Proxy:              s.GetProxy(),
		CheckEndpoint:      s.GetCheckEndpoint(),
		Env:                s.GetEnv(),
		Port:               int(s.GetPort()),
		Devices:            toInts(s.GetDevices()),
		HealthCheckTimeout: fromSeconds(s.GetHealthCheckTimeoutSeconds()),
		Options:            s.GetOptions(),
	}
}

func fromSeconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	if s >= math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

func toInt32s(xs []int) []int32 {
	if xs == nil {
		return nil
	}
	out := make([]int32, len(xs))
	for i, x := range xs {
		out[i] = int32(x)
	}
	return out
}

func toInts(xs []int32) []int {
	if xs == nil {
		return nil
	}
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

var stateToPB = map[State]pb.State{
	StateStarting: pb.State_STATE_STARTING,
	StateReady:    pb.State_STATE_READY,
	StateStopping: pb.State_STATE_STOPPING,
	StateExited:   pb.State_STATE_EXITED,
}

var stateFromPB = map[pb.State]State{
	pb.State_STATE_STARTING: StateStarting,
	pb.State_STATE_READY:    StateReady,
	pb.State_STATE_STOPPING: StateStopping,
	pb.State_STATE_EXITED:   StateExited,
}

var residencyToPB = map[ResidencyState]pb.Residency{
	ResidencyRunning: pb.Residency_RESIDENCY_RUNNING,
	ResidencyAsleep:  pb.Residency_RESIDENCY_ASLEEP,
	ResidencyStopped: pb.Residency_RESIDENCY_STOPPED,
}

var residencyFromPB = map[pb.Residency]ResidencyState{
	pb.Residency_RESIDENCY_RUNNING: ResidencyRunning,
	pb.Residency_RESIDENCY_ASLEEP:  ResidencyAsleep,
	pb.Residency_RESIDENCY_STOPPED: ResidencyStopped,
}

// toStatus turns a backend's error into a gRPC status whose code carries the
// sentinel errors across the boundary.
func toStatus(err error) error {
	code := codes.Unknown
	switch {
	case errors.Is(err, ErrUnknownModel):
		code = codes.NotFound
	case errors.Is(err, ErrAlreadyRunning):
		code = codes.AlreadyExists
	case errors.Is(err, ErrNotSupported):
		code = codes.Unimplemented
	case errors.Is(err, ErrNotRunning):
		code = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

// fromStatus undoes toStatus: the message stays the plugin's, and errors.Is
// finds the sentinel the code stands for. A dead plugin, or a connection
// closed under a call whose ctx is still live, gives ErrPluginExited.
func fromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var is error
	switch st.Code() {
	case codes.NotFound:
		is = ErrUnknownModel
	case codes.AlreadyExists:
		is = ErrAlreadyRunning
	case codes.Unimplemented:
		// A plugin built before the call existed answers this by itself.
		is = ErrNotSupported
	case codes.FailedPrecondition:
		is = ErrNotRunning
	case codes.DeadlineExceeded:
		is = context.DeadlineExceeded
	case codes.Canceled:
		if ctx.Err() == nil {
			return fmt.Errorf("%w: %s", ErrPluginExited, st.Message())
		}
		is = context.Canceled
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrPluginExited, st.Message())
	default:
		return errors.New(st.Message())
	}
	return &remoteError{msg: st.Message(), is: is}
}

// remoteError is an error returned by the plugin: its text, and the sentinel
// its gRPC code stands for.
type remoteError struct {
	msg string
	is  error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.is }
