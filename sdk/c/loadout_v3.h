/*
 * loadout_v3.h: the Loadout policy ABI, version 3, for policies written in C
 * (clang --target=wasm32-wasi -mexec-model=reactor). docs/ABI.md describes
 * it; examples/lru-c is a policy built with it.
 *
 * GENERATED from the host's import and export tables (host/policy) and the
 * SDK's constants by
 *
 *     go test ./host/policy -run TestCHeader -update
 *
 * and checked by the same test without -update. Do not edit.
 *
 * Messages (docs/ABI.md, sdk/codec.go): version u8 | kind u8 | fields, all
 * little-endian and fixed width; a string or byte slice is a u32 length and
 * the bytes; a list is a u32 count and the items.
 */
#ifndef LOADOUT_V3_H
#define LOADOUT_V3_H

#include <stdint.h>

/* The ABI version: loadout_abi_version's value and every message's first byte. */
#define LOADOUT_ABI_VERSION 3
#define LOADOUT_HEADER_SIZE 2 /* version, kind */

/* Message kinds: every message's second byte. */
#define LOADOUT_MSG_INIT             1 /* InitEvent: now i64, settings bytes (JSON) */
#define LOADOUT_MSG_REQUEST          2 /* RequestEvent: now i64, id u64, model str, priority i32, client str */
#define LOADOUT_MSG_SWAP_DONE        3 /* SwapDoneEvent: now i64, model str, err str */
#define LOADOUT_MSG_SERVE_DONE       4 /* ServeDoneEvent: now i64, id u64, model str */
#define LOADOUT_MSG_CANCEL           5 /* CancelEvent: now i64, id u64, model str */
#define LOADOUT_MSG_UNLOAD           6 /* UnloadEvent: now i64, models [str], reason u8 */
#define LOADOUT_MSG_TICK             7 /* TickEvent: now i64, changed [str] */
#define LOADOUT_MSG_SHUTDOWN         8 /* ShutdownEvent: now i64, reason str */
#define LOADOUT_MSG_PLAN_REQUEST     9 /* PlanRequest: now i64, target str, running [str] */
#define LOADOUT_MSG_PLAN             10 /* Plan: evict [str], devices [i32], modes [u8] (LOADOUT_EVICT_*, parallel to evict; shorter: the rest default) */
#define LOADOUT_MSG_SWAP_START       11 /* SwapStartEvent: now i64, target str, running [str], evict [str], devices [i32], modes [u8] */
#define LOADOUT_MSG_SWAP_REQUEST     12 /* SwapRequest: model str, evict [str], devices [i32], modes [u8] */
#define LOADOUT_MSG_MODEL_INFO       13 /* ModelInfo: name str, state u8, in_flight u32, concurrency_limit u32, priority i32, pinned u8, group str, last_use i64, ttl i64, estimated_vram u64, measured_vram u64, devices [i32], leased [u64], then the residency (LOADOUT_RESIDENCY_SIZE bytes): sleep_level u8, can_sleep u8, load_time i64, wake_time1 i64, wake_time2 i64, host_bytes1 u64, host_bytes2 u64, host_leased u64 */
#define LOADOUT_MSG_MODEL_LIST       14 /* ModelList: models [ModelInfo fields] */
#define LOADOUT_MSG_SNAPSHOT         15 /* Snapshot: now i64, models [ModelInfo fields], gpus [index i32, name str, total u64, free u64, leased u64], host_total u64, host_leased u64 */
#define LOADOUT_MSG_STOP_REQUEST     16 /* StopRequest: models [str] */
#define LOADOUT_MSG_JOB_PLAN_REQUEST 17 /* JobPlanRequest, to plan: now i64, job str, gpus u32, priority i32, candidates [i32], running [str]; answer STATUS_NO_POLICY to leave jobs to the host */
#define LOADOUT_MSG_REPLICA_SET      18 /* ReplicaSet, the replicas import's reply: model str, min u32, max u32, replicas [str] */
#define LOADOUT_MSG_SNAPSHOT_DELTA   19 /* SnapshotDelta, from snapshot_delta: now i64, base u64, gen u64, total u32, changed [position u32 + ModelInfo fields], gpus_changed bool, then the gpus list as in Snapshot only if gpus_changed, host_total u64, host_leased u64 */
#define LOADOUT_MSG_DEMAND           20 /* DemandList, the demand import's reply: models [name str, requests u64, loads u32, load_time i64] */
#define LOADOUT_MSG_WAITS            21 /* WaitStats, the waits import's reply: granted u32, p95 i64 (ns), above u32, held u32 */

/* Export statuses: the high 32 bits of an event export's i64 result; the low 32 bits are the output's length. */
#define LOADOUT_STATUS_OK        0
#define LOADOUT_STATUS_ERROR     1 /* the policy's error; set_error was called */
#define LOADOUT_STATUS_PANIC     2
#define LOADOUT_STATUS_BAD_INPUT 3 /* the event could not be decoded */
#define LOADOUT_STATUS_NO_POLICY 4

/* Policy kinds: loadout_policy_kind's value. */
#define LOADOUT_KIND_NONE      0
#define LOADOUT_KIND_SCHEDULER 1
#define LOADOUT_KIND_SWAPPER   2

/* Model states (ModelInfo.state). */
#define LOADOUT_STATE_STOPPED  0
#define LOADOUT_STATE_STARTING 1
#define LOADOUT_STATE_READY    2
#define LOADOUT_STATE_STOPPING 3
#define LOADOUT_STATE_FAILED   4

/* Error codes (grant_error). */
#define LOADOUT_CODE_INTERNAL          0 /* 500 */
#define LOADOUT_CODE_MODEL_NOT_FOUND   1 /* 404 */
#define LOADOUT_CODE_QUEUE_FULL        2 /* 429 */
#define LOADOUT_CODE_CONCURRENCY_LIMIT 3 /* 429 */
#define LOADOUT_CODE_UNAVAILABLE       4 /* 503 */
#define LOADOUT_CODE_SWAP_FAILED       5 /* 502 */
#define LOADOUT_CODE_TIMEOUT           6 /* 504 */
#define LOADOUT_CODE_TOO_LARGE         7 /* 507 */

/* Host import results below zero (sdk.ResultError). */
#define LOADOUT_ERR_UNKNOWN_REQUEST (-1) /* unknown request id */
#define LOADOUT_ERR_UNKNOWN_MODEL   (-2) /* unknown model */
#define LOADOUT_ERR_NOT_READY       (-3) /* model is not ready */
#define LOADOUT_ERR_NOT_ALLOWED     (-4) /* not allowed for this policy kind */
#define LOADOUT_ERR_MODEL_BUSY      (-5) /* would evict a model with requests in flight */
#define LOADOUT_ERR_SWAP_ACTIVE     (-6) /* model already has a swap in progress */
#define LOADOUT_ERR_SWAPPER_FAILED  (-7) /* swapper failed */
#define LOADOUT_ERR_BAD_ARGUMENT    (-8) /* malformed argument */
#define LOADOUT_ERR_DOES_NOT_FIT    (-9) /* does not fit in GPU memory with the planned evictions */
#define LOADOUT_ERR_HELD_BY_JOB     (-10) /* the GPU memory it needs is held by jobs */

/* Eviction modes (Plan, SwapRequest, SwapStartEvent: modes). */
#define LOADOUT_EVICT_DEFAULT 0 /* the model's configured evict: (docs/ABI.md, "Eviction modes") */
#define LOADOUT_EVICT_STOP    1 /* stop its server; the only mode for an asleep model */
#define LOADOUT_EVICT_SLEEP1  2 /* sleep at level 1: weights to host memory */
#define LOADOUT_EVICT_SLEEP2  3 /* sleep at level 2: weights dropped */

/* Residency (ModelInfo: sleep_level, can_sleep; its encoded size). */
#define LOADOUT_CAN_SLEEP_1    1 /* can_sleep bit: the backend sleeps at level 1 */
#define LOADOUT_CAN_SLEEP_2    2 /* can_sleep bit: the backend sleeps at level 2 */
#define LOADOUT_RESIDENCY_SIZE 50 /* bytes of ModelInfo's residency fields, after leased */

/* Admission flags (admit; the warm path). */
#define LOADOUT_ADMIT_SERVE_DONE 1 /* keep sending on_serve_done for the model */

/* Bounds of a requested tick after now, ns (request_tick; ticks on demand). */
#define LOADOUT_MIN_TICK_DELAY  1000000 /* a sooner tick is clamped to now + this */
#define LOADOUT_MAX_TICK_DELAY  86400000000000 /* a later tick is clamped to now + this */
#define LOADOUT_PAST_TICK_DELAY 1000000000 /* a tick at or before now is taken as now + this */

/* Log levels (log). */
#define LOADOUT_LEVEL_DEBUG (-4)
#define LOADOUT_LEVEL_INFO  0
#define LOADOUT_LEVEL_WARN  4
#define LOADOUT_LEVEL_ERROR 8

/* Unload reasons (UnloadEvent.reason). */
#define LOADOUT_UNLOAD_ADMIN 0
#define LOADOUT_UNLOAD_TTL   1

/*
 * Host imports, module "loadout_v2", as loadout_host_NAME. Reads use the retry
 * pattern: the host writes the reply to (buf, limit) only if it fits and
 * always returns its full length; a result below zero is a LOADOUT_ERR_*
 * value.
 */
#define LOADOUT_IMPORT(name) __attribute__((import_module("loadout_v2"), import_name(#name)))
LOADOUT_IMPORT(log) void loadout_host_log(int32_t level, const void *msg, uint32_t msg_len);
LOADOUT_IMPORT(set_error) void loadout_host_set_error(const void *msg, uint32_t msg_len);
LOADOUT_IMPORT(grant_serve) int32_t loadout_host_grant_serve(uint64_t id, const void *model, uint32_t model_len);
LOADOUT_IMPORT(grant_error) int32_t loadout_host_grant_error(uint64_t id, int32_t code, const void *msg, uint32_t msg_len);
LOADOUT_IMPORT(start_swap) int32_t loadout_host_start_swap(const void *msg, uint32_t msg_len);
LOADOUT_IMPORT(stop_processes) int32_t loadout_host_stop_processes(const void *msg, uint32_t msg_len);
LOADOUT_IMPORT(set_queue_position) int32_t loadout_host_set_queue_position(uint64_t id, int32_t pos);
LOADOUT_IMPORT(model_state) int32_t loadout_host_model_state(const void *name, uint32_t name_len, void *buf, uint32_t limit);
LOADOUT_IMPORT(running_models) int32_t loadout_host_running_models(void *buf, uint32_t limit);
LOADOUT_IMPORT(snapshot) int32_t loadout_host_snapshot(void *buf, uint32_t limit);
LOADOUT_IMPORT(snapshot_delta) int32_t loadout_host_snapshot_delta(uint64_t base, void *buf, uint32_t limit);
LOADOUT_IMPORT(plan) int32_t loadout_host_plan(const void *target, uint32_t target_len, void *buf, uint32_t limit);
LOADOUT_IMPORT(admit) int32_t loadout_host_admit(const void *model, uint32_t model_len, uint32_t limit, int32_t flags);
LOADOUT_IMPORT(replicas) int32_t loadout_host_replicas(const void *name, uint32_t name_len, void *buf, uint32_t limit);
LOADOUT_IMPORT(demand) int32_t loadout_host_demand(void *buf, uint32_t limit);
LOADOUT_IMPORT(waits) int32_t loadout_host_waits(const void *name, uint32_t name_len, void *buf, uint32_t limit);
LOADOUT_IMPORT(request_tick) int32_t loadout_host_request_tick(int64_t at_ns);

/*
 * Exports, as loadout_NAME. A policy defines the common ones and those of
 * its kind; the declarations carry the export names, so a definition needs
 * nothing else.
 * An event export takes the length of the message the host wrote at the
 * in-buffer's address and returns (int64_t)status << 32 | out_len.
 */
#define LOADOUT_EXPORT(name) __attribute__((export_name(#name)))

/* Every policy. */
LOADOUT_EXPORT(loadout_abi_version) int32_t loadout_abi_version(void); /* LOADOUT_ABI_VERSION */
LOADOUT_EXPORT(loadout_policy_kind) int32_t loadout_policy_kind(void); /* LOADOUT_KIND_* */
LOADOUT_EXPORT(abi_buffers) int32_t loadout_abi_buffers(void); /* address of 4 u32: in-buffer address, capacity, out-buffer address, capacity */
LOADOUT_EXPORT(init) int64_t loadout_init(int32_t len); /* LOADOUT_MSG_INIT */

/* A scheduler. */
LOADOUT_EXPORT(on_request) int64_t loadout_on_request(int32_t len);
LOADOUT_EXPORT(on_swap_done) int64_t loadout_on_swap_done(int32_t len);
LOADOUT_EXPORT(on_serve_done) int64_t loadout_on_serve_done(int32_t len);
LOADOUT_EXPORT(on_cancel) int64_t loadout_on_cancel(int32_t len);
LOADOUT_EXPORT(on_unload) int64_t loadout_on_unload(int32_t len);
LOADOUT_EXPORT(on_tick) int64_t loadout_on_tick(int32_t len);
LOADOUT_EXPORT(on_shutdown) int64_t loadout_on_shutdown(int32_t len);

/* A swapper. */
LOADOUT_EXPORT(plan) int64_t loadout_plan(int32_t len);
LOADOUT_EXPORT(on_swap_start) int64_t loadout_on_swap_start(int32_t len);
LOADOUT_EXPORT(plan_is_pure) int32_t loadout_plan_is_pure(void); /* optional: 1 if plan depends only on settings, target and running set */

#endif /* LOADOUT_V3_H */
