package policytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
	"gopkg.in/yaml.v3"
)

// Scenario is one scenario file, parsed and checked: a policy's settings,
// the models (and GPUs) the host starts with, and a sequence of steps, each
// an event the host delivers and, optionally, the effects the policy must
// answer it with. The format is described in docs/POLICIES.md ("Scenario
// files"); in short:
//
//	name: a request for a stopped model starts a swap and is served when it is done
//	kind: scheduler            # or swapper
//	settings: {max_queue: 2}   # the policy's settings: a mapping, or a JSON string
//	swapper: evict_all         # schedulers: the fake swapper that answers plans
//	models:
//	  - {name: a}
//	  - {name: b, state: ready, in_flight: 1, last_use: -10s, vram: 8GiB, devices: [0]}
//	gpus:
//	  - {total: 24GiB}
//	host_memory: 64GiB         # ABI version 3: host memory sleepers may lease
//	waits: {"": {granted: 400, p95: 10s, above: 12}}   # the host's record of waits ("": the box)
//	steps:
//	  - request: {id: 1, model: a}
//	    expect:
//	      - start_swap: {model: a, evict: [b]}
//	      - queue: {id: 1, pos: 0}
//	  - at: 2s
//	    swap_done: a
//	    expect: [grant: 1]
//
// Parse errors name the file and line. A Scenario is immutable once
// parsed and may be run any number of times (Run).
type Scenario struct {
	// Name is the scenario's name: field, else the file's base name
	// without its extension.
	Name string
	// File is the path the scenario was read from, as given.
	File string
	// Kind is the kind of policy the scenario is written for.
	Kind sdk.PolicyKind

	settings   []byte
	initErr    *string
	swapper    fakeSwapper
	warmPath   bool                     // warm_path: the Host takes the warm path (Host.WarmPath)
	hostMemory uint64                   // host_memory: (Host.HostMemory)
	evict      map[string]sdk.EvictMode // the models' evict: (Host.Evict)
	onDemand   bool                     // ticks_on_demand: the Host ticks on demand (Host.TicksOnDemand)
	waits      map[string]sdk.WaitStats // waits: the record of queueing delay (Host.WaitRecords)
	demand     map[string]uint64        // the models' requests: counted before the start (Host.Demand)
	models     []sdk.ModelInfo
	gpus       []gpuYAML
	steps      []step
	firstLine  int // the line of the first step, for init failures
	fileHeader int // the line of kind:, for kind mismatches
}

// scenarioStart is the host time, in Unix nanoseconds, at which every
// scenario starts (NewHost's), so `at: 0s` is the first event's time.
const scenarioStart int64 = 1e12

// LoadScenario reads and parses one scenario file.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return ParseScenario(path, data)
}

// ParseScenario parses a scenario from data; file names it in errors and
// in Scenario.File. Decoding is strict: an unknown field, a value of the
// wrong type, an event or effect that does not exist, and a step that is
// not for the scenario's kind of policy are all errors, each naming
// file:line.
func ParseScenario(file string, data []byte) (*Scenario, error) {
	var f fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty scenario file", file)
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: a scenario file holds one scenario; start another file instead of a second document", file, extra.Line)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(file, err)
	}
	p := &parser{file: file}
	sc, err := p.scenario(&f, doc.Content[0])
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// yamlLine matches one line of a yaml.v3 error: "line 7: …", possibly
// after "yaml: ", "yaml: unmarshal errors:" or indentation.
var yamlLine = regexp.MustCompile(`(?m)^\s*(?:yaml: )?line (\d+): (.*)$`)

var notFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlError turns a yaml.v3 error into "file:line: message" lines, one per
// problem it lists.
func yamlError(file string, err error) error {
	ms := yamlLine.FindAllStringSubmatch(err.Error(), -1)
	if len(ms) == 0 {
		return fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	lines := make([]string, len(ms))
	for i, m := range ms {
		msg := notFound.ReplaceAllString(m[2], `unknown field "$1"`)
		msg = strings.ReplaceAll(msg, "!!", "")
		lines[i] = fmt.Sprintf("%s:%s: %s", file, m[1], msg)
	}
	return errors.New(strings.Join(lines, "\n"))
}

// lineError is an error at a line of the file being parsed. Custom
// unmarshalers return it; yamlError and parser.errorf format it.
func lineError(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

// ---- the YAML shapes ----

type fileYAML struct {
	Name      string       `yaml:"name"`
	Kind      string       `yaml:"kind"`
	Settings  any          `yaml:"settings"`
	InitError *string      `yaml:"init_error"`
	Swapper   *swapperYAML `yaml:"swapper"`
	WarmPath  bool         `yaml:"warm_path"`
	// TicksOnDemand: the Host ticks on demand (Host.TicksOnDemand).
	TicksOnDemand bool        `yaml:"ticks_on_demand"`
	Models        []modelYAML `yaml:"models"`
	GPUs          []gpuYAML   `yaml:"gpus"`
	// HostMemory is the host memory sleepers may lease (Host.HostMemory).
	HostMemory *byteSize `yaml:"host_memory"`
	// Waits is the host's record of queueing delay (Host.WaitRecords).
	Waits map[string]*waitsYAML `yaml:"waits"`
	Steps []stepYAML            `yaml:"steps"`
}

// waitsYAML is one record of queueing delay, sdk.WaitStats: granted,
// p95 (a duration), above and held.
type waitsYAML struct {
	Granted uint32   `yaml:"granted"`
	P95     duration `yaml:"p95"`
	Above   uint32   `yaml:"above"`
	Held    uint32   `yaml:"held"`
}

// modelYAML is a model, or in a set step a change to one: only the fields
// given change.
type modelYAML struct {
	Name             string      `yaml:"name"`
	State            *stateName  `yaml:"state"`
	InFlight         *uint32     `yaml:"in_flight"`
	ConcurrencyLimit *uint32     `yaml:"concurrency_limit"`
	Priority         *int32      `yaml:"priority"`
	Pinned           *bool       `yaml:"pinned"`
	Group            *string     `yaml:"group"`
	LastUse          *duration   `yaml:"last_use"` // since the scenario's start; may be negative
	TTL              *duration   `yaml:"ttl"`
	VRAM             *byteSize   `yaml:"vram"` // EstimatedVRAM
	MeasuredVRAM     *byteSize   `yaml:"measured_vram"`
	Devices          *[]int32    `yaml:"devices"`
	Leased           *[]byteSize `yaml:"leased"`
	// Requests is the model's request count (sdk.ModelDemand.Requests):
	// in models:, the requests counted before the scenario starts; in a
	// set step, its count from then on. Request steps add to it.
	Requests *uint64 `yaml:"requests"`

	// Residency (ABI version 3). asleep: 1 or 2 is SleepLevel (0 wakes
	// it); host_leased defaults to its level's host bytes while asleep.
	Asleep     *uint8       `yaml:"asleep"`
	CanSleep   *[]uint8     `yaml:"can_sleep"` // the levels, e.g. [1, 2]
	LoadTime   *duration    `yaml:"load_time"`
	WakeTime   *duration    `yaml:"wake_time"` // from level 1
	WakeTime2  *duration    `yaml:"wake_time2"`
	HostBytes  *byteSize    `yaml:"host_bytes"` // at level 1
	HostBytes2 *byteSize    `yaml:"host_bytes2"`
	HostLeased *byteSize    `yaml:"host_leased"`
	Evict      *evictConfig `yaml:"evict"` // the model's evict: setting (Host.Evict)
}

// gpuYAML is a GPU. Index defaults to its position in the list; Leased to
// what the running models hold on it; Free to Total minus Leased.
type gpuYAML struct {
	Index  *int32    `yaml:"index"`
	Name   string    `yaml:"name"`
	Total  byteSize  `yaml:"total"`
	Free   *byteSize `yaml:"free"`
	Leased *byteSize `yaml:"leased"`
}

type stepYAML struct {
	At        *duration      `yaml:"at"`
	Request   *requestYAML   `yaml:"request"`
	SwapDone  *swapDoneYAML  `yaml:"swap_done"`
	ServeDone *idYAML        `yaml:"serve_done"`
	Cancel    *idYAML        `yaml:"cancel"`
	Leave     *idYAML        `yaml:"leave"`
	Unload    *unloadYAML    `yaml:"unload"`
	Tick      *struct{}      `yaml:"tick"`
	Shutdown  *shutdownYAML  `yaml:"shutdown"`
	Set       *setYAML       `yaml:"set"`
	Plan      *planStepYAML  `yaml:"plan"`
	SwapStart *swapStartYAML `yaml:"swap_start"`
	Expect    []effectYAML   `yaml:"expect"`
	Logs      []string       `yaml:"logs"`
	// NextTick is the tick the scheduler has asked for once the step is
	// done (Host.NextTick): a duration since the scenario's start, or
	// "none"; needs ticks_on_demand: true.
	NextTick *string `yaml:"next_tick"`
}

type requestYAML struct {
	ID       uint64 `yaml:"id"`
	Model    string `yaml:"model"`
	Priority int32  `yaml:"priority"`
	Client   string `yaml:"client"`
}

// swapDoneYAML is `swap_done: MODEL` or `{model: MODEL, error: TEXT}`.
type swapDoneYAML struct {
	Model string `yaml:"model"`
	Error string `yaml:"error"`
}

func (s *swapDoneYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s.Model = n.Value
		return nil
	}
	type plain swapDoneYAML
	return decodeMapping(n, (*plain)(s))
}

// idYAML is `ID` or `{id: ID}`.
type idYAML struct {
	ID uint64 `yaml:"id"`
}

func (s *idYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&s.ID)
	}
	type plain idYAML
	return decodeMapping(n, (*plain)(s))
}

type unloadYAML struct {
	Models []string   `yaml:"models"`
	Reason reasonName `yaml:"reason"`
}

// shutdownYAML is `shutdown:`, `shutdown: REASON` or `{reason: REASON}`.
type shutdownYAML struct {
	Reason string `yaml:"reason"`
}

func (s *shutdownYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s.Reason = n.Value
		return nil
	}
	type plain shutdownYAML
	return decodeMapping(n, (*plain)(s))
}

type setYAML struct {
	Models     []modelYAML            `yaml:"models"`
	GPUs       *[]gpuYAML             `yaml:"gpus"`
	HostMemory *byteSize              `yaml:"host_memory"`
	RefuseSwap map[string]refusalName `yaml:"refuse_swap"`
	// Waits replaces the records it names; a null one is dropped (the
	// host then knows no record for that name).
	Waits map[string]*waitsYAML `yaml:"waits"`
}

type planStepYAML struct {
	Target  string    `yaml:"target"`
	Running *[]string `yaml:"running"`
}

type swapStartYAML struct {
	Target  string     `yaml:"target"`
	Evict   []string   `yaml:"evict"`
	Devices []int32    `yaml:"devices"`
	Modes   []modeName `yaml:"modes"`
}

// effectYAML is one expected effect: exactly one field set.
type effectYAML struct {
	Grant     *grantYAML     `yaml:"grant"`
	Error     *errorYAML     `yaml:"error"`
	StartSwap *startSwapYAML `yaml:"start_swap"`
	Stop      *stopYAML      `yaml:"stop"`
	Queue     *queueYAML     `yaml:"queue"`
	Plan      *planYAML      `yaml:"plan"`
	PlanError *string        `yaml:"plan_error"`
	Admit     *admitYAML     `yaml:"admit"`
	WarmGrant *grantYAML     `yaml:"warm_grant"`
}

// admitYAML is `admit: {model: MODEL, limit: N, flags: N, refused: NAME}`
// (warm_path: scenarios).
type admitYAML struct {
	Model   string       `yaml:"model"`
	Limit   uint32       `yaml:"limit"`
	Flags   uint32       `yaml:"flags"`
	Refused *refusalName `yaml:"refused"`
}

// grantYAML is `grant: ID` or `{id: ID, model: MODEL, ok: BOOL}`.
type grantYAML struct {
	ID    uint64 `yaml:"id"`
	Model string `yaml:"model"`
	OK    *bool  `yaml:"ok"`
}

func (g *grantYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&g.ID)
	}
	type plain grantYAML
	return decodeMapping(n, (*plain)(g))
}

type errorYAML struct {
	ID      uint64   `yaml:"id"`
	Code    codeName `yaml:"code"`
	Message *string  `yaml:"message"`
}

// startSwapYAML is `start_swap: MODEL` or the mapping.
type startSwapYAML struct {
	Model   string       `yaml:"model"`
	Evict   []string     `yaml:"evict"`
	Devices []int32      `yaml:"devices"`
	Modes   []modeName   `yaml:"modes"` // parallel to evict; trailing defaults may be left out
	Refused *refusalName `yaml:"refused"`
}

func (s *startSwapYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s.Model = n.Value
		return nil
	}
	type plain startSwapYAML
	return decodeMapping(n, (*plain)(s))
}

// stopYAML is `stop: [MODEL…]` or `{models: [MODEL…], refused: NAME}`.
type stopYAML struct {
	Models  []string     `yaml:"models"`
	Refused *refusalName `yaml:"refused"`
}

func (s *stopYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return n.Decode(&s.Models)
	}
	type plain stopYAML
	return decodeMapping(n, (*plain)(s))
}

type queueYAML struct {
	ID  uint64 `yaml:"id"`
	Pos int    `yaml:"pos"`
}

type planYAML struct {
	Evict   []string   `yaml:"evict"`
	Devices []int32    `yaml:"devices"`
	Modes   []modeName `yaml:"modes"`
}

// swapperYAML is the fake swapper of a scheduler scenario: `evict_all`,
// `none`, or a mapping with rule and that rule's fields.
type swapperYAML struct {
	Rule      string              `yaml:"rule"`
	Groups    [][]string          `yaml:"groups"`
	Exclusive bool                `yaml:"exclusive"`
	Error     string              `yaml:"error"`
	Plans     map[string]planYAML `yaml:"plans"`
	line      int
}

func (s *swapperYAML) UnmarshalYAML(n *yaml.Node) error {
	s.line = n.Line
	if n.Kind == yaml.ScalarNode {
		s.Rule = n.Value
		return nil
	}
	type plain swapperYAML
	line := s.line
	err := decodeMapping(n, (*plain)(s))
	s.line = line
	return err
}

// decodeMapping decodes the mapping n into v, a pointer to a struct, after
// checking that every key is one of its fields: yaml.v3's Node.Decode,
// which custom unmarshalers must use, does not honour KnownFields.
func decodeMapping(n *yaml.Node, v any) error {
	if n.Kind != yaml.MappingNode {
		return lineError(n, "want a mapping, got %s", nodeKind(n))
	}
	t := reflect.TypeOf(v).Elem()
	var known []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			known = append(known, tag)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !slices.Contains(known, k.Value) {
			return lineError(k, "unknown field %q (known: %s)", k.Value, strings.Join(known, ", "))
		}
	}
	return n.Decode(v)
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// duration is a Go duration string ("1.5s", "-10m").
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return lineError(n, "want a duration such as 1.5s or -10m, got %s", nodeKind(n))
	}
	*d = duration(v)
	return nil
}

// byteSize is a size ("24GiB", "512MiB") or a whole number of bytes, read
// by sdk/settings' size rule.
type byteSize uint64

func (s *byteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := sdksettings.ParseSize(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return lineError(n, "want a size such as 24GiB or a number of bytes, got %s", nodeKind(n))
	}
	*s = byteSize(v)
	return nil
}

// enum decodes a scalar that must be one of names (index = value).
func enum(n *yaml.Node, what string, names []string) (int, error) {
	if i := slices.Index(names, n.Value); n.Kind == yaml.ScalarNode && i >= 0 && names[i] != "" {
		return i, nil
	}
	var valid []string
	for _, s := range names {
		if s != "" {
			valid = append(valid, s)
		}
	}
	return 0, lineError(n, "unknown %s %s (known: %s)", what, nodeKind(n), strings.Join(valid, ", "))
}

// The names of the enumerations, indexed by value.
var (
	stateNames       = []string{"stopped", "starting", "ready", "stopping", "failed"}
	evictModeNames   = []string{sdk.EvictDefault.String(), sdk.EvictStop.String(), sdk.EvictSleep1.String(), sdk.EvictSleep2.String()}
	evictConfigNames = []string{"auto", "stop", "sleep", "sleep2"}
	reasonNames      = []string{"admin", "ttl"}
	codeKeys         = []string{"internal", "model_not_found", "queue_full", "concurrency_limit", "unavailable", "swap_failed", "timeout", "too_large"}
	refusalNames     = []string{"", "unknown_request", "unknown_model", "not_ready", "not_allowed", "model_busy", "swap_active", "swapper_failed", "bad_argument", "does_not_fit", "held_by_job"} // by -value
)

// modeName is an eviction mode by sdk.EvictMode's String: default,
// stop, sleep, sleep2.
type modeName sdk.EvictMode

func (m *modeName) UnmarshalYAML(n *yaml.Node) error {
	i, err := enum(n, "eviction mode", evictModeNames)
	*m = modeName(i)
	return err
}

// modes converts a scenario's mode list.
func modes(l []modeName) []sdk.EvictMode {
	if l == nil {
		return nil
	}
	out := make([]sdk.EvictMode, len(l))
	for i, m := range l {
		out[i] = sdk.EvictMode(m)
	}
	return out
}

// evictConfig is a model's evict: setting: auto, stop, sleep or sleep2,
// the mode EvictDefault resolves to (auto: EvictDefault itself).
type evictConfig sdk.EvictMode

func (e *evictConfig) UnmarshalYAML(n *yaml.Node) error {
	i, err := enum(n, "evict setting", evictConfigNames)
	*e = evictConfig(i)
	return err
}

type stateName sdk.ModelState

func (s *stateName) UnmarshalYAML(n *yaml.Node) error {
	i, err := enum(n, "state", stateNames)
	*s = stateName(i)
	return err
}

type reasonName sdk.UnloadReason

func (r *reasonName) UnmarshalYAML(n *yaml.Node) error {
	i, err := enum(n, "unload reason", reasonNames)
	*r = reasonName(i)
	return err
}

type codeName sdk.ErrorCode

func (c *codeName) UnmarshalYAML(n *yaml.Node) error {
	i, err := enum(n, "error code", codeKeys)
	*c = codeName(i)
	return err
}

// refusalName is a host refusal (sdk.ResultError) by name, or "none" in a
// set step's refuse_swap to lift one.
type refusalName sdk.ResultError

func (r *refusalName) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "none" && n.Kind == yaml.ScalarNode {
		*r = 0
		return nil
	}
	i, err := enum(n, "refusal", refusalNames)
	*r = refusalName(-i)
	return err
}

// codeString names an error code as scenario files do ("queue_full").
func codeString(c sdk.ErrorCode) string {
	if int(c) >= 0 && int(c) < len(codeKeys) {
		return codeKeys[c]
	}
	return strconv.Itoa(int(c))
}

// refusalString names a host refusal as scenario files do ("model_busy"),
// or gives the error's text for anything else.
func refusalString(err error) string {
	var re sdk.ResultError
	if errors.As(err, &re) && -int(re) > 0 && -int(re) < len(refusalNames) {
		return refusalNames[-re]
	}
	return strconv.Quote(err.Error())
}

// ---- checking and building ----

// The events a step may carry, by kind.
var (
	schedulerEvents = []string{"request", "swap_done", "serve_done", "cancel", "leave", "unload", "tick", "shutdown", "set"}
	swapperEvents   = []string{"plan", "swap_start", "swap_done", "set"}
	effectNames     = []string{"grant", "error", "start_swap", "stop", "queue", "plan", "plan_error", "admit", "warm_grant"}
)

type parser struct{ file string }

func (p *parser) errorf(line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.file, line, fmt.Sprintf(format, args...))
}

// field returns the value node of key in the mapping n, or nil.
func field(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

func (p *parser) scenario(f *fileYAML, root *yaml.Node) (*Scenario, error) {
	sc := &Scenario{Name: f.Name, File: p.file}
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(p.file), filepath.Ext(p.file))
	}
	kindKey, _ := field(root, "kind")
	switch f.Kind {
	case "scheduler":
		sc.Kind = sdk.KindScheduler
	case "swapper":
		sc.Kind = sdk.KindSwapper
	case "":
		return nil, p.errorf(root.Line, "kind: is required: scheduler or swapper")
	default:
		return nil, p.errorf(kindKey.Line, "kind: want scheduler or swapper, got %q", f.Kind)
	}
	sc.fileHeader = kindKey.Line

	// Settings: a JSON string passed as is, or YAML turned into JSON.
	sc.settings = []byte("{}")
	if k, v := field(root, "settings"); k != nil {
		switch s, ok := f.Settings.(string); {
		case ok && v.Tag == "!!str":
			sc.settings = []byte(s)
		case f.Settings != nil:
			b, err := json.Marshal(f.Settings)
			if err != nil {
				return nil, p.errorf(k.Line, "settings: %v", err)
			}
			sc.settings = b
		}
	}
	sc.initErr = f.InitError
	sc.warmPath = f.WarmPath
	sc.onDemand = f.TicksOnDemand
	if f.HostMemory != nil {
		sc.hostMemory = uint64(*f.HostMemory)
	}

	if f.Swapper != nil {
		if sc.Kind != sdk.KindScheduler {
			return nil, p.errorf(f.Swapper.line, "swapper: is for scheduler scenarios (it answers the scheduler's plans); a swapper scenario tests the swapper itself")
		}
		sw, err := p.fakeSwapper(f.Swapper)
		if err != nil {
			return nil, err
		}
		sc.swapper = sw
	} else {
		sc.swapper = fakeSwapper{rule: "evict_all"}
	}

	_, modelsNode := field(root, "models")
	seen := map[string]bool{}
	for i := range f.Models {
		line := itemLine(modelsNode, i)
		m := f.Models[i]
		if m.Name == "" {
			return nil, p.errorf(line, "a model needs a name")
		}
		if seen[m.Name] {
			return nil, p.errorf(line, "model %q is listed twice", m.Name)
		}
		seen[m.Name] = true
		info := sdk.ModelInfo{Name: m.Name}
		if err := p.apply(&info, &m, line); err != nil {
			return nil, err
		}
		sc.models = append(sc.models, info)
		if m.Requests != nil {
			if sc.demand == nil {
				sc.demand = map[string]uint64{}
			}
			sc.demand[m.Name] = *m.Requests
		}
		if m.Evict != nil {
			if sc.evict == nil {
				sc.evict = map[string]sdk.EvictMode{}
			}
			sc.evict[m.Name] = sdk.EvictMode(*m.Evict)
		}
	}
	sc.gpus = f.GPUs
	if k, v := field(root, "waits"); k != nil {
		w, err := p.waits(sc, f.Waits, v, "waits", false)
		if err != nil {
			return nil, err
		}
		sc.waits = w
	}

	_, stepsNode := field(root, "steps")
	sc.firstLine = root.Line
	if stepsNode != nil {
		sc.firstLine = stepsNode.Line
	}
	if len(f.Steps) > 0 && f.InitError != nil {
		return nil, p.errorf(sc.firstLine, "steps: a scenario with init_error: has no instance to run steps against; put them in another file")
	}
	if len(f.Steps) == 0 && f.InitError == nil {
		return nil, p.errorf(sc.firstLine, "steps: a scenario needs at least one step (or init_error:)")
	}
	var at time.Duration
	for i := range f.Steps {
		st, err := p.step(sc, &f.Steps[i], stepsNode.Content[i], i+1, &at)
		if err != nil {
			return nil, err
		}
		sc.steps = append(sc.steps, st)
	}
	return sc, nil
}

// waits checks a waits: mapping (node n, named what in errors) and
// returns its records: every key a model of the scenario or "" (the
// box), above no more than granted plus held, p95 not negative; a null
// record only where drop allows it (a set step's).
func (p *parser) waits(sc *Scenario, w map[string]*waitsYAML, n *yaml.Node, what string, drop bool) (map[string]sdk.WaitStats, error) {
	out := make(map[string]sdk.WaitStats, len(w))
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, line := n.Content[i].Value, n.Content[i].Line
		if name != "" && sc.modelIndex(name) < 0 {
			return nil, p.errorf(line, "%s: no model %q in models: (\"\" is the box's record)", what, name)
		}
		r := w[name]
		if r == nil {
			if !drop {
				return nil, p.errorf(line, "%s: %q: a record needs granted, p95, above and held (a null one drops it in a set step)", what, name)
			}
			continue
		}
		if r.P95 < 0 {
			return nil, p.errorf(line, "%s: %q: p95 %s is negative", what, name, time.Duration(r.P95))
		}
		if uint64(r.Above) > uint64(r.Granted)+uint64(r.Held) {
			return nil, p.errorf(line, "%s: %q: above (%d) counts grants and held requests past the p95, so at most granted + held (%d)", what, name, r.Above, uint64(r.Granted)+uint64(r.Held))
		}
		out[name] = r.stats()
	}
	return out, nil
}

// modelIndex is the index in sc.models of the model named name, -1 for
// none.
func (sc *Scenario) modelIndex(name string) int {
	return slices.IndexFunc(sc.models, func(m sdk.ModelInfo) bool { return m.Name == name })
}

// stats is r as the host reports it.
func (r *waitsYAML) stats() sdk.WaitStats {
	return sdk.WaitStats{Granted: r.Granted, P95: int64(r.P95), Above: r.Above, Held: r.Held}
}

// itemLine is the line of the i-th item of a sequence node.
func itemLine(seq *yaml.Node, i int) int {
	if seq != nil && i < len(seq.Content) {
		return seq.Content[i].Line
	}
	return 0
}

// apply copies the fields m sets onto info.
func (p *parser) apply(info *sdk.ModelInfo, m *modelYAML, line int) error {
	if m.State != nil {
		info.State = sdk.ModelState(*m.State)
	}
	if m.InFlight != nil {
		info.InFlight = *m.InFlight
	}
	if m.ConcurrencyLimit != nil {
		info.ConcurrencyLimit = *m.ConcurrencyLimit
	}
	if m.Priority != nil {
		info.Priority = *m.Priority
	}
	if m.Pinned != nil {
		info.Pinned = *m.Pinned
	}
	if m.Group != nil {
		info.Group = *m.Group
	}
	if m.LastUse != nil {
		info.LastUse = scenarioStart + int64(*m.LastUse)
	}
	if m.TTL != nil {
		info.TTL = int64(*m.TTL)
	}
	if m.VRAM != nil {
		info.EstimatedVRAM = uint64(*m.VRAM)
	}
	if m.MeasuredVRAM != nil {
		info.MeasuredVRAM = uint64(*m.MeasuredVRAM)
	}
	if m.Devices != nil {
		info.Devices = slices.Clone(*m.Devices)
	}
	if m.Leased != nil {
		info.Leased = nil
		for _, b := range *m.Leased {
			info.Leased = append(info.Leased, uint64(b))
		}
	}
	if len(info.Leased) > 0 && len(info.Leased) != len(info.Devices) {
		return p.errorf(line, "model %q: leased has %d entries and devices %d; give one per device", info.Name, len(info.Leased), len(info.Devices))
	}
	return p.applyResidency(info, m, line)
}

// applyResidency copies the residency fields m sets onto info (ABI
// version 3) and checks them: a sleep level of 1 or 2, only for a stopped
// model (or one being woken, starting), and can_sleep levels 1 and 2.
func (p *parser) applyResidency(info *sdk.ModelInfo, m *modelYAML, line int) error {
	if m.CanSleep != nil {
		info.CanSleep = 0
		for _, l := range *m.CanSleep {
			if l != 1 && l != 2 {
				return p.errorf(line, "model %q: can_sleep lists sleep levels, 1 and 2; got %d", info.Name, l)
			}
			info.CanSleep |= l
		}
	}
	for _, f := range []struct {
		v   *duration
		dst *int64
	}{{m.LoadTime, &info.LoadTime}, {m.WakeTime, &info.WakeTime1}, {m.WakeTime2, &info.WakeTime2}} {
		if f.v != nil {
			*f.dst = int64(*f.v)
		}
	}
	if m.HostBytes != nil {
		info.HostBytes1 = uint64(*m.HostBytes)
	}
	if m.HostBytes2 != nil {
		info.HostBytes2 = uint64(*m.HostBytes2)
	}
	if m.Asleep != nil {
		if *m.Asleep > 2 {
			return p.errorf(line, "model %q: asleep is a sleep level, 1 or 2 (0: awake); got %d", info.Name, *m.Asleep)
		}
		info.SleepLevel = *m.Asleep
		info.HostLeased = sleepBytes(info, info.SleepLevel)
	}
	if m.HostLeased != nil {
		info.HostLeased = uint64(*m.HostLeased)
	}
	if info.SleepLevel > 0 && info.State != sdk.StateStopped && info.State != sdk.StateStarting {
		return p.errorf(line, "model %q: asleep: %d needs state stopped (asleep) or starting (being woken), not %s", info.Name, info.SleepLevel, info.State)
	}
	return nil
}

func (p *parser) fakeSwapper(s *swapperYAML) (fakeSwapper, error) {
	sw := fakeSwapper{rule: s.Rule, exclusive: s.Exclusive, err: s.Error}
	only := func(fields ...string) error {
		set := map[string]bool{"groups": s.Groups != nil, "exclusive": s.Exclusive, "error": s.Error != "", "plans": s.Plans != nil}
		for name, isSet := range set {
			if isSet && !slices.Contains(fields, name) {
				return p.errorf(s.line, "swapper: %s is not a field of rule %s", name, s.Rule)
			}
		}
		return nil
	}
	var err error
	switch s.Rule {
	case "evict_all", "none":
		err = only()
	case "groups":
		err = only("groups", "exclusive")
		sw.groupOf = map[string]int{}
		for i, g := range s.Groups {
			for _, m := range g {
				if _, dup := sw.groupOf[m]; dup {
					return sw, p.errorf(s.line, "swapper: model %q is in two groups", m)
				}
				sw.groupOf[m] = i + 1
			}
		}
	case "fail":
		err = only("error")
		if sw.err == "" {
			sw.err = "the swapper failed"
		}
	case "plans":
		err = only("plans")
		sw.plans = map[string]sdk.Plan{}
		for t, pl := range s.Plans {
			sw.plans[t] = sdk.Plan{Evict: pl.Evict, Devices: pl.Devices, Modes: modes(pl.Modes)}
		}
	default:
		return sw, p.errorf(s.line, "swapper: unknown rule %q (known: evict_all, none, groups, fail, plans)", s.Rule)
	}
	return sw, err
}

// step checks one step against its node and builds it.
func (p *parser) step(sc *Scenario, y *stepYAML, n *yaml.Node, index int, at *time.Duration) (step, error) {
	st := step{index: index, line: n.Line, y: y}
	allowed := schedulerEvents
	if sc.Kind == sdk.KindSwapper {
		allowed = swapperEvents
	}
	var events []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if slices.Contains(schedulerEvents, key) || slices.Contains(swapperEvents, key) {
			events = append(events, key)
			if !slices.Contains(allowed, key) {
				return st, p.errorf(n.Content[i].Line, "step %d: %s is not an event for a %s (a %s's events: %s)", index, key, sc.Kind, sc.Kind, strings.Join(allowed, ", "))
			}
		}
	}
	switch len(events) {
	case 0:
		return st, p.errorf(n.Line, "step %d: no event (one of: %s)", index, strings.Join(allowed, ", "))
	case 1:
		st.event = events[0]
	default:
		return st, p.errorf(n.Line, "step %d: one event per step, got %s", index, strings.Join(events, " and "))
	}
	if _, v := field(n, st.event); v.Tag == "!!null" && st.event != "tick" && st.event != "shutdown" {
		return st, p.errorf(v.Line, "step %d: %s needs a value", index, st.event)
	}
	if y.At != nil {
		if time.Duration(*y.At) < *at {
			return st, p.errorf(n.Line, "step %d: at: %s is before the previous step's %s; time only moves forward", index, time.Duration(*y.At), *at)
		}
		*at = time.Duration(*y.At)
	}
	st.at = *at
	switch st.event {
	case "request":
		if y.Request.ID == 0 || y.Request.Model == "" {
			return st, p.errorf(n.Line, "step %d: request needs an id (from 1) and a model", index)
		}
	case "unload":
		if len(y.Unload.Models) == 0 {
			return st, p.errorf(n.Line, "step %d: unload needs models", index)
		}
	case "plan":
		if y.Plan.Target == "" {
			return st, p.errorf(n.Line, "step %d: plan needs a target", index)
		}
	case "swap_start":
		if y.SwapStart.Target == "" {
			return st, p.errorf(n.Line, "step %d: swap_start needs a target", index)
		}
	case "set":
		if y.Set == nil {
			return st, p.errorf(n.Line, "step %d: set needs models, gpus, host_memory, refuse_swap or waits", index)
		}
		_, setNode := field(n, "set")
		if _, v := field(setNode, "waits"); v != nil {
			if _, err := p.waits(sc, y.Set.Waits, v, fmt.Sprintf("step %d: set: waits", index), true); err != nil {
				return st, err
			}
		}
		_, modelsNode := field(setNode, "models")
		for i, m := range y.Set.Models {
			j := sc.modelIndex(m.Name)
			if j < 0 {
				return st, p.errorf(itemLine(modelsNode, i), "step %d: set: no model %q in models:", index, m.Name)
			}
			probe := sc.models[j]
			if err := p.apply(&probe, &y.Set.Models[i], itemLine(modelsNode, i)); err != nil {
				return st, err
			}
		}
	}
	// Events whose value may be null (tick:, shutdown:) need nothing more;
	// the others are checked by their decoders.
	if k, v := field(n, "expect"); k != nil {
		st.checkEffects = true
		for i := range y.Expect {
			want, err := p.effect(sc, &y.Expect[i], v.Content[i], index, st.event)
			if err != nil {
				return st, err
			}
			st.expect = append(st.expect, want)
		}
	}
	if k, _ := field(n, "expect"); k != nil && st.event == "plan" && len(st.expect) != 1 {
		return st, p.errorf(k.Line, "step %d: a plan step expects one answer: plan: or plan_error:", index)
	}
	if k, _ := field(n, "logs"); k != nil {
		st.checkLogs = true
	}
	if k, v := field(n, "next_tick"); k != nil {
		if !sc.onDemand {
			return st, p.errorf(k.Line, "step %d: next_tick needs ticks_on_demand: true", index)
		}
		st.checkTick = true
		if v.Value != "none" {
			d, err := time.ParseDuration(v.Value)
			if err != nil {
				return st, p.errorf(v.Line, "step %d: next_tick: want a duration since the start such as 61s, or none; got %q", index, v.Value)
			}
			st.nextTick = scenarioStart + int64(d)
		}
	}
	return st, nil
}

// effect checks one expected effect against its node.
func (p *parser) effect(sc *Scenario, y *effectYAML, n *yaml.Node, index int, event string) (wantEffect, error) {
	w := wantEffect{line: n.Line}
	var names []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		names = append(names, n.Content[i].Value)
	}
	if n.Kind != yaml.MappingNode || len(names) != 1 {
		return w, p.errorf(n.Line, "step %d: an expected effect is a mapping with one of %s", index, strings.Join(effectNames, ", "))
	}
	w.name = names[0]
	isPlan := w.name == "plan" || w.name == "plan_error"
	switch {
	case isPlan && event != "plan":
		return w, p.errorf(n.Line, "step %d: %s is the answer to a plan step", index, w.name)
	case !isPlan && event == "plan":
		return w, p.errorf(n.Line, "step %d: a plan step expects plan: or plan_error:, not %s", index, w.name)
	case !isPlan && sc.Kind == sdk.KindSwapper:
		return w, p.errorf(n.Line, "step %d: a swapper has no effects but logs (logs:) and plans", index)
	}
	switch w.name {
	case "grant":
		w.call = Call{Op: OpGrantServe, ID: sdk.RequestID(y.Grant.ID), Model: y.Grant.Model, OK: y.Grant.OK == nil || *y.Grant.OK}
		w.anyModel = y.Grant.Model == ""
	case "error":
		w.call = Call{Op: OpGrantError, ID: sdk.RequestID(y.Error.ID), Code: sdk.ErrorCode(y.Error.Code)}
		if y.Error.Message != nil {
			w.call.Msg, w.msgGiven = *y.Error.Message, true
		}
	case "start_swap":
		s := y.StartSwap
		if s.Model == "" {
			return w, p.errorf(n.Line, "step %d: start_swap needs a model", index)
		}
		w.call = Call{Op: OpStartSwap, Model: s.Model, Models: s.Evict, Devices: s.Devices, Modes: modes(s.Modes)}
		if s.Refused != nil && *s.Refused != 0 {
			w.call.Err = sdk.ResultError(*s.Refused)
		}
	case "stop":
		w.call = Call{Op: OpStopProcesses, Models: y.Stop.Models}
		if y.Stop.Refused != nil && *y.Stop.Refused != 0 {
			w.call.Err = sdk.ResultError(*y.Stop.Refused)
		}
	case "queue":
		w.call = Call{Op: OpSetQueuePosition, ID: sdk.RequestID(y.Queue.ID), Pos: y.Queue.Pos}
	case "admit", "warm_grant":
		if !sc.warmPath {
			return w, p.errorf(n.Line, "step %d: %s needs warm_path: true", index, w.name)
		}
		if w.name == "warm_grant" {
			w.call = Call{Op: OpWarmGrant, ID: sdk.RequestID(y.WarmGrant.ID), Model: y.WarmGrant.Model, OK: true}
			w.anyModel = y.WarmGrant.Model == ""
			break
		}
		if y.Admit.Model == "" {
			return w, p.errorf(n.Line, "step %d: admit needs a model", index)
		}
		w.call = Call{Op: OpAdmit, Model: y.Admit.Model, Limit: y.Admit.Limit, Flags: sdk.AdmitFlags(y.Admit.Flags)}
		if y.Admit.Refused != nil && *y.Admit.Refused != 0 {
			w.call.Err = sdk.ResultError(*y.Admit.Refused)
		}
	case "plan":
		w.plan = &sdk.Plan{Evict: y.Plan.Evict, Devices: y.Plan.Devices, Modes: modes(y.Plan.Modes)}
	case "plan_error":
		w.planErr = y.PlanError
	}
	return w, nil
}
