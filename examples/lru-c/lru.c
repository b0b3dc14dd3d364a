/*
 * lru: a Loadout swapper (eviction) policy in C, the twin of the Go swapper
 * `loadout policy new lru --kind swapper` writes, held to the same scenario
 * files (cmd/loadout/scaffold/swapper/testdata/scenarios). It proves the
 * policy ABI is language-neutral: no Go, no SDK, only loadout_v3.h (the ABI
 * as C declarations, generated from the host's own tables) and the wire
 * format of docs/ABI.md, decoded and encoded here by hand. Built with
 * -DLOADOUT_V2 it is a version 2 module instead (loadout_v2.h, no
 * residency, no eviction modes), which the host still loads and calls in
 * version 2: cmd/loadout's TestCPolicy builds it both ways.
 *
 * The rule: when a model must load and more than max_running models would
 * then run, evict the excess from the running models, those already
 * stopping first, then idle ready ones, then busy or loading ones; the
 * least recently used first within each, by name last. A pinned model is
 * never evicted. A target that is already loaded or loading needs nothing.
 *
 * Build (Debian: clang, lld, wasi-libc, libclang-rt-14-dev-wasm32):
 *
 *     clang --target=wasm32-wasi -O2 -mexec-model=reactor -I../../sdk/c -o lru.wasm lru.c
 *
 * Settings: {"max_running": N}, N >= 0; 0 or absent means 1.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef LOADOUT_V2
#include "loadout_v2.h"
#else
#include "loadout_v3.h"
#endif

/* ---- buffers the host writes events into and reads plans from ---- */

#define IN_CAP (256u << 10)
#define OUT_CAP (64u << 10)

static uint8_t in_buf[IN_CAP];
static uint8_t out_buf[OUT_CAP];
static uint32_t buf_desc[4];

/* Replies of host reads (running_models, model_state); grown on demand. */
static uint8_t *scratch;
static uint32_t scratch_cap;

static int32_t max_running = 1;

static int64_t result(uint32_t status, uint32_t out_len) {
    return (int64_t)((uint64_t)status << 32 | out_len);
}

static void set_error(const char *msg) { loadout_host_set_error(msg, (uint32_t)strlen(msg)); }

/* ---- decoding: a bounds-checked little-endian reader ---- */

typedef struct {
    const uint8_t *p;
    uint32_t n, off;
    int bad; /* a read ran past the end */
} reader;

typedef struct {
    const char *s;
    uint32_t n;
} str;

static int need(reader *r, uint32_t k) {
    if (r->bad || k > r->n - r->off) {
        r->bad = 1;
        return 0;
    }
    return 1;
}

static uint8_t rd_u8(reader *r) { return need(r, 1) ? r->p[r->off++] : 0; }

static uint32_t rd_u32(reader *r) {
    if (!need(r, 4)) return 0;
    const uint8_t *b = r->p + r->off;
    r->off += 4;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t rd_u64(reader *r) {
    uint64_t lo = rd_u32(r);
    return lo | (uint64_t)rd_u32(r) << 32;
}

static str rd_str(reader *r) {
    str s = {0, 0};
    uint32_t n = rd_u32(r);
    if (!need(r, n)) return s;
    s.s = (const char *)r->p + r->off;
    s.n = n;
    r->off += n;
    return s;
}

/* rd_count reads a list's length, which must leave at least min_item bytes
 * per item, so garbage cannot make us allocate. */
static uint32_t rd_count(reader *r, uint32_t min_item) {
    uint32_t n = rd_u32(r);
    if (!r->bad && min_item > 0 && n > (r->n - r->off) / min_item) r->bad = 1;
    return r->bad ? 0 : n;
}

static void skip(reader *r, uint32_t k) {
    if (need(r, k)) r->off += k;
}

/* open_msg starts reading a message of the given kind. */
static reader open_msg(const uint8_t *p, uint32_t n, uint8_t kind) {
    reader r = {p, n, 0, 0};
    if (rd_u8(&r) != LOADOUT_ABI_VERSION || rd_u8(&r) != kind) r.bad = 1;
    return r;
}

/* done reports whether the message was read whole and exactly. */
static int done(reader *r) { return !r->bad && r->off == r->n; }

static int str_eq(str a, str b) { return a.n == b.n && memcmp(a.s, b.s, a.n) == 0; }

/* str_cmp orders like Go's strings.Compare: bytewise, shorter first. */
static int str_cmp(str a, str b) {
    uint32_t n = a.n < b.n ? a.n : b.n;
    int c = memcmp(a.s, b.s, n);
    if (c != 0) return c;
    return a.n < b.n ? -1 : a.n > b.n;
}

/* ---- encoding ---- */

typedef struct {
    uint8_t *p;
    uint32_t cap, n;
    int full;
} writer;

static void wr_bytes(writer *w, const void *b, uint32_t k) {
    if (w->full || k > w->cap - w->n) {
        w->full = 1;
        return;
    }
    memcpy(w->p + w->n, b, k);
    w->n += k;
}

static void wr_u8(writer *w, uint8_t v) { wr_bytes(w, &v, 1); }

static void wr_u32(writer *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wr_bytes(w, b, 4);
}

static void wr_str(writer *w, str s) {
    wr_u32(w, s.n);
    wr_bytes(w, s.s, s.n);
}

/* ---- the model table, from running_models and model_state ---- */

typedef struct {
    str name;
    uint8_t state;
    uint32_t in_flight;
    uint8_t pinned;
    int64_t last_use;
} model;

/* rd_model reads one ModelInfo's fields, keeping those the rule uses. */
static void rd_model(reader *r, model *m) {
    m->name = rd_str(r);
    m->state = rd_u8(r);
    m->in_flight = rd_u32(r);
    rd_u32(r); /* concurrency_limit */
    rd_u32(r); /* priority */
    m->pinned = rd_u8(r);
    rd_str(r); /* group */
    m->last_use = (int64_t)rd_u64(r);
    rd_u64(r); /* ttl */
    rd_u64(r); /* estimated_vram */
    rd_u64(r); /* measured_vram */
    skip(r, rd_count(r, 4) * 4); /* devices */
    skip(r, rd_count(r, 8) * 8); /* leased */
#if LOADOUT_ABI_VERSION >= 3
    skip(r, LOADOUT_RESIDENCY_SIZE); /* residency: lru stops whatever it evicts */
#endif
}

/* host_read makes a host read with the retry pattern: call asks for the
 * reply into (scratch, scratch_cap); a reply larger than that grows
 * scratch and asks again. It returns the reply's length, or a negative
 * LOADOUT_ERR_* value. */
typedef int32_t (*read_fn)(const str *arg, void *buf, uint32_t limit);

static int32_t host_read(read_fn call, const str *arg) {
    for (;;) {
        int32_t n = call(arg, scratch, scratch_cap);
        if (n < 0 || (uint32_t)n <= scratch_cap) return n;
        uint8_t *grown = realloc(scratch, (uint32_t)n);
        if (!grown) return LOADOUT_ERR_BAD_ARGUMENT;
        scratch = grown;
        scratch_cap = (uint32_t)n;
    }
}

static int32_t call_running_models(const str *arg, void *buf, uint32_t limit) {
    (void)arg;
    return loadout_host_running_models(buf, limit);
}

static int32_t call_model_state(const str *name, void *buf, uint32_t limit) {
    return loadout_host_model_state(name->s, name->n, buf, limit);
}

/* ---- settings: {"max_running": N}, parsed by hand ---- */

static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* parse_settings sets max_running, or writes why not into err. */
static int parse_settings(const char *p, const char *end, char *err, size_t errcap) {
    p = skip_space(p, end);
    if (p == end || (end - p == 4 && memcmp(p, "null", 4) == 0)) return 1;
    if (*p++ != '{') goto syntax;
    p = skip_space(p, end);
    if (p < end && *p == '}') {
        if (skip_space(p + 1, end) == end) return 1;
        goto syntax;
    }
    for (;;) {
        if (p == end || *p++ != '"') goto syntax;
        const char *key = p;
        while (p < end && *p != '"') p++;
        if (p == end) goto syntax;
        size_t keylen = (size_t)(p - key);
        p = skip_space(p + 1, end);
        if (p == end || *p++ != ':') goto syntax;
        p = skip_space(p, end);
        if (keylen != 11 || memcmp(key, "max_running", 11) != 0) {
            /* The Go twin's encoding/json says: json: unknown field "KEY". */
            size_t n = keylen < errcap - 48 ? keylen : errcap - 48;
            memcpy(err, "lru settings: json: unknown field \"", 35);
            memcpy(err + 35, key, n);
            memcpy(err + 35 + n, "\"", 2);
            return 0;
        }
        int neg = p < end && *p == '-';
        if (neg) p++;
        if (p == end || *p < '0' || *p > '9') {
            strncpy(err, "lru settings: max_running: want a whole number", errcap);
            return 0;
        }
        int64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            v = v * 10 + (*p++ - '0');
            if (v > INT32_MAX) {
                strncpy(err, "lru settings: max_running: too large", errcap);
                return 0;
            }
        }
        if (neg && v != 0) {
            /* The Go twin's words: max_running: want 0 or more, got -1. */
            const char *msg = "lru settings: max_running: want 0 or more, got -";
            size_t ml = strlen(msg);
            char num[16];
            int k = 0;
            do num[k++] = (char)('0' + v % 10); while ((v /= 10) > 0);
            memcpy(err, msg, ml);
            while (k > 0) err[ml++] = num[--k];
            err[ml] = 0;
            return 0;
        }
        max_running = v == 0 ? 1 : (int32_t)v;
        p = skip_space(p, end);
        if (p < end && *p == ',') {
            p = skip_space(p + 1, end);
            continue;
        }
        if (p < end && *p == '}' && skip_space(p + 1, end) == end) return 1;
        goto syntax;
    }
syntax:
    strncpy(err, "lru settings: not a JSON object such as {\"max_running\": 2}", errcap);
    return 0;
}

/* ---- exports ---- */

int32_t loadout_abi_version(void) { return LOADOUT_ABI_VERSION; }

int32_t loadout_policy_kind(void) { return LOADOUT_KIND_SWAPPER; }

int32_t loadout_abi_buffers(void) {
    buf_desc[0] = (uint32_t)(uintptr_t)in_buf;
    buf_desc[1] = IN_CAP;
    buf_desc[2] = (uint32_t)(uintptr_t)out_buf;
    buf_desc[3] = OUT_CAP;
    return (int32_t)(uintptr_t)buf_desc;
}

int64_t loadout_init(int32_t len) {
    if ((uint32_t)len > IN_CAP) return set_error("event larger than the in-buffer"), result(LOADOUT_STATUS_BAD_INPUT, 0);
    reader r = open_msg(in_buf, (uint32_t)len, LOADOUT_MSG_INIT);
    rd_u64(&r); /* now */
    str settings = rd_str(&r);
    if (!done(&r)) return set_error("malformed init event"), result(LOADOUT_STATUS_BAD_INPUT, 0);
    scratch_cap = 16u << 10;
    scratch = malloc(scratch_cap);
    char err[160] = {0};
    if (!parse_settings(settings.s, settings.s + settings.n, err, sizeof err - 1)) {
        set_error(err);
        return result(LOADOUT_STATUS_ERROR, 0);
    }
    return result(LOADOUT_STATUS_OK, 0);
}

/* Eviction classes, evicted in this order. */
enum { STOPPING, IDLE, BUSY };

typedef struct {
    uint32_t running; /* position in the plan request's running list */
    int cls;
    int64_t last_use;
    str name;
    int chosen;
} candidate;

static int before(const candidate *a, const candidate *b) {
    if (a->cls != b->cls) return a->cls < b->cls;
    if (a->last_use != b->last_use) return a->last_use < b->last_use;
    return str_cmp(a->name, b->name) < 0;
}

static int64_t plan_error(const char *msg) {
    set_error(msg);
    return result(LOADOUT_STATUS_ERROR, 0);
}

int64_t loadout_plan(int32_t len) {
    if ((uint32_t)len > IN_CAP) return set_error("event larger than the in-buffer"), result(LOADOUT_STATUS_BAD_INPUT, 0);
    /* A GPU job's plan is left to the host's own rule (docs/ABI.md, "Plans
     * for GPU jobs"), as the Go twin does by not implementing
     * sdk.JobPlanner. */
    if (len >= LOADOUT_HEADER_SIZE && in_buf[1] == LOADOUT_MSG_JOB_PLAN_REQUEST) {
        set_error("lru does not plan for GPU jobs");
        return result(LOADOUT_STATUS_NO_POLICY, 0);
    }
    reader r = open_msg(in_buf, (uint32_t)len, LOADOUT_MSG_PLAN_REQUEST);
    rd_u64(&r); /* now */
    str target = rd_str(&r);
    uint32_t n = rd_count(&r, 4);
    uint32_t names_at = r.off;
    for (uint32_t i = 0; i < n; i++) rd_str(&r);
    if (!done(&r)) return set_error("malformed plan request"), result(LOADOUT_STATUS_BAD_INPUT, 0);

    writer w = {out_buf, OUT_CAP, 0, 0};
    wr_u8(&w, LOADOUT_ABI_VERSION);
    wr_u8(&w, LOADOUT_MSG_PLAN);

    /* (1) A target loaded or loading needs nothing. */
    int32_t k = host_read(call_model_state, &target);
    if (k >= 0) {
        reader mr = open_msg(scratch, (uint32_t)k, LOADOUT_MSG_MODEL_INFO);
        model t;
        rd_model(&mr, &t);
        if (!done(&mr)) return plan_error("lru: malformed model_state reply");
        if (t.state == LOADOUT_STATE_READY || t.state == LOADOUT_STATE_STARTING) n = 0;
    }
    /* (2) The target makes one more. */
    int64_t excess = (int64_t)n + 1 - max_running;
    candidate *cands = NULL;
    uint32_t nc = 0;
    if (excess > 0) {
        /* (3) What the host knows of the running models. */
        k = host_read(call_running_models, NULL);
        if (k < 0) return plan_error("lru: running_models failed");
        reader lr = open_msg(scratch, (uint32_t)k, LOADOUT_MSG_MODEL_LIST);
        uint32_t nm = rd_count(&lr, 4);
        model *known = calloc(nm ? nm : 1, sizeof *known);
        cands = calloc(n, sizeof *cands);
        if (!known || !cands) return plan_error("lru: out of memory");
        for (uint32_t i = 0; i < nm; i++) rd_model(&lr, &known[i]);
        if (!done(&lr)) return plan_error("lru: malformed running_models reply");
        reader names = {in_buf, (uint32_t)len, names_at, 0};
        for (uint32_t i = 0; i < n; i++) {
            candidate c = {i, BUSY, 0, rd_str(&names), 0};
            const model *m = NULL;
            for (uint32_t j = 0; j < nm && !m; j++)
                if (str_eq(known[j].name, c.name)) m = &known[j];
            if (m && m->pinned) continue;
            if (m) {
                c.last_use = m->last_use;
                if (m->state == LOADOUT_STATE_STOPPING) c.cls = STOPPING;
                else if (m->state == LOADOUT_STATE_READY && m->in_flight == 0) c.cls = IDLE;
            }
            /* Insertion sort: running sets are small. */
            uint32_t at = nc++;
            while (at > 0 && before(&c, &cands[at - 1])) {
                cands[at] = cands[at - 1];
                at--;
            }
            cands[at] = c;
        }
        free(known);
        for (uint32_t i = 0; i < nc && (int64_t)i < excess; i++) cands[i].chosen = 1;
    }
    /* The evictions in the order of the running list (sorted by name). */
    uint32_t chosen = 0;
    for (uint32_t i = 0; i < nc; i++) chosen += (uint32_t)cands[i].chosen;
    wr_u32(&w, chosen);
    for (uint32_t i = 0; i < n && chosen > 0; i++)
        for (uint32_t j = 0; j < nc; j++)
            if (cands[j].chosen && cands[j].running == i) wr_str(&w, cands[j].name);
    wr_u32(&w, 0); /* devices: the host places the target */
#if LOADOUT_ABI_VERSION >= 3
    wr_u32(&w, 0); /* modes: none, so every eviction is the configured default */
#endif
    free(cands);
    if (w.full) return plan_error("lru: plan larger than the out-buffer");
    return result(LOADOUT_STATUS_OK, w.n);
}

int64_t loadout_on_swap_start(int32_t len) {
    if ((uint32_t)len > IN_CAP) return set_error("event larger than the in-buffer"), result(LOADOUT_STATUS_BAD_INPUT, 0);
    reader r = open_msg(in_buf, (uint32_t)len, LOADOUT_MSG_SWAP_START);
    rd_u64(&r); /* now */
    str target = rd_str(&r);
    uint32_t n = rd_count(&r, 4);
    for (uint32_t i = 0; i < n; i++) rd_str(&r); /* running */
    uint32_t ne = rd_count(&r, 4);
    uint32_t evict_at = r.off;
    for (uint32_t i = 0; i < ne; i++) rd_str(&r);
    skip(&r, rd_count(&r, 4) * 4); /* devices */
#if LOADOUT_ABI_VERSION >= 3
    skip(&r, rd_count(&r, 1)); /* modes */
#endif
    if (!done(&r)) return set_error("malformed swap start event"), result(LOADOUT_STATUS_BAD_INPUT, 0);

    /* One line per real swap: "lru swap: model=T evict=[A,B]". */
    writer w = {out_buf, OUT_CAP, 0, 0};
    const char *pre = "lru swap: model=";
    wr_bytes(&w, pre, (uint32_t)strlen(pre));
    wr_bytes(&w, target.s, target.n);
    wr_bytes(&w, " evict=[", 8);
    reader ev = {in_buf, (uint32_t)len, evict_at, 0};
    for (uint32_t i = 0; i < ne; i++) {
        str e = rd_str(&ev);
        if (i > 0) wr_bytes(&w, ",", 1);
        wr_bytes(&w, e.s, e.n);
    }
    wr_bytes(&w, "]", 1);
    loadout_host_log(LOADOUT_LEVEL_INFO, out_buf, w.n);
    return result(LOADOUT_STATUS_OK, 0);
}
