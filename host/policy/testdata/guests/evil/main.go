// Command evil is a scheduler policy that misbehaves on purpose, so that the
// host's sandbox can be tested. Its settings select the misbehaviour and
// when it happens:
//
//	{"misbehave": "panic", "model": "bad"}
//
// misbehaves in on_request for model "bad" only ("" = every request), and
// serves every other request. {"misbehave": "...", "in": "init"} misbehaves
// in init instead. Misbehaviours: panic (recovered by the SDK: status 2),
// loop (for {}), spin (a long loop that ends), alloc (allocate without
// bound), stack (unbounded recursion), exit (os.Exit(3): proc_exit),
// goexit-panic (a panic the SDK cannot recover: in another goroutine),
// garbage (call every import with pointers outside memory and log the
// results), spam (log and print a lot).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/loadout-dev/loadout/sdk"
)

// Raw declarations of the imports, to pass pointers the SDK never would.

//go:wasmimport loadout_v2 log
func rawLog(level int32, p, n uint32)

//go:wasmimport loadout_v2 set_error
func rawSetError(p, n uint32)

//go:wasmimport loadout_v2 grant_serve
func rawGrantServe(id uint64, p, n uint32) int32

//go:wasmimport loadout_v2 grant_error
func rawGrantError(id uint64, code int32, p, n uint32) int32

//go:wasmimport loadout_v2 start_swap
func rawStartSwap(p, n uint32) int32

//go:wasmimport loadout_v2 stop_processes
func rawStopProcesses(p, n uint32) int32

//go:wasmimport loadout_v2 set_queue_position
func rawSetQueuePosition(id uint64, pos int32) int32

//go:wasmimport loadout_v2 model_state
func rawModelState(p, n, buf, limit uint32) int32

//go:wasmimport loadout_v2 running_models
func rawRunningModels(buf, limit uint32) int32

//go:wasmimport loadout_v2 snapshot
func rawSnapshot(buf, limit uint32) int32

//go:wasmimport loadout_v2 plan
func rawPlan(p, n, buf, limit uint32) int32

//go:wasmimport loadout_v2 replicas
func rawReplicas(p, n, buf, limit uint32) int32

//go:wasmimport loadout_v2 demand
func rawDemand(buf, limit uint32) int32

//go:wasmimport loadout_v2 waits
func rawWaits(p, n, buf, limit uint32) int32

type settings struct {
	Misbehave string `json:"misbehave"`
	Model     string `json:"model"`
	In        string `json:"in"`
}

type evil struct {
	fx  sdk.Effects
	set settings
}

var hoard [][]byte

// spun is what "spin" adds up, kept so the loop is not optimised away.
var spun int

func misbehave(fx sdk.Effects, what string) {
	switch what {
	case "panic":
		panic("evil: deliberate panic")
	case "loop":
		//lint:ignore SA5002 the point: the host's deadline must stop it
		for {
		}
	case "spin": // overruns any short deadline, then returns
		for i := range 1 << 28 {
			spun += i
		}
	case "alloc":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	case "stack":
		recurse(0)
	case "exit":
		os.Exit(3)
	case "goexit-panic":
		done := make(chan bool)
		go func() { panic("evil: panic in a goroutine") }()
		<-done
	case "garbage":
		fx.Log(sdk.LevelInfo, garbage())
	case "spam":
		for i := range 1000 {
			fx.Log(sdk.LevelInfo, fmt.Sprintf("spam %d", i))
		}
		fmt.Println(strings.Repeat("stdout spam ", 2000))
	}
}

//go:noinline
func recurse(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	//lint:ignore SA5007 the point: the guest runs out of stack
	return recurse(n+1) + int(pad[(n+1)%256])
}

// garbage calls every import with bad pointers and returns the results as
// "name=result" pairs.
func garbage() string {
	const bad = 0xFFFFFFF0 // far past the end of a 64 MiB memory
	good := "good"
	gp := uint32(uintptr(unsafe.Pointer(unsafe.StringData(good))))
	junk := []byte{1, 12, 0xFF, 0xFF, 0xFF, 0x7F} // a SwapRequest whose model length runs past the end
	jp := uint32(uintptr(unsafe.Pointer(&junk[0])))
	rawLog(0, bad, 100)
	rawSetError(bad, 100)
	r := []string{
		fmt.Sprintf("grant_serve=%d", rawGrantServe(1, bad, 16)),
		fmt.Sprintf("grant_serve_len=%d", rawGrantServe(1, gp, 0xFFFFFFFF)),
		fmt.Sprintf("grant_error=%d", rawGrantError(1, 0, bad, 16)),
		fmt.Sprintf("grant_error_code=%d", rawGrantError(1, 99, gp, 4)),
		fmt.Sprintf("start_swap=%d", rawStartSwap(bad, 16)),
		fmt.Sprintf("start_swap_junk=%d", rawStartSwap(jp, uint32(len(junk)))),
		fmt.Sprintf("stop_processes=%d", rawStopProcesses(bad, 16)),
		fmt.Sprintf("set_queue_position=%d", rawSetQueuePosition(1, -1)),
		fmt.Sprintf("model_state=%d", rawModelState(bad, 16, 0, 0)),
		fmt.Sprintf("model_state_buf=%d", rawModelState(gp, 4, bad, 4096)),
		fmt.Sprintf("running_models=%d", rawRunningModels(bad, 1<<20)),
		fmt.Sprintf("snapshot=%d", rawSnapshot(bad, 1<<20)),
		fmt.Sprintf("plan=%d", rawPlan(bad, 16, 0, 0)),
		fmt.Sprintf("plan_buf=%d", rawPlan(gp, 4, bad, 4096)),
		fmt.Sprintf("replicas=%d", rawReplicas(bad, 16, 0, 0)),
		fmt.Sprintf("demand=%d", rawDemand(bad, 1<<20)),
		fmt.Sprintf("waits=%d", rawWaits(bad, 16, 0, 0)),
		fmt.Sprintf("waits_buf=%d", rawWaits(gp, 0, bad, 4096)),
	}
	return "garbage " + strings.Join(r, " ")
}

func (e *evil) OnRequest(ev sdk.RequestEvent) {
	if e.set.In == "" && (e.set.Model == "" || e.set.Model == ev.Model) {
		misbehave(e.fx, e.set.Misbehave)
	}
	e.fx.GrantServe(ev.ID, ev.Model)
}

func (e *evil) OnSwapDone(sdk.SwapDoneEvent)   {}
func (e *evil) OnServeDone(sdk.ServeDoneEvent) {}
func (e *evil) OnCancel(sdk.CancelEvent)       {}
func (e *evil) OnUnload(sdk.UnloadEvent)       {}
func (e *evil) OnTick(sdk.TickEvent)           {}
func (e *evil) OnShutdown(sdk.ShutdownEvent)   {}

func init() {
	sdk.RegisterScheduler(func(fx sdk.Effects, raw []byte) (sdk.Scheduler, error) {
		e := &evil{fx: fx}
		if err := json.Unmarshal(raw, &e.set); err != nil {
			return nil, err
		}
		if e.set.In == "init" {
			misbehave(fx, e.set.Misbehave)
		}
		return e, nil
	})
}

func main() {}
